// A trained draft model for speculative decoding as a value: its weights (a small Llama of the
// base's vocabulary), the base blocks it started from, the token subset its head scores, and the
// adapter it was distilled from; read from a draft-model checkpoint or a package. Training the
// draft is Distillation's; running it is Inference's (DraftEngine).
import Foundation
import ModelAssets

public struct DraftWeights: Sendable {
    /// Tensor name under which a restricted head's token ids are stored in a draft checkpoint.
    public static let vocabularyTensorName = "draft.vocabulary"

    public let weights: BaseWeights
    /// For a draft made from the base: draft block i is base block layers[i].
    public let layers: [Int]?
    /// Sorted token ids the head scores; nil = the whole vocabulary.
    public let vocabulary: [Int]?
    /// The adapter the draft was distilled from (nil: the bare base).
    public let teacherAdapterSignature: String?

    public var config: ModelConfig { weights.config }

    public init(weights: BaseWeights, layers: [Int]?, vocabulary: [Int]?, teacherAdapterSignature: String?) {
        self.weights = weights
        self.layers = layers
        self.vocabulary = vocabulary
        self.teacherAdapterSignature = teacherAdapterSignature
    }

    /// The draft stored in a draft-model checkpoint, refused (saying what the file is) unless it
    /// is a draft trained on `base`.
    public static func load(checkpoint c: CheckpointFile, base: BaseModel) throws -> DraftWeights {
        try c.requireDraft(for: base)
        guard let config = c.model.draftConfig else {
            throw ModelError.checkpoint(path: c.path, reason: "a draft-model checkpoint without its draft_config")
        }
        var tensors = c.tensors
        let vocabulary = try tensors.removeValue(forKey: vocabularyTensorName).map {
            try tokenIds($0, vocabSize: config.vocabSize) { ModelError.checkpoint(path: c.path, reason: $0) }
        }
        // A draft made from the base's blocks with its embeddings frozen leaves them out: they
        // are the base's (same signature, checked above), used as the base holds them.
        var shared: [String: FrozenMatrix] = [:]
        if c.model.draftLayers != nil {
            if tensors[TensorTable.embedding] == nil { shared[TensorTable.embedding] = base.weights.embedding }
            if !config.tieWordEmbeddings, tensors[TensorTable.head] == nil, let head = base.weights.untiedHead { shared[TensorTable.head] = head }
        }
        let weights: BaseWeights
        do { weights = try BaseWeights(config: config, tensors: tensors, matrices: shared) } catch let e as ModelError {
            throw ModelError.checkpoint(path: c.path, reason: "its draft weights do not form the model its header describes: \(e.localizedDescription)")
        }
        return DraftWeights(weights: weights, layers: c.model.draftLayers, vocabulary: vocabulary,
                            teacherAdapterSignature: c.model.teacherAdapterSignature)
    }

    /// Loads a draft-model checkpoint file for `base`.
    public static func load(path: String, base: BaseModel) throws -> DraftWeights {
        try load(checkpoint: CheckpointFile.load(path, moments: false), base: base)
    }

    /// The sorted, in-range token ids a vocabulary tensor holds; `makeError(reason)` otherwise.
    public static func tokenIds(_ t: HostTensor, vocabSize: Int, makeError: (String) -> Error) throws -> [Int] {
        let ids = t.data.map { Int($0) }
        guard t.shape.count == 1, !ids.isEmpty, zip(ids, ids.dropFirst()).allSatisfy({ $0 < $1 }),
              ids.first! >= 0, ids.last! < vocabSize else {
            throw makeError("tensor '\(vocabularyTensorName)' is not a sorted list of token ids below \(vocabSize)")
        }
        return ids
    }
}
