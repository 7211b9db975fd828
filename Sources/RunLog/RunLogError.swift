// The errors of run logs: a folder or file that cannot be written, a log or event file that
// cannot be read back. Each names the path and says what to do.
import Foundation

public enum RunLogError: Error, LocalizedError, Equatable {
    case io(path: String, reason: String)
    case corrupt(path: String, reason: String)

    public var errorDescription: String? {
        switch self {
        case .io(let path, let reason): "\(path): \(reason)"
        case .corrupt(let path, let reason): "\(path): \(reason)"
        }
    }
}
