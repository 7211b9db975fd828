// The one error enum of Evaluation: what stops an evaluation before or while it runs, with the
// path or option at fault and what to do. Per-sample failures (a reply that is not JSON, a
// malformed tool call) are not errors: they are scored.
import Foundation

public enum EvaluationError: Error, LocalizedError, Equatable {
    /// Nothing to evaluate: no checkpoint found, no model chosen.
    case nothingToEvaluate(String)
    /// The eval file gives nothing to score.
    case noTargets(path: String, reason: String)
    /// A file could not be read or written.
    case io(path: String, reason: String)
    /// An option value that cannot work.
    case invalidOption(name: String, reason: String)

    public var errorDescription: String? {
        switch self {
        case let .nothingToEvaluate(why):
            return "nothing to evaluate: \(why)"
        case let .noTargets(path, reason):
            return "\(path): \(reason)"
        case let .io(path, reason):
            return "\(path): \(reason)"
        case let .invalidOption(name, reason):
            return "\(name): \(reason)"
        }
    }
}
