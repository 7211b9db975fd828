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
    /// A reply that calls one of `tools` — `<tool_call>\n{"name":"NAME","arguments":{...}}\n</tool_call>`
    /// (the rendering of Schema.md's tool calls), the arguments valid against that tool's
    /// parameters (any JSON object when it has none) — or, with `allowText`, plain text that does
    /// not begin with `<`. Parameters are inlined, so a tool's schema may not use `$ref`.
    public static func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], allowText: Bool,
                                stateLimit: Int = defaultStateLimit) throws(GuidanceError) -> Grammar {
        guard !tools.isEmpty else { throw GuidanceError.noValue(path: "tools", reason: "no tool is declared") }
        let calls: [JSONValue] = tools.map { tool in
            .object([
                JSONMember(key: "type", value: .string("object")),
                JSONMember(key: "properties", value: .object([
                    JSONMember(key: "name", value: .object([JSONMember(key: "const", value: .string(tool.name))])),
                    JSONMember(key: "arguments", value: tool.parameters?.root ?? .object([JSONMember(key: "type", value: .string("object"))])),
                ])),
                JSONMember(key: "required", value: .array([.string("name"), .string("arguments")])),
                JSONMember(key: "additionalProperties", value: .bool(false)),
            ])
        }
        let root: JSONValue = calls.count == 1 ? calls[0] : .object([JSONMember(key: "anyOf", value: .array(calls))])
        let schema: JSONSchema
        do throws(DataSchemaError) {
            schema = try JSONSchema(root, context: "tool calls")
        } catch {
            throw GuidanceError.unsupported(path: "tools", keyword: "$ref", reason: "a tool's parameters must stand alone to be combined with the others (\(error.localizedDescription))")
        }
        let compiler = SchemaCompiler(schema: schema, stateLimit: stateLimit)
        let b = compiler.b
        guard case let .value(call) = try compiler.compile(schema.root, at: SchemaLocation()) else {
            throw GuidanceError.noValue(path: "tools", reason: "no tool call can be generated for these parameters")
        }
        var branches = [b.concat([b.literal("<tool_call>\n"), call, b.literal("\n</tool_call>")])]
        if allowText {
            let text = try ScalarNFA.compile(#"[^<][\s\S]*"#, reading: .raw, path: "text", stateLimit: stateLimit)
            branches.append(try b.scalarStrings(text, minLength: 0, maxLength: nil, encoding: .raw, path: "text"))
        }
        if b.isOverLimit { throw GuidanceError.tooLarge(path: "tools", limit: stateLimit) }
        guard let nfa = b.finish(b.union(branches)) else {
            throw GuidanceError.noValue(path: "tools", reason: "no tool call can be generated")
        }
        return Grammar(nfa: nfa, summary: "tool call (\(tools.map(\.name).joined(separator: ", ")))\(allowText ? " or text" : "")")
    }
}
