// ModelConfig from Hugging Face config.json (llama, mistral, qwen2; transformers 4 and 5 rope
// keys), from GGUF metadata, Codable round trips, and validation errors that name the field.
import Foundation
import ModelDefinition
import XCTest
@testable import ModelAssets

final class ModelConfigTests: XCTestCase {
    /// SmolLM2-135M-Instruct's config.json as transformers 5 writes it (trimmed).
    static let smolLMConfigJSON = """
    {"architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
     "head_dim": 64, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
     "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
     "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 9.999999747378752e-06,
     "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "tie_word_embeddings": true,
     "vocab_size": 49152, "rope_theta": 100000.0}
    """

    private func hf(_ json: String) throws -> ModelConfig {
        try ModelConfig.fromHuggingFace(json: Data(json.utf8), path: "config.json")
    }

    func testSmolLMHuggingFaceConfig() throws {
        let c = try hf(Self.smolLMConfigJSON)
        XCTAssertEqual(c.architecture, .llama)
        XCTAssertEqual([c.hiddenSize, c.intermediateSize, c.numLayers, c.numHeads, c.numKVHeads, c.headDim, c.vocabSize],
                       [576, 1536, 30, 9, 3, 64, 49152])
        XCTAssertEqual(c.ropeTheta, 100000)
        XCTAssertEqual(c.rmsNormEps, 9.999999747378752e-06)
        XCTAssertTrue(c.tieWordEmbeddings)
        XCTAssertFalse(c.attentionBias)
        XCTAssertEqual(c.maxPositionEmbeddings, 8192)
        XCTAssertNil(c.ropeScaling)
        XCTAssertEqual(c.queryDim, 576)
        XCTAssertEqual(c.keyValueDim, 192)
    }

    func testRopeThetaOnlyUnderRopeParameters() throws {
        let json = Self.smolLMConfigJSON.replacingOccurrences(of: ", \"rope_theta\": 100000.0}", with: "}")
            .replacingOccurrences(of: "\"rope_theta\": 100000.0, \"rope_type\"", with: "\"rope_theta\": 500000.0, \"rope_type\"")
        XCTAssertEqual(try hf(json).ropeTheta, 500000)
    }

    func testRopeThetaDisagreementIsAnError() {
        let json = Self.smolLMConfigJSON.replacingOccurrences(of: "\"rope_theta\": 100000.0, \"rope_type\"", with: "\"rope_theta\": 10000.0, \"rope_type\"")
        XCTAssertThrowsError(try hf(json)) { error in
            guard case .invalidConfig("config.json", "rope_theta", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testQwen2DefaultsToAttentionBiasAndMistralParses() throws {
        let qwen = try hf("""
        {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "max_position_embeddings": 4096}
        """)
        XCTAssertEqual(qwen.architecture, .qwen2)
        XCTAssertTrue(qwen.attentionBias)
        XCTAssertEqual(qwen.headDim, 16)
        let mistral = try hf("""
        {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 100, "rms_norm_eps": 1e-05,
         "max_position_embeddings": 4096, "sliding_window": null}
        """)
        XCTAssertEqual(mistral.architecture, .mistral)
        XCTAssertFalse(mistral.attentionBias)
        XCTAssertEqual(mistral.ropeTheta, 10000)
        XCTAssertFalse(mistral.tieWordEmbeddings)
    }

    func testLlama3RopeScaling() throws {
        let c = try hf("""
        {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
         "num_attention_heads": 4, "vocab_size": 10, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
         "max_position_embeddings": 131072, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
         "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
        """)
        XCTAssertEqual(c.ropeScaling, RopeScaling(kind: .llama3, factor: 32, lowFrequencyFactor: 1, highFrequencyFactor: 4, originalMaxPositionEmbeddings: 8192))
    }

    func testUnsupportedAndInvalidConfigsNameTheField() {
        let cases: [(String, String)] = [
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"llama\"", with: "\"gpt2\""), "model_type"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"num_key_value_heads\": 3", with: "\"num_key_value_heads\": 4"), "numKVHeads"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"hidden_size\": 576", with: "\"hidden_size\": \"576\""), "hidden_size"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"tie_word_embeddings\": true", with: "\"tie_word_embeddings\": 1"), "tie_word_embeddings"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"mlp_bias\": false", with: "\"mlp_bias\": true"), "mlp_bias"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"rms_norm_eps\": 9.999999747378752e-06", with: "\"rms_norm_eps\": 0"), "rmsNormEps"),
            (Self.smolLMConfigJSON.replacingOccurrences(of: "\"head_dim\": 64", with: "\"head_dim\": 63"), "headDim"),
        ]
        for (json, field) in cases {
            XCTAssertThrowsError(try hf(json), field) { error in
                guard case let .invalidConfig(path, f, _) = error as? ModelAssetsError else { return XCTFail("\(field): \(error)") }
                XCTAssertEqual(path, "config.json")
                XCTAssertEqual(f, field)
            }
        }
        XCTAssertThrowsError(try hf(Self.smolLMConfigJSON.replacingOccurrences(of: "\"vocab_size\": 49152,", with: ""))) { error in
            guard case .missingKey(_, "vocab_size") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try hf("[]"))
    }

    func testCodableRoundTripAndValidationWhileDecoding() throws {
        let c = try hf(Self.smolLMConfigJSON)
        let encoded = try JSONEncoder().encode(c)
        XCTAssertEqual(try JSONDecoder().decode(ModelConfig.self, from: encoded), c)
        var object = try XCTUnwrap(JSONSerialization.jsonObject(with: encoded) as? [String: Any])
        object["numKVHeads"] = 2
        let bad = try JSONSerialization.data(withJSONObject: object)
        XCTAssertThrowsError(try JSONDecoder().decode(ModelConfig.self, from: bad)) { error in
            guard case .dataCorrupted = error as? DecodingError else { return XCTFail("\(error)") }
        }
    }

    func testHuggingFaceJSONRoundTrips() throws {
        for c in [try hf(Self.smolLMConfigJSON), TinyModels.qwen2Config, TinyModels.llamaConfig] {
            XCTAssertEqual(try ModelConfig.fromHuggingFace(json: c.huggingFaceConfigJSON(), path: "x"), c)
        }
    }

    func testGGUFMetadataRoundTrips() throws {
        for c in [try hf(Self.smolLMConfigJSON), TinyModels.qwen2Config, TinyModels.llamaConfig] {
            var writer = GGUFWriter()
            for (k, v) in ModelExport.ggufMetadata(for: c) { try writer.set(k, v) }
            let file = try GGUFFile(data: writer.serialized(), path: "m.gguf")
            var back = try ModelConfig.fromGGUF(file, hasOutputTensor: !c.tieWordEmbeddings)
            back.attentionBias = c.attentionBias  // GGUF records biases as tensors, not keys
            // GGUF stores rope base and epsilon as float32.
            XCTAssertEqual(back.rmsNormEps, Double(Float(c.rmsNormEps)))
            back.rmsNormEps = c.rmsNormEps
            XCTAssertEqual(back, c)
        }
    }

    func testGGUFMetadataErrorsNameTheKey() throws {
        var writer = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: TinyModels.llamaConfig) where k != "llama.block_count" { try writer.set(k, v) }
        XCTAssertThrowsError(try ModelConfig.fromGGUF(GGUFFile(data: writer.serialized(), path: "m.gguf"), hasOutputTensor: true)) { error in
            guard case .missingKey("m.gguf", "llama.block_count") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        var wrongType = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: TinyModels.llamaConfig) {
            try wrongType.set(k, k == "llama.embedding_length" ? .string("64") : v)
        }
        XCTAssertThrowsError(try ModelConfig.fromGGUF(GGUFFile(data: wrongType.serialized(), path: "m.gguf"), hasOutputTensor: true)) { error in
            XCTAssertTrue((error as? ModelAssetsError)?.localizedDescription.contains("llama.embedding_length") == true, "\(error)")
        }
        var otherArch = GGUFWriter()
        try otherArch.set("general.architecture", .string("gemma"))
        XCTAssertThrowsError(try ModelConfig.fromGGUF(GGUFFile(data: otherArch.serialized(), path: "m.gguf"), hasOutputTensor: true)) { error in
            guard case .invalidConfig(_, "general.architecture", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }
}
