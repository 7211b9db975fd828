// A GGUF base with a SentencePiece vocabulary exported as Hugging Face tokenizer files (fuse
// writes them for a GGUF base): read back, they give the ids transformers gives for the same
// vocabulary. Fixtures: Tests/TokenizerTests/Fixtures/sentencepiece (make_sentencepiece_fixtures.py).
import Foundation
import ModelAssets
import XCTest
@testable import Export

final class SentencePieceTokenizerFilesTests: XCTestCase {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("TokenizerTests/Fixtures/sentencepiece")

    func testTokenizerJSONFromGGUFGivesHuggingFaceIds() throws {
        let golden = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: Self.fixtures.appendingPathComponent("golden.json"))) as? [String: [[String: Any]]])
        for (file, folder) in [("llama.gguf", "llama_normalizer"), ("gemma.gguf", "gemma")] {
            let data = try TokenizerData(gguf: GGUFFile(path: Self.fixtures.appendingPathComponent(file).path))
            let files = try TokenizerFiles.make(from: data, preTokenizer: .gpt2)
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sp-files-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            try files.tokenizerJSON.write(to: dir.appendingPathComponent("tokenizer.json"))
            try files.tokenizerConfigJSON.write(to: dir.appendingPathComponent("tokenizer_config.json"))
            let tok = try BPETokenizer.load(tokenizerJSON: dir.appendingPathComponent("tokenizer.json"))
            XCTAssertNotNil(tok.sentencePiece, file)
            XCTAssertEqual(tok.bosTokenId, data.bosTokenId, file)
            XCTAssertEqual(tok.eosTokenId, data.eosTokenId, file)
            let entries = try XCTUnwrap(golden[folder])
            for e in entries {
                let text = try XCTUnwrap(e["text"] as? String), ids = try XCTUnwrap(e["ids"] as? [Int])
                guard !text.contains("<mask>") else { continue }
                XCTAssertEqual(tok.encode(text), ids, "\(file) \(e["name"] ?? "")")
                XCTAssertEqual(tok.decode(ids), e["decoded"] as? String, "\(file) \(e["name"] ?? "")")
            }
        }
    }
}
