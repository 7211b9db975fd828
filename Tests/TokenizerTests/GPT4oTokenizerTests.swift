// The GPT-4o (o200k) pre-tokenizer as Phi-4-mini uses it, end to end: a tiny Phi-4-mini-shaped
// byte-level BPE (trained with `tokenizers`, its pipeline Split(o200k regex) + ByteLevel) read from
// tokenizer.json and from the GGUF llama.cpp's converter writes for it (tokenizer.ggml.pre "gpt-4o",
// [PAD] slots up to the padded vocabulary), ids equal to transformers' AutoTokenizer on the folder.
// The split itself is held to `tokenizers` by PreTokenizerTests. Fixtures: make_tokenizer_fixtures.py.
import Foundation
import XCTest
@testable import ModelAssets

final class GPT4oTokenizerTests: XCTestCase {
    struct Entry {
        var text: String
        var ids: [Int]
        var idsWithSpecialTokens: [Int]
    }

    static func golden() throws -> [Entry] {
        let root = try XCTUnwrap(Fixtures.json("tiny_phi4mini_golden.json") as? [String: Any])
        let entries = try XCTUnwrap(root["entries"] as? [[String: Any]])
        return try entries.map { e in
            Entry(text: try XCTUnwrap(e["text"] as? String), ids: try XCTUnwrap(e["ids"] as? [Int]),
                  idsWithSpecialTokens: try XCTUnwrap(e["ids_special"] as? [Int]))
        }
    }

    static func fromJSON() throws -> BPETokenizer {
        try BPETokenizer.load(tokenizerJSON: Fixtures.url("tiny_phi4mini/tokenizer.json"))
    }

    static func fromGGUF() throws -> BPETokenizer {
        try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: Fixtures.url("tiny_phi4mini.gguf").path)))
    }

    func testBothFilesReadTheGPT4oSplit() throws {
        let json = try Self.fromJSON(), gguf = try Self.fromGGUF()
        XCTAssertEqual(json.preTokenizer, .gpt4o)
        XCTAssertEqual(gguf.preTokenizer, .gpt4o)
        XCTAssertFalse(json.ignoresMerges)
        XCTAssertFalse(gguf.ignoresMerges)
        XCTAssertFalse(json.normalizesNFC)
        // The converter pads the token list to config.json's vocab_size with unused [PAD i] slots.
        XCTAssertEqual(json.vocabularySize, 812)
        XCTAssertEqual(gguf.vocabularySize, 832)
        XCTAssertEqual(gguf.tokenString(831), "[PAD831]")
        let eot = try XCTUnwrap(json.tokenId("<|endoftext|>"))
        XCTAssertEqual(json.bosTokenId, eot)
        XCTAssertEqual(json.eosTokenId, eot)
        XCTAssertEqual(gguf.bosTokenId, eot)
        XCTAssertEqual(gguf.eosTokenId, eot)
    }

    func testIdsEqualTransformers() throws {
        let golden = try Self.golden()
        XCTAssertGreaterThan(golden.count, 40)
        for (name, tokenizer) in [("tokenizer.json", try Self.fromJSON()), ("GGUF", try Self.fromGGUF())] {
            for e in golden {
                XCTAssertEqual(tokenizer.encode(e.text), e.ids, "\(name): \(e.text.debugDescription)")
                XCTAssertTrue(sameScalars(tokenizer.decode(e.ids), e.text), "\(name) decode: \(e.text.debugDescription)")
            }
        }
    }

    /// The corpus reaches what sets the o200k split apart, so the comparison above means something:
    /// a case boundary inside a run of letters, a contraction glued to a capitalized word, "/" after
    /// a newline, a mark that starts a word.
    func testCorpusExercisesTheCaseRules() throws {
        let texts = try Self.golden().map(\.text)
        let pieces = texts.flatMap { PreTokenizer.gpt4o.split($0) }
        XCTAssertTrue(pieces.contains(" Camel") && pieces.contains("Case"))
        XCTAssertTrue(pieces.contains("HTMLParser"))
        XCTAssertTrue(pieces.contains(" DON'T") || pieces.contains("DON'T"))
        XCTAssertTrue(pieces.contains("!\n/"))
        XCTAssertTrue(pieces.contains(" \u{301}x"))
        // and the Llama-3 split, the nearest one, cuts the same texts differently
        XCTAssertNotEqual(texts.flatMap { PreTokenizer.llama3.split($0) }, pieces)
    }
}
