// A compiled grammar: the byte-level automaton of the texts generation may produce — compact
// JSON for a JSON schema, one of a list of strings, or a full match of a regular expression.
// Immutable and shareable; `TokenConstraint` pairs it with a vocabulary.
import DataSchema

public final class Grammar: Sendable {
    let nfa: ByteNFA
    /// What the grammar was built from, for messages (`JSON schema`, `choice of 3 strings`, ...).
    public let summary: String

    /// Compilation stops with `GuidanceError.tooLarge` past this many automaton states.
    public static let defaultStateLimit = 2_000_000

    init(nfa: ByteNFA, summary: String) {
        self.nfa = nfa
        self.summary = summary
    }

    /// Compact JSON that `schema.validate` accepts (docs/guided-generation.md: the subset, the
    /// refusals, why some valid values are never generated). Throws on keywords generation
    /// cannot enforce, naming the keyword and its path, and when no value can be generated.
    public static func jsonSchema(_ schema: JSONSchema, stateLimit: Int = defaultStateLimit) throws(GuidanceError) -> Grammar {
        let compiler = SchemaCompiler(schema: schema, stateLimit: stateLimit)
        switch try compiler.compile(schema.root, at: SchemaLocation()) {
        case let .empty(path, reason):
            throw GuidanceError.noValue(path: path, reason: reason)
        case let .value(f):
            guard let nfa = compiler.b.finish(f) else {
                throw GuidanceError.noValue(path: "$", reason: "the schema admits no value generation can produce")
            }
            return Grammar(nfa: nfa, summary: "JSON schema")
        }
    }

    /// Exactly one of `options`, as raw text (not JSON-quoted).
    public static func choice(_ options: [String]) throws(GuidanceError) -> Grammar {
        guard !options.isEmpty else {
            throw GuidanceError.noValue(path: "choice", reason: "the list of choices is empty; give at least one string")
        }
        let b = NFABuilder(stateLimit: defaultStateLimit)
        let f = b.union(options.map { b.literal($0) })
        if b.isOverLimit { throw GuidanceError.tooLarge(path: "choice", limit: defaultStateLimit) }
        return Grammar(nfa: b.finish(f)!, summary: "choice of \(options.count) string\(options.count == 1 ? "" : "s")")
    }

    /// Raw text that `pattern` matches in full, read per Unicode scalar: `.` is any scalar but
    /// newline, `\d \w \s` are ASCII classes, `^`/`$` allowed only at the ends (they add nothing).
    public static func regex(_ pattern: String, stateLimit: Int = defaultStateLimit) throws(GuidanceError) -> Grammar {
        let scalars = try ScalarNFA.compile(pattern, reading: .raw, path: "regex", stateLimit: stateLimit)
        let b = NFABuilder(stateLimit: stateLimit)
        let f = try b.scalarStrings(scalars, minLength: 0, maxLength: nil, encoding: .raw, path: "regex")
        guard let nfa = b.finish(f) else {
            throw GuidanceError.noValue(path: "regex", reason: "the pattern \(GuidanceError.quoted(pattern)) matches no text")
        }
        return Grammar(nfa: nfa, summary: "regex \(GuidanceError.quoted(pattern))")
    }

    /// Automaton states (after pruning).
    public var stateCount: Int { nfa.count }

    /// Whether the grammar produces exactly these bytes.
    public func matches(bytes: [UInt8]) -> Bool { nfa.matches(bytes) }

    /// Whether the grammar produces exactly this text (its UTF-8 bytes).
    public func matches(_ text: String) -> Bool { nfa.matches(Array(text.utf8)) }

    /// Whether some text the grammar produces starts with these bytes.
    public func isPrefix(bytes: [UInt8]) -> Bool { nfa.matches(bytes, prefixOnly: true) }
}

extension Grammar {
    /// What a tool reply may be instead of a call.
    public enum ToolCallAlternative: Sendable, Equatable {
        /// Nothing: the reply is a call (tool_choice required or a named tool).
        case none
        /// Plain text that does not begin with the first character of a call (`<` in the
        /// documented format, `{` in Llama 3's) (tool_choice auto).
        case text
        /// A value of this schema, as `jsonSchema` generates it (a guided reply in a session that
        /// has tools: the answer, or a call first).
        case value(JSONSchema)
    }

    /// A reply that calls one of `tools` in `format` — the model's own, as its chat template
    /// writes a call (ChatFormat.toolCallFormat), by default Schema.md's
    /// `<tool_call>\n{"name":"NAME","arguments":{...}}\n</tool_call>` — the arguments valid
    /// against that tool's parameters (any JSON object when it has none) in compact JSON, or,
    /// with `allowText`, plain text that does not begin with the call's first character.
    public static func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], allowText: Bool, format: ToolCallFormat = .documented,
                                severalCalls: Bool = false, specialMarkers: [String] = [],
                                stateLimit: Int = defaultStateLimit) throws(GuidanceError) -> Grammar {
        try toolCall(tools, otherwise: allowText ? .text : .none, format: format, severalCalls: severalCalls,
                     specialMarkers: specialMarkers, stateLimit: stateLimit)
    }

    /// Calls of `tools` (as above) or `otherwise`, one automaton. Each tool's parameters and the
    /// alternative's schema are compiled as documents of their own into one builder, so each
    /// resolves its own `$ref`s (`#/$defs/...` of a nested `@Generable` type) and orders its
    /// properties by its own `x-order`. Errors in a tool's parameters name the tool in their path
    /// (`tool get_weather $.properties.unit`); the alternative's keep the schema's `$` path.
    ///
    /// The reply is the format's list opening, a call, and with `severalCalls` (where the format
    /// joins calls: not Llama 3's) further calls each after the separator, then the list's end.
    /// A format whose calls carry an id (Mistral's) writes it as `idLength` ASCII letters and
    /// digits. `specialMarkers` are texts of the framing the tokenizer has as special tokens
    /// (`<|tool_call|>`, `[TOOL_CALLS]`): they are spelled as TokenVocabulary.markerSpelling, which
    /// only that special token spells (a vocabulary that includes it: TokenVocabulary(tokenizer:
    /// stopTokens:markers:)), so the model writes the marker as the token it was trained on.
    public static func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], otherwise: ToolCallAlternative,
                                format: ToolCallFormat = .documented, severalCalls: Bool = false, specialMarkers: [String] = [],
                                stateLimit: Int = defaultStateLimit) throws(GuidanceError) -> Grammar {
        guard !tools.isEmpty else { throw GuidanceError.noValue(path: "tools", reason: "no tool is declared") }
        let b = NFABuilder(stateLimit: stateLimit)
        func framing(_ text: String) -> Fragment { b.literal(TokenVocabulary.spelling(of: text, markers: specialMarkers)) }
        var calls: [Fragment] = []
        for tool in tools {
            let parameters = tool.parameters ?? anyObject
            let arguments: Fragment
            do throws(GuidanceError) {
                switch try SchemaCompiler(schema: parameters, builder: b).compile(parameters.root, at: SchemaLocation()) {
                case let .value(f): arguments = f
                case let .empty(path, reason): throw GuidanceError.noValue(path: path, reason: reason)
                }
            } catch {
                throw error.inTool(tool.name)
            }
            var parts = [framing(format.opening + JSONValue.string(tool.name).compactText + format.argumentsLead), arguments]
            if let idLead = format.idLead {
                // `"` + idLength of [0-9A-Za-z] + `"`
                let alnum: ByteRanges = [48...57, 65...90, 97...122]
                parts.append(framing(idLead + "\""))
                parts.append(try b.repeated(min: ToolCallFormat.idLength, max: ToolCallFormat.idLength) { b.byteSet(alnum) })
                parts.append(b.literal("\""))
            }
            parts.append(framing(format.closing))
            calls.append(b.concat(parts))
            if b.isOverLimit { throw GuidanceError.tooLarge(path: "tool \(tool.name)", limit: stateLimit) }
        }
        let call = b.union(calls)
        if severalCalls, let separator = format.separator {
            // after a call, the separator leads back to another (one copy of the calls, a loop)
            let join = framing(separator)
            b.connect(call.end, join.start)
            b.connect(join.end, call.start)
        }
        var replies = [b.concat([framing(format.listOpen), call, framing(format.listClose)])]
        var summary = "tool call\(severalCalls && format.separator != nil ? "s" : "") (\(tools.map(\.name).joined(separator: ", ")))"
        switch otherwise {
        case .none: break
        case .text:
            let text = try ScalarNFA.compile(format.textPattern, reading: .raw, path: "text", stateLimit: stateLimit)
            replies.append(try b.scalarStrings(text, minLength: 0, maxLength: nil, encoding: .raw, path: "text"))
            summary += " or text"
        case let .value(schema):
            switch try SchemaCompiler(schema: schema, builder: b).compile(schema.root, at: SchemaLocation()) {
            case let .value(f): replies.append(f)
            case let .empty(path, reason): throw GuidanceError.noValue(path: path, reason: reason)
            }
            summary += " or JSON schema"
        }
        if b.isOverLimit { throw GuidanceError.tooLarge(path: "tools", limit: stateLimit) }
        guard let nfa = b.finish(b.union(replies)) else {
            throw GuidanceError.noValue(path: "tools", reason: "no tool call can be generated")
        }
        return Grammar(nfa: nfa, summary: summary)
    }

    /// A tool without parameters takes any object.
    static let anyObject = try! JSONSchema(.object([JSONMember(key: "type", value: .string("object"))]))
}

extension GuidanceError {
    /// The same error, its path naming the tool whose parameters it is in.
    func inTool(_ name: String) -> GuidanceError {
        let prefix = "tool \(name) "
        switch self {
        case let .unsupported(path, keyword, reason): return .unsupported(path: prefix + path, keyword: keyword, reason: reason)
        case let .noValue(path, reason): return .noValue(path: prefix + path, reason: reason)
        case let .invalidPattern(path, pattern, reason): return .invalidPattern(path: prefix + path, pattern: pattern, reason: reason)
        case let .tooLarge(path, limit): return .tooLarge(path: prefix + path, limit: limit)
        case .invalidVocabulary, .tokenNotAllowed: return self
        }
    }

    /// The tool named at the start of this error's path (`inTool`), if any.
    public var toolName: String? {
        let path: String
        switch self {
        case let .unsupported(p, _, _), let .noValue(p, _), let .invalidPattern(p, _, _), let .tooLarge(p, _): path = p
        case .invalidVocabulary, .tokenNotAllowed: return nil
        }
        guard path.hasPrefix("tool "), let end = path.dropFirst(5).firstIndex(of: " ") else { return nil }
        return String(path[path.index(path.startIndex, offsetBy: 5)..<end])
    }
}
