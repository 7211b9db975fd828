// The draft model for speculative decoding: a small Llama trained in full (not LoRA), built from
// N evenly spaced blocks of the base (with its embeddings and final norm) or loaded from a smaller
// model file with the same vocabulary, optionally with its output head restricted to a token subset.
// Leaves out the distillation loss (DraftObjective) and the run (DraftRun). Follows the layer-drop
// initialisation of DistilBERT/"shrink and fine-tune" and the draft setup of Leviathan et al. 2022.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition
import Training

/// Where a draft's starting weights come from.
public enum DraftSource: Sendable, Equatable {
    /// N evenly spaced blocks of the base model, with its embeddings and final norm.
    case baseLayers(Int)
    /// A smaller Llama-family model (.gguf or Hugging Face folder) with the base's vocabulary.
    case model(path: String)
}

/// Which tokens the draft's output head scores. Speculative decoding stays exact whatever the
/// draft proposes (rejection sampling corrects it), so a head restricted to the tokens of the
/// task data trades a little acceptance on other text for a much cheaper draft step: the full
/// SmolLM2 head is 49152 × 576, about a fifth of the whole model's per-token cost.
public enum DraftVocabularyMode: String, Sendable, CaseIterable, Codable {
    /// The whole vocabulary.
    case full
    /// The tokens that occur in the training data, plus the stop tokens; the rest get −∞.
    case task
}

/// A draft model: the Llama it runs, the base blocks it started from, and its head's tokens.
public final class DraftModel {
    /// Tensor name under which a restricted head's token ids are stored in a draft checkpoint.
    public static let vocabularyTensorName = DraftWeights.vocabularyTensorName

    public let model: LlamaModel
    /// For a draft made from the base: which base blocks, in order (block i of the draft is base block layers[i]).
    public let layers: [Int]?
    /// Sorted token ids the head scores; nil = the whole vocabulary.
    public let vocabulary: [Int]?
    public var config: ModelConfig { model.config }
    /// A frozen stored head's rows for `vocabulary` ([V', D], unpacked once; no gradient).
    let storedHeadRows: Tensor?

    public init(model: LlamaModel, layers: [Int]?, vocabulary: [Int]?) {
        self.model = model
        self.layers = layers
        self.vocabulary = vocabulary
        storedHeadRows = model.lmHead == nil ? vocabulary.map { DraftObjective.rows(of: model.storedHead!, $0) } : nil
    }

    /// The trained tensors (all weights, or all but the embeddings with `freezeEmbeddings`).
    public var trainableParameters: [(name: String, tensor: Tensor)] { model.baseParameters }

    /// The weights held as tensors that are not trained, stored in checkpoints so that a draft is
    /// self-contained (with the base: see `baseEmbeddings`).
    public var frozenParameters: [(name: String, tensor: Tensor)] {
        let trained = Set(trainableParameters.map(\.name))
        return model.namedWeights.filter { !trained.contains($0.name) }
    }

    /// Frozen embedding and head kept as the base stores them (`freezeEmbeddings` on a stored
    /// base). A draft made from the base's blocks leaves them out of its checkpoints: they are
    /// the base's own, which loading a draft requires anyway (DraftWeights.load takes them from it).
    public var baseEmbeddings: [(name: String, matrix: FrozenMatrix)] { model.storedEmbeddingMatrices }

    /// Output-head logits for the chosen rows: hidden [N, D] -> [M, V'] (V' = vocabulary size, or V).
    public func logits(hidden: Tensor, rows: [Int]) -> Tensor {
        let h = gatherRows(hidden, rows)  // [M, D]
        guard let vocabulary else { return model.logits(hidden: h) }  // [M, V]
        guard let head = model.lmHead else { return linear(h, weight: storedHeadRows!) }  // [M, V'], frozen
        return linear(h, weight: gatherRows(head, vocabulary))  // [M, V']
    }

    // MARK: building

    /// N block indices of `total`, evenly spaced and always including the first and the last.
    public static func evenlySpacedLayers(_ n: Int, of total: Int) -> [Int] {
        precondition(n >= 1 && n <= total, "[evenlySpacedLayers] \(n) of \(total)")
        if n == 1 { return [total - 1] }
        return (0..<n).map { i in Int((Double(i) * Double(total - 1) / Double(n - 1)).rounded()) }
    }

    /// A draft from N evenly spaced blocks of the base model.
    public static func fromBase(_ base: BaseModel, layers n: Int, freezeEmbeddings: Bool, vocabulary: [Int]?) throws -> DraftModel {
        let total = base.config.numLayers
        guard n >= 1 && n <= total else {
            throw TrainingError.invalidConfig("--draft-layers must be between 1 and the base model's \(total) layers, got \(n)")
        }
        let layers = evenlySpacedLayers(n, of: total)
        var rng = SeededRNG(seed: 0)
        let model = try LlamaModel(weights: base.weights.selectingLayers(layers), lora: nil, rng: &rng, trainBase: true,
                                   freezeEmbeddings: freezeEmbeddings)
        return DraftModel(model: model, layers: layers, vocabulary: vocabulary)
    }

    /// A draft from a model file, refused unless its tokenizer is the base model's.
    public static func fromFile(_ path: String, base: BaseModel, freezeEmbeddings: Bool, vocabulary: [Int]?) throws -> DraftModel {
        let draft = try BaseModel.load(path: path, storage: base.weights.embedding.isStored ? .stored : .float32)
        try requireSameVocabulary(draft: draft, base: base)
        var rng = SeededRNG(seed: 0)
        let model = try LlamaModel(weights: draft.weights, lora: nil, rng: &rng, trainBase: true, freezeEmbeddings: freezeEmbeddings)
        return DraftModel(model: model, layers: nil, vocabulary: vocabulary)
    }

    /// Throws unless `draft` scores exactly the base model's tokens (same size, same spellings).
    public static func requireSameVocabulary(draft: BaseModel, base: BaseModel) throws {
        let what = "a draft model must use the base model's tokenizer and vocabulary (\(base.config.vocabSize) tokens, \(base.tokenizer.vocabularySize) in its tokenizer, from \(base.path)); pick a smaller model of the same family, or use --draft-layers"
        guard draft.config.vocabSize == base.config.vocabSize, draft.tokenizer.vocabularySize == base.tokenizer.vocabularySize else {
            throw TrainingError.incompatible(path: draft.path, reason: "is a model with a vocabulary of \(draft.config.vocabSize) tokens (\(draft.tokenizer.vocabularySize) in its tokenizer), but \(what)")
        }
        for id in 0..<base.tokenizer.vocabularySize where draft.tokenizer.tokenString(id) != base.tokenizer.tokenString(id) {
            throw TrainingError.incompatible(path: draft.path, reason: "is a model whose token \(id) is '\(draft.tokenizer.tokenString(id) ?? "?")' where the base has '\(base.tokenizer.tokenString(id) ?? "?")'; \(what)")
        }
    }

    /// Token ids of the examples (inputs and targets) plus `extra`, sorted: the `task` head.
    public static func taskVocabulary(examples: [[Int]], extra: Set<Int>, vocabSize: Int) -> [Int] {
        var seen = [Bool](repeating: false, count: vocabSize)
        for ids in examples { for id in ids where id >= 0 && id < vocabSize { seen[id] = true } }
        for id in extra where id >= 0 && id < vocabSize { seen[id] = true }
        return seen.indices.filter { seen[$0] }
    }

    // MARK: loading a trained draft

    /// The draft stored in a draft-model checkpoint, refused (saying what the file is) unless it is
    /// a draft trained on `base`.
    public static func load(checkpoint c: Checkpoint, base: BaseModel) throws -> DraftModel {
        let stored = try DraftWeights.load(checkpoint: c.file, base: base)
        var rng = SeededRNG(seed: 0)
        return DraftModel(model: try LlamaModel(weights: stored.weights, lora: nil, rng: &rng), layers: stored.layers, vocabulary: stored.vocabulary)
    }

    /// The draft's current weights as the model definition's DraftWeights (what Inference's
    /// DraftEngine runs).
    public func definition(teacherAdapterSignature: String? = nil) throws -> DraftWeights {
        DraftWeights(weights: try model.frozenWeights(), layers: layers, vocabulary: vocabulary, teacherAdapterSignature: teacherAdapterSignature)
    }

    /// One-line description for logs.
    public var summary: String {
        let source = layers.map { "base blocks \($0.map(String.init).joined(separator: ","))" } ?? "own weights"
        let head = vocabulary.map { "head over \($0.count) task tokens" } ?? "full head (\(config.vocabSize) tokens)"
        return "\(config.numLayers) layers (\(source)), hidden \(config.hiddenSize), \(head)"
    }
}
