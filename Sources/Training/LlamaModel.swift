// The decoder on Autograd, for every described architecture (Llama, Mistral, Qwen2, Qwen3,
// SmolLM3, Granite, OLMo 2, Phi-3, Gemma 3: the block's norms, q/k norms, NoPE layers, scale factors,
// partial rotary, LongRoPE, (1 + w) norms, the gate's activation, sliding-window layers and their
// RoPE bases come from the config and its description): frozen base weights, optional LoRA on any
// of the seven projections (on Phi-3's fused modules one A and one B, B sliced per projection on the tape),
// forward for training (hidden states, then the output head only where the loss needs it).
// Follows Hugging Face's *ForCausalLM modules; weights arrive in Hugging Face layout and names
// (ModelDefinition converts GGUF at its boundary).
// The no-grad KV-cache decoding path lives in Inference; this file is the differentiable one.
//
// Dimensions: B batch, T tokens per row, N = B*T rows, D hidden, H query heads, K kv heads,
// hd head dim, F feed-forward, V vocab, R LoRA rank, M rows kept for the loss.
import Autograd
import ModelAssets
import ModelDefinition

/// One linear projection: frozen weight, optionally with a LoRA adapter on top. The weight is a
/// tensor (the float32 path, and a draft's trained weights) or a matrix kept as its file stores
/// it, multiplied a panel at a time (the stored path; never copied whole).
public final class Projection {
    public let weight: Tensor?  // [out, in], frozen unless a draft trains it
    public let stored: FrozenMatrix?  // [out, in], when the base is kept as stored
    public let bias: Tensor?  // [out], frozen
    public let lora: LoRALinear?  // float32 path
    /// The adapter on a stored weight (no LoRALinear: that op holds a weight tensor).
    let storedLoRA: (a: Tensor, b: Tensor, scale: Float, dropout: Float)?
    /// The adapter of a fused module this projection is part of (Phi-3's qkv_proj, gate_up_proj):
    /// the module's A and whole B, and the rows of B that make this projection's outputs (sliced
    /// on the tape each pass, so B's gradient is the module's).
    var fusedLoRA: (a: Tensor, b: Tensor, rows: Range<Int>, scale: Float, dropout: Float)?

    init(weight: Tensor, bias: Tensor?, lora: LoRALinear?) {
        self.weight = weight
        stored = nil
        self.bias = bias
        self.lora = lora
        storedLoRA = nil
    }

    init(stored: FrozenMatrix, bias: Tensor?, lora: (a: Tensor, b: Tensor, scale: Float, dropout: Float)?) {
        weight = nil
        self.stored = stored
        self.bias = bias
        self.lora = nil
        storedLoRA = lora
    }

    /// [N, in] -> [N, out]. `loraInput`: the fused module's input after its one dropout draw.
    func callAsFunction(_ x: Tensor, rng: inout SeededRNG, training: Bool, loraInput: Tensor? = nil) -> Tensor {
        if let f = fusedLoRA {
            let xd = loraInput ?? (training && f.dropout > 0 ? dropout(x, p: f.dropout, rng: &rng) : x)
            let b = slice(f.b, dim: 0, range: f.rows)  // [out, r]
            if let stored { return loraLinear(x, frozen: stored, bias: bias, a: f.a, b: b, scale: f.scale, loraInput: xd) }
            return loraLinear(x, weight: weight!, bias: bias, a: f.a, b: b, scale: f.scale, loraInput: xd)
        }
        if let stored {
            guard let f = storedLoRA else { return linear(x, frozen: stored, bias: bias) }
            let xd = training && f.dropout > 0 ? dropout(x, p: f.dropout, rng: &rng) : x
            return loraLinear(x, frozen: stored, bias: bias, a: f.a, b: f.b, scale: f.scale, loraInput: xd)
        }
        guard let lora else { return linear(x, weight: weight!, bias: bias) }
        if training && lora.dropout > 0 { return lora(x, rng: &rng) }
        return lora(x)
    }

    /// The LoRA factors A [r, in] and B [out, r], whichever path holds them (a fused module's whole B).
    var loraTensors: (a: Tensor, b: Tensor)? {
        lora.map { ($0.a, $0.b) } ?? storedLoRA.map { ($0.a, $0.b) } ?? fusedLoRA.map { ($0.a, $0.b) }
    }
}

public final class LlamaBlock {
    /// The norm weights in NormSlot.allCases order; nil where the architecture has none.
    let norms: [Tensor?]  // [D], q/k: [hd] per head or [H*hd] / [K*hd]
    public let q, k, v, o: Projection  // q [H*hd, D], k/v [K*hd, D], o [D, H*hd]
    public let gate, up, down: Projection  // gate/up [F, D], down [D, F]
    /// This block's place in the model (its RoPE: NoPE layers).
    let layer: Int

    init(layer: Int, norms: [Tensor?], q: Projection, k: Projection, v: Projection,
         o: Projection, gate: Projection, up: Projection, down: Projection) {
        self.layer = layer
        self.norms = norms
        self.q = q
        self.k = k
        self.v = v
        self.o = o
        self.gate = gate
        self.up = up
        self.down = down
    }

    /// The norm weight in `slot`, if the architecture has one there.
    public func norm(_ slot: NormSlot) -> Tensor? { norms[slot.index] }

    /// x [N, D] -> x + r·attention + r·MLP [N, D], the norms where the description puts them:
    /// h = attentionInput?(x), a = attentionOutput?(attention(h)), x += r·a, and the same for the MLP.
    func forward(_ x: Tensor, config c: ModelConfig, layout: ForwardLayout, rng: inout SeededRNG, training: Bool) -> Tensor {
        let eps = Float(c.rmsNormEps), offset = c.definition.normWeightOffset
        func normed(_ t: Tensor, _ slot: NormSlot) -> Tensor { norm(slot).map { rmsNorm(t, weight: $0, eps: eps, offset: offset) } ?? t }
        let h = normed(x, .attentionInput)  // [N, D]
        let hd = fusedDropoutInput(h, self.q, rng: &rng, training: training)  // a fused qkv_proj's one dropout draw
        var q = self.q(h, rng: &rng, training: training, loraInput: hd)  // [N, H*hd]
        var k = self.k(h, rng: &rng, training: training, loraInput: hd)  // [N, K*hd]
        let v = self.v(h, rng: &rng, training: training, loraInput: hd)  // [N, K*hd]
        q = qkNorm(q, .query, heads: c.numHeads, config: c)
        k = qkNorm(k, .key, heads: c.numKVHeads, config: c)
        if c.rope(layer: layer) == .full {
            // LongRoPE picks its factors by how far the pass reaches, as transformers does per call;
            // a sliding layer with its own base (Gemma 3's local RoPE) is unscaled.
            let local = c.localRopeTheta != nil && c.slidingWindowLayers.contains(layer)
            let (factors, af) = local ? (c.ropeFrequencyFactors(layer: layer), 1) : c.rope(reaching: (layout.positions.max() ?? 0) + 1)
            let base = Float(c.ropeTheta(layer: layer))
            q = rope(q, heads: c.numHeads, positions: layout.positions, base: base, factors: factors,
                     rotaryDim: c.rotaryDim, attentionFactor: af)
            k = rope(k, heads: c.numKVHeads, positions: layout.positions, base: base, factors: factors,
                     rotaryDim: c.rotaryDim, attentionFactor: af)
        }
        let window = c.window(layer: layer)
        let a = causalAttention(q: q, k: k, v: v, batch: layout.batch, heads: c.numHeads,
                                kvHeads: c.numKVHeads, segmentIds: layout.segmentIds, scale: c.attentionScale,
                                window: window, positions: window == nil ? nil : layout.positions)  // [N, H*hd]
        let x1 = residual(x, normed(o(a, rng: &rng, training: training), .attentionOutput), c)  // [N, D]
        let h2 = normed(x1, .feedForwardInput)
        let h2d = fusedDropoutInput(h2, gate, rng: &rng, training: training)
        let g = gate(h2, rng: &rng, training: training, loraInput: h2d)  // [N, F]
        let u = up(h2, rng: &rng, training: training, loraInput: h2d)  // [N, F]
        let act = c.definition.activation == .geluTanh ? geluTanhGated(gate: g, up: u) : swiglu(gate: g, up: u)  // [N, F]
        return residual(x1, normed(down(act, rng: &rng, training: training), .feedForwardOutput), c)  // [N, D]
    }

    /// A fused module's LoRA input: its input after one dropout draw for all of its projections (as
    /// PEFT's one Linear), nil when `first` is no fused module's or there is no dropout.
    private func fusedDropoutInput(_ x: Tensor, _ first: Projection, rng: inout SeededRNG, training: Bool) -> Tensor? {
        guard let f = first.fusedLoRA, training, f.dropout > 0 else { return nil }
        return dropout(x, p: f.dropout, rng: &rng)
    }

    /// x + r·y, r Granite's residual multiplier (1 elsewhere, and then no op is recorded for it).
    private func residual(_ x: Tensor, _ y: Tensor, _ c: ModelConfig) -> Tensor {
        guard let m = c.multipliers, m.residual != 1 else { return x + y }
        return x + scale(y, Float(m.residual))
    }

    /// The q or k norm, if any: per head (the projection seen as [N, heads, hd]) or over the
    /// whole projection [N, heads·hd].
    private func qkNorm(_ t: Tensor, _ slot: NormSlot, heads: Int, config c: ModelConfig) -> Tensor {
        guard let w = norm(slot) else { return t }
        switch c.definition.qkNorm {
        case .perHead:
            let n = t.shape[0]
            return reshape(rmsNorm(reshape(t, [n, heads, c.headDim]), weight: w, eps: Float(c.rmsNormEps), offset: c.definition.normWeightOffset),
                           [n, heads * c.headDim])
        case .wholeProjection, .none:
            return rmsNorm(t, weight: w, eps: Float(c.rmsNormEps), offset: c.definition.normWeightOffset)
        }
    }

    /// Every tensor of the block that requires a gradient (LoRA A and B; all weights of a
    /// fully trained draft).
    var trainableTensors: [Tensor] {
        var all = norms.compactMap { $0 }
        for t in LoRATarget.allCases {
            let p = projection(t)
            if let w = p.weight { all.append(w) }
            if let b = p.bias { all.append(b) }
            if let l = p.loraTensors { all += [l.a, l.b] }
        }
        var seen = Set<ObjectIdentifier>()  // a fused module's A and B are every part's
        return all.filter { $0.requiresGrad && seen.insert(ObjectIdentifier($0)).inserted }
    }

    public func projection(_ target: LoRATarget) -> Projection {
        switch target {
        case .q: q
        case .k: k
        case .v: v
        case .o: o
        case .gate: gate
        case .up: up
        case .down: down
        }
    }
}

/// What one forward pass needs besides the ids: the row layout, and for packed rows the
/// segment ids and per-token positions.
public struct ForwardLayout: Sendable {
    public var batch: Int
    public var positions: [Int]  // [N], restarting at 0 for each packed sample
    public var segmentIds: [Int32]?  // [N], nil = one sample per row

    public init(batch: Int, positions: [Int], segmentIds: [Int32]?) {
        self.batch = batch
        self.positions = positions
        self.segmentIds = segmentIds
    }

    /// Plain rows of equal length T with positions 0..<T.
    public static func rows(batch: Int, length: Int) -> ForwardLayout {
        ForwardLayout(batch: batch, positions: (0..<batch).flatMap { _ in 0..<length }, segmentIds: nil)
    }
}

public enum TrainingError: Error, LocalizedError, Equatable {
    case invalidConfig(String)
    case checkpoint(path: String, reason: String)
    case incompatible(path: String, reason: String)
    case data(String)
    case io(path: String, reason: String)
    case nonFiniteLoss(step: Int, value: Float, lastGoodCheckpoint: String?)

    public var errorDescription: String? {
        switch self {
        case .invalidConfig(let why):
            "invalid configuration: \(why)"
        case .checkpoint(let path, let reason):
            "\(path): not a usable checkpoint: \(reason)"
        case .incompatible(let path, let reason):
            "\(path): \(reason)"
        case .data(let why):
            why
        case .io(let path, let reason):
            "\(path): \(reason)"
        case .nonFiniteLoss(let step, let value, let last):
            "the loss became \(value) at step \(step); training stopped. "
                + (last.map { "The last good checkpoint is \($0). " } ?? "No checkpoint was written yet. ")
                + "Try a lower --learning-rate or a stricter --clip-grad-norm."
        }
    }
}

import Foundation

/// The decoder. Base weights are frozen `Tensor`s wrapping the loaded arrays (no copies);
/// LoRA A and B are the only tensors that require gradients.
public final class LlamaModel {
    public let config: ModelConfig
    public let embedTokens: Tensor?  // [V, D]; nil when kept as stored (`frozenEmbedding`)
    public let lmHead: Tensor?  // [V, D]; the same tensor as embedTokens when tied; nil when stored
    /// The embedding and head when kept as the file stores them (a frozen embedding and head
    /// are never copied: LoRA training, and a draft with `freezeEmbeddings`).
    public let storedEmbedding: FrozenMatrix?, storedHead: FrozenMatrix?
    /// The frozen weights the model was built on.
    let base: BaseWeights
    public let finalNorm: Tensor  // [D]
    public let blocks: [LlamaBlock]
    public let lora: LoRAConfig?

    /// Builds the model on frozen `weights`. With `lora`, adapters are created on the chosen
    /// targets: A from `rng` (PEFT's Kaiming-uniform), B = 0, so step 0 equals the base.
    /// `trainBase` makes every base weight trainable (a draft model is trained in full, not
    /// with LoRA): each becomes a float32 tensor. `freezeEmbeddings` then keeps the embedding
    /// and the head frozen, as the base holds them (a stored pair stays stored, never copied).
    public init(weights: BaseWeights, lora: LoRAConfig?, rng: inout SeededRNG,
                trainBase: Bool = false, freezeEmbeddings: Bool = false) throws {
        let config = weights.config
        self.config = config
        self.lora = lora
        self.trainsBase = trainBase
        base = weights
        // A stored base stays stored (a panel at a time); a trained draft needs tensors for what it trains.
        let keep = !trainBase, keepEmbeddings = !trainBase || freezeEmbeddings
        if trainBase && lora != nil {
            throw TrainingError.invalidConfig("a model is trained either in full or with LoRA, not both")
        }
        try lora?.validate()
        if let lora { try TensorTable.checkTargets(lora.targets, config: config) }
        var named: [(String, Tensor)] = []
        func tensor(_ name: String, shape: [Int], _ values: [Float], embedding: Bool = false) -> Tensor {
            let t = Tensor(shape: shape, data: values, requiresGrad: trainBase && !(freezeEmbeddings && embedding))
            named.append((name, t))
            return t
        }
        if keepEmbeddings && weights.embedding.isStored {
            (embedTokens, storedEmbedding) = (nil, weights.embedding)
        } else {
            (embedTokens, storedEmbedding) = (tensor(TensorTable.embedding, shape: weights.embedding.shape, weights.embedding.values, embedding: true), nil)
        }
        if let head = weights.untiedHead {
            if keepEmbeddings && head.isStored {
                (lmHead, storedHead) = (nil, head)
            } else {
                (lmHead, storedHead) = (tensor(TensorTable.head, shape: head.shape, head.values, embedding: true), nil)
            }
        } else {
            (lmHead, storedHead) = (embedTokens, storedEmbedding)
        }
        finalNorm = tensor(TensorTable.finalNorm, shape: [weights.finalNorm.count], weights.finalNorm)
        var blocks: [LlamaBlock] = []
        for (i, layer) in weights.layers.enumerated() {
            // A fused module's factors (Phi-3's qkv_proj, gate_up_proj), made once, in module order.
            var fused: [LoRATarget: (a: Tensor, b: Tensor, rows: Range<Int>)] = [:]
            if let lora {
                for m in TensorTable.loraModules(config: config, targets: lora.targets) where m.parts.count > 1 {
                    let (a, b) = LoRALinear.initialFactors(inFeatures: m.inDim, outFeatures: m.outDim, rank: lora.rank, rng: &rng)
                    var start = 0
                    for t in m.parts {
                        let rows = TensorTable.dimensions(t, config: config).out
                        fused[t] = (a, b, start..<(start + rows))
                        start += rows
                    }
                }
            }
            func proj(_ t: LoRATarget) -> Projection {
                if let lora, let f = fused[t] {
                    let m = layer.projection(t)
                    let b = layer.bias(t).map { tensor(TensorTable.bias(layer: i, target: t), shape: [$0.count], $0) }
                    let p = keep && m.isStored ? Projection(stored: m, bias: b, lora: nil)
                        : Projection(weight: tensor(TensorTable.weight(layer: i, target: t), shape: m.shape, m.values), bias: b, lora: nil)
                    p.fusedLoRA = (f.a, f.b, f.rows, lora.scale, lora.dropout)
                    return p
                }
                let m = layer.projection(t)
                let b = layer.bias(t).map { tensor(TensorTable.bias(layer: i, target: t), shape: [$0.count], $0) }
                if keep && m.isStored {
                    var factors: (a: Tensor, b: Tensor, scale: Float, dropout: Float)? = nil
                    if let lora, lora.targets.contains(t) {
                        let (a, bb) = LoRALinear.initialFactors(inFeatures: m.columns, outFeatures: m.rows, rank: lora.rank, rng: &rng)
                        factors = (a, bb, lora.scale, lora.dropout)
                    }
                    return Projection(stored: m, bias: b, lora: factors)
                }
                let w = tensor(TensorTable.weight(layer: i, target: t), shape: m.shape, m.values)
                var adapter: LoRALinear? = nil
                if let lora, lora.targets.contains(t) {
                    adapter = LoRALinear(weight: w, bias: b, rank: lora.rank, alpha: lora.alpha, rng: &rng)
                    adapter!.dropout = lora.dropout
                }
                return Projection(weight: w, bias: b, lora: adapter)
            }
            let norms = NormSlot.allCases.map { slot in
                TensorTable.norm(slot, layer: i, config: config).map { name in
                    tensor(name, shape: [layer.norm(slot)!.count], layer.norm(slot)!)
                }
            }
            blocks.append(LlamaBlock(
                layer: i, norms: norms,
                q: proj(.q), k: proj(.k), v: proj(.v), o: proj(.o), gate: proj(.gate), up: proj(.up), down: proj(.down)))
        }
        self.blocks = blocks
        baseParameters = trainBase ? named.filter { $0.1.requiresGrad } : []
    }

    /// The base model with `adapter` loaded into its LoRA tensors (or the bare base when nil).
    /// The adapter must have been checked against `base` (`Adapter.requireBase`).
    public convenience init(base: BaseWeights, adapter: Adapter?) throws {
        var rng = SeededRNG(seed: 0)
        try self.init(weights: base, lora: adapter?.lora, rng: &rng)
        if let adapter {
            for ((name, t), (stored, value)) in zip(loraParameters, adapter.tensors) {
                precondition(name == stored && value.shape == t.shape, "[LlamaModel] adapter tensor \(stored) \(value.shape) for \(name) \(t.shape)")
                t.data = value.data
            }
        }
    }

    /// Whether the base weights themselves are trained (draft models).
    public let trainsBase: Bool
    /// With `trainBase`: the trainable weights under their Hugging Face names, in a fixed order.
    public let baseParameters: [(name: String, tensor: Tensor)]

    /// Every weight held as a tensor under its Hugging Face name (`lm_head.weight` only when
    /// untied), in table order; matrices kept as stored are left out.
    public var namedWeights: [(name: String, tensor: Tensor)] {
        var out: [(String, Tensor)] = embedTokens.map { [(TensorTable.embedding, $0)] } ?? []
        for (i, b) in blocks.enumerated() {
            for n in config.definition.norms { out.append((TensorTable.norm(n, layer: i), b.norm(n.slot)!)) }
            for t in LoRATarget.allCases {
                let proj = b.projection(t)
                if let w = proj.weight { out.append((TensorTable.weight(layer: i, target: t), w)) }
                if let bias = proj.bias { out.append((TensorTable.bias(layer: i, target: t), bias)) }
            }
        }
        out.append((TensorTable.finalNorm, finalNorm))
        if !config.tieWordEmbeddings, let lmHead { out.append((TensorTable.head, lmHead)) }
        return out
    }

    /// The embedding and (untied) head kept as stored, under their Hugging Face names: what
    /// `namedWeights` leaves out besides stored projections.
    public var storedEmbeddingMatrices: [(name: String, matrix: FrozenMatrix)] {
        var out: [(String, FrozenMatrix)] = storedEmbedding.map { [(TensorTable.embedding, $0)] } ?? []
        if !config.tieWordEmbeddings, let storedHead { out.append((TensorTable.head, storedHead)) }
        return out
    }

    /// The weights as the model definition's frozen weights: the ones the model was built on,
    /// or, for a model that trains its base (a draft), their current values (arrays shared; a
    /// frozen stored embedding and head as they are).
    public func frozenWeights() throws -> BaseWeights {
        guard trainsBase else { return base }
        return try BaseWeights(config: config, tensors: Dictionary(uniqueKeysWithValues: namedWeights.map {
            ($0.name, HostTensor(shape: $0.tensor.shape, data: $0.tensor.data))
        }), matrices: Dictionary(uniqueKeysWithValues: storedEmbeddingMatrices.map { ($0.name, $0.matrix) }))
    }

    /// The LoRA tensors' current values as an adapter (nil without LoRA).
    public func adapter(baseSignature: String?, source: String = "<training model>") -> Adapter? {
        guard let lora else { return nil }
        return Adapter(source: source, lora: lora, baseConfig: config, baseSignature: baseSignature,
                       tensors: loraParameters.map { ($0.name, HostTensor(shape: $0.tensor.shape, data: $0.tensor.data)) })
    }

    /// The trainable tensors with their PEFT-style names
    /// (`model.layers.{i}.self_attn.q_proj.lora_A.weight`), in a fixed order.
    public var loraParameters: [(name: String, tensor: Tensor)] {
        guard let lora else { return [] }
        var out: [(String, Tensor)] = []
        let modules = TensorTable.loraModules(config: config, targets: lora.targets)
        for (i, block) in blocks.enumerated() {
            for m in modules {
                guard let l = block.projection(m.parts[0]).loraTensors else { continue }
                out.append((TensorTable.layerPrefix(i) + m.module + ".lora_A.weight", l.a))
                out.append((TensorTable.layerPrefix(i) + m.module + ".lora_B.weight", l.b))
            }
        }
        return out
    }

    /// Recompute each block's activations in the backward pass instead of keeping them
    /// (`--activation-checkpointing`): memory holds one [N, D] input per block, for about one
    /// more forward pass of compute. Gradients agree with the plain pass to float rounding.
    public var activationCheckpointing = false

    /// Final hidden states after the last RMSNorm, ids [N] -> [N, D]: what the output head
    /// multiplies (divided by Granite's logits scaling, so that the head's product is the logits).
    public func hiddenStates(ids: [Int], layout: ForwardLayout, rng: inout SeededRNG, training: Bool) -> Tensor {
        var x = embedTokens.map { embedding($0, ids: ids) } ?? embedding(storedEmbedding!, ids: ids)  // [N, D]
        if let e = config.embeddingScale { x = scale(x, e) }  // Granite's multiplier, Gemma's √hidden
        for block in blocks {
            if activationCheckpointing && training {
                // The recompute replays the block's dropout from the same generator state.
                let start = rng
                var end = rng
                x = checkpointed(x, parameters: block.trainableTensors) { [config] input in
                    var r = start
                    defer { end = r }
                    return block.forward(input, config: config, layout: layout, rng: &r, training: training)
                }
                rng = end
            } else {
                x = block.forward(x, config: config, layout: layout, rng: &rng, training: training)
            }
        }
        let h = rmsNorm(x, weight: finalNorm, eps: Float(config.rmsNormEps), offset: config.definition.normWeightOffset)
        guard let m = config.multipliers, m.logits != 1 else { return h }
        return scale(h, Float(1 / m.logits))
    }

    /// Output-head logits for the chosen rows only: hidden [N, D] -> [M, V].
    public func logits(hidden: Tensor, rows: [Int]? = nil) -> Tensor {
        let h = rows.map { gatherRows(hidden, $0) } ?? hidden  // [M, D]
        return lmHead.map { linear(h, weight: $0) } ?? linear(h, frozen: storedHead!)  // [M, V]
    }

    /// Mean next-token cross-entropy over the positions where `lossMask` is true.
    /// inputs/targets/lossMask are [N]; the head runs only on the kept rows, a chunk at a time.
    public func loss(inputs: [Int], targets: [Int], lossMask: [Bool], layout: ForwardLayout,
                     rng: inout SeededRNG, training: Bool) -> Tensor {
        let hidden = hiddenStates(ids: inputs, layout: layout, rng: &rng, training: training)  // [N, D]
        let rows = lossMask.indices.filter { lossMask[$0] }
        let kept = rows.map { targets[$0] }
        // Output head and cross-entropy in one op, in chunks: the [M, V] logits never exist.
        let h = gatherRows(hidden, rows)  // [M, D]
        if let lmHead { return linearCrossEntropy(hidden: h, weight: lmHead, targets: kept) }
        return linearCrossEntropy(hidden: h, frozen: storedHead!, targets: kept)
    }
}
