// What a template can fail with: a syntax error found while parsing, or an error while rendering
// (an undefined value used, a type error, a sandbox refusal, a bound exceeded, or the template's
// own `raise_exception`). Every error names the template line and column it happened at.

public struct JinjaError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        /// The template does not parse.
        case syntax
        /// An undefined value was used beyond printing or testing it.
        case undefined
        /// An operation got a value of the wrong type.
        case type
        /// The template called `raise_exception(message)`; `message` is its own text.
        case raised
        /// Something the sandbox refuses (mutating a list, an unsafe attribute).
        case security
        /// A bound on recursion, loop iterations, output size or nesting was exceeded.
        case limit
        /// Any other runtime failure (a bad argument, an unknown filter).
        case runtime
    }

    public var kind: Kind
    /// The message alone (for `.raised`, exactly the template's text).
    public var message: String
    /// 1-based line and column in the template source.
    public var line: Int
    public var column: Int

    public init(kind: Kind, message: String, line: Int, column: Int) {
        self.kind = kind
        self.message = message
        self.line = line
        self.column = column
    }

    public var description: String {
        let what = kind == .raised ? "the template raised" : kind == .syntax ? "syntax error" : "error"
        return "template line \(line), column \(column): \(what): \(message)"
    }
}

/// A failure before its position is known; the interpreter attaches the node's line and column.
enum JinjaFailure: Error {
    case type(String)
    case undefined(String)
    case raised(String)
    case security(String)
    case limit(String)
    case runtime(String)

    var kind: JinjaError.Kind {
        switch self {
        case .type: .type
        case .undefined: .undefined
        case .raised: .raised
        case .security: .security
        case .limit: .limit
        case .runtime: .runtime
        }
    }

    var message: String {
        switch self {
        case let .type(m), let .undefined(m), let .raised(m), let .security(m), let .limit(m), let .runtime(m): m
        }
    }
}
