// The small shared vocabulary of ModelAssets that other modules code against: host tensors,
// chat messages and template segments, and the tokenizer protocol. Implementations live in
// their own files (GGUF.swift, Safetensors.swift, Tokenizer*.swift, ChatTemplate.swift).

/// A dense, row-major Float32 array with an explicit shape, as read from a model file.
/// No autograd here: Training wraps these into `Autograd.Tensor`s.
public struct HostTensor: Sendable, Equatable {
    public var shape: [Int]
    public var data: [Float]
    public init(shape: [Int], data: [Float]) {
        precondition(shape.reduce(1, *) == data.count, "[HostTensor] shape \(shape) does not hold \(data.count) values")
        self.shape = shape
        self.data = data
    }
}

/// Text to token ids and back. Special tokens (`<|im_start|>`, ...) in the text are matched whole.
public protocol TextTokenizer: Sendable {
    /// The text's own tokens, nothing added (what a chat template's output is tokenized with).
    func encode(_ text: String) -> [Int]
    /// Plain text as a whole input, with the special tokens the tokenizer puts around one (BOS first
    /// when it says so): Hugging Face's `tokenizer(text)`, llama.cpp's `llama_tokenize(add_special: true)`.
    func encodeText(_ text: String) -> [Int]
    func decode(_ ids: [Int]) -> String
    var vocabularySize: Int { get }
}

extension TextTokenizer {
    /// A tokenizer that adds nothing around text.
    public func encodeText(_ text: String) -> [Int] { encode(text) }
}

public enum ChatRole: String, Sendable, Codable, CaseIterable {
    case system, user, assistant, tool
}

/// One turn as the chat template sees it: plain text content. Tool definitions, tool calls and
/// response formats are already rendered into `content` by DataSchema (rules in Schema.md).
public struct ChatMessage: Sendable, Equatable {
    public var role: ChatRole
    public var content: String
    public init(role: ChatRole, content: String) {
        self.role = role
        self.content = content
    }
}

/// A piece of rendered template text. `isTarget` marks text the loss is computed on: every
/// assistant turn's content and its end-of-turn token, nothing else.
public struct TemplateSegment: Sendable, Equatable {
    public var text: String
    public var isTarget: Bool
    public init(text: String, isTarget: Bool) {
        self.text = text
        self.isTarget = isTarget
    }
}

/// Renders a conversation into text segments, the way the model's own chat template does.
public protocol ChatTemplating: Sendable {
    /// `addGenerationPrompt` appends the assistant header, as for generation.
    func render(_ messages: [ChatMessage], addGenerationPrompt: Bool) -> [TemplateSegment]
}

/// What a BPE tokenizer is built from, wherever it was read (GGUF metadata
/// `tokenizer.ggml.*`, or a Hugging Face `tokenizer.json`).
public struct TokenizerData: Sendable, Equatable {
    /// Token strings by id: in the byte-level alphabet (GPT-2's byte-to-unicode map) for "gpt2",
    /// SentencePiece pieces ("▁the", "<0x0A>") for "llama".
    public var tokens: [String]
    /// Merge rules in priority order, each "left right".
    public var merges: [String]
    /// GGUF token types by id (1 normal, 3 control, 4 user-defined, 6 byte ...); nil if unknown.
    public var tokenTypes: [Int32]?
    /// Pre-tokenizer name as GGUF's `tokenizer.ggml.pre` spells it ("smollm", "llama-bpe", "qwen2", "gpt2", ...).
    public var preTokenizer: String
    public var bosTokenId: Int?
    public var eosTokenId: Int?
    public var padTokenId: Int?
    /// The model's Jinja chat template text, if the file carries one (used to pick ChatML vs Llama-3).
    public var chatTemplate: String?
    /// GGUF `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE).
    public var model = "gpt2"
    /// SentencePiece piece scores by id (`tokenizer.ggml.scores`); merges follow them.
    public var scores: [Float]?
    public var unknownTokenId: Int?
    /// `tokenizer.ggml.add_bos_token`, `tokenizer.ggml.add_eos_token`, `tokenizer.ggml.add_space_prefix` when present.
    public var addBOS: Bool?
    public var addEOS: Bool?
    public var addSpacePrefix: Bool?
    public init(tokens: [String], merges: [String], tokenTypes: [Int32]?, preTokenizer: String,
                bosTokenId: Int?, eosTokenId: Int?, padTokenId: Int?, chatTemplate: String?) {
        self.tokens = tokens
        self.merges = merges
        self.tokenTypes = tokenTypes
        self.preTokenizer = preTokenizer
        self.bosTokenId = bosTokenId
        self.eosTokenId = eosTokenId
        self.padTokenId = padTokenId
        self.chatTemplate = chatTemplate
    }

    /// Whether llama.cpp puts BOS before text it tokenizes with `add_special` (llama-vocab.cpp's
    /// load): `tokenizer.ggml.add_bos_token` when the file has it, else its default for the kind —
    /// true for SentencePiece ("llama") and the Llama-3 pre-tokenizer names, false for other BPE.
    public var addsBOSToText: Bool {
        if let addBOS { return addBOS }
        if model == "llama" { return true }
        return ["llama3", "llama-v3", "llama-bpe", "falcon3"].contains(preTokenizer)
    }
}
