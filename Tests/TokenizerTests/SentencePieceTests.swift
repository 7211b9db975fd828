// SentencePiece-style BPE against the reference: ids and decoded text equal to Hugging Face
// `tokenizers` for five tokenizer.json pipelines of two vocabularies trained here, GGUF (llama.cpp's
// SPM export) ids equal to the matching tokenizer.json's, streaming decode of byte-fallback
// characters, segment marks, and errors that name what is unsupported. Fixtures:
// scripts/fixtures/make_sentencepiece_fixtures.py.
import Foundation
import XCTest
@testable import ModelAssets
import ModelDefinition

final class SentencePieceTests: XCTestCase {
    struct Entry {
        var name: String
        var text: String
        var ids: [Int]
        var decoded: String
        var decodedSkip: String
    }

    static let folders = ["llama_always", "llama_first", "llama_normalizer", "metaspace_split", "gemma"]

    static func golden() throws -> [String: [Entry]] {
        let root = try XCTUnwrap(Fixtures.json("sentencepiece/golden.json") as? [String: [[String: Any]]])
        return try root.mapValues { list in
            try list.map { e in
                Entry(name: try XCTUnwrap(e["name"] as? String), text: try XCTUnwrap(e["text"] as? String),
                      ids: try XCTUnwrap(e["ids"] as? [Int]), decoded: try XCTUnwrap(e["decoded"] as? String),
                      decodedSkip: try XCTUnwrap(e["decoded_skip"] as? String))
            }
        }
    }

    static func json(_ folder: String) throws -> BPETokenizer {
        try BPETokenizer.load(tokenizerJSON: Fixtures.url("sentencepiece/\(folder)/tokenizer.json"))
    }

    static func gguf(_ name: String) throws -> BPETokenizer {
        try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: Fixtures.url("sentencepiece/\(name)").path)))
    }

    func testPipelinesAreReadAsConfigured() throws {
        let expected: [String: (SentencePieceOptions.Prefix, Bool, Int)] = [
            "llama_always": (.always, false, 1), "llama_first": (.first, false, 1), "llama_normalizer": (.everyPiece, false, 1),
            "metaspace_split": (.always, true, 1), "gemma": (.never, false, 0),
        ]
        for folder in Self.folders {
            let tok = try Self.json(folder)
            let sp = try XCTUnwrap(tok.sentencePiece, folder)
            let (prefix, split, strip) = try XCTUnwrap(expected[folder])
            XCTAssertEqual(sp.prefix, prefix, folder)
            XCTAssertEqual(sp.splitsAtSpace, split, folder)
            XCTAssertEqual(sp.stripsLeadingSpaces, strip, folder)
            XCTAssertTrue(sp.byteFallback, folder)
        }
        XCTAssertNil(try Fixtures.smolLM2().sentencePiece, "byte-level BPE must stay byte-level")
        let llama = try Self.gguf("llama.gguf"), gemma = try Self.gguf("gemma.gguf")
        XCTAssertEqual(llama.sentencePiece?.prefix, .everyPiece)
        XCTAssertEqual(gemma.sentencePiece?.prefix, .never)
        XCTAssertEqual(llama.bosTokenId, 1)
        XCTAssertEqual(llama.eosTokenId, 2)
        XCTAssertEqual(gemma.bosTokenId, 2)
        XCTAssertEqual(gemma.eosTokenId, 1)
        XCTAssertEqual(llama.sentencePiece?.unknownTokenId, 0)
        XCTAssertEqual(gemma.sentencePiece?.unknownTokenId, 3)
        // add_bos_token / add_space_prefix are read when the file has them.
        var data = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("sentencepiece/llama.gguf").path))
        XCTAssertEqual(data.addSpacePrefix, true)
        XCTAssertNil(llama.addsBOS)
        data.addBOS = true
        data.addSpacePrefix = false
        let changed = try BPETokenizer(data: data)
        XCTAssertEqual(changed.addsBOS, true)
        XCTAssertEqual(changed.sentencePiece?.prefix, .never)
        XCTAssertEqual(llama.tokenString(llama.encode("Hi there")[0])?.hasPrefix("▁"), true)
        XCTAssertEqual(changed.tokenString(changed.encode("Hi there")[0])?.hasPrefix("▁"), false)
    }

    func testIdsAndDecodingEqualHuggingFace() throws {
        let golden = try Self.golden()
        for folder in Self.folders {
            let tok = try Self.json(folder)
            let entries = try XCTUnwrap(golden[folder])
            XCTAssertGreaterThan(entries.count, 40)
            for e in entries {
                XCTAssertEqual(tok.encode(e.text), e.ids, "\(folder) \(e.name): ids differ from tokenizers'")
                XCTAssertTrue(sameScalars(tok.decode(e.ids), e.decoded), "\(folder) \(e.name): decode \(tok.decode(e.ids).debugDescription) vs \(e.decoded.debugDescription)")
                let skipped = tok.decode(e.ids, skipSpecialTokens: true)
                XCTAssertTrue(sameScalars(skipped, e.decodedSkip), "\(folder) \(e.name): skip-special decode \(skipped.debugDescription) vs \(e.decodedSkip.debugDescription)")
            }
        }
    }

    /// The corpus reaches byte fallback (CJK, emoji), multi-space pieces and added tokens, so the
    /// equality above is not vacuous.
    func testCorpusExercisesFallbackAndAddedTokens() throws {
        let golden = try Self.golden()
        let tok = try Self.json("llama_always")
        let entries = try XCTUnwrap(golden["llama_always"])
        let byteIds = Set((0..<256).compactMap { tok.tokenId(String(format: "<0x%02X>", $0)) })
        XCTAssertEqual(byteIds.count, 256)
        for name in ["sp_cjk", "sp_emoji", "cjk", "emoji"] {
            let e = try XCTUnwrap(entries.first { $0.name == name })
            XCTAssertTrue(e.ids.contains(where: byteIds.contains), "\(name) should need byte fallback")
        }
        let turns = try XCTUnwrap(entries.first { $0.name == "sp_turns" })
        XCTAssertTrue(turns.ids.contains(try XCTUnwrap(tok.tokenId("<start_of_turn>"))))
    }

    func testGGUFIdsEqualTokenizerJSON() throws {
        let golden = try Self.golden()
        // llama.cpp puts "▁" before the text and after every special token, as the Prepend normalizer
        // does; Gemma's GGUF has add_space_prefix false, as its tokenizer.json has no prefix.
        for (file, folder) in [("llama.gguf", "llama_normalizer"), ("gemma.gguf", "gemma")] {
            let tok = try Self.gguf(file)
            for e in try XCTUnwrap(golden[folder]) where !e.text.contains("<mask>") {
                XCTAssertEqual(tok.encode(e.text), e.ids, "\(file) \(e.name): ids differ from \(folder)/tokenizer.json's")
                XCTAssertTrue(sameScalars(tok.decode(e.ids), e.decoded), "\(file) \(e.name): decode \(tok.decode(e.ids).debugDescription)")
            }
        }
    }

    func testStreamingDecodeHoldsBackSplitCharacters() throws {
        let golden = try Self.golden()
        for folder in ["llama_always", "gemma"] {
            let tok = try Self.json(folder)
            for e in try XCTUnwrap(golden[folder]) {
                for skip in [false, true] {
                    var decoder = StreamingDecoder(tokenizer: tok, skipSpecialTokens: skip)
                    var streamed = ""
                    var heldBack = false
                    for id in e.ids {
                        let piece = decoder.feed(id)
                        XCTAssertFalse(piece.unicodeScalars.contains("\u{FFFD}"), "\(folder) \(e.name): emitted half a character")
                        heldBack = heldBack || decoder.hasPendingBytes
                        streamed += piece
                    }
                    streamed += decoder.finish()
                    XCTAssertTrue(sameScalars(streamed, skip ? e.decodedSkip : e.decoded), "\(folder) \(e.name) skip \(skip): streamed \(streamed.debugDescription)")
                    if ["sp_cjk", "sp_emoji"].contains(e.name) {
                        XCTAssertTrue(heldBack, "\(folder) \(e.name): a byte-fallback character should arrive in pieces")
                    }
                }
            }
        }
    }

    func testRoundTripsAndSegments() throws {
        let golden = try Self.golden()
        for folder in Self.folders {
            let tok = try Self.json(folder)
            let added: Set<String> = ["<start_of_turn>", "<end_of_turn>", "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>"]
            var checked = 0
            for e in try XCTUnwrap(golden[folder]) where tok.unencodableScalars(in: e.text).isEmpty {
                // Where HF's decode does not give the text back, neither do we: a literal "▁" decodes
                // as a space; the strip removes a leading space that got no prefix (Metaspace always,
                // first); a prefix "▁" after an added token (Prepend, llama.cpp) decodes as a space.
                guard let sp = tok.sentencePiece, !e.text.contains("▁") else { continue }
                if sp.stripsLeadingSpaces > 0 && sp.prefix != .everyPiece && e.text.hasPrefix(" ") { continue }
                if sp.prefix != .never && e.ids.contains(where: { tok.tokenString($0).map(added.contains) ?? false }) { continue }
                let decoded = tok.decode(tok.encode(e.text))
                XCTAssertTrue(sameScalars(decoded, e.text), "\(folder) \(e.name): round trip \(decoded.debugDescription)")
                checked += 1
            }
            XCTAssertGreaterThan(checked, 35, folder)
            // Segments: the ids of the joined text, marks on the target segment's tokens only.
            let segments = [TemplateSegment(text: "<start_of_turn>user\nWhy 日本?<end_of_turn>\n", isTarget: false),
                            TemplateSegment(text: "<start_of_turn>model\n Because 😀  it is.", isTarget: true),
                            TemplateSegment(text: "<end_of_turn>\n", isTarget: false)]
            let joined = segments.map(\.text).joined()
            let (ids, marks) = tok.encode(segments: segments)
            XCTAssertEqual(ids, tok.encode(joined), folder)
            let firstTarget = tok.encode(segments[0].text).count
            XCTAssertFalse(marks[..<firstTarget].contains(true), folder)
            XCTAssertTrue(marks[firstTarget...].contains(true), folder)
            XCTAssertFalse(try XCTUnwrap(marks.last), folder)
        }
    }

    /// A SentencePiece GGUF written back (export, fuse) keeps model, scores, types and flags.
    func testGGUFMetadataRoundTrips() throws {
        for name in ["llama.gguf", "gemma.gguf"] {
            let data = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("sentencepiece/\(name)").path))
            var writer = GGUFWriter()
            try writer.set("general.architecture", .string("llama"))
            for (k, v) in ModelExport.ggufMetadata(for: data) { try writer.set(k, v) }
            let url = FileManager.default.temporaryDirectory.appendingPathComponent("sp-\(UUID().uuidString).gguf")
            defer { try? FileManager.default.removeItem(at: url) }
            try writer.write(to: url.path)
            let back = try TokenizerData(gguf: GGUFFile(path: url.path))
            XCTAssertEqual(back, data, name)
            XCTAssertEqual(back.model, "llama")
            XCTAssertEqual(back.scores?.count, 1000)
        }
    }

    /// Pieces that are canonically equivalent but spelled differently stay two tokens (HF and
    /// llama.cpp compare bytes; Swift's String == would make them one).
    func testSpellingsAreComparedAsBytes() throws {
        var index = SpellingIndex(["caf\u{E9}", "cafe\u{301}", "x"])
        XCTAssertEqual(index["caf\u{E9}"], 0)
        XCTAssertEqual(index["cafe\u{301}"], 1)
        index.add("\u{C5}", 7)
        XCTAssertEqual(index["\u{C5}"], 7)
        XCTAssertNil(index["A\u{30A}"])
        let data = TokenizerData(tokens: ["<unk>", "\u{E9}", "e", "\u{301}", "e\u{301}"], merges: [], tokenTypes: [2, 1, 1, 1, 1],
                                 preTokenizer: "default", bosTokenId: nil, eosTokenId: nil, padTokenId: nil, chatTemplate: nil)
        var sp = data
        sp.model = "llama"
        sp.scores = [0, -1, -2, -3, -4]
        sp.addSpacePrefix = false
        let tok = try BPETokenizer(data: sp)
        XCTAssertEqual(tok.encode("\u{E9}e\u{301}"), [1, 4])
    }

    func testUnsupportedKindsAreNamed() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sp-errors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let base = try XCTUnwrap(Fixtures.json("sentencepiece/llama_normalizer/tokenizer.json") as? [String: Any])
        func load(_ object: [String: Any]) throws -> BPETokenizer {
            let url = dir.appendingPathComponent("tokenizer.json")
            try JSONSerialization.data(withJSONObject: object).write(to: url)
            return try BPETokenizer.load(tokenizerJSON: url)
        }
        var unigram = base
        var model = try XCTUnwrap(base["model"] as? [String: Any])
        model["type"] = "Unigram"
        unigram["model"] = model
        XCTAssertThrowsError(try load(unigram)) { error in
            guard case let ModelAssetsError.invalidConfig(_, "model.type", reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("Unigram") && reason.contains("SentencePiece"), reason)
        }
        var badDecoder = base
        badDecoder["decoder"] = ["type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true]
        XCTAssertThrowsError(try load(badDecoder)) { error in
            guard case ModelAssetsError.invalidConfig(_, "decoder", _) = error else { return XCTFail("\(error)") }
        }
        var noSpaces = base  // byte fallback with a byte-level pre-tokenizer: neither kind
        noSpaces["normalizer"] = NSNull()
        noSpaces["pre_tokenizer"] = ["type": "ByteLevel", "add_prefix_space": false, "use_regex": true]
        XCTAssertThrowsError(try load(noSpaces)) { error in
            guard case ModelAssetsError.invalidConfig(_, "model.byte_fallback", _) = error else { return XCTFail("\(error)") }
        }
        var data = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("sentencepiece/llama.gguf").path))
        data.model = "t5"
        XCTAssertThrowsError(try BPETokenizer(data: data)) { error in
            guard case let ModelAssetsError.invalidConfig(_, "tokenizer.ggml.model", reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("'t5'"), reason)
        }
        data.model = "llama"
        data.scores = nil
        XCTAssertThrowsError(try BPETokenizer(data: data)) { error in
            guard case ModelAssetsError.missingKey(_, "tokenizer.ggml.scores") = error else { return XCTFail("\(error)") }
        }
    }
}
