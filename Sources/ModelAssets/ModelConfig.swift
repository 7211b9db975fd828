// The numbers of one decoder (hidden size, heads, RoPE, norms, ... and the optional features an
// architecture has: NoPE layers, Granite's multipliers), validated against its architecture's
// description (Architecture.swift), and how they are read from GGUF metadata (`{arch}.*` keys) or a
// Hugging Face config.json with the reference's defaults. Phi-3's partial rotary and LongRoPE are
// read here; sliding windows are one field for both users: Gemma 3's sliding-window layers (window,
// which layers, their RoPE base) and query_pre_attn_scalar, Phi-3's window on every layer.
// Mistral/Qwen's sliding-window options and MoE are left out. Key names follow llama.cpp's LLM_KV
// table and transformers' configs.
import Foundation

/// RoPE frequency scaling. `llama3` is Llama 3.1's band-wise rescale; `linear` divides positions;
/// `longrope` (Phi-3, Phi-4-mini) divides each frequency by a short or a long factor, the long ones
/// when a pass reaches beyond `originalMaxPositionEmbeddings`, and scales cos and sin by an attention factor.
public struct RopeScaling: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case linear, llama3, longrope }
    public var kind: Kind
    public var factor: Double
    /// llama3 only.
    public var lowFrequencyFactor: Double?
    public var highFrequencyFactor: Double?
    public var originalMaxPositionEmbeddings: Int?
    /// The per-frequency divisors themselves, when a file gives them instead of the parameters
    /// (a GGUF's `rope_freqs.weight`): [headDim/2].
    public var frequencyFactors: [Double]?
    /// longrope only: the divisors [rotaryDim/2] up to `originalMaxPositionEmbeddings` positions and
    /// beyond, and the factor cos and sin are multiplied by (transformers' `attention_factor`).
    public var shortFactors: [Double]?
    public var longFactors: [Double]?
    public var attentionFactor: Double?

    public init(kind: Kind, factor: Double, lowFrequencyFactor: Double? = nil, highFrequencyFactor: Double? = nil,
                originalMaxPositionEmbeddings: Int? = nil, frequencyFactors: [Double]? = nil,
                shortFactors: [Double]? = nil, longFactors: [Double]? = nil, attentionFactor: Double? = nil) {
        self.shortFactors = shortFactors
        self.longFactors = longFactors
        self.attentionFactor = attentionFactor
        self.kind = kind
        self.factor = factor
        self.lowFrequencyFactor = lowFrequencyFactor
        self.highFrequencyFactor = highFrequencyFactor
        self.originalMaxPositionEmbeddings = originalMaxPositionEmbeddings
        self.frequencyFactors = frequencyFactors
    }
}

public struct ModelConfig: Codable, Sendable, Equatable {
    public var architecture: ModelArchitecture
    public var hiddenSize: Int
    public var intermediateSize: Int
    public var numLayers: Int
    public var numHeads: Int
    public var numKVHeads: Int
    public var headDim: Int
    public var vocabSize: Int
    public var ropeTheta: Double
    public var ropeScaling: RopeScaling?
    public var rmsNormEps: Double
    public var tieWordEmbeddings: Bool
    /// Bias on the q, k and v projections (Qwen2); o_proj never has one.
    public var attentionBias: Bool
    public var maxPositionEmbeddings: Int
    /// Layers that apply no RoPE (SmolLM3's NoPE layers), ascending; empty for the others.
    public var noRopeLayers: [Int]
    /// Granite's scale factors; nil for architectures without them.
    public var multipliers: Multipliers?
    /// How many leading dimensions of each head RoPE rotates (the rest pass through): head_dim
    /// unless the architecture allows partial rotary (Phi-4-mini: 96 of 128).
    public var rotaryDim: Int
    /// The window of sliding-window layers (a query at position i sees keys i − window < j ≤ i),
    /// nil when no layer slides: Gemma 3's `sliding_window`, Phi-3's (on every layer).
    public var slidingWindow: Int? = nil
    /// The layers that attend within `slidingWindow`, ascending: Gemma 3's `layer_types`
    /// "sliding_attention", every layer for Phi-3 when it has a window.
    public var slidingWindowLayers: [Int] = []
    /// Gemma 3: the RoPE base of sliding layers (`rope_local_base_freq`; RoPE scaling applies to global ones only).
    public var localRopeTheta: Double? = nil
    /// Gemma 3: attention scores are scaled by query_pre_attn_scalar^−½ instead of head_dim^−½.
    public var queryPreAttentionScalar: Double? = nil

    public init(architecture: ModelArchitecture, hiddenSize: Int, intermediateSize: Int, numLayers: Int,
                numHeads: Int, numKVHeads: Int, headDim: Int? = nil, vocabSize: Int, ropeTheta: Double,
                ropeScaling: RopeScaling? = nil, rmsNormEps: Double, tieWordEmbeddings: Bool,
                attentionBias: Bool? = nil, maxPositionEmbeddings: Int, noRopeLayers: [Int] = [],
                multipliers: Multipliers? = nil, rotaryDim: Int? = nil, slidingWindow: Int? = nil) throws {
        self.architecture = architecture
        self.hiddenSize = hiddenSize
        self.intermediateSize = intermediateSize
        self.numLayers = numLayers
        self.numHeads = numHeads
        self.numKVHeads = numKVHeads
        self.headDim = headDim ?? (numHeads > 0 ? hiddenSize / numHeads : 0)
        self.vocabSize = vocabSize
        self.ropeTheta = ropeTheta
        self.ropeScaling = ropeScaling
        self.rmsNormEps = rmsNormEps
        self.tieWordEmbeddings = tieWordEmbeddings
        self.attentionBias = attentionBias ?? architecture.definition.defaults.attentionBias
        self.maxPositionEmbeddings = maxPositionEmbeddings
        self.noRopeLayers = noRopeLayers
        self.multipliers = multipliers ?? (architecture.definition.hasMultipliers ? Multipliers() : nil)
        self.rotaryDim = rotaryDim ?? self.headDim
        self.slidingWindow = slidingWindow
        // Phi-3's window covers every layer (Gemma 3 sets its layers after init)
        if slidingWindow != nil, architecture.definition.slidesEveryLayer { slidingWindowLayers = Array(0..<numLayers) }
        try validate()
    }

    private enum CodingKeys: String, CodingKey {
        case architecture, hiddenSize, intermediateSize, numLayers, numHeads, numKVHeads, headDim, vocabSize
        case ropeTheta, ropeScaling, rmsNormEps, tieWordEmbeddings, attentionBias, maxPositionEmbeddings
        case noRopeLayers, multipliers, rotaryDim
        case slidingWindow, slidingWindowLayers, localRopeTheta, queryPreAttentionScalar
    }

    /// The keys a Llama-family config always had; the optional features only when present, so a
    /// config recorded before them encodes as it did.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(architecture, forKey: .architecture)
        try c.encode(hiddenSize, forKey: .hiddenSize)
        try c.encode(intermediateSize, forKey: .intermediateSize)
        try c.encode(numLayers, forKey: .numLayers)
        try c.encode(numHeads, forKey: .numHeads)
        try c.encode(numKVHeads, forKey: .numKVHeads)
        try c.encode(headDim, forKey: .headDim)
        try c.encode(vocabSize, forKey: .vocabSize)
        try c.encode(ropeTheta, forKey: .ropeTheta)
        try c.encodeIfPresent(ropeScaling, forKey: .ropeScaling)
        try c.encode(rmsNormEps, forKey: .rmsNormEps)
        try c.encode(tieWordEmbeddings, forKey: .tieWordEmbeddings)
        try c.encode(attentionBias, forKey: .attentionBias)
        try c.encode(maxPositionEmbeddings, forKey: .maxPositionEmbeddings)
        if !noRopeLayers.isEmpty { try c.encode(noRopeLayers, forKey: .noRopeLayers) }
        try c.encodeIfPresent(multipliers, forKey: .multipliers)
        if rotaryDim != headDim { try c.encode(rotaryDim, forKey: .rotaryDim) }
        try c.encodeIfPresent(slidingWindow, forKey: .slidingWindow)
        if !slidingWindowLayers.isEmpty { try c.encode(slidingWindowLayers, forKey: .slidingWindowLayers) }
        try c.encodeIfPresent(localRopeTheta, forKey: .localRopeTheta)
        try c.encodeIfPresent(queryPreAttentionScalar, forKey: .queryPreAttentionScalar)
    }

    /// Decoding validates; an invalid config is a `DecodingError.dataCorrupted` carrying the reason.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        architecture = try c.decode(ModelArchitecture.self, forKey: .architecture)
        hiddenSize = try c.decode(Int.self, forKey: .hiddenSize)
        intermediateSize = try c.decode(Int.self, forKey: .intermediateSize)
        numLayers = try c.decode(Int.self, forKey: .numLayers)
        numHeads = try c.decode(Int.self, forKey: .numHeads)
        numKVHeads = try c.decode(Int.self, forKey: .numKVHeads)
        headDim = try c.decode(Int.self, forKey: .headDim)
        vocabSize = try c.decode(Int.self, forKey: .vocabSize)
        ropeTheta = try c.decode(Double.self, forKey: .ropeTheta)
        ropeScaling = try c.decodeIfPresent(RopeScaling.self, forKey: .ropeScaling)
        rmsNormEps = try c.decode(Double.self, forKey: .rmsNormEps)
        tieWordEmbeddings = try c.decode(Bool.self, forKey: .tieWordEmbeddings)
        attentionBias = try c.decode(Bool.self, forKey: .attentionBias)
        maxPositionEmbeddings = try c.decode(Int.self, forKey: .maxPositionEmbeddings)
        noRopeLayers = try c.decodeIfPresent([Int].self, forKey: .noRopeLayers) ?? []
        multipliers = try c.decodeIfPresent(Multipliers.self, forKey: .multipliers)
        rotaryDim = try c.decodeIfPresent(Int.self, forKey: .rotaryDim) ?? headDim
        slidingWindow = try c.decodeIfPresent(Int.self, forKey: .slidingWindow)
        slidingWindowLayers = try c.decodeIfPresent([Int].self, forKey: .slidingWindowLayers) ?? []
        // Phi-3 configs written before Gemma 3 merged had the window alone; it covers every layer
        if slidingWindow != nil, slidingWindowLayers.isEmpty, architecture.definition.slidesEveryLayer {
            slidingWindowLayers = Array(0..<numLayers)
        }
        localRopeTheta = try c.decodeIfPresent(Double.self, forKey: .localRopeTheta)
        queryPreAttentionScalar = try c.decodeIfPresent(Double.self, forKey: .queryPreAttentionScalar)
        do {
            try validate()
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.localizedDescription, underlyingError: error))
        }
    }

    /// Checks internal consistency; `path` names the source in the error.
    public func validate(path: String = "<model config>") throws {
        func bad(_ field: String, _ reason: String) -> ModelAssetsError { .invalidConfig(path: path, field: field, reason: reason) }
        for (field, v) in [("hiddenSize", hiddenSize), ("intermediateSize", intermediateSize), ("numLayers", numLayers),
                           ("numHeads", numHeads), ("numKVHeads", numKVHeads), ("headDim", headDim),
                           ("vocabSize", vocabSize), ("maxPositionEmbeddings", maxPositionEmbeddings)] where v <= 0 {
            throw bad(field, "must be positive, found \(v)")
        }
        for (field, v) in [("hiddenSize", hiddenSize), ("intermediateSize", intermediateSize), ("headDim", headDim),
                           ("vocabSize", vocabSize)] where v > 1 << 20 {
            throw bad(field, "\(v) is implausibly large")
        }
        guard numLayers <= 1024, numHeads <= 1024 else { throw bad("numLayers/numHeads", "implausibly large") }
        guard numHeads % numKVHeads == 0 else {
            throw bad("numKVHeads", "\(numKVHeads) does not divide numHeads \(numHeads)")
        }
        guard headDim % 2 == 0 else { throw bad("headDim", "\(headDim) must be even for RoPE") }
        guard ropeTheta.isFinite, ropeTheta > 1 else { throw bad("ropeTheta", "must be a finite number above 1, found \(ropeTheta)") }
        guard rmsNormEps.isFinite, rmsNormEps > 0, rmsNormEps < 1 else {
            throw bad("rmsNormEps", "must be in (0, 1), found \(rmsNormEps)")
        }
        let definition = architecture.definition
        if attentionBias, !definition.allowsAttentionBias {
            throw bad("attentionBias", "\(architecture.rawValue) with attention biases (which would include an o_proj bias) is not supported")
        }
        if !noRopeLayers.isEmpty {
            guard definition.ggufNoRopeStep != nil else { throw bad("noRopeLayers", "\(architecture.rawValue) has no NoPE layers") }
            guard zip(noRopeLayers, noRopeLayers.dropFirst()).allSatisfy({ $0 < $1 }), noRopeLayers.allSatisfy({ (0..<numLayers).contains($0) }) else {
                throw bad("noRopeLayers", "must be ascending layer indices below \(numLayers), found \(noRopeLayers)")
            }
        }
        if let m = multipliers {
            guard definition.hasMultipliers else { throw bad("multipliers", "\(architecture.rawValue) has no embedding/residual/attention/logits multipliers") }
            for (field, v) in [("embedding", m.embedding), ("residual", m.residual), ("attention", m.attention), ("logits", m.logits)] {
                guard v.isFinite, v > 0 else { throw bad("multipliers.\(field)", "must be a positive finite number, found \(v)") }
            }
        }
        guard rotaryDim > 0, rotaryDim <= headDim, rotaryDim % 2 == 0 else {
            throw bad("rotaryDim", "must be an even number of dimensions in 2...\(headDim), found \(rotaryDim)")
        }
        if rotaryDim != headDim, !definition.allowsPartialRotary {
            throw bad("rotaryDim", "\(architecture.rawValue) rotates whole heads (partial rotary is not supported for it)")
        }
        if definition.slidesEveryLayer {
            // Phi-3: the window is on every layer or on none, with the one RoPE base and scale
            if let w = slidingWindow, w <= 0 { throw bad("slidingWindow", "must be positive, found \(w)") }
            guard slidingWindowLayers == (slidingWindow == nil ? [] : Array(0..<numLayers)) else {
                throw bad("slidingWindowLayers", "\(architecture.rawValue) windows every layer or none (sliding_window), found \(slidingWindowLayers) of \(numLayers) layers")
            }
            guard localRopeTheta == nil, queryPreAttentionScalar == nil else {
                throw bad("localRopeTheta", "\(architecture.rawValue) has no local RoPE base or query_pre_attn_scalar")
            }
        } else if slidingWindow != nil || !slidingWindowLayers.isEmpty || localRopeTheta != nil || queryPreAttentionScalar != nil {
            guard definition.hasSlidingWindowLayers else {
                throw bad("slidingWindow", "\(architecture.rawValue) has no sliding-window layers, local RoPE base or query_pre_attn_scalar")
            }
        }
        if !slidingWindowLayers.isEmpty {
            guard let w = slidingWindow, w > 0 else { throw bad("slidingWindow", "sliding layers \(slidingWindowLayers) need a positive window, found \(slidingWindow.map(String.init) ?? "none")") }
            guard zip(slidingWindowLayers, slidingWindowLayers.dropFirst()).allSatisfy({ $0 < $1 }), slidingWindowLayers.allSatisfy({ (0..<numLayers).contains($0) }) else {
                throw bad("slidingWindowLayers", "must be ascending layer indices below \(numLayers), found \(slidingWindowLayers)")
            }
        }
        if let t = localRopeTheta { guard t.isFinite, t > 1 else { throw bad("localRopeTheta", "must be a finite number above 1, found \(t)") } }
        if let q = queryPreAttentionScalar { guard q.isFinite, q > 0 else { throw bad("queryPreAttentionScalar", "must be positive, found \(q)") } }
        if let s = ropeScaling {
            guard s.factor.isFinite, s.factor >= 1 else { throw bad("ropeScaling.factor", "must be >= 1, found \(s.factor)") }
            if s.kind == .longrope {
                guard let short = s.shortFactors, let long = s.longFactors, short.count == rotaryDim / 2, long.count == rotaryDim / 2,
                      (short + long).allSatisfy({ $0.isFinite && $0 > 0 })
                else { throw bad("ropeScaling", "longrope needs short and long factor lists of \(rotaryDim / 2) positive numbers each") }
                guard let original = s.originalMaxPositionEmbeddings, original > 0 else {
                    throw bad("ropeScaling.originalMaxPositionEmbeddings", "longrope needs the original context length")
                }
                guard let a = s.attentionFactor, a.isFinite, a > 0 else { throw bad("ropeScaling.attentionFactor", "must be a positive number") }
            } else if let f = s.frequencyFactors {
                guard f.count == rotaryDim / 2, f.allSatisfy({ $0.isFinite && $0 > 0 }) else {
                    throw bad("ropeScaling.frequencyFactors", "needs \(rotaryDim / 2) positive finite divisors, found \(f.count)")
                }
            } else if s.kind == .llama3 {
                guard let low = s.lowFrequencyFactor, let high = s.highFrequencyFactor, high > low,
                      let original = s.originalMaxPositionEmbeddings, original > 0
                else { throw bad("ropeScaling", "llama3 scaling needs low/high frequency factors (high > low) and the original context length") }
            }
        }
    }

    /// RoPE's per-frequency divisors [rotaryDim/2]: frequency i turns by base^(−2i/rd) / factor_i
    /// (rd = rotaryDim). nil without scaling. Linear scaling divides every frequency by its factor; llama3 follows
    /// transformers' `_compute_llama3_parameters` (1 for short wavelengths, the factor for long
    /// ones, a smooth blend between); a file's explicit factors win; longrope's short factors
    /// (`rope(reaching:)` picks short or long).
    public var ropeFrequencyFactors: [Double]? {
        guard let s = ropeScaling else { return nil }
        if let f = s.frequencyFactors { return f }
        let half = rotaryDim / 2
        switch s.kind {
        case .longrope:
            return s.shortFactors
        case .linear:
            return [Double](repeating: s.factor, count: half)
        case .llama3:
            guard let low = s.lowFrequencyFactor, let high = s.highFrequencyFactor, let original = s.originalMaxPositionEmbeddings else { return nil }
            let old = Double(original), lowWavelength = old / low, highWavelength = old / high
            return (0..<half).map { i in
                let freq = 1 / pow(ropeTheta, Double(2 * i) / Double(rotaryDim))
                let wavelength = 2 * Double.pi / freq
                if wavelength < highWavelength { return 1 }
                if wavelength > lowWavelength { return s.factor }
                let smooth = (old / wavelength - low) / (high - low)
                return 1 / ((1 - smooth) / s.factor + smooth)
            }
        }
    }

    /// The divisors and the cos/sin scale of a pass whose rows reach `length` positions (the
    /// highest position + 1): longrope's long factors when `length` exceeds the original context,
    /// its short ones otherwise, as transformers' `longrope_frequency_update` picks them per
    /// forward call (keys already cached keep the factors they were rotated with, as there).
    public func rope(reaching length: Int) -> (factors: [Double]?, attentionFactor: Double) {
        guard let s = ropeScaling, s.kind == .longrope, s.frequencyFactors == nil else { return (ropeFrequencyFactors, 1) }
        let long = length > (s.originalMaxPositionEmbeddings ?? maxPositionEmbeddings)
        return (long ? s.longFactors : s.shortFactors, s.attentionFactor ?? 1)
    }

    /// The description of this config's architecture.
    public var definition: ArchitectureDescription { architecture.definition }

    /// How layer `layer` rotates q and k.
    public func rope(layer: Int) -> LayerRope { noRopeLayers.contains(layer) ? .none : .full }

    /// The window layer `layer` attends within (Gemma 3's sliding layers, Phi-3's every layer), nil for full attention.
    public func window(layer: Int) -> Int? { slidingWindowLayers.contains(layer) ? slidingWindow : nil }

    /// The RoPE base of layer `layer`: a sliding layer's local base when the config has one, else `ropeTheta`.
    public func ropeTheta(layer: Int) -> Double {
        guard slidingWindowLayers.contains(layer), let local = localRopeTheta else { return ropeTheta }
        return local
    }

    /// RoPE's frequency divisors for layer `layer`: the scaling applies to global layers only
    /// (Gemma 3's rope_parameters["full_attention"]); a sliding layer with a local base has none.
    public func ropeFrequencyFactors(layer: Int) -> [Double]? {
        slidingWindowLayers.contains(layer) && localRopeTheta != nil ? nil : ropeFrequencyFactors
    }

    /// The scale of attention scores when it is not 1/√head_dim: Granite's attention multiplier,
    /// Gemma's query_pre_attn_scalar^−½ (nil: each executor's own 1/√head_dim, as computed before
    /// multipliers existed).
    public var attentionScale: Float? {
        if let m = multipliers { return Float(m.attention) }
        return queryPreAttentionScalar.map { Float(pow($0, -0.5)) }
    }

    /// The factor the token embedding is multiplied by: Granite's multiplier, or Gemma's √hidden
    /// (transformers' embed_scale as a float32 tensor), nil for none.
    public var embeddingScale: Float? {
        if let m = multipliers, m.embedding != 1 { return Float(m.embedding) }
        return definition.scalesEmbeddingBySqrtHidden ? Float(Double(hiddenSize).squareRoot()) : nil
    }

    /// The config of the layers `indices` of this model (in that order): a draft built from the
    /// base's blocks keeps each chosen layer's own RoPE.
    public func selectingLayers(_ indices: [Int]) -> ModelConfig {
        var c = self
        c.numLayers = indices.count
        c.noRopeLayers = indices.enumerated().filter { noRopeLayers.contains($0.element) }.map(\.offset)
        c.slidingWindowLayers = indices.enumerated().filter { slidingWindowLayers.contains($0.element) }.map(\.offset)
        return c
    }

    /// q_proj rows (numHeads * headDim).
    public var queryDim: Int { numHeads * headDim }
    /// k_proj and v_proj rows (numKVHeads * headDim).
    public var keyValueDim: Int { numKVHeads * headDim }
}

// MARK: - From GGUF metadata

extension ModelConfig {
    /// Reads `general.architecture` and that architecture's keys (llama.cpp's LLM_KV names).
    /// GGUF has no tie flag: pass whether the file has an `output.weight` tensor.
    public static func fromGGUF(_ file: GGUFFile, hasOutputTensor: Bool) throws -> ModelConfig {
        let archName = try file.string("general.architecture")
        guard let arch = ModelArchitecture(rawValue: archName) else {
            throw ModelAssetsError.invalidConfig(
                path: file.path, field: "general.architecture",
                reason: "'\(archName)' is not supported (supported: \(ModelArchitecture.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        let p = archName + "."
        let hidden = try file.int(p + "embedding_length")
        let heads = try file.int(p + "attention.head_count")
        let kvHeads = file.metadata[p + "attention.head_count_kv"] == nil ? heads : try file.int(p + "attention.head_count_kv")
        var headDim = hidden / max(heads, 1)
        if file.metadata[p + "attention.key_length"] != nil {
            headDim = try file.int(p + "attention.key_length")
            if file.metadata[p + "attention.value_length"] != nil, try file.int(p + "attention.value_length") != headDim {
                throw ModelAssetsError.invalidConfig(path: file.path, field: p + "attention.value_length", reason: "must equal key_length")
            }
        }
        var rotaryDim = headDim
        if file.metadata[p + "rope.dimension_count"] != nil {
            rotaryDim = try file.int(p + "rope.dimension_count")
            if rotaryDim != headDim, !arch.definition.allowsPartialRotary {
                throw ModelAssetsError.invalidConfig(
                    path: file.path, field: p + "rope.dimension_count", reason: "partial rotary embeddings are not supported for \(archName) (must equal head dim \(headDim))")
            }
        }
        let vocab: Int
        if file.metadata[p + "vocab_size"] != nil {
            vocab = try file.int(p + "vocab_size")
        } else if let tokens = file.metadata["tokenizer.ggml.tokens"]?.arrayValue {
            vocab = tokens.count
        } else if let embed = file.tensorInfo(named: "token_embd.weight") {
            vocab = embed.shape[0]
        } else {
            throw ModelAssetsError.missingKey(path: file.path, key: "tokenizer.ggml.tokens")
        }
        var scaling: RopeScaling?
        if let kind = file.metadata[p + "rope.scaling.type"]?.stringValue, kind != "none" {
            guard kind == "linear" else {
                throw ModelAssetsError.invalidConfig(path: file.path, field: p + "rope.scaling.type", reason: "'\(kind)' is not supported (linear only)")
            }
            scaling = RopeScaling(kind: .linear, factor: try file.double(p + "rope.scaling.factor"))
        }
        let definition = arch.definition
        let theta = file.metadata[p + "rope.freq_base"] == nil ? definition.defaults.ropeTheta : try file.double(p + "rope.freq_base")
        let layers = try file.int(p + "block_count")
        // llama.cpp's SmolLM3 graph skips RoPE on every 4th layer whatever the file says.
        let noRope = definition.ggufNoRopeStep.map { step in (0..<layers).filter { ($0 + 1) % step == 0 } } ?? []
        var multipliers: Multipliers? = nil
        if definition.hasMultipliers {
            // llama.cpp: an absent (or zero) scale is no scaling; an absent attention scale is 1/√head_dim.
            func scale(_ key: String, _ otherwise: Double) throws -> Double {
                guard file.metadata[p + key] != nil else { return otherwise }
                let v = try file.double(p + key)
                return v == 0 ? otherwise : v
            }
            multipliers = Multipliers(
                embedding: try scale("embedding_scale", 1), residual: try scale("residual_scale", 1),
                attention: try scale("attention.scale", 1 / Double(headDim).squareRoot()), logits: try scale("logit_scale", 1))
        }
        // Phi-3: llama.cpp's converter writes sliding_window 0 for none (Phi-4-mini); LongRoPE's
        // factor lists are tensors (rope_factors_long/short.weight, read by the loader), the
        // original context and the attention factor are keys.
        var slidingWindow: Int? = nil
        if arch.definition.allowsPartialRotary {
            if file.metadata[p + "attention.sliding_window"] != nil, try file.int(p + "attention.sliding_window") > 0 {
                slidingWindow = try file.int(p + "attention.sliding_window")
            }
            if file.tensorInfo(named: "rope_factors_long.weight") != nil {
                let context = try file.int(p + "context_length")
                let original = file.metadata[p + "rope.scaling.original_context_length"] == nil ? context : try file.int(p + "rope.scaling.original_context_length")
                func factors(_ name: String) throws -> [Double] {
                    guard file.tensorInfo(named: name) != nil else { throw ModelAssetsError.missingTensor(path: file.path, tensor: name) }
                    return try file.dequantize(name).data.map(Double.init)
                }
                scaling = RopeScaling(
                    kind: .longrope, factor: max(1, Double(context) / Double(original)), originalMaxPositionEmbeddings: original,
                    shortFactors: try factors("rope_factors_short.weight"), longFactors: try factors("rope_factors_long.weight"),
                    attentionFactor: file.metadata[p + "rope.scaling.attn_factor"] == nil ? 1 : try file.double(p + "rope.scaling.attn_factor"))
            }
        }
        var sliding: (window: Int, layers: [Int], localTheta: Double, scalar: Double)? = nil
        if definition.hasSlidingWindowLayers, file.metadata[p + "attention.sliding_window"] != nil {
            // llama.cpp's gemma3: sliding layers unless (i + 1) % pattern == 0 (pattern 6 unless the
            // file says), their RoPE base `rope.freq_base_swa` (10000 as transformers' default when
            // absent); scores scaled by 1/√head_dim (hidden/heads for the 62-layer 27B).
            let window = try file.int(p + "attention.sliding_window")
            let pattern = file.metadata[p + "attention.sliding_window_pattern"] == nil
                ? (definition.ggufSlidingWindowPattern ?? 6) : try file.int(p + "attention.sliding_window_pattern")
            guard pattern > 0 else {
                throw ModelAssetsError.invalidConfig(path: file.path, field: p + "attention.sliding_window_pattern", reason: "must be positive, found \(pattern)")
            }
            let localTheta = file.metadata[p + "rope.freq_base_swa"] == nil ? 10000 : try file.double(p + "rope.freq_base_swa")
            sliding = (window, window > 0 ? (0..<layers).filter { ($0 + 1) % pattern != 0 } : [], localTheta,
                       layers == 62 ? Double(hidden / max(heads, 1)) : Double(headDim))
        }
        if file.metadata[p + "final_logit_softcapping"] != nil {
            throw ModelAssetsError.invalidConfig(path: file.path, field: p + "final_logit_softcapping", reason: "logit softcapping is not supported")
        }
        do {
            var config = try ModelConfig(
                architecture: arch, hiddenSize: hidden, intermediateSize: try file.int(p + "feed_forward_length"),
                numLayers: layers, numHeads: heads, numKVHeads: kvHeads, headDim: headDim,
                vocabSize: vocab, ropeTheta: theta, ropeScaling: scaling,
                rmsNormEps: try file.double(p + "attention.layer_norm_rms_epsilon"),
                tieWordEmbeddings: !hasOutputTensor, attentionBias: file.tensorInfo(named: "blk.0.attn_q.bias") != nil,
                maxPositionEmbeddings: try file.int(p + "context_length"), noRopeLayers: noRope, multipliers: multipliers,
                rotaryDim: rotaryDim, slidingWindow: slidingWindow)
            if let s = sliding {
                config.slidingWindow = s.window
                config.slidingWindowLayers = s.layers
                config.localRopeTheta = s.localTheta
                config.queryPreAttentionScalar = s.scalar
                try config.validate()
            }
            return config
        } catch let ModelAssetsError.invalidConfig(_, field, reason) {
            throw ModelAssetsError.invalidConfig(path: file.path, field: field, reason: reason)
        }
    }
}

// MARK: - From a Hugging Face config.json

extension ModelConfig {
    public static func fromHuggingFace(path: String) throws -> ModelConfig {
        try fromHuggingFace(json: FileBytes.read(path: path), path: path)
    }

    /// Reads `model_type` "llama", "mistral" or "qwen2". Rope base comes from top-level
    /// `rope_theta` or transformers 5's `rope_parameters.rope_theta` (they must agree if both).
    public static func fromHuggingFace(json: Data, path: String) throws -> ModelConfig {
        guard let root = (try? JSONSerialization.jsonObject(with: json, options: [])) as? [String: Any] else {
            throw ModelAssetsError.malformed(path: path, item: "config", reason: "is not a JSON object")
        }
        func bad(_ key: String, _ reason: String) -> ModelAssetsError { .invalidConfig(path: path, field: key, reason: reason) }
        func int(_ key: String) throws -> Int? {
            guard let v = root[key], !(v is NSNull) else { return nil }
            guard let n = jsonInteger(v) else { throw bad(key, "must be an integer, found \(v)") }
            return n
        }
        func requiredInt(_ key: String) throws -> Int {
            guard let n = try int(key) else { throw ModelAssetsError.missingKey(path: path, key: key) }
            return n
        }
        func double(_ key: String, in dict: [String: Any]) throws -> Double? {
            guard let v = dict[key], !(v is NSNull) else { return nil }
            guard let n = jsonNumber(v) else { throw bad(key, "must be a number, found \(v)") }
            return n
        }
        func bool(_ key: String) throws -> Bool? {
            guard let v = root[key], !(v is NSNull) else { return nil }
            guard let b = jsonBool(v) else { throw bad(key, "must be true or false, found \(v)") }
            return b
        }

        guard let typeName = root["model_type"] as? String else { throw ModelAssetsError.missingKey(path: path, key: "model_type") }
        guard let arch = ArchitectureDescription.architecture(huggingFaceModelType: typeName) else {
            throw bad("model_type", "'\(typeName)' is not supported (supported: \(ModelArchitecture.allCases.map(\.definition.huggingFaceModelType).joined(separator: ", ")))")
        }
        // Gemma 3 (transformers 5) keeps one rope_parameters per layer type: the global layers'
        // ("full_attention") are the model's RoPE; the sliding layers' base is read below.
        let allRopeParameters = root["rope_parameters"] as? [String: Any]
        let ropeParameters = arch.definition.hasSlidingWindowLayers
            ? ((allRopeParameters?["full_attention"] as? [String: Any]) ?? allRopeParameters) : allRopeParameters
        let scalingDict = (root["rope_scaling"] as? [String: Any]) ?? ropeParameters
        let topTheta = try double("rope_theta", in: root)
        let nestedTheta = try ropeParameters.flatMap { try double("rope_theta", in: $0) }
        if let a = topTheta, let b = nestedTheta, a != b {
            throw bad("rope_theta", "top-level \(a) disagrees with rope_parameters.rope_theta \(b)")
        }
        var scaling: RopeScaling?
        if let s = scalingDict, let kind = (s["rope_type"] ?? s["type"]) as? String, kind != "default" {
            switch kind {
            case "linear":
                guard let f = try double("factor", in: s) else { throw bad("rope_scaling.factor", "is missing") }
                scaling = RopeScaling(kind: .linear, factor: f)
            case "llama3":
                guard let f = try double("factor", in: s) else { throw bad("rope_scaling.factor", "is missing") }
                scaling = RopeScaling(
                    kind: .llama3, factor: f, lowFrequencyFactor: try double("low_freq_factor", in: s),
                    highFrequencyFactor: try double("high_freq_factor", in: s),
                    originalMaxPositionEmbeddings: (s["original_max_position_embeddings"]).flatMap(jsonInteger))
            case "longrope", "su":
                guard arch.definition.allowsPartialRotary else { throw bad("rope_scaling", "rope type '\(kind)' is not supported for \(arch.rawValue) (default, linear, llama3)") }
                // Phi3Config: the lists as given; original_max_position_embeddings from the scaling
                // dict or the top level (default 4096); factor from the dict or max / original; the
                // attention factor from the dict or √(1 + ln factor / ln original) (1 if factor ≤ 1).
                func factors(_ key: String) throws -> [Double] {
                    guard let list = s[key] as? [Any] else { throw bad("rope_scaling.\(key)", "longrope needs a list of numbers") }
                    let values = list.compactMap(jsonNumber)
                    guard values.count == list.count else { throw bad("rope_scaling.\(key)", "must hold numbers only") }
                    return values
                }
                let original = try (s["original_max_position_embeddings"]).flatMap(jsonInteger) ?? int("original_max_position_embeddings") ?? 4096
                let maxPositions = try int("max_position_embeddings") ?? arch.definition.defaults.maxPositionEmbeddings
                let factor = try double("factor", in: s) ?? Double(maxPositions) / Double(original)
                let attention = try double("attention_factor", in: s)
                    ?? (factor <= 1 ? 1 : (1 + Foundation.log(factor) / Foundation.log(Double(original))).squareRoot())
                scaling = RopeScaling(kind: .longrope, factor: max(factor, 1), originalMaxPositionEmbeddings: original,
                                      shortFactors: try factors("short_factor"), longFactors: try factors("long_factor"),
                                      attentionFactor: attention)
            default:
                throw bad("rope_scaling", "rope type '\(kind)' is not supported (default, linear, llama3\(arch.definition.allowsPartialRotary ? ", longrope" : ""))")
            }
        }
        let hidden = try requiredInt("hidden_size")
        let heads = try requiredInt("num_attention_heads")
        let layers = try requiredInt("num_hidden_layers")
        let definition = arch.definition, defaults = definition.defaults
        var rotaryDim: Int? = nil, slidingWindow: Int? = nil
        if definition.allowsPartialRotary {
            // transformers: dim = int(head_dim · partial_rotary_factor), the factor at the top level
            // or in rope_parameters (transformers 5 moves it there).
            let factor = try double("partial_rotary_factor", in: root) ?? ropeParameters.flatMap { try double("partial_rotary_factor", in: $0) } ?? 1
            guard factor > 0, factor <= 1 else { throw bad("partial_rotary_factor", "must be in (0, 1], found \(factor)") }
            let hd = try int("head_dim") ?? defaults.headDim ?? hidden / max(heads, 1)
            rotaryDim = Int(Double(hd) * factor)
            slidingWindow = try int("sliding_window")
        }
        if definition.hasSlidingWindowOption {
            if try bool("use_sliding_window") == true { throw bad("use_sliding_window", "sliding-window attention is not supported yet") }
            if let types = root["layer_types"] as? [Any], let other = types.first(where: { ($0 as? String) != "full_attention" }) {
                throw bad("layer_types", "'\(other)' layers are not supported yet (full_attention only)")
            }
        }
        var noRope: [Int] = []
        if definition.ggufNoRopeStep != nil {
            // SmolLM3Config: no_rope_layers[i] = 1 if layer i uses RoPE, else a NoPE layer every
            // no_rope_layer_interval layers ((i + 1) % interval == 0).
            if let flags = root["no_rope_layers"], !(flags is NSNull) {
                let values = (flags as? [Any] ?? []).prefix(layers).compactMap(jsonInteger)
                guard values.count == layers, values.allSatisfy({ $0 == 0 || $0 == 1 }) else {
                    throw bad("no_rope_layers", "must list 0 or 1 for each of the \(layers) layers")
                }
                noRope = values.indices.filter { values[$0] == 0 }
            } else {
                let interval = try int("no_rope_layer_interval") ?? 4
                guard interval > 0 else { throw bad("no_rope_layer_interval", "must be positive, found \(interval)") }
                noRope = (0..<layers).filter { ($0 + 1) % interval == 0 }
            }
        }
        var multipliers: Multipliers? = nil
        if definition.hasMultipliers {
            multipliers = Multipliers(
                embedding: try double("embedding_multiplier", in: root) ?? 1, residual: try double("residual_multiplier", in: root) ?? 1,
                attention: try double("attention_multiplier", in: root) ?? 1, logits: try double("logits_scaling", in: root) ?? 1)
        }
        var sliding: (window: Int, layers: [Int], localTheta: Double, scalar: Double)? = nil
        if definition.hasSlidingWindowLayers {
            // Gemma3TextConfig: sliding_window 4096, layer_types (else sliding unless (i + 1) %
            // sliding_window_pattern == 0, pattern 6), the local base from rope_parameters
            // ["sliding_attention"] or rope_local_base_freq (10000), query_pre_attn_scalar 256.
            if try bool("use_bidirectional_attention") == true { throw bad("use_bidirectional_attention", "bidirectional attention (an embedding model) is not supported") }
            for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
                if let v = root[key], !(v is NSNull) { throw bad(key, "logit softcapping is not supported (found \(v))") }
            }
            if let act = (root["hidden_activation"] ?? root["hidden_act"]) as? String, act != "gelu_pytorch_tanh" {
                throw bad("hidden_activation", "'\(act)' is not supported (gelu_pytorch_tanh)")
            }
            let window = try int("sliding_window") ?? 4096
            var slidingLayers: [Int]
            if let types = root["layer_types"] as? [Any] {
                guard types.count == layers, types.allSatisfy({ ["sliding_attention", "full_attention"].contains($0 as? String) }) else {
                    throw bad("layer_types", "must list \"sliding_attention\" or \"full_attention\" for each of the \(layers) layers")
                }
                slidingLayers = types.indices.filter { (types[$0] as? String) == "sliding_attention" }
            } else {
                let pattern = try int("sliding_window_pattern") ?? 6
                guard pattern > 0 else { throw bad("sliding_window_pattern", "must be positive, found \(pattern)") }
                slidingLayers = (0..<layers).filter { ($0 + 1) % pattern != 0 }
            }
            let localParameters = allRopeParameters?["sliding_attention"] as? [String: Any]
            if let kind = localParameters?["rope_type"] as? String, kind != "default" {
                throw bad("rope_parameters.sliding_attention.rope_type", "'\(kind)' is not supported for sliding layers (default)")
            }
            let localTheta = try localParameters.flatMap { try double("rope_theta", in: $0) } ?? double("rope_local_base_freq", in: root) ?? 10000
            sliding = (window, slidingLayers, localTheta, try double("query_pre_attn_scalar", in: root) ?? 256)
        }
        do {
            var config = try ModelConfig(
                architecture: arch, hiddenSize: hidden, intermediateSize: try requiredInt("intermediate_size"),
                numLayers: layers, numHeads: heads,
                numKVHeads: try int("num_key_value_heads") ?? heads, headDim: try int("head_dim") ?? defaults.headDim,
                vocabSize: try requiredInt("vocab_size"), ropeTheta: topTheta ?? nestedTheta ?? defaults.ropeTheta,
                ropeScaling: scaling, rmsNormEps: try double("rms_norm_eps", in: root) ?? defaults.rmsNormEps,
                tieWordEmbeddings: try bool("tie_word_embeddings") ?? defaults.tieWordEmbeddings,
                attentionBias: try bool("attention_bias") ?? defaults.attentionBias,
                maxPositionEmbeddings: try int("max_position_embeddings") ?? defaults.maxPositionEmbeddings,
                noRopeLayers: noRope, multipliers: multipliers, rotaryDim: rotaryDim, slidingWindow: slidingWindow)
            if try bool("mlp_bias") == true { throw bad("mlp_bias", "MLP biases are not supported") }
            if let s = sliding {
                config.slidingWindow = s.layers.isEmpty ? nil : s.window
                config.slidingWindowLayers = s.layers
                config.localRopeTheta = s.localTheta
                config.queryPreAttentionScalar = s.scalar
                try config.validate()
            }
            return config
        } catch let ModelAssetsError.invalidConfig(_, field, reason) {
            throw ModelAssetsError.invalidConfig(path: path, field: field, reason: reason)
        }
    }
}

/// JSON values from JSONSerialization: exact integers, any number, booleans. JSON booleans
/// bridge to NSNumber with objCType "c" and must not pass as numbers (nor 0/1 as booleans).
func jsonInteger(_ v: Any) -> Int? {
    guard let n = v as? NSNumber, !isBoolean(n) else { return nil }
    if let i = v as? Int { return i }
    if let d = v as? Double, d.rounded() == d, abs(d) < 9.0e15 { return Int(d) }
    return nil
}

func jsonNumber(_ v: Any) -> Double? {
    guard let n = v as? NSNumber, !isBoolean(n) else { return nil }
    return n.doubleValue
}

func jsonBool(_ v: Any) -> Bool? {
    guard let n = v as? NSNumber, isBoolean(n) else { return nil }
    return n.boolValue
}

private func isBoolean(_ n: NSNumber) -> Bool {
    String(cString: n.objCType) == "c"
}

extension ModelConfig {
    /// A transformers-style config.json (keys sorted) that `fromHuggingFace` reads back to `self`.
    public func huggingFaceConfigJSON() -> Data {
        let definition = architecture.definition
        var fields: [(String, String)] = [
            ("architectures", "[\(jsonString(definition.huggingFaceClass))]"),
            ("model_type", jsonString(definition.huggingFaceModelType)),
            ("hidden_size", "\(hiddenSize)"),
            ("intermediate_size", "\(intermediateSize)"),
            ("num_hidden_layers", "\(numLayers)"),
            ("num_attention_heads", "\(numHeads)"),
            ("num_key_value_heads", "\(numKVHeads)"),
            ("head_dim", "\(headDim)"),
            ("vocab_size", "\(vocabSize)"),
            ("rope_theta", "\(ropeTheta)"),
            ("rms_norm_eps", "\(rmsNormEps)"),
            ("tie_word_embeddings", "\(tieWordEmbeddings)"),
            ("attention_bias", "\(attentionBias)"),
            ("max_position_embeddings", "\(maxPositionEmbeddings)"),
            ("hidden_act", definition.activation == .geluTanh ? "\"gelu_pytorch_tanh\"" : "\"silu\""),
            ("torch_dtype", "\"float32\""),
        ]
        if definition.hasSlidingWindowOption { fields.append(("use_sliding_window", "false")) }
        if definition.ggufNoRopeStep != nil {
            fields.append(("no_rope_layers", "[\((0..<numLayers).map { noRopeLayers.contains($0) ? "0" : "1" }.joined(separator: ", "))]"))
        }
        if definition.hasSlidingWindowLayers {
            fields.append(("hidden_activation", "\"gelu_pytorch_tanh\""))
            fields.append(("sliding_window", slidingWindow.map { "\($0)" } ?? "null"))
            fields.append(("layer_types", "[\((0..<numLayers).map { slidingWindowLayers.contains($0) ? "\"sliding_attention\"" : "\"full_attention\"" }.joined(separator: ", "))]"))
            fields.append(("rope_local_base_freq", "\(localRopeTheta ?? ropeTheta)"))
            // Gemma3TextConfig's query_pre_attn_scalar is an int (transformers 5 refuses 256.0)
            let scalar = queryPreAttentionScalar ?? Double(headDim)
            fields.append(("query_pre_attn_scalar", scalar.rounded() == scalar && abs(scalar) < 1e15 ? "\(Int(scalar))" : "\(scalar)"))
        }
        if let m = multipliers {
            fields += [("embedding_multiplier", "\(m.embedding)"), ("residual_multiplier", "\(m.residual)"),
                       ("attention_multiplier", "\(m.attention)"), ("logits_scaling", "\(m.logits)")]
        }
        if definition.allowsPartialRotary {
            fields.append(("partial_rotary_factor", "\(Double(rotaryDim) / Double(headDim))"))
            fields.append(("sliding_window", slidingWindow.map { "\($0)" } ?? "null"))
        }
        if let s = ropeScaling, s.kind == .longrope {
            func list(_ v: [Double]?) -> String { "[" + (v ?? []).map { "\($0)" }.joined(separator: ", ") + "]" }
            // factor and attention_factor only where they are not what Phi3Config derives (a derived
            // value is derived again on reading, bit for bit; a decimal round trip might not be)
            var parts = ["\"rope_type\": \"longrope\"", "\"short_factor\": \(list(s.shortFactors))", "\"long_factor\": \(list(s.longFactors))"]
            let original = Double(s.originalMaxPositionEmbeddings ?? maxPositionEmbeddings)
            if s.factor != max(1, Double(maxPositionEmbeddings) / original) { parts.append("\"factor\": \(s.factor)") }
            let derived = s.factor <= 1 ? 1 : (1 + Foundation.log(s.factor) / Foundation.log(original)).squareRoot()
            if let v = s.attentionFactor, v != derived { parts.append("\"attention_factor\": \(v)") }
            if let v = s.originalMaxPositionEmbeddings {
                parts.append("\"original_max_position_embeddings\": \(v)")
                fields.append(("original_max_position_embeddings", "\(v)"))
            }
            fields.append(("rope_scaling", "{\(parts.joined(separator: ", "))}"))
        } else if let s = ropeScaling {
            var parts = ["\"rope_type\": \(jsonString(s.kind.rawValue))", "\"factor\": \(s.factor)"]
            if let v = s.lowFrequencyFactor { parts.append("\"low_freq_factor\": \(v)") }
            if let v = s.highFrequencyFactor { parts.append("\"high_freq_factor\": \(v)") }
            if let v = s.originalMaxPositionEmbeddings { parts.append("\"original_max_position_embeddings\": \(v)") }
            fields.append(("rope_scaling", "{\(parts.joined(separator: ", "))}"))
        }
        let body = fields.sorted { $0.0 < $1.0 }.map { "  \(jsonString($0.0)): \($0.1)" }.joined(separator: ",\n")
        return Data("{\n\(body)\n}\n".utf8)
    }
}
