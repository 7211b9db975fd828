// The constraints of one vocabulary, compiled once per schema, list or expression and shared:
// an eval set's samples repeat one response_format, a server's requests repeat theirs, and a
// constraint's masks (cached per automaton state) are worth keeping across replies.
import DataSchema
import Foundation
import ModelAssets

public final class ConstraintLibrary: @unchecked Sendable {
    public let vocabulary: TokenVocabulary
    private let lock = NSLock()
    private var compiled: [String: TokenConstraint] = [:]

    public init(vocabulary: TokenVocabulary) { self.vocabulary = vocabulary }

    /// For a tokenizer, stopping at `stopTokens` (a model's end-of-turn tokens).
    public convenience init(tokenizer: BPETokenizer, stopTokens: Set<Int>) throws(GuidanceError) {
        self.init(vocabulary: try TokenVocabulary(tokenizer: tokenizer, stopTokens: stopTokens.sorted()))
    }

    /// Replies that are compact JSON valid against `schema`.
    public func jsonSchema(_ schema: JSONSchema) throws(GuidanceError) -> TokenConstraint {
        try constraint(key: "schema " + schema.root.compactText) { () throws(GuidanceError) in try Grammar.jsonSchema(schema) }
    }

    /// Replies that are exactly one of `options`.
    public func choice(_ options: [String]) throws(GuidanceError) -> TokenConstraint {
        try constraint(key: "choice " + JSONValue.array(options.map { .string($0) }).compactText) { () throws(GuidanceError) in try Grammar.choice(options) }
    }

    /// Replies that `pattern` matches in full.
    public func regex(_ pattern: String) throws(GuidanceError) -> TokenConstraint {
        try constraint(key: "regex " + pattern) { () throws(GuidanceError) in try Grammar.regex(pattern) }
    }

    func constraint(key: String, _ make: () throws(GuidanceError) -> Grammar) throws(GuidanceError) -> TokenConstraint {
        lock.lock()
        defer { lock.unlock() }
        if let c = compiled[key] { return c }
        let c = TokenConstraint(grammar: try make(), vocabulary: vocabulary)
        compiled[key] = c
        return c
    }
}

extension ConstraintLibrary {
    /// Replies that call one of `tools` in `format` (or, with `allowText`, plain text not beginning like a call).
    public func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], allowText: Bool, format: ToolCallFormat = .documented) throws(GuidanceError) -> TokenConstraint {
        try toolCall(tools, otherwise: allowText ? .text : .none, format: format)
    }

    /// Replies that call one of `tools` in `format` or are `otherwise` (Grammar.toolCall(_:otherwise:format:)).
    public func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], otherwise: Grammar.ToolCallAlternative,
                         format: ToolCallFormat = .documented) throws(GuidanceError) -> TokenConstraint {
        let alternative: String
        switch otherwise {
        case .none: alternative = "none"
        case .text: alternative = "text"
        case let .value(schema): alternative = "value " + schema.root.compactText
        }
        let key = "tools " + JSONValue.array(tools.map { .array([.string($0.name), $0.parameters?.root ?? .null]) }).compactText + " or " + alternative
            + " as " + JSONValue.array([.string(format.opening), .string(format.argumentsLead), .string(format.closing)]).compactText
        return try constraint(key: key) { () throws(GuidanceError) in try Grammar.toolCall(tools, otherwise: otherwise, format: format) }
    }
}
