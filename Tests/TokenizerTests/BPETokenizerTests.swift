// BPETokenizer against golden ids from the Hugging Face tokenizer (SmolLM2, and tiny Llama-3/Qwen2
// pipelines), round trips, streaming decode, GGUF-style construction and typed load errors.
// The fixtures come from scripts/fixtures/make_tokenizer_fixtures.py.
import Foundation
import XCTest
@testable import ModelAssets

final class BPETokenizerTests: XCTestCase {
    func testSmolLM2GoldenIds() throws {
        let tok = try Fixtures.smolLM2()
        let entries = try Fixtures.smolLM2Golden()
        XCTAssertGreaterThanOrEqual(entries.count, 30)
        for e in entries {
            let ids = tok.encode(e.text)
            if ids != e.ids {
                let mine = ids.map { tok.tokenString($0) ?? "?" }
                XCTFail("\(e.name): ids differ from HF\n mine: \(mine)\n   hf: \(e.tokens)")
            }
        }
    }

    func testSmolLM2Metadata() throws {
        let tok = try Fixtures.smolLM2()
        XCTAssertEqual(tok.vocabularySize, 49152)
        XCTAssertEqual(tok.preTokenizer, .smollm)
        XCTAssertEqual(tok.bosTokenId, 1)
        XCTAssertEqual(tok.eosTokenId, 2)
        XCTAssertEqual(tok.padTokenId, 2)
        XCTAssertEqual(tok.tokenId("<|im_start|>"), 1)
        XCTAssertEqual(tok.tokenId("<|im_end|>"), 2)
        XCTAssertEqual(tok.tokenId("<|endoftext|>"), 0)
        XCTAssertEqual(tok.tokenString(2), "<|im_end|>")
        XCTAssertEqual(tok.tokenId("Ġthe").flatMap(tok.tokenString), "Ġthe")
        XCTAssertNil(tok.tokenString(49152))
        XCTAssertEqual(tok.specialTokenIds, Set(0...16))
        XCTAssertTrue(tok.chatTemplate?.contains("<|im_start|>") ?? false)
        XCTAssertEqual(tok.decode([1, 4093, 2], skipSpecialTokens: true), tok.decode([4093]))
    }

    func testDecodeMatchesReferenceAndRoundTrips() throws {
        let tok = try Fixtures.smolLM2()
        for e in try Fixtures.smolLM2Golden() {
            XCTAssertTrue(sameScalars(tok.decode(e.ids), e.decoded), "\(e.name): decode(golden ids) differs from HF")
            if tok.unencodableScalars(in: e.text).isEmpty {
                XCTAssertTrue(sameScalars(tok.decode(tok.encode(e.text)), e.text), "\(e.name): decode(encode(s)) != s")
            }
        }
        XCTAssertEqual(tok.unencodableScalars(in: "a\u{04}b\u{1D}é"), ["\u{04}", "\u{1D}"])
        XCTAssertEqual(tok.unencodableBytes.count, 21)
        XCTAssertEqual(tok.decode([]), "")
        XCTAssertEqual(tok.decode([-1, 999_999]), "\u{FFFD}\u{FFFD}")
    }

    func testStreamingDecoderEmitsOnlyCompleteText() throws {
        let tok = try Fixtures.smolLM2()
        for e in try Fixtures.smolLM2Golden() where tok.unencodableScalars(in: e.text).isEmpty {
            var decoder = StreamingDecoder(tokenizer: tok)
            var soFar = ""
            var sawHeldBack = false
            for id in e.ids {
                let piece = decoder.feed(id)
                XCTAssertFalse(piece.unicodeScalars.contains("\u{FFFD}"), "\(e.name): emitted a replacement character")
                soFar += piece
                sawHeldBack = sawHeldBack || decoder.hasPendingBytes
                XCTAssertTrue(e.text.utf8.starts(with: soFar.utf8), "\(e.name): streamed text is not a prefix of the text")
            }
            soFar += decoder.finish()
            XCTAssertTrue(sameScalars(soFar, e.text), "\(e.name): streamed text differs")
            if ["cjk", "emoji"].contains(e.name) {
                XCTAssertTrue(sawHeldBack, "\(e.name): expected a character split across tokens")
            }
        }
    }

    func testStreamingMatchesDecodeOnBrokenUTF8() throws {
        let tok = try Fixtures.smolLM2()
        // Byte tokens of "é" (C3 A9) and "€" (E2 82 AC) in odd orders, plus lone continuation bytes.
        let byte = { (b: UInt8) in tok.tokenId(ByteLevelAlphabet.encode([b]))! }
        let sequences: [[UInt8]] = [[0xC3, 0xA9], [0xE2, 0x82, 0xAC], [0xE2, 0x82, 0x41], [0xA9, 0x41],
                                    [0xE2, 0x82], [0xF0, 0x9F, 0x98, 0x80, 0xF0], [0xE0, 0x80, 0x41], [0xED, 0xA0, 0x80]]
        for bytes in sequences {
            let ids = bytes.map(byte)
            var decoder = StreamingDecoder(tokenizer: tok)
            let streamed = ids.map { decoder.feed($0) }.joined() + decoder.finish()
            XCTAssertTrue(sameScalars(streamed, tok.decode(ids)), "\(bytes): streamed \(Array(streamed.unicodeScalars)) vs decode \(Array(tok.decode(ids).unicodeScalars))")
        }
        XCTAssertEqual(StreamingDecoder.completePrefixLength([0x41, 0xE2, 0x82]), 1)
        XCTAssertEqual(StreamingDecoder.completePrefixLength([0x41, 0xE2, 0x82, 0xAC]), 4)
        XCTAssertEqual(StreamingDecoder.completePrefixLength([0xF0, 0x9F]), 0)
        XCTAssertEqual(StreamingDecoder.completePrefixLength([0xE0, 0x80]), 2)
    }

    func testSpecialTokensAreMatchedWhole() throws {
        let tok = try Fixtures.smolLM2()
        XCTAssertEqual(tok.encode("<|im_start|><|im_end|>"), [1, 2])
        XCTAssertEqual(tok.encode("<|im_end|>\n"), [2, tok.tokenId("Ċ")!])
        XCTAssertFalse(tok.encode("<|im_end").contains(2))
        XCTAssertFalse(tok.encode("<|IM_END|>").contains(2))
    }

    /// The same vocabulary, merges and token types as GGUF stores them go through `init(data:)`.
    func testInitFromGGUFStyleDataMatchesJSON() throws {
        let json = try Fixtures.smolLM2()
        let data = try Self.ggufStyleData(from: json)
        let tok = try BPETokenizer(data: data)
        XCTAssertEqual(tok.vocabularySize, 49152)
        XCTAssertEqual(tok.specialTokenIds, Set(0...16))
        XCTAssertEqual(tok.eosTokenId, 2)
        for e in try Fixtures.smolLM2Golden() {
            XCTAssertEqual(tok.encode(e.text), e.ids, e.name)
        }
        XCTAssertEqual(ChatTemplate.detect(from: tok.chatTemplate), .smolLM2)
    }

    /// The spelling -> id index answers as the `[String: Int]` it replaced: every spelling of the
    /// vocabulary, a later id winning a repeated spelling, an added token's other spelling, misses;
    /// in a table small enough that probes collide.
    func testSpellingIndexAnswersAsADictionary() throws {
        let tok = try Fixtures.smolLM2()
        var reference: [String: Int] = [:]
        for id in 0..<tok.vocabularySize { if let t = tok.tokenString(id) { reference[t] = id } }
        XCTAssertEqual(reference.count, 49152)
        for (t, id) in reference { XCTAssertEqual(tok.tokenId(t), id, t) }
        for miss in ["", "Ġthe the the", "<|nope|>", "ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ"] where reference[miss] == nil {
            XCTAssertNil(tok.tokenId(miss), miss)
        }

        let spellings: [String?] = ["a", "b", nil, "a", "cd", "e", nil, "b", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o"]
        var index = SpellingIndex(spellings)
        index.add("<added>", 2)
        index.add("f", 0)  // spelled by id 8: stays 8
        var dictionary: [String: Int] = [:]
        for (id, t) in spellings.enumerated() { if let t { dictionary[t] = id } }
        dictionary["<added>"] = 2
        for (t, id) in dictionary { XCTAssertEqual(index[t], id, t) }
        for miss in ["", "ab", "x", "<added", "A"] { XCTAssertNil(index[miss], miss) }
    }

    func testTinyLlama3AndQwen2Pipelines() throws {
        let root = try XCTUnwrap(Fixtures.json("tiny_bpe_golden.json") as? [String: [[String: Any]]])
        for (name, pre, ignoresMerges, nfc) in [("tiny_llama3", PreTokenizer.llama3, true, false),
                                                ("tiny_qwen2", PreTokenizer.qwen2, false, true)] {
            let tok = try BPETokenizer.load(tokenizerJSON: Fixtures.url("\(name)/tokenizer.json"))
            XCTAssertEqual(tok.preTokenizer, pre)
            XCTAssertEqual(tok.ignoresMerges, ignoresMerges)
            XCTAssertEqual(tok.normalizesNFC, nfc)
            let entries = try XCTUnwrap(root[name])
            for e in entries {
                let text = try XCTUnwrap(e["text"] as? String)
                let ids = try XCTUnwrap(e["ids"] as? [Int])
                XCTAssertEqual(tok.encode(text), ids, "\(name): \(text.debugDescription)")
            }
        }
        // ignore_merges: the fixture adds "Ġzebra" to the vocabulary without merges that reach it.
        let llama = try BPETokenizer.load(tokenizerJSON: Fixtures.url("tiny_llama3/tokenizer.json"))
        XCTAssertEqual(llama.encode(" zebra"), [llama.tokenId("Ġzebra")!])
    }

    func testShortAndLongMergeAgree() throws {
        let tok = try Fixtures.smolLM2()
        var rng = SplitMix64(seed: 7)
        let alphabet = Array("aabcdeeinorst ththeingon\u{e9}\u{65e5}".utf8)
        for _ in 0..<300 {
            let n = Int(rng.next() % 80) + 2
            let word = (0..<n).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            let start = word.map { tok.byteTokens[Int($0)] }
            XCTAssertEqual(tok.mergeShort(start), tok.mergeLong(start), "\(word)")
        }
        // A very long word takes the heap path and still round-trips.
        let long = String(repeating: "ab", count: 5000) + " " + String(repeating: " ", count: 3000) + "x"
        XCTAssertTrue(sameScalars(tok.decode(tok.encode(long)), long))
    }

    func testLoadErrorsAreTyped() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tok-errors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let base = try XCTUnwrap(Fixtures.json("tiny_llama3/tokenizer.json") as? [String: Any])

        func write(_ object: Any) throws -> URL {
            let url = dir.appendingPathComponent("tokenizer.json")
            try JSONSerialization.data(withJSONObject: object).write(to: url)
            return url
        }

        // Not JSON at all.
        let garbage = dir.appendingPathComponent("tokenizer.json")
        try Data("{not json".utf8).write(to: garbage)
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: garbage)) { error in
            guard case ModelAssetsError.malformed = error else { return XCTFail("\(error)") }
        }
        // Missing file.
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: dir.appendingPathComponent("none.json"))) { error in
            guard case ModelAssetsError.io = error else { return XCTFail("\(error)") }
        }
        // A merge naming a token that is not in the vocabulary.
        var badMerge = base
        var model = try XCTUnwrap(base["model"] as? [String: Any])
        var merges = try XCTUnwrap(model["merges"] as? [Any])
        merges.insert(["Ġt", "nosuchtoken"], at: 3)
        model["merges"] = merges
        badMerge["model"] = model
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: write(badMerge))) { error in
            guard case let ModelAssetsError.malformed(_, item, reason) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(item, "model.merges[3]")
            XCTAssertTrue(reason.contains("nosuchtoken"), reason)
        }
        // An unsupported pre-tokenizer: the message lists the supported ones.
        var badPre = base
        badPre["pre_tokenizer"] = ["type": "Whitespace"]
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: write(badPre))) { error in
            guard case let ModelAssetsError.invalidConfig(_, field, reason) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(field, "pre_tokenizer")
            XCTAssertTrue(reason.contains("Digits") && reason.contains("Llama-3"), reason)
            XCTAssertTrue(error.localizedDescription.contains("pre_tokenizer"))
        }
        // A WordPiece model.
        var wordPiece = base
        model = try XCTUnwrap(base["model"] as? [String: Any])
        model["type"] = "WordPiece"
        wordPiece["model"] = model
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: write(wordPiece))) { error in
            guard case ModelAssetsError.invalidConfig(_, "model.type", _) = error else { return XCTFail("\(error)") }
        }
        // GGUF metadata with an unknown pre-tokenizer name or a malformed merge line.
        var data = try Self.ggufStyleData(from: Fixtures.smolLM2())
        data.preTokenizer = "chameleon"
        XCTAssertThrowsError(try BPETokenizer(data: data)) { error in
            guard case let ModelAssetsError.invalidConfig(_, field, reason) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(field, "tokenizer.ggml.pre")
            XCTAssertTrue(reason.contains("smollm") && reason.contains("llama-bpe") && reason.contains("qwen2"), reason)
        }
        data.preTokenizer = "smollm"
        data.merges[5] = "Ġthe"
        XCTAssertThrowsError(try BPETokenizer(data: data)) { error in
            guard case ModelAssetsError.malformed(_, "tokenizer.ggml.merges[5]", _) = error else { return XCTFail("\(error)") }
        }
    }

    /// Encodes 1,000 chat samples of about 200 tokens and prints the throughput (no assertion on
    /// time): once with words drawn from the golden corpus (natural text, word cache warm after a
    /// while), once with random pseudo-words that nearly always miss the word cache (worst case).
    func testEncodeThroughputReport() throws {
        let loadStart = Date()
        let tok = try BPETokenizer.load(tokenizerJSON: Fixtures.url("smollm2/tokenizer.json"))  // cold word cache
        let loadSeconds = Date().timeIntervalSince(loadStart)
        let corpus = try Fixtures.smolLM2Golden().map(\.text).filter { !$0.isEmpty }
        var rng = SplitMix64(seed: 1)
        let template = ChatTemplate.smolLM2
        let letters = Array("abcdefghijklmnopqrstuvwxyzeeaaiioouu")
        func sample(_ i: Int, randomWords: Bool) -> String {
            var words: [String] = []
            while words.count < 44 {
                if randomWords {
                    let n = Int(rng.next() % 9) + 2
                    words.append(String((0..<n).map { _ in letters[Int(rng.next() % UInt64(letters.count))] }))
                } else {
                    let parts = corpus[Int(rng.next() % UInt64(corpus.count))].split(separator: " ")
                    let start = Int(rng.next() % UInt64(max(parts.count, 1)))
                    words += parts[start...].prefix(8).map(String.init)
                }
                if rng.next() % 4 == 0 { words.append(String(rng.next() % 10_000)) }
            }
            let half = words.count / 2
            let messages = [ChatMessage(role: .user, content: "Sample \(i): " + words[..<half].joined(separator: " ")),
                            ChatMessage(role: .assistant, content: words[half...].joined(separator: " "))]
            return template.renderText(messages, addGenerationPrompt: false)
        }
        for randomWords in [false, true] {
            let samples = (0..<1000).map { sample($0, randomWords: randomWords) }
            let bytes = samples.reduce(0) { $0 + $1.utf8.count }
            var tokens = 0
            let first = Date()
            for s in samples { tokens += tok.encode(s).count }
            let firstSeconds = Date().timeIntervalSince(first)
            let second = Date()
            for s in samples { _ = tok.encode(s) }
            let secondSeconds = Date().timeIntervalSince(second)
            print(String(format: "[tokenizer throughput] %@: 1000 samples, %d tokens (%.0f per sample), %d bytes: first pass %.3f s (%.2f M tokens/s), second pass %.3f s (%.2f M tokens/s); load %.2f s",
                         randomWords ? "random pseudo-words" : "corpus words", tokens, Double(tokens) / 1000, bytes,
                         firstSeconds, Double(tokens) / firstSeconds / 1e6, secondSeconds, Double(tokens) / secondSeconds / 1e6, loadSeconds))
            XCTAssertGreaterThan(tokens, 150_000)
        }
    }

    // MARK: helpers

    /// TokenizerData as a GGUF file would carry it (token types 3 for control tokens).
    static func ggufStyleData(from tok: BPETokenizer) throws -> TokenizerData {
        let tokens = try (0..<tok.vocabularySize).map { try XCTUnwrap(tok.tokenString($0)) }
        let root = try XCTUnwrap(Fixtures.json("smollm2/tokenizer.json") as? [String: Any])
        let model = try XCTUnwrap(root["model"] as? [String: Any])
        let merges = try XCTUnwrap(model["merges"] as? [[String]]).map { $0.joined(separator: " ") }
        let types: [Int32] = (0..<tok.vocabularySize).map { tok.specialTokenIds.contains($0) ? 3 : 1 }
        let template = try String(contentsOf: Fixtures.url("smollm2/chat_template.jinja"), encoding: .utf8)
        return TokenizerData(tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: "smollm",
                             bosTokenId: 1, eosTokenId: 2, padTokenId: 2, chatTemplate: template)
    }
}

/// A tiny deterministic generator for test inputs.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
