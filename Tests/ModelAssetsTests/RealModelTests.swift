// The real default base model, SmolLM2-135M-Instruct Q4_1 GGUF, found through ADAPTER_BASE_MODEL
// (scripts/test.sh sets it): config, shapes, tokenizer metadata, and dequantized values against
// gguf-py (Fixtures/smollm2_spotcheck.json). With ADAPTER_BASE_MODEL_HF also set to a Hugging Face
// folder converted from that file, every tensor and the signature must match it. Skipped otherwise.
import Foundation
import ModelDefinition
import XCTest
@testable import ModelAssets

final class RealModelTests: XCTestCase {
    private func modelPath() throws -> String {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], !path.isEmpty else {
            throw XCTSkip("ADAPTER_BASE_MODEL is not set; run scripts/test.sh (or scripts/fetch-model.sh and export it) to test the real SmolLM2 GGUF")
        }
        guard FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("ADAPTER_BASE_MODEL=\(path) does not exist; run scripts/fetch-model.sh")
        }
        return path
    }

    private struct SpotCheck: Decodable {
        struct Tensor: Decodable {
            var gguf: String, hf: String, type: String, shape: [Int]
            var sum: Double, sumSquares: Double
            var indices: [Int], values: [Double], ggufLayoutValues: [Double]
        }
        var sha256: String
        var tensorCount: Int
        var tensors: [Tensor]
    }

    private func spotCheck() throws -> SpotCheck {
        let url = try XCTUnwrap(Bundle.module.url(forResource: "smollm2_spotcheck", withExtension: "json", subdirectory: "Fixtures"))
        return try JSONDecoder().decode(SpotCheck.self, from: Data(contentsOf: url))
    }

    func testSmolLM2LoadsWithExpectedConfigShapesAndValues() throws {
        let path = try modelPath()
        let fixture = try spotCheck()
        let start = Date()
        let model = try ModelLoader.load(path: path)
        let seconds = Date().timeIntervalSince(start)
        print("RealModelTests: loaded \(path) in \(String(format: "%.2f", seconds)) s")

        let c = model.config
        XCTAssertEqual(c.architecture, .llama)
        XCTAssertEqual(c.numLayers, 30)
        XCTAssertEqual(c.hiddenSize, 576)
        XCTAssertEqual(c.numHeads, 9)
        XCTAssertEqual(c.numKVHeads, 3)
        XCTAssertEqual(c.headDim, 64)
        XCTAssertEqual(c.intermediateSize, 1536)
        XCTAssertEqual(c.vocabSize, 49152)
        XCTAssertEqual(c.ropeTheta, 100000)
        XCTAssertEqual(c.rmsNormEps, Double(Float(1e-5)))
        XCTAssertEqual(c.maxPositionEmbeddings, 8192)
        XCTAssertTrue(c.tieWordEmbeddings)
        XCTAssertFalse(c.attentionBias)

        XCTAssertEqual(model.tensors.count, fixture.tensorCount)
        XCTAssertEqual(model.tensors["model.embed_tokens.weight"]?.shape, [49152, 576])
        XCTAssertEqual(model.tensors["model.layers.0.self_attn.q_proj.weight"]?.shape, [576, 576])
        XCTAssertEqual(model.tensors["model.layers.29.self_attn.k_proj.weight"]?.shape, [192, 576])
        XCTAssertEqual(model.tensors["model.layers.29.self_attn.v_proj.weight"]?.shape, [192, 576])
        XCTAssertEqual(model.tensors["model.layers.3.self_attn.o_proj.weight"]?.shape, [576, 576])
        XCTAssertEqual(model.tensors["model.layers.3.mlp.gate_proj.weight"]?.shape, [1536, 576])
        XCTAssertEqual(model.tensors["model.layers.3.mlp.down_proj.weight"]?.shape, [576, 1536])
        XCTAssertEqual(model.tensors["model.norm.weight"]?.shape, [576])
        XCTAssertNil(model.tensors["lm_head.weight"])

        for t in fixture.tensors {
            let got = try XCTUnwrap(model.tensors[t.hf], t.hf)
            XCTAssertEqual(got.shape, t.shape, t.hf)
            for (i, expected) in zip(t.indices, t.values) {
                XCTAssertEqual(got.data[i], Float(expected), accuracy: abs(Float(expected)) * 1e-6, "\(t.hf)[\(i)]")
            }
            let sum = got.data.reduce(0.0) { $0 + Double($1) }
            let squares = got.data.reduce(0.0) { $0 + Double($1) * Double($1) }
            XCTAssertEqual(sum, t.sum, accuracy: 1e-6 * max(1, abs(t.sum)), "\(t.hf) sum")
            XCTAssertEqual(squares, t.sumSquares, accuracy: 1e-6 * t.sumSquares, "\(t.hf) sum of squares")
        }

        guard let tok = try model.tokenizer.ggufData() else { return XCTFail("expected GGUF tokenizer data") }
        XCTAssertEqual(tok.tokens.count, 49152)
        XCTAssertEqual(tok.merges.count, 48900)
        XCTAssertEqual(tok.tokenTypes?.count, 49152)
        XCTAssertEqual(tok.preTokenizer, "smollm")
        XCTAssertEqual(tok.bosTokenId, 1)
        XCTAssertEqual(tok.eosTokenId, 2)
        XCTAssertEqual(tok.padTokenId, 2)
        XCTAssertEqual(tok.tokens[1], "<|im_start|>")
        XCTAssertTrue(tok.chatTemplate?.contains("<|im_start|>") == true)
    }

    func testSmolLM2RawGGUFMatchesGGUFPyLayout() throws {
        let file = try GGUFFile(path: try modelPath())
        XCTAssertEqual(file.version, 3)
        XCTAssertEqual(file.tensors.count, 272)
        for t in try spotCheck().tensors {
            let info = try XCTUnwrap(file.tensorInfo(named: t.gguf))
            XCTAssertEqual(info.type.name, t.type, t.gguf)
            let raw = try file.dequantize(t.gguf)
            for (i, expected) in zip(t.indices, t.ggufLayoutValues) {
                XCTAssertEqual(raw.data[i], Float(expected), accuracy: abs(Float(expected)) * 1e-6, "\(t.gguf)[\(i)]")
            }
        }
    }

    /// Proves the layout conversion end to end: transformers' own GGUF import (which un-permutes
    /// q/k independently of this code) must give the very same tensors and therefore signature.
    func testSmolLM2MatchesHuggingFaceFolderConvertedFromIt() throws {
        let path = try modelPath()
        guard let folder = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL_HF"], !folder.isEmpty,
              FileManager.default.fileExists(atPath: folder)
        else {
            throw XCTSkip("ADAPTER_BASE_MODEL_HF is not set to a Hugging Face folder converted from the GGUF; skipping the GGUF-vs-HF comparison")
        }
        let gguf = try ModelLoader.load(path: path)
        let hf = try ModelLoader.load(path: folder)
        XCTAssertEqual(hf.config.numLayers, gguf.config.numLayers)
        XCTAssertEqual(Set(hf.tensors.keys), Set(gguf.tensors.keys))
        for (name, t) in gguf.tensors {
            XCTAssertTrue(hf.tensors[name] == t, "\(name) differs between GGUF and Hugging Face folder")
        }
        XCTAssertEqual(gguf.signature(), hf.signature())
    }
}
