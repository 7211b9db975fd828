// Test helpers that cross the executors: the KV-cache model of a training model's current
// weights and adapter, so a test can compare the two passes on the same numbers.
import Inference
import ModelDefinition
import Training

extension InferenceModel {
    /// The KV-cache pass over `model`'s weights, its LoRA tensors (current values) merged at load.
    public convenience init(_ model: LlamaModel) throws {
        self.init(base: try model.frozenWeights(), adapter: model.adapter(baseSignature: nil))
    }
}
