// The one error type of the model definition: every case names the file, tensor or setting and
// says what to do. Errors of the file readers underneath (ModelAssetsError) pass through
// unchanged; they already carry their paths.
import Foundation
import ModelAssets

public enum ModelError: Error, LocalizedError, Equatable {
    case missingTensor(String)
    case wrongShape(name: String, expected: [Int], got: [Int])
    case invalidConfig(String)
    /// A checkpoint file that is not one, or is damaged.
    case checkpoint(path: String, reason: String)
    /// A package (folder) or one of its files is missing, damaged or inconsistent.
    case package(path: String, reason: String)
    /// A weights container (adapter_weights.bin, draft_weights.bin) is damaged.
    case weights(path: String, reason: String)
    /// Inputs that do not belong together (another base, a draft given as an adapter, ...).
    case incompatible(path: String, reason: String)
    case io(path: String, reason: String)
    /// A request that cannot be carried out as asked.
    case unsupported(String)

    public var errorDescription: String? {
        switch self {
        case .missingTensor(let name):
            "the base model has no tensor '\(name)'; is it a model of a supported architecture (\(ModelArchitecture.allCases.map(\.rawValue).joined(separator: ", ")))?"
        case .wrongShape(let name, let expected, let got):
            "tensor '\(name)' has shape \(got), expected \(expected) from the model config"
        case .invalidConfig(let why):
            "invalid configuration: \(why)"
        case .checkpoint(let path, let reason):
            "\(path): not a usable checkpoint: \(reason)"
        case .package(let path, let reason):
            "\(path): not a usable .fmadapter package: \(reason)"
        case .weights(let path, let reason), .incompatible(let path, let reason), .io(let path, let reason):
            "\(path): \(reason)"
        case .unsupported(let why):
            why
        }
    }
}
