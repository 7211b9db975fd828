// The one error type of the Export module: every case names the file (or folder) and the problem,
// and the message says what to do. Errors from the modules underneath (TrainingError,
// ModelAssetsError) pass through unchanged; they already carry their paths.
import Foundation
import ModelDefinition

public enum ExportError: Error, LocalizedError, Equatable {
    /// The adapter name breaks the runtime's rule.
    case invalidName(String)
    /// A package (folder) or one of its files is missing, damaged or inconsistent.
    case package(path: String, reason: String)
    /// A weights container (adapter_weights.bin, draft_weights.bin) is damaged.
    case weights(path: String, reason: String)
    /// Inputs that do not belong together (another base, a draft without its adapter, ...).
    case incompatible(path: String, reason: String)
    /// A request that cannot be carried out as asked.
    case unsupported(String)
    /// The file system refused.
    case io(path: String, reason: String)

    public var errorDescription: String? {
        switch self {
        case .invalidName(let name):
            "invalid adapter name '\(name)': a name must be non-empty and use only the letters A-Z and a-z, the digits 0-9 and underscores (_), as the runtime requires; for example \(AdapterName.suggestion(for: name))"
        case .package(let path, let reason):
            "\(path): not a usable .fmadapter package: \(reason)"
        case .weights(let path, let reason):
            "\(path): \(reason)"
        case .incompatible(let path, let reason):
            "\(path): \(reason)"
        case .unsupported(let why):
            why
        case .io(let path, let reason):
            "\(path): \(reason)"
        }
    }
}

extension AdapterName {
    /// Throws `ExportError.invalidName` unless `name` follows the rule.
    public static func validate(_ name: String) throws {
        guard isValid(name) else { throw ExportError.invalidName(name) }
    }
}
