// The runtime's models: one base loaded once (its weights kept as the file stores them,
// memory-mapped), and any number of adapted models over it. An adapter is never merged into the
// shared weights: each adapted model adds its low-rank term per row, so sessions with different
// adapters run side by side over one base and never see each other's adapter. Shaped like
// Foundation Models' `SystemLanguageModel(adapter:)`.
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition

/// A base model, loaded once and shared by every adapted model and session made from it.
public final class LanguageModel: @unchecked Sendable {
    public let base: BaseModel
    /// How prompts are rendered: the model's own chat template (or the one given at load), with
    /// its notes (a built-in fallback, tools written into turns) in `chatFormat.notes`.
    public let chatFormat: ChatFormat
    /// Constraints compiled for this model's vocabulary, shared by every session.
    public let constraints: ConstraintLibrary
    /// The base alone (no adapter).
    public private(set) lazy var plain: AdaptedModel = AdaptedModel(model: self, adapter: nil)
    let activations: ActivationPrecision
    let kvCache: KVCachePrecision

    /// Loads the base at `path` (a .gguf file or a Hugging Face folder). `stored` keeps the
    /// weights as the file stores them (GGUF blocks, memory-mapped); `float32` dequantizes them.
    /// `activations` is what stored quantized weights are multiplied with: `.q8` (the default, as
    /// the command-line tools: llama.cpp's int8 activations, faster decoding) or `.float32` (the
    /// reference numbers). `kvCache: .float16` halves every session's KV cache (SmolLM2's logits moved by 4e-4 of the largest).
    /// `chatTemplate` replaces the model's own template (`.file(path)`, `.jinja(text)`), and
    /// `chatTemplateKwargs` (a JSON object) passes extra template variables.
    public init(path: String, storage: BaseWeightStorage = .stored, activations: ActivationPrecision = .q8,
                kvCache: KVCachePrecision = .float32, chatTemplate: ChatTemplateSource? = nil, chatTemplateKwargs: String? = nil) throws {
        var base = try BaseModel.load(path: path, storage: storage)
        if let chatTemplate { base.template = chatTemplate }
        if let chatTemplateKwargs { base.template.kwargsJSON = chatTemplateKwargs }
        self.base = base
        chatFormat = try ChatFormat(base: base.template, tokenizer: base.tokenizer)
        constraints = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
        self.activations = activations
        self.kvCache = kvCache
    }

    /// The base with the adapter at `path`: a checkpoint (adapter-*.safetensors), an
    /// `.fmadapter` package or a PEFT folder. An adapter trained on another base is refused
    /// with both signatures. `draft` picks speculative decoding's draft: by default (`auto`) a
    /// package's own draft when it carries one; `.ngram` prompt lookup; a draft checkpoint.
    /// Replies are the same with any draft, guided ones included; only the speed differs.
    public func adapted(with path: String, draft: DraftSelection = DraftSelection()) throws -> AdaptedModel {
        let loaded = try LoadedModel.load(base: base, adapter: path)
        return AdaptedModel(model: self, adapter: loaded.adapter, draft: try draft.resolve(loaded))
    }

    /// The base with an adapter already in memory (checked against the base), with a draft
    /// (`.ngram`, or a draft checkpoint) if asked for.
    public func adapted(with adapter: Adapter?, draft: DraftSelection = DraftSelection(kind: .none)) throws -> AdaptedModel {
        try adapter?.requireBase(base)
        return AdaptedModel(model: self, adapter: adapter, draft: try draft.resolve(LoadedModel(base: base, adapter: adapter)))
    }
}

/// A base with an optional adapter, ready to generate; cheap to make (the base is shared).
public final class AdaptedModel: @unchecked Sendable {
    public let model: LanguageModel
    public let adapter: Adapter?
    let engine: InferenceModel
    /// Speculative decoding's draft and γ (nil: none).
    let draft: (drafter: Drafter, tokens: Int)?

    init(model: LanguageModel, adapter: Adapter?, draft: (drafter: Drafter, tokens: Int, notes: [String])? = nil) {
        self.model = model
        self.adapter = adapter
        self.draft = draft.map { ($0.drafter, $0.tokens) }
        engine = InferenceModel(base: model.base.weights, adapter: adapter, activations: model.activations, kvCache: model.kvCache)
    }

    /// The draft replies are generated with ("model" or "ngram (n 2-4)"), nil without one.
    public var draftName: String? { draft?.drafter.name }

    /// The adapter's digest (nil for the bare base).
    public var adapterSignature: String? { adapter?.signature }
}

/// How a reply is generated. Greedy by default (repeatable); `temperature` > 0 samples, with
/// optional top-k / top-p and a seed.
public struct GenerationOptions: Sendable, Codable, Equatable {
    public var temperature: Double
    public var topK: Int?
    public var topP: Double?
    public var seed: UInt64
    public var maximumResponseTokens: Int

    public init(temperature: Double = 0, topK: Int? = nil, topP: Double? = nil, seed: UInt64 = 0, maximumResponseTokens: Int = 512) {
        self.temperature = temperature
        self.topK = topK
        self.topP = topP
        self.seed = seed
        self.maximumResponseTokens = maximumResponseTokens
    }

    func check() throws(RuntimeError) {
        guard temperature >= 0, temperature.isFinite else { throw .invalidOption("temperature must be 0 (greedy) or positive, got \(temperature)") }
        if let k = topK, k < 1 { throw .invalidOption("topK must be at least 1, got \(k)") }
        if let p = topP, !(p > 0 && p <= 1) { throw .invalidOption("topP must be in (0, 1], got \(p)") }
        guard maximumResponseTokens >= 1 else { throw .invalidOption("maximumResponseTokens must be at least 1, got \(maximumResponseTokens)") }
    }

    var sampling: SamplingOptions { SamplingOptions(temperature: Float(temperature), topK: topK, topP: topP.map(Float.init)) }
}

public enum RuntimeError: Error, LocalizedError, Equatable {
    /// A session answers one prompt at a time.
    case busy
    case invalidOption(String)
    /// A guided reply stopped before it was a whole value (the token limit): never returned as valid.
    case incomplete(partial: String, maximumResponseTokens: Int)
    /// The schema (or choice list, or expression) cannot be enforced by constrained decoding.
    case unsupportedGuide(String)
    /// A complete guided reply that does not decode into the requested type.
    case decoding(String)
    /// The conversation no longer fits the model's context.
    case contextExceeded(tokens: Int, limit: Int)

    public var errorDescription: String? {
        switch self {
        case .busy: return "the session is already responding; await that reply first (or use another session)"
        case let .invalidOption(m): return "invalid generation option: \(m)"
        case let .incomplete(partial, limit):
            return "the reply stopped before it was a whole value (maximumResponseTokens \(limit)); raise maximumResponseTokens. Partial text: \(partial.prefix(200))"
        case let .unsupportedGuide(m): return "cannot guide generation: \(m)"
        case let .decoding(m): return "the guided reply does not decode: \(m)"
        case let .contextExceeded(tokens, limit):
            return "the conversation is \(tokens) tokens, more than the model's context of \(limit); start a new session"
        }
    }
}
