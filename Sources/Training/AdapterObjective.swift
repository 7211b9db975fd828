// The adapter's training objective: the frozen base with LoRA, mean next-token cross-entropy
// over the batch's assistant tokens (the loss mask), output head run only on those rows.
import Autograd
import DataSchema

public final class AdapterObjective: TrainingObjective {
    public let model: LlamaModel

    public init(model: LlamaModel) {
        self.model = model
    }

    public var parameters: [(name: String, tensor: Tensor)] { model.loraParameters }

    public func loss(_ batch: Batch, rng: inout SeededRNG, training: Bool) -> Tensor {
        let layout = ForwardLayout(batch: batch.batchSize, positions: batch.positions, segmentIds: batch.segmentIds)
        return model.loss(inputs: batch.inputIds, targets: batch.targets, lossMask: batch.lossMask,
                          layout: layout, rng: &rng, training: training)
    }
}
