// The tokenizer built from the real SmolLM2 GGUF metadata (tokenizer.ggml.*, pre "smollm") against
// the same golden ids as tokenizer.json. Runs when the model is fetched (scripts/fetch-model.sh,
// or ADAPTER_BASE_MODEL); skips with a reason otherwise.
import Foundation
import XCTest
@testable import ModelAssets

final class RealGGUFTokenizerTests: XCTestCase {
    func testGGUFTokenizerMatchesGoldenIdsAndTemplate() throws {
        var path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"] ?? ""
        if !FileManager.default.fileExists(atPath: path) {
            path = FileManager.default.currentDirectoryPath + "/assets/SmolLM2-135M-Instruct.Q4_1.gguf"
        }
        guard FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("the real base model is not fetched (run scripts/fetch-model.sh or set ADAPTER_BASE_MODEL); skipping the GGUF tokenizer test")
        }
        let data = try TokenizerData(gguf: GGUFFile(path: path))
        XCTAssertEqual(data.preTokenizer, "smollm")
        let tok = try BPETokenizer(data: data)
        XCTAssertEqual(tok.vocabularySize, 49152)
        XCTAssertEqual(tok.bosTokenId, 1)
        XCTAssertEqual(tok.eosTokenId, 2)
        XCTAssertEqual(tok.specialTokenIds, Set(0...16))
        for e in try Fixtures.smolLM2Golden() {
            XCTAssertEqual(tok.encode(e.text), e.ids, e.name)
        }
        XCTAssertEqual(ChatTemplate.detect(from: data.chatTemplate), .smolLM2)
        XCTAssertEqual(data.chatTemplate, try Fixtures.smolLM2().chatTemplate)
    }
}
