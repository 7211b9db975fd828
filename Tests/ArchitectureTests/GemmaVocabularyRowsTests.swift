// Embedding rows beyond the tokenizer (issue 37, item 3): what llama.cpp's Gemma 3 converter does
// with them, on the tiny Gemma 3 of make_gemma_oov_fixture.py (one layer, 308 rows, a 300-token
// tokenizer.json). A Hugging Face folder keeps every row; the converter's GGUF of the same folder
// holds 303 rows (len(vocab) + len(added_tokens)) for 308 tokens, which llama.cpp cannot load and
// the toolkit refuses, naming the cause. docs/models.md says why no published Gemma 3 file is cut.
import Foundation
import ModelAssets
import ModelDefinition
import XCTest

final class GemmaVocabularyRowsTests: XCTestCase {
    static var dir: URL { ArchitectureFixture.root.appendingPathComponent("gemma3_oov") }

    func testConverterCutIsRefusedByName() throws {
        let manifest = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: Self.dir.appendingPathComponent("manifest.json"))) as? [String: Any])
        let rows = try XCTUnwrap(manifest["gguf_token_embd_ne"] as? [Int])[1]
        let tokens = try XCTUnwrap(manifest["gguf_tokens"] as? Int)
        XCTAssertEqual(rows, try XCTUnwrap(manifest["n_vocab_real"] as? Int))
        XCTAssertEqual(tokens, try XCTUnwrap(manifest["config_vocab_size"] as? Int))
        XCTAssertLessThan(rows, tokens, "the fixture is a file the cut bit")
        let file = try GGUFFile(path: Self.dir.appendingPathComponent("m.gguf").path)
        XCTAssertEqual(file.tensorInfo(named: "token_embd.weight")?.shape[0], rows)
        XCTAssertThrowsError(try ModelLoader.load(path: Self.dir.appendingPathComponent("m.gguf").path)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("token_embd.weight"), text)
            XCTAssertTrue(text.contains("has \(rows) rows for a \(tokens)-token vocabulary"), text)
            XCTAssertTrue(text.contains("tokenizer.model"), text)
        }
    }

    /// The same model as a Hugging Face folder: all 308 rows load, the tokenizer has 300 tokens,
    /// and the logits cover every row, as transformers' do.
    func testFolderKeepsEveryRow() throws {
        let gemma = try ArchitectureFixture("gemma3")
        var config = gemma.config
        config.vocabSize += 8
        config.numLayers = 1
        config.slidingWindowLayers = config.slidingWindowLayers.filter { $0 < 1 }
        var tensors: [String: HostTensor] = [:]
        for (name, shape) in TensorTable.shapes(for: config) {
            tensors[name] = ArchitectureFixture.seeded(name, shape: shape, std: name.hasSuffix("norm.weight") ? 0.1 : 0.15)
        }
        let folder = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try ModelExport.writeHuggingFaceFolder(config: config, tensors: tensors, to: folder)
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            try FileManager.default.copyItem(atPath: ArchitectureFixture.root.appendingPathComponent(f).path, toPath: folder + "/" + f)
        }
        let base = try BaseModel.load(path: folder)
        XCTAssertEqual(base.config.vocabSize, 308)
        XCTAssertEqual(base.tokenizer.vocabularySize, 300)
        XCTAssertEqual(base.weights.embedding.rows, 308)
        XCTAssertEqual(base.weights.embedding.columns, config.hiddenSize)
    }
}
