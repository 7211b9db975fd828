// The special tokens put around plain text (`encodeText`: raw prompts, /v1/completions, {"text"}
// records) against transformers' `tokenizer(text)` for Gemma-like, Llama-2-like, Llama-3-like and
// Qwen2-like model folders, and against the tokenizer keys llama.cpp's converter writes for the same
// folders; a chat template that writes BOS itself gets no second one. Fixtures:
// scripts/fixtures/make_bos_fixtures.py (Fixtures/bos/).
import DataSchema
import Foundation
import XCTest
@testable import ModelAssets

final class TextBOSTests: XCTestCase {
    struct Case {
        var name: String
        var texts: [(text: String, ids: [Int], idsSpecial: [Int])]
        var chat: (messages: [[String: String]], ids: [Int])?
    }

    static func cases() throws -> [Case] {
        let root = try XCTUnwrap(Fixtures.json("bos/golden.json") as? [String: [String: Any]])
        return try root.keys.sorted().map { name in
            let e = root[name]!
            let texts = try XCTUnwrap(e["texts"] as? [[String: Any]]).map { t in
                (try XCTUnwrap(t["text"] as? String), try XCTUnwrap(t["ids"] as? [Int]), try XCTUnwrap(t["ids_special"] as? [Int]))
            }
            var chat: ([[String: String]], [Int])?
            if let c = e["chat"] as? [String: Any] {
                chat = (try XCTUnwrap(c["messages"] as? [[String: String]]), try XCTUnwrap(c["ids"] as? [Int]))
            }
            return Case(name: name, texts: texts, chat: chat)
        }
    }

    static func json(_ name: String) throws -> BPETokenizer {
        try BPETokenizer.load(tokenizerJSON: Fixtures.url("bos/\(name)/tokenizer.json"))
    }

    static func gguf(_ name: String) throws -> BPETokenizer {
        try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: Fixtures.url("bos/\(name).gguf").path)))
    }

    func testEncodeTextEqualsTransformers() throws {
        let cases = try Self.cases()
        XCTAssertEqual(Set(cases.map(\.name)), ["gemma", "gemma_template", "llama2", "llama2_eos", "llama3", "llama3_off", "qwen2"])
        for c in cases {
            let tokenizer = try Self.json(c.name)
            for t in c.texts {
                XCTAssertEqual(tokenizer.encode(t.text), t.ids, "\(c.name): \(t.text.debugDescription)")
                XCTAssertEqual(tokenizer.encodeText(t.text), t.idsSpecial, "\(c.name) with special tokens: \(t.text.debugDescription)")
            }
        }
    }

    /// What the references add, so the comparison above covers each way: BOS (Gemma, Llama 2, Llama 3
    /// even with add_bos_token false, which transformers 5 drops), BOS and EOS, nothing (Qwen2).
    func testFixturesCoverEachBehaviour() throws {
        var added: [String: (Int, Int)] = [:]
        for c in try Self.cases() {
            let t = try XCTUnwrap(c.texts.first { $0.text == "Hello world" })
            added[c.name] = (t.idsSpecial.count - t.ids.count, t.idsSpecial.starts(with: t.ids) ? 0 : 1)
            let tokenizer = try Self.json(c.name)
            XCTAssertEqual(tokenizer.textPrefix.count + tokenizer.textSuffix.count, t.idsSpecial.count - t.ids.count, c.name)
        }
        XCTAssertEqual(added["gemma"]?.0, 1)
        XCTAssertEqual(added["llama3_off"]?.0, 1)
        XCTAssertEqual(added["llama2_eos"]?.0, 2)
        XCTAssertEqual(added["qwen2"]?.0, 0)
        // a BOS written in the text stays, and another goes before it, in transformers as here
        let gemma = try Self.json("gemma")
        let bos = try XCTUnwrap(gemma.bosTokenId)
        XCTAssertEqual(Array(gemma.encodeText("<bos>already").prefix(2)), [bos, bos])
    }

    /// llama.cpp adds what the GGUF says (`tokenizer.ggml.add_bos_token`, else its default per kind).
    /// The converter sets that key from the post_processor, or from tokenizer_config.json's
    /// add_bos_token when present; llama3_off's config says false against its template, so there
    /// the GGUF adds no BOS where transformers 5 (which ignores the config) adds one.
    func testGGUFAddsWhatTheConverterWrote() throws {
        for c in try Self.cases() {
            let tokenizer = try Self.gguf(c.name)
            let data = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("bos/\(c.name).gguf").path))
            for t in c.texts {
                XCTAssertEqual(tokenizer.encode(t.text), t.ids, "\(c.name).gguf: \(t.text.debugDescription)")
                let expected = c.name == "llama3_off" ? t.ids : t.idsSpecial
                XCTAssertEqual(tokenizer.encodeText(t.text), expected, "\(c.name).gguf with special tokens: \(t.text.debugDescription)")
            }
            switch c.name {
            case "qwen2": XCTAssertEqual(data.addBOS, false)  // from tokenizer_config.json
            case "gemma_template": XCTAssertEqual(data.addBOS, true)
            default: XCTAssertNotNil(data.addBOS)
            }
        }
        // Missing keys fall back to llama.cpp's defaults: SentencePiece and Llama 3 yes, other BPE no.
        var data = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("bos/llama2.gguf").path))
        data.addBOS = nil
        XCTAssertEqual(try BPETokenizer(data: data).textPrefix, [1])
        var llama3 = try TokenizerData(gguf: GGUFFile(path: Fixtures.url("bos/llama3.gguf").path))
        llama3.addBOS = nil
        XCTAssertEqual(try BPETokenizer(data: llama3).textPrefix, [0])
        llama3.preTokenizer = "qwen2"
        XCTAssertEqual(try BPETokenizer(data: llama3).textPrefix, [])
    }

    /// Text records and raw prompts get the BOS; a chat template that writes bos_token gets no
    /// second one (transformers' apply_chat_template ids).
    func testEncoderAddsBOSToTextOnly() throws {
        for c in try Self.cases() {
            let tokenizer = try Self.json(c.name)
            let encoder = try TrainingEncoder(tokenizer: tokenizer, template: .model(tokenizer), maxSequenceLength: 4096)
            for t in c.texts where !t.text.isEmpty {
                XCTAssertEqual(try encoder.encodePrompt([Message.plainText(t.text)]), t.idsSpecial, "\(c.name): \(t.text.debugDescription)")
                let record = try encoder.encodeFull([Message.plainText(t.text)])
                XCTAssertEqual(record.tokens, t.idsSpecial, "\(c.name) record: \(t.text.debugDescription)")
                XCTAssertTrue(record.isTarget.allSatisfy { $0 })
            }
            guard let chat = c.chat else { continue }
            let messages = chat.messages.map { Message(role: ChatRole(rawValue: $0["role"]!)!, content: $0["content"]!) }
            let ids = try encoder.encodePrompt(messages)
            XCTAssertEqual(ids, chat.ids, "\(c.name) chat")
            XCTAssertEqual(ids.filter { $0 == tokenizer.bosTokenId }.count, 1, "\(c.name) chat: one BOS")
        }
    }
}
