// The descriptions' config decoding: each architecture's defaults where config.json is silent (as
// its transformers config class applies them), its own keys (SmolLM3's NoPE layers, Granite's
// multipliers) from config.json and from GGUF metadata, refusals that name the key, and the
// tensor names of each architecture in both namings.
import Foundation
import ModelAssets
import ModelDefinition
import XCTest

final class ArchitectureConfigTests: XCTestCase {
    private func hf(_ json: String) throws -> ModelConfig {
        try ModelConfig.fromHuggingFace(json: Data(json.utf8), path: "config.json")
    }

    private static let base = #""hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8, "num_attention_heads": 4, "vocab_size": 50"#

    func testDefaultsAreTheReferenceConfigClasses() throws {
        let qwen3 = try hf(#"{"model_type": "qwen3", \#(Self.base)}"#)
        XCTAssertEqual([qwen3.headDim, qwen3.numKVHeads, qwen3.maxPositionEmbeddings], [128, 4, 32768])  // Qwen3Config.head_dim = 128
        XCTAssertEqual(qwen3.rmsNormEps, 1e-6)
        XCTAssertFalse(qwen3.tieWordEmbeddings)
        let smol = try hf(#"{"model_type": "smollm3", \#(Self.base)}"#)
        XCTAssertEqual(smol.ropeTheta, 2_000_000)  // SmolLM3Config.default_theta
        XCTAssertTrue(smol.tieWordEmbeddings)
        XCTAssertEqual(smol.noRopeLayers, [3, 7], "a NoPE layer every no_rope_layer_interval (4) layers")
        XCTAssertEqual(smol.headDim, 16)
        let granite = try hf(#"{"model_type": "granite", \#(Self.base)}"#)
        XCTAssertEqual(granite.multipliers, Multipliers(embedding: 1, residual: 1, attention: 1, logits: 1), "GraniteConfig's defaults are 1.0 each")
        let olmo = try hf(#"{"model_type": "olmo2", \#(Self.base)}"#)
        XCTAssertEqual(olmo.rmsNormEps, 1e-5)
        XCTAssertEqual(olmo.maxPositionEmbeddings, 2048)
        XCTAssertNil(olmo.multipliers)
        XCTAssertEqual(olmo.noRopeLayers, [])
    }

    func testArchitectureKeys() throws {
        let listed = try hf(#"{"model_type": "smollm3", \#(Self.base), "no_rope_layers": [1, 0, 1, 1, 0, 1, 1, 1]}"#)
        XCTAssertEqual(listed.noRopeLayers, [1, 4])
        let every3 = try hf(#"{"model_type": "smollm3", \#(Self.base), "no_rope_layer_interval": 3}"#)
        XCTAssertEqual(every3.noRopeLayers, [2, 5])
        let granite = try hf(#"{"model_type": "granite", \#(Self.base), "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.015625, "logits_scaling": 8}"#)
        XCTAssertEqual(granite.multipliers, Multipliers(embedding: 12, residual: 0.22, attention: 0.015625, logits: 8))
        XCTAssertEqual(granite.attentionScale, 0.015625)
        XCTAssertNil(try hf(#"{"model_type": "llama", \#(Self.base)}"#).attentionScale, "1/√hd, each executor's own")
    }

    func testRefusalsNameTheKey() {
        let cases: [(String, String)] = [
            (#"{"model_type": "qwen3", \#(Self.base), "use_sliding_window": true}"#, "use_sliding_window"),
            (#"{"model_type": "smollm3", \#(Self.base), "layer_types": ["sliding_attention"]}"#, "layer_types"),
            (#"{"model_type": "qwen3", \#(Self.base), "attention_bias": true}"#, "attentionBias"),
            (#"{"model_type": "smollm3", \#(Self.base), "no_rope_layers": [1, 0]}"#, "no_rope_layers"),
            (#"{"model_type": "smollm3", \#(Self.base), "no_rope_layer_interval": 0}"#, "no_rope_layer_interval"),
            (#"{"model_type": "granite", \#(Self.base), "logits_scaling": 0}"#, "multipliers.logits"),
            (#"{"model_type": "gemma3", \#(Self.base)}"#, "model_type"),
        ]
        for (json, field) in cases {
            XCTAssertThrowsError(try hf(json), field) { error in
                guard case let .invalidConfig(path, f, _) = error as? ModelAssetsError else { return XCTFail("\(field): \(error)") }
                XCTAssertEqual(path, "config.json")
                XCTAssertEqual(f, field)
            }
        }
        // a feature on an architecture that has no such thing
        XCTAssertThrowsError(try ModelConfig(architecture: .llama, hiddenSize: 8, intermediateSize: 8, numLayers: 4, numHeads: 2, numKVHeads: 2,
                                             vocabSize: 4, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true,
                                             maxPositionEmbeddings: 8, noRopeLayers: [3]))
        XCTAssertThrowsError(try ModelConfig(architecture: .qwen3, hiddenSize: 8, intermediateSize: 8, numLayers: 4, numHeads: 2, numKVHeads: 2,
                                             vocabSize: 4, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true,
                                             maxPositionEmbeddings: 8, multipliers: Multipliers()))
    }

    /// What ModelExport writes as GGUF metadata reads back (the float32 keys rounded), and what
    /// llama.cpp's graphs hard-code comes from the description: SmolLM3's every-4th NoPE layer.
    func testGGUFMetadataRoundTrips() throws {
        for f in try ArchitectureFixture.all {
            var writer = GGUFWriter()
            for (k, v) in ModelExport.ggufMetadata(for: f.config) { try writer.set(k, v) }
            for (name, t) in ModelExport.ropeFactorTensors(f.config) { try writer.addTensor(name, t, as: .f32) }  // Phi's LongRoPE lists
            let file = try GGUFFile(data: writer.serialized(), path: "m.gguf")
            let back = try ModelConfig.fromGGUF(file, hasOutputTensor: !f.config.tieWordEmbeddings)
            XCTAssertEqual(back, ArchitectureFormatTests.float32Rounded(f.config), f.name)
        }
        // A draft of chosen SmolLM3 layers keeps each layer's RoPE, and cannot be a llama.cpp file
        let smol = try ArchitectureFixture("smollm3").config
        let draft = smol.selectingLayers([0, 3])
        XCTAssertEqual(draft.noRopeLayers, [1])
        XCTAssertThrowsError(try ModelExport.checkGGUFExpressible(draft)) { error in
            guard case .invalidConfig(_, "noRopeLayers", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        // Granite without scale keys: llama.cpp's defaults (no scaling, attention 1/√hd)
        var writer = GGUFWriter()
        let granite = try ArchitectureFixture("granite").config
        for (k, v) in ModelExport.ggufMetadata(for: granite) where !k.hasSuffix("scale") { try writer.set(k, v) }
        let plain = try ModelConfig.fromGGUF(GGUFFile(data: writer.serialized(), path: "m.gguf"), hasOutputTensor: false)
        XCTAssertEqual(plain.multipliers, Multipliers(embedding: 1, residual: 1, attention: 1 / Double(granite.headDim).squareRoot(), logits: 1))
    }

    /// Gemma 3 as google/gemma-3-1b's config.json spells it (transformers 4's keys: rope_theta,
    /// rope_local_base_freq, sliding_window_pattern) is make-model's gemma-3-1b shape; a draft of
    /// chosen layers keeps each layer's window and cannot be a llama.cpp file; what llama.cpp's
    /// gemma3 cannot express, or the toolkit does not run, is refused by name.
    func testGemma3Keys() throws {
        let published = try hf(#"""
            {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "hidden_size": 1152, "intermediate_size": 6912,
             "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
             "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": null, "sliding_window": 512,
             "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "max_position_embeddings": 32768,
             "final_logit_softcapping": null, "attn_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh"}
            """#)
        XCTAssertEqual(published, PublishedShape.gemma3_1b.config)
        XCTAssertEqual(published.slidingWindowLayers.count, 22)
        XCTAssertEqual((0..<26).filter { published.window(layer: $0) == nil }, [5, 11, 17, 23])
        XCTAssertEqual(published.attentionScale, 1 / 16)
        XCTAssertEqual(published.ropeTheta(layer: 0), 10000)
        XCTAssertEqual(published.ropeTheta(layer: 5), 1_000_000)
        // transformers 5's Gemma3TextConfig takes query_pre_attn_scalar as an int only
        XCTAssertTrue(String(decoding: published.huggingFaceConfigJSON(), as: UTF8.self).contains(#""query_pre_attn_scalar": 256,"#))
        // defaults: Gemma3TextConfig's window 4096, pattern 6, local base 1e4, scalar 256, head_dim 256
        let plain = try hf(#"{"model_type": "gemma3_text", \#(Self.base)}"#)
        XCTAssertEqual([plain.slidingWindow, plain.headDim], [4096, 256])
        XCTAssertEqual(plain.slidingWindowLayers, [0, 1, 2, 3, 4, 6, 7])
        XCTAssertEqual(plain.queryPreAttentionScalar, 256)
        XCTAssertTrue(plain.tieWordEmbeddings)
        // GGUF metadata of the published shape reads back to it (what llama.cpp assumes: every 6th
        // layer global, 1/√head_dim)
        var writer = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: published) { try writer.set(k, v) }
        XCTAssertEqual(try ModelConfig.fromGGUF(GGUFFile(data: writer.serialized(), path: "m.gguf"), hasOutputTensor: false),
                       ArchitectureFormatTests.float32Rounded(published))
        let draft = published.selectingLayers([0, 5, 6])
        XCTAssertEqual(draft.slidingWindowLayers, [0, 2])
        XCTAssertThrowsError(try ModelExport.checkGGUFExpressible(draft)) { error in
            guard case .invalidConfig(_, "slidingWindowLayers", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        var scaled = published
        scaled.queryPreAttentionScalar = 144
        XCTAssertThrowsError(try ModelExport.checkGGUFExpressible(scaled)) { error in
            guard case .invalidConfig(_, "queryPreAttentionScalar", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        let refused: [(String, String)] = [
            (#"{"model_type": "gemma3_text", \#(Self.base), "final_logit_softcapping": 30.0}"#, "final_logit_softcapping"),
            (#"{"model_type": "gemma3_text", \#(Self.base), "attn_logit_softcapping": 50.0}"#, "attn_logit_softcapping"),
            (#"{"model_type": "gemma3_text", \#(Self.base), "layer_types": ["full_attention"]}"#, "layer_types"),
            (#"{"model_type": "gemma3_text", \#(Self.base), "hidden_activation": "gelu"}"#, "hidden_activation"),
            (#"{"model_type": "gemma3_text", \#(Self.base), "use_bidirectional_attention": true}"#, "use_bidirectional_attention"),
            (#"{"model_type": "gemma3_text", \#(Self.base), "sliding_window": 0}"#, "slidingWindow"),
        ]
        for (json, field) in refused {
            XCTAssertThrowsError(try hf(json), field) { error in
                guard case let .invalidConfig(path, f, _) = error as? ModelAssetsError else { return XCTFail("\(field): \(error)") }
                XCTAssertEqual(path, "config.json")
                XCTAssertEqual(f, field)
            }
        }
    }

    /// The same Hugging Face name is another llama.cpp tensor in another architecture.
    func testTensorNamesPerArchitecture() throws {
        XCTAssertEqual(TensorTable.ggufName(forHuggingFace: "model.layers.2.post_attention_layernorm.weight", architecture: .llama),
                       "blk.2.ffn_norm.weight")
        XCTAssertEqual(TensorTable.ggufName(forHuggingFace: "model.layers.2.post_attention_layernorm.weight", architecture: .olmo2),
                       "blk.2.post_attention_norm.weight")
        XCTAssertEqual(TensorTable.huggingFaceName(forGGUF: "blk.1.post_ffw_norm.weight", architecture: .olmo2),
                       "model.layers.1.post_feedforward_layernorm.weight")
        XCTAssertEqual(TensorTable.huggingFaceName(forGGUF: "blk.0.attn_q_norm.weight", architecture: .qwen3), "model.layers.0.self_attn.q_norm.weight")
        XCTAssertNil(TensorTable.huggingFaceName(forGGUF: "blk.0.attn_q_norm.weight", architecture: .llama), "llama files have no q norm")
        XCTAssertNil(TensorTable.huggingFaceName(forGGUF: "blk.0.attn_norm.weight", architecture: .olmo2), "OLMo 2 has no input norm")
        for f in try ArchitectureFixture.all {
            // as the files name them (Phi-3's fused qkv_proj and gate_up_proj: attn_qkv, ffn_up)
            for name in f.fileWeights().keys {
                let gguf = try XCTUnwrap(TensorTable.ggufName(forHuggingFace: name, architecture: f.config.architecture), name)
                XCTAssertEqual(TensorTable.huggingFaceName(forGGUF: gguf, architecture: f.config.architecture), name)
            }
        }
        XCTAssertEqual(TensorTable.ggufName(forHuggingFace: "model.layers.1.mlp.gate_up_proj.weight", architecture: .phi3), "blk.1.ffn_up.weight")
        XCTAssertNil(TensorTable.ggufName(forHuggingFace: "model.layers.1.mlp.up_proj.weight", architecture: .phi3), "Phi-3 files hold gate and up as one")
        XCTAssertEqual(TensorTable.ggufRopeHeads(forHuggingFace: "model.layers.0.self_attn.q_proj.weight", config: try ArchitectureFixture("granite").config), 6)
        XCTAssertNil(TensorTable.ggufRopeHeads(forHuggingFace: "model.layers.0.self_attn.q_proj.weight", config: try ArchitectureFixture("qwen3").config))
    }
}
