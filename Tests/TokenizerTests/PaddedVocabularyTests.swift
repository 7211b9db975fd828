// SmolLM2's tokenizer as make-model writes it into a bigger model's file: tokenizer.* metadata
// copied from a GGUF and padded with unused [PAD<id>] tokens to Llama 3.2's and Qwen2.5's
// published vocabularies, read back the way the toolkit reads a base model's tokenizer, must give
// the reference tokenizer's golden ids. No model file needed (SmolLM2's tokenizer.json fixture).
import Foundation
import ModelDefinition
import XCTest
@testable import ModelAssets

final class PaddedVocabularyTests: XCTestCase {
    func testPaddedSmolLM2VocabularyEncodesTheGoldenIds() throws {
        let data = try BPETokenizerTests.ggufStyleData(from: Fixtures.smolLM2())
        var source = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: data) { try source.set(k, v) }
        let sourceFile = try GGUFFile(data: source.serialized(), path: "smollm2-tokenizer.gguf")
        for size in [128_256, 151_936] {
            var padded = GGUFWriter()
            for (k, v) in try RandomModel.tokenizerMetadata(from: sourceFile, vocabularySize: size) { try padded.set(k, v) }
            let file = try GGUFFile(data: padded.serialized(), path: "padded.gguf")
            let readBack = try TokenizerData(gguf: file)
            XCTAssertEqual(Array(readBack.tokens.prefix(49152)), data.tokens)
            XCTAssertEqual(readBack.tokens[49152], "[PAD49152]")
            XCTAssertEqual(readBack.tokenTypes?.last, RandomModel.unusedTokenType)
            let tok = try BPETokenizer(data: readBack)
            XCTAssertEqual(tok.vocabularySize, size)
            XCTAssertEqual(tok.specialTokenIds, Set(0...16))
            for e in try Fixtures.smolLM2Golden() {
                XCTAssertEqual(tok.encode(e.text), e.ids, "\(size): \(e.name)")
                XCTAssertTrue(sameScalars(tok.decode(e.ids), e.decoded), "\(size): \(e.name)")
            }
            XCTAssertEqual(tok.decode([size - 1]), "[PAD\(size - 1)]")
        }
    }
}
