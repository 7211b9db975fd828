// The shapes of published checkpoints that bigger-model measurements use (make-model writes them
// with random weights), as validated ModelConfigs. Weights, tokenizers and generation settings
// are left out. Every number is from the model's Hugging Face config.json, cited per case.
import Foundation
import ModelAssets

public enum PublishedShape: String, CaseIterable, Sendable {
    case llama3_2_1b = "llama-3.2-1b"
    case llama3_2_3b = "llama-3.2-3b"
    case qwen2_5_0_5b = "qwen2.5-0.5b"
    case smollm2_135m = "smollm2-135m"
    case qwen3_0_6b = "qwen3-0.6b"
    case qwen3_1_7b = "qwen3-1.7b"
    case qwen3_4b = "qwen3-4b"
    case smollm3_3b = "smollm3-3b"
    case granite3_1_2b = "granite-3.1-2b"
    case olmo2_1b = "olmo-2-1b"
    case phi4_mini = "phi-4-mini"
    case phi3_mini = "phi-3-mini"
    case gemma3_270m = "gemma-3-270m"
    case gemma3_1b = "gemma-3-1b"

    /// The Hugging Face repository whose config.json the numbers come from.
    public var repository: String {
        switch self {
        case .llama3_2_1b: "meta-llama/Llama-3.2-1B (same shape: -Instruct)"
        case .llama3_2_3b: "meta-llama/Llama-3.2-3B (same shape: -Instruct)"
        case .qwen2_5_0_5b: "Qwen/Qwen2.5-0.5B (same shape: -Instruct)"
        case .smollm2_135m: "HuggingFaceTB/SmolLM2-135M-Instruct"
        case .qwen3_0_6b: "Qwen/Qwen3-0.6B"
        case .qwen3_1_7b: "Qwen/Qwen3-1.7B"
        case .qwen3_4b: "Qwen/Qwen3-4B"
        case .smollm3_3b: "HuggingFaceTB/SmolLM3-3B"
        case .granite3_1_2b: "ibm-granite/granite-3.1-2b-base (same shape: -instruct)"
        case .olmo2_1b: "allenai/OLMo-2-0425-1B"
        case .phi4_mini: "microsoft/Phi-4-mini-instruct"
        case .phi3_mini: "microsoft/Phi-3-mini-4k-instruct"
        case .gemma3_270m: "google/gemma-3-270m (same shape: -it)"
        case .gemma3_1b: "google/gemma-3-1b-pt (same shape: -it)"
        }
    }

    /// config.json spells out `head_dim`, so convert_hf_to_gguf.py also writes
    /// `{arch}.attention.key_length` and `value_length` (Llama 3.2 does; Qwen2.5 and the SmolLM2
    /// GGUF in assets/ do not).
    public var declaresHeadDim: Bool {
        switch self {
        case .llama3_2_1b, .llama3_2_3b, .qwen3_0_6b, .qwen3_1_7b, .qwen3_4b, .gemma3_270m, .gemma3_1b: true
        case .qwen2_5_0_5b, .smollm2_135m, .smollm3_3b, .granite3_1_2b, .olmo2_1b, .phi4_mini, .phi3_mini: false
        }
    }

    public var config: ModelConfig {
        // The initializer validates; these literals are valid, so a failure is a bug here.
        do {
            switch self {
            case .llama3_2_1b:
                // config.json: hidden_size 2048, intermediate_size 8192, num_hidden_layers 16,
                // num_attention_heads 32, num_key_value_heads 8, head_dim 64, vocab_size 128256,
                // rope_theta 500000.0, rope_scaling {rope_type llama3, factor 32.0, low_freq_factor 1.0,
                // high_freq_factor 4.0, original_max_position_embeddings 8192}, rms_norm_eps 1e-05,
                // tie_word_embeddings true, attention_bias false, max_position_embeddings 131072.
                return try ModelConfig(
                    architecture: .llama, hiddenSize: 2048, intermediateSize: 8192, numLayers: 16, numHeads: 32,
                    numKVHeads: 8, headDim: 64, vocabSize: 128_256, ropeTheta: 500_000, ropeScaling: Self.llama3Scaling,
                    rmsNormEps: 1e-5, tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 131_072)
            case .llama3_2_3b:
                // config.json: hidden_size 3072, intermediate_size 8192, num_hidden_layers 28,
                // num_attention_heads 24, num_key_value_heads 8, head_dim 128, vocab_size 128256,
                // rope_theta 500000.0, rope_scaling as 1B (llama3, factor 32.0, 1.0, 4.0, 8192),
                // rms_norm_eps 1e-05, tie_word_embeddings true, max_position_embeddings 131072.
                return try ModelConfig(
                    architecture: .llama, hiddenSize: 3072, intermediateSize: 8192, numLayers: 28, numHeads: 24,
                    numKVHeads: 8, headDim: 128, vocabSize: 128_256, ropeTheta: 500_000, ropeScaling: Self.llama3Scaling,
                    rmsNormEps: 1e-5, tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 131_072)
            case .qwen2_5_0_5b:
                // config.json: model_type qwen2, hidden_size 896, intermediate_size 4864,
                // num_hidden_layers 24, num_attention_heads 14, num_key_value_heads 2 (head dim
                // 896 / 14 = 64), vocab_size 151936, rope_theta 1000000.0, rms_norm_eps 1e-06,
                // tie_word_embeddings true, max_position_embeddings 32768 (use_sliding_window false);
                // Qwen2 has q/k/v biases.
                return try ModelConfig(
                    architecture: .qwen2, hiddenSize: 896, intermediateSize: 4864, numLayers: 24, numHeads: 14,
                    numKVHeads: 2, headDim: 64, vocabSize: 151_936, ropeTheta: 1_000_000, rmsNormEps: 1e-6,
                    tieWordEmbeddings: true, attentionBias: true, maxPositionEmbeddings: 32_768)
            case .smollm2_135m:
                // config.json: hidden_size 576, intermediate_size 1536, num_hidden_layers 30,
                // num_attention_heads 9, num_key_value_heads 3 (head dim 64), vocab_size 49152,
                // rope_theta 100000, rms_norm_eps 1e-05, tie_word_embeddings true,
                // max_position_embeddings 8192 (as the fetched GGUF's llama.* keys say).
                return try ModelConfig(
                    architecture: .llama, hiddenSize: 576, intermediateSize: 1536, numLayers: 30, numHeads: 9,
                    numKVHeads: 3, headDim: 64, vocabSize: 49_152, ropeTheta: 100_000, rmsNormEps: 1e-5,
                    tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 8192)
            case .qwen3_0_6b, .qwen3_1_7b, .qwen3_4b:
                // config.json (all three): model_type qwen3, head_dim 128, vocab_size 151936,
                // rope_theta 1000000, rms_norm_eps 1e-06, tie_word_embeddings true,
                // max_position_embeddings 40960, attention_bias false; 0.6B: hidden_size 1024,
                // intermediate_size 3072, 28 layers, 16 heads, 8 kv heads; 1.7B: 2048, 6144, 28, 16,
                // 8; 4B: 2560, 9728, 36, 32, 8.
                let (hidden, ffn, layers, heads) = switch self {
                case .qwen3_0_6b: (1024, 3072, 28, 16)
                case .qwen3_1_7b: (2048, 6144, 28, 16)
                default: (2560, 9728, 36, 32)
                }
                return try ModelConfig(
                    architecture: .qwen3, hiddenSize: hidden, intermediateSize: ffn, numLayers: layers, numHeads: heads,
                    numKVHeads: 8, headDim: 128, vocabSize: 151_936, ropeTheta: 1_000_000, rmsNormEps: 1e-6,
                    tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 40_960)
            case .smollm3_3b:
                // config.json: model_type smollm3, hidden_size 2048, intermediate_size 11008,
                // num_hidden_layers 36, num_attention_heads 16, num_key_value_heads 4 (head dim 128),
                // vocab_size 128256, rope_theta 5000000.0, rms_norm_eps 1e-06, tie_word_embeddings
                // true, max_position_embeddings 65536, no_rope_layer_interval 4 (NoPE on layers 3, 7, ...).
                return try ModelConfig(
                    architecture: .smollm3, hiddenSize: 2048, intermediateSize: 11008, numLayers: 36, numHeads: 16,
                    numKVHeads: 4, headDim: 128, vocabSize: 128_256, ropeTheta: 5_000_000, rmsNormEps: 1e-6,
                    tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 65_536,
                    noRopeLayers: (0..<36).filter { ($0 + 1) % 4 == 0 })
            case .granite3_1_2b:
                // config.json: model_type granite, hidden_size 2048, intermediate_size 8192,
                // num_hidden_layers 40, num_attention_heads 32, num_key_value_heads 8 (head dim 64),
                // vocab_size 49152, rope_theta 5000000.0, rms_norm_eps 1e-05, max_position_embeddings
                // 131072, tie_word_embeddings true, embedding_multiplier 12.0, residual_multiplier 0.22,
                // attention_multiplier 0.015625, logits_scaling 8.0.
                return try ModelConfig(
                    architecture: .granite, hiddenSize: 2048, intermediateSize: 8192, numLayers: 40, numHeads: 32,
                    numKVHeads: 8, headDim: 64, vocabSize: 49_152, ropeTheta: 5_000_000, rmsNormEps: 1e-5,
                    tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 131_072,
                    multipliers: Multipliers(embedding: 12, residual: 0.22, attention: 0.015625, logits: 8))
            case .olmo2_1b:
                // config.json: model_type olmo2, hidden_size 2048, intermediate_size 8192,
                // num_hidden_layers 16, num_attention_heads 16, num_key_value_heads 16 (head dim 128),
                // vocab_size 100352, rope_theta 500000, rms_norm_eps 1e-06, tie_word_embeddings false,
                // max_position_embeddings 4096.
                return try ModelConfig(
                    architecture: .olmo2, hiddenSize: 2048, intermediateSize: 8192, numLayers: 16, numHeads: 16,
                    numKVHeads: 16, headDim: 128, vocabSize: 100_352, ropeTheta: 500_000, rmsNormEps: 1e-6,
                    tieWordEmbeddings: false, attentionBias: false, maxPositionEmbeddings: 4096)
            case .phi4_mini:
                // config.json: model_type phi3, hidden_size 3072, intermediate_size 8192, num_hidden_layers 32,
                // num_attention_heads 24, num_key_value_heads 8 (head dim 128), partial_rotary_factor 0.75,
                // vocab_size 200064, rope_theta 10000.0, rope_scaling {type longrope, short_factor 48 × 1.0,
                // long_factor (below)}, original_max_position_embeddings 4096, max_position_embeddings 131072,
                // rms_norm_eps 1e-05, tie_word_embeddings true, sliding_window 262144.
                return try ModelConfig(
                    architecture: .phi3, hiddenSize: 3072, intermediateSize: 8192, numLayers: 32, numHeads: 24,
                    numKVHeads: 8, headDim: 128, vocabSize: 200_064, ropeTheta: 10000,
                    ropeScaling: RopeScaling(kind: .longrope, factor: 32, originalMaxPositionEmbeddings: 4096,
                                             shortFactors: [Double](repeating: 1, count: 48), longFactors: Self.phi4MiniLongFactors,
                                             attentionFactor: (1 + Foundation.log(32.0) / Foundation.log(4096.0)).squareRoot()),
                    rmsNormEps: 1e-5, tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 131_072,
                    rotaryDim: 96, slidingWindow: 262_144)
            case .phi3_mini:
                // config.json: model_type phi3, hidden_size 3072, intermediate_size 8192, num_hidden_layers 32,
                // num_attention_heads 32, num_key_value_heads 32, vocab_size 32064, rope_theta 10000.0,
                // rope_scaling null, max_position_embeddings 4096 (original 4096), rms_norm_eps 1e-05,
                // tie_word_embeddings false, sliding_window 2047.
                return try ModelConfig(
                    architecture: .phi3, hiddenSize: 3072, intermediateSize: 8192, numLayers: 32, numHeads: 32,
                    numKVHeads: 32, headDim: 96, vocabSize: 32064, ropeTheta: 10000, rmsNormEps: 1e-5,
                    tieWordEmbeddings: false, attentionBias: false, maxPositionEmbeddings: 4096, slidingWindow: 2047)
            case .gemma3_270m:
                // config.json: model_type gemma3_text, hidden_size 640, intermediate_size 2048,
                // num_hidden_layers 18, num_attention_heads 4, num_key_value_heads 1, head_dim 256,
                // vocab_size 262144, rope_theta 1000000, rope_local_base_freq 10000, sliding_window 512,
                // layer_types: full_attention every 6th (5, 11, 17), query_pre_attn_scalar 256,
                // rms_norm_eps 1e-06, max_position_embeddings 32768, tied, no softcapping.
                return try Self.gemma3(hidden: 640, intermediate: 2048, layers: 18)
            case .gemma3_1b:
                // config.json: model_type gemma3_text, hidden_size 1152, intermediate_size 6912,
                // num_hidden_layers 26, num_attention_heads 4, num_key_value_heads 1, head_dim 256,
                // vocab_size 262144, rope_theta 1000000, rope_local_base_freq 10000, rope_scaling null,
                // sliding_window 512, sliding_window_pattern 6, query_pre_attn_scalar 256,
                // rms_norm_eps 1e-06, max_position_embeddings 32768, tied, no softcapping.
                return try Self.gemma3(hidden: 1152, intermediate: 6912, layers: 26)
            }
        } catch {
            preconditionFailure("[PublishedShape] \(rawValue) does not validate: \(error)")
        }
    }

    /// Phi-4-mini-instruct's config.json rope_scaling.long_factor (48 values, one per rotated pair).
    private static let phi4MiniLongFactors: [Double] = [
        1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649, 2.446418898,
        2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533, 5.984965424,
        6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651, 14.64173252,
        16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23,
        32.6, 32.61, 32.64, 32.66, 32.7, 32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77,
    ]
    /// Gemma 3's small text models: 4 query heads of 256 over one kv head, window 512, every 6th layer global.
    private static func gemma3(hidden: Int, intermediate: Int, layers: Int) throws -> ModelConfig {
        var c = try ModelConfig(
            architecture: .gemma3, hiddenSize: hidden, intermediateSize: intermediate, numLayers: layers, numHeads: 4,
            numKVHeads: 1, headDim: 256, vocabSize: 262_144, ropeTheta: 1_000_000, rmsNormEps: 1e-6,
            tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 32_768)
        c.slidingWindow = 512
        c.slidingWindowLayers = (0..<layers).filter { ($0 + 1) % 6 != 0 }
        c.localRopeTheta = 10_000
        c.queryPreAttentionScalar = 256
        try c.validate()
        return c
    }

    private static let llama3Scaling = RopeScaling(
        kind: .llama3, factor: 32, lowFrequencyFactor: 1, highFrequencyFactor: 4, originalMaxPositionEmbeddings: 8192)
}
