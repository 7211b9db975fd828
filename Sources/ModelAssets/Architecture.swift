// An architecture as a description: what one decoder family is, as a value the loaders, the tensor
// table, both executors and the exports read — its names (config.json `model_type` and class,
// GGUF `general.architecture`), the config defaults its reference applies, the norms of its block
// (where they sit and what they cover, with Hugging Face and llama.cpp names), how its GGUF files
// lay out q/k rows, and which of the optional features (NoPE layers, scale factors) it has.
// Every architecture is one pre-norm-or-post-norm decoder block with SwiGLU; what differs is here.
// Phi-3's fused projections and partial rotary are flags here (the split and the rotation live in
// ModelDefinition and the executors); Gemma 3 adds (1 + w) norms, a GELU-tanh gate, an embedding
// scale and sliding-window layers, which Phi-3's window (on every layer) also uses.
// References: transformers' configuration_/modeling_<arch>.py, llama.cpp's llama-arch.cpp and
// src/models/<arch>.cpp, convert_hf_to_gguf.py (conversion/<arch>.py).

/// The architectures read. Raw values are config.json's `model_type` and GGUF's `general.architecture`
/// (the same strings for every architecture here).
public enum ModelArchitecture: String, Codable, Sendable, CaseIterable {
    case llama, mistral, qwen2, qwen3, smollm3, granite, olmo2, phi3
    /// Gemma 3's text model: GGUF `gemma3`, config.json `gemma3_text` (`huggingFaceModelType`).
    case gemma3

    /// The description of this architecture.
    public var definition: ArchitectureDescription { ArchitectureDescription.of(self) }
}

/// Where a layer norm sits in the block (the residual stream is x):
///
///     h = attentionInput?(x);  a = attention(h);  a = attentionOutput?(a);  x = x + r·a
///     h = feedForwardInput?(x); m = mlp(h);        m = feedForwardOutput?(m); x = x + r·m
///
/// and the norms inside attention, on q and k before RoPE (per head or over the whole projection).
/// Llama has the two input norms; OLMo 2 the two output norms; Gemma 3 (next) all four.
public enum NormSlot: String, CaseIterable, Sendable, Codable {
    case attentionInput, attentionOutput, feedForwardInput, feedForwardOutput, query, key

    /// The slot's position in `allCases` (arrays of per-slot weights are laid out so).
    public var index: Int {
        switch self {
        case .attentionInput: 0
        case .attentionOutput: 1
        case .feedForwardInput: 2
        case .feedForwardOutput: 3
        case .query: 4
        case .key: 5
        }
    }
}

/// The gated MLP's activation: down(act(gate(h)) · up(h)).
public enum GatedActivation: String, Sendable, Codable {
    /// x·σ(x) (SwiGLU: Llama and the others).
    case silu
    /// transformers' `gelu_pytorch_tanh`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Gemma).
    case geluTanh
}

/// What the q and k norms cover.
public enum QKNormKind: String, Sendable, Codable {
    /// No q/k norm.
    case none
    /// One RMSNorm of size head_dim applied to every head (Qwen3, Gemma 3).
    case perHead
    /// One RMSNorm over the whole projection, q [H·hd] and k [K·hd] (OLMo 2).
    case wholeProjection
}

/// A layer norm of an architecture: its slot and its tensor names (`{name}.weight` under
/// `model.layers.{i}.` in Hugging Face files, `blk.{i}.{gguf}.weight` in GGUF files).
public struct LayerNormName: Sendable, Equatable {
    public let slot: NormSlot
    public let huggingFace: String
    public let gguf: String
}

/// Config values an architecture's reference fills in when config.json leaves them out
/// (transformers' config class defaults).
public struct ArchitectureDefaults: Sendable, Equatable {
    /// nil: hidden_size / num_attention_heads.
    public var headDim: Int?
    public var ropeTheta: Double
    public var rmsNormEps: Double
    public var tieWordEmbeddings: Bool
    public var attentionBias: Bool
    public var maxPositionEmbeddings: Int
}

public struct ArchitectureDescription: Sendable {
    public let architecture: ModelArchitecture
    /// config.json's `architectures[0]`.
    public let huggingFaceClass: String
    /// The layer norms, in block order.
    public let norms: [LayerNormName]
    public let qkNorm: QKNormKind
    /// Whether llama.cpp's converter stores q/k rows interleaved per head for its "normal" RoPE
    /// (`LlamaModel.permute`; architectures llama.cpp ropes with LLAMA_ROPE_TYPE_NORM). NEOX-style
    /// architectures (Qwen2, Qwen3, OLMo 2) keep Hugging Face's row order.
    public let ggufRowsPermuted: Bool
    /// Whether `attention_bias` may be true: Llama-family configs put a bias on q, k and v only;
    /// the others would also put one on o_proj, which no published checkpoint has (refused).
    public let allowsAttentionBias: Bool
    /// Granite's embedding, residual, attention and logits multipliers.
    public let hasMultipliers: Bool
    /// Layers without RoPE: config.json's `no_rope_layers` (SmolLM3); in GGUF every `ggufNoRopeStep`-th
    /// layer (llama.cpp hard-codes 4 for SmolLM3). nil: every layer rotates.
    public let ggufNoRopeStep: Int?
    /// Whether the reference has sliding-window options (refused when turned on, for now).
    public let hasSlidingWindowOption: Bool
    public let defaults: ArchitectureDefaults
    /// Whether the files hold q/k/v as one `self_attn.qkv_proj` (GGUF `attn_qkv`) and gate/up as
    /// one `mlp.gate_up_proj` (gate rows first; GGUF `ffn_up` [2F, D]), as Phi-3 does. The loaders
    /// split them into the seven projections; LoRA targets them as PEFT does, one A and one B per
    /// fused module (`TensorTable.loraModules`).
    public var fusedProjections = false
    /// Whether RoPE may rotate only the first dimensions of each head (config.json's
    /// `partial_rotary_factor`, GGUF's `rope.dimension_count`; Phi-4-mini rotates 96 of 128).
    public var allowsPartialRotary = false
    /// What the norm weights of Hugging Face files are offset by: Gemma 3's RMSNorm multiplies by
    /// (1 + w), and llama.cpp's converter stores w + 1 (every `*norm.weight`). The toolkit holds
    /// Hugging Face's w; the executors add this, the GGUF loader subtracts it, GGUF exports add it.
    public var normWeightOffset: Float = 0
    /// The gate's activation in the gated MLP: SiLU (SwiGLU) or GELU with the tanh approximation.
    public var activation: GatedActivation = .silu
    /// Whether the token embedding is multiplied by √hidden (Gemma: transformers' embed_scale,
    /// llama.cpp's `inp_scaled`).
    public var scalesEmbeddingBySqrtHidden = false
    /// Whether the config marks layers as sliding-window (`layer_types`, `sliding_window`,
    /// `rope_local_base_freq`): Gemma 3's local layers, with their own RoPE base.
    public var hasSlidingWindowLayers = false
    /// In GGUF, a global layer every `ggufSlidingWindowPattern`-th (llama.cpp's default for gemma3, 6).
    public var ggufSlidingWindowPattern: Int? = nil
    /// Whether config.json's `sliding_window` (GGUF `attention.sliding_window`, 0 for none) windows
    /// every layer with the one RoPE base, as transformers' Phi-3 applies it: `slidingWindowLayers`
    /// is then all layers or none.
    public var slidesEveryLayer = false
    /// config.json's `model_type`, when it is not the GGUF name (Gemma 3's text model).
    public var huggingFaceModelTypeOverride: String? = nil

    public var ggufName: String { architecture.rawValue }
    public var huggingFaceModelType: String { huggingFaceModelTypeOverride ?? architecture.rawValue }

    /// The norm in `slot`, if the architecture has one there.
    public func norm(_ slot: NormSlot) -> LayerNormName? { norms.first { $0.slot == slot } }

    static let llamaNorms = [
        LayerNormName(slot: .attentionInput, huggingFace: "input_layernorm", gguf: "attn_norm"),
        LayerNormName(slot: .feedForwardInput, huggingFace: "post_attention_layernorm", gguf: "ffn_norm"),
    ]
    static let qkNorms = [
        LayerNormName(slot: .query, huggingFace: "self_attn.q_norm", gguf: "attn_q_norm"),
        LayerNormName(slot: .key, huggingFace: "self_attn.k_norm", gguf: "attn_k_norm"),
    ]

    public static func of(_ a: ModelArchitecture) -> ArchitectureDescription {
        switch a {
        case .llama:
            // LlamaConfig: rms_norm_eps 1e-6, max_position_embeddings 2048, rope_theta 10000.
            return llamaFamily(a, "LlamaForCausalLM", bias: false, permuted: true)
        case .mistral:
            return llamaFamily(a, "MistralForCausalLM", bias: false, permuted: true)
        case .qwen2:
            // Qwen2 puts biases on q/k/v; its GGUF rows are not permuted (NEOX RoPE).
            return llamaFamily(a, "Qwen2ForCausalLM", bias: true, permuted: false)
        case .qwen3:
            // Qwen3Config: head_dim 128, rms_norm_eps 1e-6, max_position_embeddings 32768,
            // tie_word_embeddings false, attention_bias false; per-head q/k RMSNorm before RoPE.
            return ArchitectureDescription(
                architecture: a, huggingFaceClass: "Qwen3ForCausalLM", norms: qkNorms + llamaNorms, qkNorm: .perHead,
                ggufRowsPermuted: false, allowsAttentionBias: false, hasMultipliers: false, ggufNoRopeStep: nil,
                hasSlidingWindowOption: true,
                defaults: .init(headDim: 128, ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, attentionBias: false,
                                maxPositionEmbeddings: 32768))
        case .smollm3:
            // SmolLM3Config: default_theta 2e6, rms_norm_eps 1e-6, max_position_embeddings 32768,
            // tie_word_embeddings true; no_rope_layers (1 = RoPE) or a NoPE layer every 4th.
            return ArchitectureDescription(
                architecture: a, huggingFaceClass: "SmolLM3ForCausalLM", norms: llamaNorms, qkNorm: .none,
                ggufRowsPermuted: true, allowsAttentionBias: false, hasMultipliers: false, ggufNoRopeStep: 4,
                hasSlidingWindowOption: true,
                defaults: .init(headDim: nil, ropeTheta: 2_000_000, rmsNormEps: 1e-6, tieWordEmbeddings: true, attentionBias: false,
                                maxPositionEmbeddings: 32768))
        case .granite:
            // GraniteConfig: rms_norm_eps 1e-6, max_position_embeddings 2048, the four multipliers 1.0.
            return ArchitectureDescription(
                architecture: a, huggingFaceClass: "GraniteForCausalLM", norms: llamaNorms, qkNorm: .none,
                ggufRowsPermuted: true, allowsAttentionBias: false, hasMultipliers: true, ggufNoRopeStep: nil,
                hasSlidingWindowOption: false,
                defaults: .init(headDim: nil, ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, attentionBias: false,
                                maxPositionEmbeddings: 2048))
        case .phi3:
            return phi3Description
        case .olmo2:
            // Olmo2Config: rms_norm_eps 1e-5, max_position_embeddings 2048; norms after each sublayer
            // (no input norms), q/k RMSNorm over the whole projection.
            return ArchitectureDescription(
                architecture: a, huggingFaceClass: "Olmo2ForCausalLM",
                norms: [
                    LayerNormName(slot: .query, huggingFace: "self_attn.q_norm", gguf: "attn_q_norm"),
                    LayerNormName(slot: .key, huggingFace: "self_attn.k_norm", gguf: "attn_k_norm"),
                    LayerNormName(slot: .attentionOutput, huggingFace: "post_attention_layernorm", gguf: "post_attention_norm"),
                    LayerNormName(slot: .feedForwardOutput, huggingFace: "post_feedforward_layernorm", gguf: "post_ffw_norm"),
                ],
                qkNorm: .wholeProjection, ggufRowsPermuted: false, allowsAttentionBias: false, hasMultipliers: false,
                ggufNoRopeStep: nil, hasSlidingWindowOption: false,
                defaults: .init(headDim: nil, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: false, attentionBias: false,
                                maxPositionEmbeddings: 2048))
        case .gemma3:
            // Gemma3TextConfig: head_dim 256, rms_norm_eps 1e-6, max_position_embeddings 131072, tied,
            // rope_theta 1e6 (global layers; rope_local_base_freq 10000 for sliding ones). All four
            // block norms, per-head q/k norms, every norm (1 + w); GELU-tanh gate; embedding ×√hidden.
            // llama.cpp ropes it NEOX-style (rows unpermuted) and makes every 6th layer global.
            var d = ArchitectureDescription(
                architecture: a, huggingFaceClass: "Gemma3ForCausalLM",
                norms: qkNorms + [
                    LayerNormName(slot: .attentionInput, huggingFace: "input_layernorm", gguf: "attn_norm"),
                    LayerNormName(slot: .attentionOutput, huggingFace: "post_attention_layernorm", gguf: "post_attention_norm"),
                    LayerNormName(slot: .feedForwardInput, huggingFace: "pre_feedforward_layernorm", gguf: "ffn_norm"),
                    LayerNormName(slot: .feedForwardOutput, huggingFace: "post_feedforward_layernorm", gguf: "post_ffw_norm"),
                ],
                qkNorm: .perHead, ggufRowsPermuted: false, allowsAttentionBias: false, hasMultipliers: false,
                ggufNoRopeStep: nil, hasSlidingWindowOption: false,
                defaults: .init(headDim: 256, ropeTheta: 1_000_000, rmsNormEps: 1e-6, tieWordEmbeddings: true, attentionBias: false,
                                maxPositionEmbeddings: 131_072))
            d.normWeightOffset = 1
            d.activation = .geluTanh
            d.scalesEmbeddingBySqrtHidden = true
            d.hasSlidingWindowLayers = true
            d.ggufSlidingWindowPattern = 6
            d.huggingFaceModelTypeOverride = "gemma3_text"
            return d
        }
    }

    /// The architecture whose config.json `model_type` is `name`.
    public static func architecture(huggingFaceModelType name: String) -> ModelArchitecture? {
        ModelArchitecture.allCases.first { $0.definition.huggingFaceModelType == name }
    }

    /// Llama, Mistral and Qwen2: the two pre-norms, optional q/k/v biases. The defaults are the
    /// ones this package has always applied to them.
    private static func llamaFamily(_ a: ModelArchitecture, _ className: String, bias: Bool, permuted: Bool) -> ArchitectureDescription {
        ArchitectureDescription(
            architecture: a, huggingFaceClass: className, norms: llamaNorms, qkNorm: .none, ggufRowsPermuted: permuted,
            allowsAttentionBias: true, hasMultipliers: false, ggufNoRopeStep: nil, hasSlidingWindowOption: false,
            defaults: .init(headDim: nil, ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, attentionBias: bias,
                            maxPositionEmbeddings: 2048))
    }
}

/// Granite's scale factors (config.json's `*_multiplier` / `logits_scaling`, GGUF's `{arch}.*_scale`).
public struct Multipliers: Codable, Sendable, Equatable {
    /// The token embedding is multiplied by this.
    public var embedding: Double
    /// Each sublayer's output is multiplied by this before it is added to the residual stream.
    public var residual: Double
    /// The attention scores' scale (in place of 1/√head_dim).
    public var attention: Double
    /// The logits are divided by this.
    public var logits: Double

    public init(embedding: Double = 1, residual: Double = 1, attention: Double = 1, logits: Double = 1) {
        self.embedding = embedding
        self.residual = residual
        self.attention = attention
        self.logits = logits
    }
}

/// How a layer rotates q and k.
public enum LayerRope: Sendable, Equatable {
    /// RoPE on the whole head.
    case full
    /// No positional rotation at all (SmolLM3's NoPE layers).
    case none
}
