// Phi-3 and Phi-4-mini (Phi3ForCausalLM) as a description: Llama's block with q/k/v fused into one
// qkv_proj and gate/up into one gate_up_proj (gate first), partial rotary (Phi-4-mini rotates 96 of
// its 128 head dimensions), LongRoPE (RopeScaling.Kind.longrope) and sliding_window on every layer
// (Gemma 3's windowed attention with all layers sliding, as transformers masks). GGUF rows are not permuted
// (llama.cpp ropes phi3 NEOX-style). Reference: transformers' configuration_phi3.py /
// modeling_phi3.py, llama.cpp's conversion/phi.py (Phi3MiniModel) and src/models/phi3.cpp.

extension ArchitectureDescription {
    /// Phi3Config: rms_norm_eps 1e-5, max_position_embeddings 4096, rope_theta 10000,
    /// tie_word_embeddings false; no biases (the module has none to turn on).
    static var phi3Description: ArchitectureDescription {
        var d = ArchitectureDescription(
            architecture: .phi3, huggingFaceClass: "Phi3ForCausalLM", norms: llamaNorms, qkNorm: .none,
            ggufRowsPermuted: false, allowsAttentionBias: false, hasMultipliers: false, ggufNoRopeStep: nil,
            hasSlidingWindowOption: false,
            defaults: .init(headDim: nil, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: false, attentionBias: false,
                            maxPositionEmbeddings: 4096))
        d.fusedProjections = true
        d.allowsPartialRotary = true
        d.slidesEveryLayer = true
        return d
    }
}
