import Foundation

/// Why a grammar cannot be built or a token cannot be taken. Paths are schema locations in
/// the validator's spelling (`$.properties.city`, `$.$defs.person.anyOf[1]`).
public enum GuidanceError: Error, Equatable, LocalizedError, Sendable {
    /// A keyword (or a value of it) that generation cannot enforce. Refused, never ignored.
    case unsupported(path: String, keyword: String, reason: String)
    /// The schema, pattern or choice list admits no value that generation can produce.
    case noValue(path: String, reason: String)
    /// A regular expression that generation cannot compile.
    case invalidPattern(path: String, pattern: String, reason: String)
    /// The automaton would need more states than the limit.
    case tooLarge(path: String, limit: Int)
    /// The vocabulary cannot be used (no stop token, ids out of range).
    case invalidVocabulary(String)
    /// A token the grammar does not allow at this point was given to `advance`.
    case tokenNotAllowed(token: Int, reason: String)

    public var errorDescription: String? {
        switch self {
        case let .unsupported(path, keyword, reason):
            return "\(path): the keyword \"\(keyword)\" cannot be enforced by guided generation: \(reason)"
        case let .noValue(path, reason):
            return "\(path): guided generation cannot produce any value here: \(reason)"
        case let .invalidPattern(path, pattern, reason):
            return "\(path): the pattern \(Self.quoted(pattern)) cannot be used for guided generation: \(reason)"
        case let .tooLarge(path, limit):
            return "\(path): the grammar needs more than \(limit) automaton states (large maxLength, maxItems, "
                + "{m,n} counts or nesting multiply); lower those bounds"
        case let .invalidVocabulary(message):
            return "token vocabulary: \(message)"
        case let .tokenNotAllowed(token, reason):
            return "token \(token) is not allowed here: \(reason)"
        }
    }

    static func quoted(_ s: String) -> String {
        var out = "\""
        for c in s.unicodeScalars {
            switch c {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out + "\""
    }
}
