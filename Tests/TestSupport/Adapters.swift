// A random LoRA adapter for a base, as the runtime, export, server and stored-weights tests use
// one: every tensor drawn in TensorTable's order from one seeded generator.
import Autograd
import ModelAssets
import ModelDefinition

/// A random adapter for `base` on `targets` (default all seven) with B ≠ 0, so it changes the
/// outputs: rank `rank`, alpha 2 × rank, every value uniform in ±`scale`, drawn from `seed`.
public func randomAdapter(_ base: BaseModel, rank: Int = 4, targets: [LoRATarget] = LoRATarget.allCases,
                          scale: Float, seed: UInt64, source: String? = nil) -> Adapter {
    let lora = LoRAConfig(rank: rank, alpha: Float(2 * rank), targets: targets)
    var rng = SeededRNG(seed: seed)
    let tensors = TensorTable.loraTensors(config: base.config, lora: lora).map { name, shape in
        (name, HostTensor(shape: shape, data: (0..<shape.reduce(1, *)).map { _ in scale * Float.random(in: -1...1, using: &rng) }))
    }
    return Adapter(source: source ?? "random \(seed)", lora: lora, baseConfig: base.config, baseSignature: base.signature, tensors: tensors)
}
