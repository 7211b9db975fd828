// Which LoRA tensors an adapter of a given shape has on a given base, with their shapes, in a
// fixed order (layer, then target q k v o gate up down, then A before B), and the checks that a
// set of tensors is exactly that set. Names are the toolkit's Hugging Face-style names
// (`model.layers.{i}.self_attn.q_proj.lora_A.weight`), as in checkpoints and PEFT minus its prefix.
import ModelAssets
import Training

public enum LoRALayout {
    /// (in, out) of a target projection.
    public static func dimensions(_ t: LoRATarget, config c: ModelConfig) -> (in: Int, out: Int) {
        let q = c.numHeads * c.headDim, kv = c.numKVHeads * c.headDim
        switch t {
        case .q: return (c.hiddenSize, q)
        case .k, .v: return (c.hiddenSize, kv)
        case .o: return (q, c.hiddenSize)
        case .gate, .up: return (c.hiddenSize, c.intermediateSize)
        case .down: return (c.intermediateSize, c.hiddenSize)
        }
    }

    /// The module path of a target in layer `layer` (`model.layers.3.mlp.up_proj`).
    public static func modulePath(layer: Int, target t: LoRATarget) -> String {
        "model.layers.\(layer).\(t.parentName).\(t.moduleName)"
    }

    /// Every tensor of the adapter: A [r, in] and B [out, r] per layer and target.
    public static func expected(config: ModelConfig, lora: LoRAConfig) -> [(name: String, shape: [Int])] {
        var out: [(String, [Int])] = []
        for i in 0..<config.numLayers {
            for t in lora.targets.sorted() {
                let (inDim, outDim) = dimensions(t, config: config)
                let p = modulePath(layer: i, target: t)
                out.append((p + ".lora_A.weight", [lora.rank, inDim]))
                out.append((p + ".lora_B.weight", [outDim, lora.rank]))
            }
        }
        return out
    }

    /// The adapter's tensors in `expected` order. Throws `makeError(reason)` naming the first
    /// missing, extra or mis-shaped tensor.
    public static func ordered(_ tensors: [String: HostTensor], config: ModelConfig, lora: LoRAConfig,
                               makeError: (String) -> Error) throws -> [(name: String, tensor: HostTensor)] {
        let want = expected(config: config, lora: lora)
        let names = Set(want.map(\.name))
        if let extra = tensors.keys.filter({ !names.contains($0) }).sorted().first {
            throw makeError("holds tensor '\(extra)', which a rank-\(lora.rank) adapter on targets \(lora.targets.map(\.rawValue).joined(separator: ",")) of this \(config.numLayers)-layer base does not have")
        }
        return try want.map { name, shape in
            guard let t = tensors[name] else {
                throw makeError("has no tensor '\(name)' (a rank-\(lora.rank) adapter on targets \(lora.targets.map(\.rawValue).joined(separator: ",")) needs it)")
            }
            guard t.shape == shape else {
                throw makeError("tensor '\(name)' has shape \(t.shape), but this adapter and base need \(shape)")
            }
            return (name, t)
        }
    }
}
