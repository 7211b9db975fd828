// Putting a trained adapter back on its base model, with the compatibility checks the
// runtime makes: a checkpoint trained on another base is refused naming both signatures, and a
// draft checkpoint given where an adapter is expected (or the reverse) is refused saying which it is.
import Autograd
import Foundation
import ModelAssets

extension LlamaModel {
    /// The base model with the adapter of `checkpoint` loaded (or the bare base when nil).
    public static func load(base: BaseModel, adapter checkpoint: Checkpoint?) throws -> LlamaModel {
        var rng = SeededRNG(seed: 0)
        guard let checkpoint else {
            return try LlamaModel(config: base.config, weights: base.file.tensors, lora: nil, rng: &rng)
        }
        try checkpoint.requireAdapter(for: base)
        let model = try LlamaModel(config: base.config, weights: base.file.tensors, lora: checkpoint.header.lora, rng: &rng)
        _ = try checkpoint.restore(into: model.loraParameters, weightDecay: 0)
        return model
    }
}

extension Checkpoint {
    /// Throws unless this is an adapter checkpoint trained on exactly `base`.
    public func requireAdapter(for base: BaseModel) throws {
        guard header.content == .adapter else {
            throw TrainingError.incompatible(path: path, reason: "is a draft-model checkpoint, but an adapter checkpoint (adapter-*.safetensors) is expected here; pass a draft with --draft-checkpoint")
        }
        guard header.lora != nil else {
            throw TrainingError.checkpoint(path: path, reason: "an adapter checkpoint without its LoRA configuration")
        }
        try requireBase(base)
    }

    /// Throws unless the checkpoint was trained on the base model with `base`'s signature.
    public func requireBase(_ base: BaseModel) throws {
        guard header.baseSignature == base.signature else {
            throw TrainingError.incompatible(path: path, reason: "was trained on base model \(header.baseSignature), but the loaded base model \(base.path) is \(base.signature); load the base model it was trained on, or retrain")
        }
    }
}
