// Which chat template a model's prompts are rendered with (`ChatTemplateSource`: the model's own
// Jinja text, a file's, or a built-in one), and the built-in templates as code for models that ship
// none: ChatML and Llama-3, cut into segments whose `isTarget` marks assistant content plus its
// end-of-turn token. Tool turns: ChatML writes `<|im_start|>tool\n...<|im_end|>\n`; Llama-3 writes
// them under an `ipython` header. The Jinja engine is the Jinja module; rendering is DataSchema's.
// References: the SmolLM2 GGUF chat_template, Meta's Llama-3 template.
import Foundation

public struct ChatTemplate: ChatTemplating, Equatable {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// `<|im_start|>role\ncontent<|im_end|>\n`
        case chatml
        /// `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>`, content trimmed, after `<|begin_of_text|>`.
        case llama3
    }

    public var kind: Kind
    /// Written as a system turn before a non-empty conversation whose first turn is not a system
    /// turn (SmolLM2's and Qwen's rule); nil writes none.
    public var defaultSystemMessage: String?
    /// Text before the first turn (Llama-3's `bos_token`, "<|begin_of_text|>"); "" for none.
    public var beginText: String

    public init(kind: Kind, defaultSystemMessage: String? = nil, beginText: String? = nil) {
        self.kind = kind
        self.defaultSystemMessage = defaultSystemMessage
        self.beginText = beginText ?? (kind == .llama3 ? "<|begin_of_text|>" : "")
    }

    /// SmolLM2-Instruct's template (from its GGUF `tokenizer.chat_template`).
    public static let smolLM2 = ChatTemplate(kind: .chatml, defaultSystemMessage: "You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    /// Qwen2.5-Instruct's default system message (Qwen2 used "You are a helpful assistant.").
    public static let qwen25 = ChatTemplate(kind: .chatml, defaultSystemMessage: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
    /// Llama-3-Instruct: no default system message.
    public static let llama3 = ChatTemplate(kind: .llama3)

    /// The end-of-turn token, which is part of the target after assistant content.
    public var endOfTurn: String { kind == .chatml ? "<|im_end|>" : "<|eot_id|>" }

    /// The kind a Jinja template is written for, or nil when it is neither ChatML nor Llama-3.
    public static func detectKind(from template: String?) -> Kind? {
        guard let template else { return nil }
        if template.contains("<|im_start|>") { return .chatml }
        if template.contains("<|start_header_id|>") { return .llama3 }
        return nil
    }

    /// Picks the kind from the model's Jinja text, and for ChatML takes the default system message
    /// the template writes literally (`'<|im_start|>system\n...<|im_end|>'`). A missing or
    /// unrecognized template gives plain ChatML without a default system message; use
    /// `detectKind` to refuse those instead.
    public static func detect(from template: String?) -> ChatTemplate {
        switch detectKind(from: template) {
        case .llama3:
            return ChatTemplate(kind: .llama3)
        case .chatml:
            return ChatTemplate(kind: .chatml, defaultSystemMessage: literalDefaultSystem(in: template ?? ""))
        case nil:
            return ChatTemplate(kind: .chatml)
        }
    }

    /// The first literal system turn in a ChatML Jinja template: text after `<|im_start|>system`
    /// and a newline (real or the escape `\n`) up to `<|im_end|>`, with no Jinja expression inside.
    static func literalDefaultSystem(in template: String) -> String? {
        let open = "<|im_start|>system"
        var rest = template[...]
        while let start = rest.firstRange(of: open) {
            var body = rest[start.upperBound...]
            defer { rest = rest[start.upperBound...] }
            if body.hasPrefix("\n") {
                body = body.dropFirst()
            } else if body.hasPrefix("\\n") {
                body = body.dropFirst(2)
            } else {
                continue
            }
            guard let end = body.firstRange(of: "<|im_end|>") else { continue }
            let text = body[..<end.lowerBound]
            if text.isEmpty || text.contains(where: { "'\"{}+".contains($0) }) { continue }
            return String(text).replacingEvery("\\n", with: "\n")
        }
        return nil
    }

    public func render(_ messages: [ChatMessage], addGenerationPrompt: Bool) -> [TemplateSegment] {
        var out = TemplateSegmentBuilder()
        // Llama-3's template writes bos_token with the first message only.
        if !beginText.isEmpty && !messages.isEmpty { out.add(beginText, target: false) }
        if let system = defaultSystemMessage, let first = messages.first, first.role != .system {
            addTurn(ChatMessage(role: .system, content: system), to: &out)
        }
        for message in messages { addTurn(message, to: &out) }
        if addGenerationPrompt { out.add(header(.assistant), target: false) }
        return out.segments
    }

    /// The joined text of `render`, as the Jinja template would print it.
    public func renderText(_ messages: [ChatMessage], addGenerationPrompt: Bool) -> String {
        render(messages, addGenerationPrompt: addGenerationPrompt).map(\.text).joined()
    }

    func header(_ role: ChatRole) -> String {
        switch kind {
        case .chatml:
            return "<|im_start|>\(role.rawValue)\n"
        case .llama3:
            let name = role == .tool ? "ipython" : role.rawValue
            return "<|start_header_id|>\(name)<|end_header_id|>\n\n"
        }
    }

    func addTurn(_ message: ChatMessage, to out: inout TemplateSegmentBuilder) {
        let content = kind == .llama3 ? jinjaTrim(message.content) : message.content
        let isAssistant = message.role == .assistant
        out.add(header(message.role), target: false)
        out.add(content + endOfTurn, target: isAssistant)
        if kind == .chatml { out.add("\n", target: false) }
    }
}

/// Collects segments, merging neighbours with the same `isTarget`.
struct TemplateSegmentBuilder {
    var segments: [TemplateSegment] = []

    mutating func add(_ text: String, target: Bool) {
        guard !text.isEmpty else { return }
        if let last = segments.last, last.isTarget == target {
            segments[segments.count - 1].text += text
        } else {
            segments.append(TemplateSegment(text: text, isTarget: target))
        }
    }
}

/// Jinja's `trim` filter is Python's `str.strip()`: it removes Unicode whitespace and also U+001C...U+001F.
func jinjaTrim(_ s: String) -> String {
    func isSpace(_ u: Unicode.Scalar) -> Bool {
        u.properties.isWhitespace || (0x1C...0x1F).contains(u.value)
    }
    let scalars = s.unicodeScalars
    guard let first = scalars.firstIndex(where: { !isSpace($0) }) else { return "" }
    let last = scalars.lastIndex(where: { !isSpace($0) })!
    var view = String.UnicodeScalarView()
    view.append(contentsOf: scalars[first...last])
    return String(view)
}

extension String {
    /// Literal replacement without Foundation's canonical-equivalence matching.
    func replacingEvery(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = self[...]
        while let r = rest.firstRange(of: target) {
            out += rest[..<r.lowerBound]
            out += replacement
            rest = rest[r.upperBound...]
        }
        out += rest
        return out
    }
}

/// Which chat template renders a model's prompts: Jinja text (the model's own, or a file given
/// with `--chat-template`) or, for a model that ships none, a built-in code template. Rendering
/// lives in DataSchema (`ChatFormat`); this is only what to render with and where it came from.
public struct ChatTemplateSource: Sendable, Equatable {
    public enum Body: Sendable, Equatable {
        case jinja(String)
        case builtIn(ChatTemplate)
    }

    public var body: Body
    /// Where the template came from, as loading notes name it.
    public var origin: String
    /// Extra template variables as a JSON object (`--chat-template-kwargs`, `{"enable_thinking": false}`).
    public var kwargsJSON: String?

    public init(body: Body, origin: String, kwargsJSON: String? = nil) {
        self.body = body
        self.origin = origin
        self.kwargsJSON = kwargsJSON
    }

    public var isBuiltIn: Bool { if case .builtIn = body { true } else { false } }

    /// Jinja text given directly (an app's own template).
    public static func jinja(_ text: String, origin: String = "the given chat template") -> ChatTemplateSource {
        ChatTemplateSource(body: .jinja(text), origin: origin)
    }

    /// The model's own template, or when it has none the built-in one its vocabulary suggests
    /// (Llama-3's when it has `<|start_header_id|>`, else ChatML), with an origin that says so.
    public static func model(_ tokenizer: BPETokenizer) -> ChatTemplateSource {
        if let text = tokenizer.chatTemplate {
            return ChatTemplateSource(body: .jinja(text), origin: tokenizer.chatTemplateOrigin ?? "the model's chat template")
        }
        let kind: ChatTemplate.Kind = tokenizer.tokenId("<|start_header_id|>") != nil ? .llama3 : .chatml
        let name = kind == .llama3 ? "Llama-3" : "ChatML"
        return ChatTemplateSource(body: .builtIn(ChatTemplate(kind: kind)),
                                  origin: "the built-in \(name) template (the model has no chat template; give one with --chat-template FILE)")
    }

    /// A template file: Jinja text, or a tokenizer_config.json whose "chat_template" is used.
    public static func file(_ path: String) throws -> ChatTemplateSource {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ModelAssetsError.io(path: path, reason: "cannot read the chat template file")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ModelAssetsError.malformed(path: path, item: "chat template", reason: "not UTF-8 text")
        }
        if path.hasSuffix(".json") {
            guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
                throw ModelAssetsError.malformed(path: path, item: "JSON", reason: "not a JSON object; give a .jinja file or a tokenizer_config.json")
            }
            if let t = object["chat_template"] as? String { return ChatTemplateSource(body: .jinja(t), origin: path) }
            if let list = object["chat_template"] as? [[String: Any]],
               let t = list.first(where: { $0["name"] as? String == "default" })?["template"] as? String {
                return ChatTemplateSource(body: .jinja(t), origin: path)
            }
            throw ModelAssetsError.malformed(path: path, item: "chat_template", reason: "the file has no \"chat_template\" string")
        }
        return ChatTemplateSource(body: .jinja(text), origin: path)
    }

    /// Spellings that end an assistant turn in common templates; `stopTokens` keeps those the
    /// template writes and the vocabulary holds.
    public static let endOfTurnSpellings = [
        "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
        "</s>", "<｜end▁of▁sentence｜>", "<|END_OF_TURN_TOKEN|>", "<|return|>", "<|call|>", "<turn|>",
    ]

    /// How templates of thinking models mark a reply's thinking (open, close), the first pair
    /// whose both spellings a template's text holds is that model's: `<think>` for Qwen3, QwQ and
    /// DeepSeek-R1(-Distill), `<seed:think>` for Seed-OSS, `[THINK]` for Magistral.
    public static let thinkingMarkerSpellings: [(open: String, close: String)] = [
        ("<think>", "</think>"), ("<seed:think>", "</seed:think>"), ("[THINK]", "[/THINK]"),
    ]

    /// The thinking markers this template writes (nil for a model without a thinking block, and
    /// for the built-in templates).
    public var thinkingMarkers: (open: String, close: String)? {
        guard case let .jinja(text) = body else { return nil }
        return Self.thinkingMarkerSpellings.first { text.contains($0.open) && text.contains($0.close) }
    }

    /// Ids that end an assistant turn: the tokenizer's EOS and the end-of-turn tokens the template writes.
    public func stopTokenIds(_ tokenizer: BPETokenizer) -> Set<Int> {
        var ids = Set<Int>()
        if let e = tokenizer.eosTokenId { ids.insert(e) }
        switch body {
        case let .builtIn(t):
            if let id = tokenizer.tokenId(t.endOfTurn) { ids.insert(id) }
        case let .jinja(text):
            for s in Self.endOfTurnSpellings where text.contains(s) {
                if let id = tokenizer.tokenId(s), tokenizer.specialTokenIds.contains(id) { ids.insert(id) }
            }
        }
        return ids
    }
}
