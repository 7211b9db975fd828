// The constraints of one vocabulary, compiled once per schema, list or expression and shared:
// an eval set's samples repeat one response_format, a server's requests repeat theirs, and a
// constraint's masks (cached per automaton state) are worth keeping across replies. Tool calls
// whose framing is special tokens of the tokenizer (Phi-4-mini's `<|tool_call|>`, Mistral's
// `[TOOL_CALLS]`) are compiled against a vocabulary that includes those tokens (and no other
// special one), made once per set of markers.
import DataSchema
import Foundation
import ModelAssets

public final class ConstraintLibrary: @unchecked Sendable {
    public let vocabulary: TokenVocabulary
    /// The tokenizer the vocabulary came from, when it came from one: a tool-call format's
    /// special tokens are found in it.
    public let tokenizer: BPETokenizer?
    private let lock = NSLock()
    private var compiled: [String: TokenConstraint] = [:]
    private var markedVocabularies: [[Int]: TokenVocabulary] = [:]

    public init(vocabulary: TokenVocabulary, tokenizer: BPETokenizer? = nil) {
        self.vocabulary = vocabulary
        self.tokenizer = tokenizer
    }

    /// For a tokenizer, stopping at `stopTokens` (a model's end-of-turn tokens).
    public convenience init(tokenizer: BPETokenizer, stopTokens: Set<Int>) throws(GuidanceError) {
        self.init(vocabulary: try TokenVocabulary(tokenizer: tokenizer, stopTokens: stopTokens.sorted()), tokenizer: tokenizer)
    }

    /// The vocabulary with the special tokens `markers` reachable (the same one for none).
    func vocabulary(markers: [Int]) throws(GuidanceError) -> TokenVocabulary {
        guard !markers.isEmpty, let tokenizer else { return vocabulary }
        lock.lock()
        defer { lock.unlock() }
        if let v = markedVocabularies[markers] { return v }
        let v = try TokenVocabulary(tokenizer: tokenizer, stopTokens: vocabulary.stopTokens, markers: markers)
        markedVocabularies[markers] = v
        return v
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

    func constraint(key: String, vocabulary: TokenVocabulary? = nil, _ make: () throws(GuidanceError) -> Grammar) throws(GuidanceError) -> TokenConstraint {
        lock.lock()
        defer { lock.unlock() }
        if let c = compiled[key] { return c }
        let c = TokenConstraint(grammar: try make(), vocabulary: vocabulary ?? self.vocabulary)
        compiled[key] = c
        return c
    }
}

extension ConstraintLibrary {
    /// Replies that call one of `tools` in `format` (or, with `allowText`, plain text not beginning like a call).
    public func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], allowText: Bool, format: ToolCallFormat = .documented,
                         severalCalls: Bool = false) throws(GuidanceError) -> TokenConstraint {
        try toolCall(tools, otherwise: allowText ? .text : .none, format: format, severalCalls: severalCalls)
    }

    /// Replies that call one of `tools` in `format` (several where `severalCalls` and the format
    /// joins calls) or are `otherwise` (Grammar.toolCall(_:otherwise:format:severalCalls:specialMarkers:)),
    /// the format's special tokens written as themselves.
    public func toolCall(_ tools: [(name: String, parameters: JSONSchema?)], otherwise: Grammar.ToolCallAlternative,
                         format: ToolCallFormat = .documented, severalCalls: Bool = false) throws(GuidanceError) -> TokenConstraint {
        let alternative: String
        switch otherwise {
        case .none: alternative = "none"
        case .text: alternative = "text"
        case let .value(schema): alternative = "value " + schema.root.compactText
        }
        let markers = tokenizer.map { format.specialTokens(in: $0).sorted() } ?? []
        let markerTexts = markers.map { tokenizer!.decode([$0]) }
        let framing: [String] = [format.listOpen, format.opening, format.argumentsLead, format.idLead ?? "-", format.closing, format.separator ?? "-", format.listClose]
        let key = "tools " + JSONValue.array(tools.map { .array([.string($0.name), $0.parameters?.root ?? .null]) }).compactText + " or " + alternative
            + " as " + JSONValue.array(framing.map { .string($0) }).compactText + (severalCalls ? " several" : "") + " markers \(markers)"
        let vocabulary = try vocabulary(markers: markers)
        return try constraint(key: key, vocabulary: vocabulary) { () throws(GuidanceError) in
            try Grammar.toolCall(tools, otherwise: otherwise, format: format, severalCalls: severalCalls, specialMarkers: markerTexts)
        }
    }
}
