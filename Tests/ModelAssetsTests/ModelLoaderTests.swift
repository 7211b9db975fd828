// ModelLoader on tiny random models written to GGUF and to Hugging Face folders: names,
// layouts (q/k RoPE permutation), shapes, tied heads, Qwen2 biases, tokenizer metadata, and the
// base model signature (stable, format-independent, sensitive to every weight and config field).
import Foundation
import ModelDefinition
import XCTest
@testable import ModelAssets

enum TinyModels {
    // swiftlint:disable force_try
    static let llamaConfig = try! ModelConfig(
        architecture: .llama, hiddenSize: 16, intermediateSize: 24, numLayers: 2, numHeads: 4, numKVHeads: 2,
        vocabSize: 20, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true, maxPositionEmbeddings: 64)
    static let qwen2Config = try! ModelConfig(
        architecture: .qwen2, hiddenSize: 12, intermediateSize: 20, numLayers: 1, numHeads: 3, numKVHeads: 1,
        headDim: 6, vocabSize: 11, ropeTheta: 1_000_000, rmsNormEps: 1e-6, tieWordEmbeddings: false,
        maxPositionEmbeddings: 128)
    // swiftlint:enable force_try

    /// Seeded random weights in Hugging Face naming and layout for `config`.
    static func weights(_ config: ModelConfig, seed: UInt64 = 1) -> [String: HostTensor] {
        var rng = SplitMix64(seed: seed)
        var out: [String: HostTensor] = [:]
        for (name, shape) in TensorTable.shapes(for: config).sorted(by: { $0.key < $1.key }) {  // in name order: the same weights in every process
            let n = shape.reduce(1, *)
            out[name] = HostTensor(shape: shape, data: (0..<n).map { _ in Float.random(in: -1...1, using: &rng) })
        }
        return out
    }

    static let tokenizer = TokenizerData(
        tokens: (0..<20).map { "t\($0)" }, merges: ["t 1", "t1 0"], tokenTypes: (0..<20).map { $0 < 2 ? 3 : 1 },
        preTokenizer: "smollm", bosTokenId: 1, eosTokenId: 2, padTokenId: 2, chatTemplate: "{{ messages }}")
}

final class ModelLoaderTests: XCTestCase {
    private var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("ml-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    private func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    // MARK: RoPE permutation

    func testPermutationMatchesConvertHFToGGUF() {
        // One head of 4 rows (D/2 = 2): HF rows [r0, r1, r2, r3] -> GGUF [r0, r2, r1, r3].
        let hf = HostTensor(shape: [4, 2], data: [0, 0, 1, 1, 2, 2, 3, 3])
        XCTAssertEqual(RoPELayout.permuteForGGUF(hf, heads: 1).data, [0, 0, 2, 2, 1, 1, 3, 3])
        // Two heads of 6 rows: each head's halves (0,1,2 | 3,4,5) interleave to 0,3,1,4,2,5.
        let rows = HostTensor(shape: [12], data: (0..<12).map(Float.init))
        XCTAssertEqual(RoPELayout.permuteForGGUF(rows, heads: 2).data, [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11])
        XCTAssertEqual(RoPELayout.unpermuteFromGGUF(RoPELayout.permuteForGGUF(rows, heads: 2), heads: 2), rows)
        let m = TinyModels.weights(TinyModels.llamaConfig)["model.layers.0.self_attn.k_proj.weight"]!
        XCTAssertEqual(RoPELayout.unpermuteFromGGUF(RoPELayout.permuteForGGUF(m, heads: 2), heads: 2), m)
        XCTAssertNotEqual(RoPELayout.permuteForGGUF(m, heads: 2), m)
    }

    func testNameMappingBothWays() {
        let config = TinyModels.qwen2Config
        for name in TensorTable.shapes(for: config).keys {
            let gguf = TensorTable.ggufName(forHuggingFace: name)
            XCTAssertNotNil(gguf, name)
            XCTAssertEqual(TensorTable.huggingFaceName(forGGUF: gguf!), name)
        }
        XCTAssertEqual(TensorTable.ggufName(forHuggingFace: "model.layers.3.self_attn.o_proj.weight"), "blk.3.attn_output.weight")
        XCTAssertEqual(TensorTable.huggingFaceName(forGGUF: "blk.12.ffn_norm.weight"), "model.layers.12.post_attention_layernorm.weight")
        for bad in ["blk.x.attn_q.weight", "blk.01.attn_q.weight", "blk.1.attn_output.bias", "blk.1.attn_q", "rope_freqs.weight"] {
            XCTAssertNil(TensorTable.huggingFaceName(forGGUF: bad), bad)
        }
    }

    // MARK: GGUF

    func testTinyLlamaGGUFLoadsInHuggingFaceLayout() throws {
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config)
        try ModelExport.writeGGUF(config: config, tensors: weights, tokenizer: TinyModels.tokenizer, to: path("tiny.gguf"))

        // On disk, q and k rows are in llama.cpp's order.
        let raw = try GGUFFile(path: path("tiny.gguf"))
        let q = weights["model.layers.1.self_attn.q_proj.weight"]!
        XCTAssertEqual(try raw.dequantize("blk.1.attn_q.weight"), RoPELayout.permuteForGGUF(q, heads: 4))
        XCTAssertNotEqual(try raw.dequantize("blk.1.attn_q.weight"), q)
        XCTAssertEqual(try raw.dequantize("blk.0.attn_v.weight"), weights["model.layers.0.self_attn.v_proj.weight"])
        XCTAssertNil(raw.tensorInfo(named: "output.weight"))

        let model = try ModelLoader.load(path: path("tiny.gguf"))
        XCTAssertEqual(model.format, .gguf)
        XCTAssertEqual(model.config.numLayers, 2)
        XCTAssertTrue(model.config.tieWordEmbeddings)
        XCTAssertEqual(model.tensors, weights)
        XCTAssertNil(model.tensors["lm_head.weight"])
        XCTAssertEqual(model.tokenizer, .gguf(path: path("tiny.gguf")))
        XCTAssertEqual(try model.tokenizer.ggufData(), TinyModels.tokenizer)
        XCTAssertEqual(model.signature(), BaseModelSignature.compute(config: config, tensors: weights))
    }

    func testTinyQwen2GGUFKeepsBiasesAndIsNotPermuted() throws {
        let config = TinyModels.qwen2Config
        let weights = TinyModels.weights(config, seed: 7)
        XCTAssertNotNil(weights["model.layers.0.self_attn.k_proj.bias"])
        XCTAssertNotNil(weights["lm_head.weight"])
        try ModelExport.writeGGUF(config: config, tensors: weights, tokenizer: nil, to: path("qwen.gguf"), matrixType: .f16)
        let raw = try GGUFFile(path: path("qwen.gguf"))
        XCTAssertEqual(raw.tensorInfo(named: "blk.0.attn_q.weight")?.type, .f16)
        XCTAssertEqual(raw.tensorInfo(named: "blk.0.attn_q.bias")?.type, .f32)
        XCTAssertEqual(raw.tensorInfo(named: "blk.0.attn_q.bias")?.dimensions, [18])
        XCTAssertEqual(raw.tensorInfo(named: "blk.0.attn_q.weight")?.dimensions, [12, 18])

        // No tokenizer keys in this file: loading weights still works, the tokenizer is reported missing.
        XCTAssertThrowsError(try ModelLoader.load(path: path("qwen.gguf"))) { error in
            guard case .missingKey(_, "tokenizer.ggml.tokens") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        var writer = try ModelExport.ggufWriter(config: config, tensors: weights, tokenizer: nil, matrixType: .f16)
        try writer.set("tokenizer.ggml.tokens", .array(elementType: .string, values: (0..<11).map { .string("\($0)") }))
        try writer.write(to: path("qwen.gguf"))
        let model = try ModelLoader.load(path: path("qwen.gguf"))
        var expected = config
        expected.rmsNormEps = Double(Float(config.rmsNormEps))  // GGUF stores it as float32
        XCTAssertEqual(model.config, expected)
        let halved = weights.mapValues { t in t.shape.count == 1 ? t : HostTensor(shape: t.shape, data: t.data.map { Float(Float16($0)) }) }
        XCTAssertEqual(model.tensors, halved)
    }

    func testGGUFWithMissingTensorIsNamed() throws {
        let config = TinyModels.llamaConfig
        var weights = TinyModels.weights(config)
        weights["model.layers.1.mlp.up_proj.weight"] = nil
        var writer = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: config) + ModelExport.ggufMetadata(for: TinyModels.tokenizer) { try writer.set(k, v) }
        for (name, t) in weights { try writer.addTensor(TensorTable.ggufName(forHuggingFace: name)!, t) }
        try writer.write(to: path("m.gguf"))
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .missingTensor(_, "model.layers.1.mlp.up_proj.weight") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testGGUFWithWrongShapeOrExtraTensorIsNamed() throws {
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config)
        func write(_ edit: (inout GGUFWriter) throws -> Void, skip: String? = nil) throws {
            var writer = GGUFWriter()
            for (k, v) in ModelExport.ggufMetadata(for: config) + ModelExport.ggufMetadata(for: TinyModels.tokenizer) { try writer.set(k, v) }
            for (name, t) in weights where name != skip { try writer.addTensor(TensorTable.ggufName(forHuggingFace: name)!, t) }
            try edit(&writer)
            try writer.write(to: path("m.gguf"))
        }
        try write({ try $0.addTensor("blk.0.ffn_down.weight", HostTensor(shape: [24, 16], data: Array(repeating: 0, count: 384))) },
                  skip: "model.layers.0.mlp.down_proj.weight")
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .shapeMismatch(_, "model.layers.0.mlp.down_proj.weight", [16, 24], [24, 16]) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        try write({ try $0.addTensor("blk.0.attn_rot_embd", HostTensor(shape: [2], data: [0, 0])) })
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .unexpectedTensor(_, "blk.0.attn_rot_embd") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        try write({ try $0.addTensor("blk.5.attn_q.weight", HostTensor(shape: [16, 16], data: Array(repeating: 0, count: 256))) })
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .unexpectedTensor(_, "model.layers.5.self_attn.q_proj.weight") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testGGUFWithUnsupportedQuantTypeIsRefusedByName() throws {
        let config = TinyModels.llamaConfig
        var writer = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: config) + ModelExport.ggufMetadata(for: TinyModels.tokenizer) { try writer.set(k, v) }
        for (name, t) in TinyModels.weights(config) where name != "model.embed_tokens.weight" {
            try writer.addTensor(TensorTable.ggufName(forHuggingFace: name)!, t)
        }
        try writer.addTensor("token_embd.weight", shape: [20, 32], type: .q8_1, encoded: [UInt8](repeating: 0, count: 20 * GGMLType.q8_1.blockGeometry.typeSize))
        try writer.write(to: path("m.gguf"))
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .unsupportedTensorType(_, "token_embd.weight", "Q8_1", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testBadTokenizerMetadataIsNamed() throws {
        let config = TinyModels.llamaConfig
        var tok = TinyModels.tokenizer
        tok.eosTokenId = 99
        try ModelExport.writeGGUF(config: config, tensors: TinyModels.weights(config), tokenizer: tok, to: path("m.gguf"))
        XCTAssertThrowsError(try ModelLoader.load(path: path("m.gguf"))) { error in
            guard case .malformed(_, "key 'tokenizer.ggml.eos_token_id'", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testUnsupportedTokenizerKindIsRefusedByName() throws {
        let config = TinyModels.llamaConfig
        // A Unigram (T5) vocabulary is refused naming its kind; a SentencePiece BPE ("llama") one
        // without its scores is refused naming the missing key.
        for (kind, expected) in [("t5", "tokenizer.ggml.model"), ("llama", "tokenizer.ggml.scores")] {
            var writer = try ModelExport.ggufWriter(config: config, tensors: TinyModels.weights(config), tokenizer: nil)
            try writer.set("tokenizer.ggml.model", .string(kind))
            try writer.set("tokenizer.ggml.tokens", .array(elementType: .string, values: (0..<20).map { .string("\($0)") }))
            try writer.write(to: path("spm.gguf"))
            XCTAssertThrowsError(try ModelLoader.load(path: path("spm.gguf"))) { error in
                switch error as? ModelAssetsError {
                case let .invalidConfig(_, field, reason)?: XCTAssertTrue(field == expected && reason.contains("'\(kind)'"), "\(error)")
                case let .missingKey(_, key)?: XCTAssertEqual(key, expected)
                default: XCTFail("\(error)")
                }
            }
        }
    }

    // MARK: Hugging Face folders

    func testHuggingFaceFolderLoadsAndMatchesGGUFSignature() throws {
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config, seed: 3)
        try ModelExport.writeHuggingFaceFolder(config: config, tensors: weights, to: path("hf"))
        try Data("{}".utf8).write(to: dir.appendingPathComponent("hf/tokenizer.json"))
        try ModelExport.writeGGUF(config: config, tensors: weights, tokenizer: TinyModels.tokenizer, to: path("m.gguf"))
        let fromHF = try ModelLoader.load(path: path("hf"))
        let fromGGUF = try ModelLoader.load(path: path("m.gguf"))
        XCTAssertEqual(fromHF.format, .huggingFace)
        XCTAssertEqual(fromHF.tokenizer, .huggingFace(folder: path("hf"), tokenizerJSON: path("hf/tokenizer.json")))
        XCTAssertEqual(fromHF.tensors, fromGGUF.tensors)
        XCTAssertEqual(fromHF.signature(), fromGGUF.signature())
    }

    func testShardedHuggingFaceFolderWithTiedHeadCopy() throws {
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config, seed: 4)
        let folder = dir.appendingPathComponent("sharded")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try config.huggingFaceConfigJSON().write(to: folder.appendingPathComponent("config.json"))
        var shard1 = SafetensorsWriter(), shard2 = SafetensorsWriter()
        var map: [String] = []
        for (i, name) in weights.keys.sorted().enumerated() {
            if i % 2 == 0 { try shard1.add(name, weights[name]!) } else { try shard2.add(name, weights[name]!) }
            map.append("\(jsonString(name)): \(jsonString(i % 2 == 0 ? "a.safetensors" : "b.safetensors"))")
        }
        // A tied model that still saved its head: accepted when it equals the embedding.
        try shard2.add("lm_head.weight", weights["model.embed_tokens.weight"]!)
        map.append("\"lm_head.weight\": \"b.safetensors\"")
        try shard1.write(to: folder.appendingPathComponent("a.safetensors").path)
        try shard2.write(to: folder.appendingPathComponent("b.safetensors").path)
        try Data("{\"weight_map\": {\(map.joined(separator: ", "))}}".utf8).write(to: folder.appendingPathComponent("model.safetensors.index.json"))
        let model = try ModelLoader.load(path: folder.path)
        XCTAssertEqual(model.tensors, weights)
        XCTAssertEqual(model.tokenizer, .huggingFace(folder: folder.path, tokenizerJSON: nil))

        // A different head under a tied config is refused.
        var shard2b = SafetensorsWriter()
        for (i, name) in weights.keys.sorted().enumerated() where i % 2 == 1 { try shard2b.add(name, weights[name]!) }
        try shard2b.add("lm_head.weight", HostTensor(shape: [20, 16], data: Array(repeating: 0.5, count: 320)))
        try shard2b.write(to: folder.appendingPathComponent("b.safetensors").path)
        XCTAssertThrowsError(try ModelLoader.load(path: folder.path)) { error in
            guard case .invalidConfig(_, "tie_word_embeddings", _) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testHuggingFaceFolderErrors() throws {
        let config = TinyModels.qwen2Config
        var weights = TinyModels.weights(config)
        weights["model.layers.0.self_attn.v_proj.bias"] = nil
        XCTAssertThrowsError(try ModelExport.writeHuggingFaceFolder(config: config, tensors: weights, to: path("hf")))
        var writer = SafetensorsWriter()
        for (name, t) in weights { try writer.add(name, t, as: .bf16) }
        try FileManager.default.createDirectory(atPath: path("hf"), withIntermediateDirectories: true)
        try writer.write(to: path("hf/model.safetensors"))
        XCTAssertThrowsError(try ModelLoader.load(path: path("hf"))) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("no config.json: \(error)") }
        }
        try config.huggingFaceConfigJSON().write(to: dir.appendingPathComponent("hf/config.json"))
        XCTAssertThrowsError(try ModelLoader.load(path: path("hf"))) { error in
            guard case .missingTensor(_, "model.layers.0.self_attn.v_proj.bias") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try ModelLoader.load(path: path("nothing-here"))) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    // MARK: signature

    func testSignatureIsStableAndGolden() throws {
        let config = TinyModels.llamaConfig
        let tensors = ["model.norm.weight": HostTensor(shape: [2], data: [1, -0.5]),
                       "model.embed_tokens.weight": HostTensor(shape: [2, 2], data: [0.25, 0, -1, 3])]
        let a = BaseModelSignature.compute(config: config, tensors: tensors)
        var reordered: [String: HostTensor] = [:]
        for key in tensors.keys.sorted().reversed() { reordered[key] = tensors[key] }
        XCTAssertEqual(BaseModelSignature.compute(config: config, tensors: reordered), a)
        XCTAssertEqual(a.count, 64)
        XCTAssertTrue(a.allSatisfy { "0123456789abcdef".contains($0) })
        // Pinned: a change here means every existing adapter stops matching its base model. The
        // goldens come from scripts/fixtures/base_signature.py (hashlib, independent of this code).
        XCTAssertEqual(a, Self.goldenSignature)
        XCTAssertEqual(BaseModelSignature.compute(config: config, tensors: tensors, encoding: .v1), Self.goldenV1Signature)
        // v2 with chunks that split a tensor (3 of its 4 values, then 1).
        XCTAssertEqual(BaseModelSignature.compute(config: config, tensors: tensors, chunkValues: 3),
                       "396f5101fd86888bfd78ad0049e2b5ffe557df3d190e72ff8501d18a05f2e379")
    }

    static let goldenSignature = "e1795b832a1be7521b36ef42cdd8cc4424ba817c9dc7335796eab55f357ff7a2"
    /// What every checkpoint, package and adapter made before 2026-11-26 records.
    static let goldenV1Signature = "c90a8633c013935ee5060d00bdbb358a517598bc6e8165270b288214fe69fe9b"

    func testStoredSignatureEqualsTheTensorsInEitherEncodingAndAnyChunking() throws {
        // Stored matrices are hashed a few rows at a time per chunk; chunks of 7 and 40 values split
        // rows of 16 and 24 values anywhere, and the digest must not depend on where.
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config)
        try ModelExport.writeGGUF(config: config, tensors: weights, tokenizer: TinyModels.tokenizer, to: path("chunks.gguf"))
        let stored = try ModelLoader.load(path: path("chunks.gguf"), storage: .stored)
        XCTAssertFalse(stored.matrices.isEmpty)
        for chunk in [1, 7, 40, BaseModelSignature.chunkValues] {
            XCTAssertEqual(stored.signature(encoding: .v2, chunkValues: chunk),
                           BaseModelSignature.compute(config: config, tensors: weights, chunkValues: chunk), "chunk \(chunk)")
        }
        XCTAssertEqual(stored.signature(encoding: .v1), BaseModelSignature.compute(config: config, tensors: weights, encoding: .v1))
        XCTAssertNotEqual(stored.signature(encoding: .v1), stored.signature())
        XCTAssertNotEqual(stored.signature(chunkValues: 7), stored.signature())
    }

    func testSignatureChangesWithAnyWeightOrConfigField() throws {
        let config = TinyModels.llamaConfig
        let weights = TinyModels.weights(config)
        let base = BaseModelSignature.compute(config: config, tensors: weights)
        var oneWeight = weights
        oneWeight["model.layers.1.mlp.down_proj.weight"]!.data[17] += 1e-6
        XCTAssertNotEqual(BaseModelSignature.compute(config: config, tensors: oneWeight), base)
        var renamed = weights
        renamed["model.layers.9.mlp.down_proj.weight"] = renamed.removeValue(forKey: "model.layers.1.mlp.down_proj.weight")
        XCTAssertNotEqual(BaseModelSignature.compute(config: config, tensors: renamed), base)
        var reshaped = weights
        reshaped["model.norm.weight"]!.shape = [1, 16]
        XCTAssertNotEqual(BaseModelSignature.compute(config: config, tensors: reshaped), base)
        var theta = config
        theta.ropeTheta = 20000
        XCTAssertNotEqual(BaseModelSignature.compute(config: theta, tensors: weights), base)
        var eps = config
        eps.rmsNormEps = 1e-6
        XCTAssertNotEqual(BaseModelSignature.compute(config: eps, tensors: weights), base)
        // Not part of the function the weights compute: the context length and the label.
        var context = config
        context.maxPositionEmbeddings = 4096
        context.architecture = .mistral
        XCTAssertEqual(BaseModelSignature.compute(config: context, tensors: weights), base)
        // Float32-equal epsilons (GGUF float32 vs config.json decimal) sign alike.
        var f32eps = config
        f32eps.rmsNormEps = Double(Float(config.rmsNormEps))
        XCTAssertEqual(BaseModelSignature.compute(config: f32eps, tensors: weights), base)
    }
}
