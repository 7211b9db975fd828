// The tool-call grammar in each model's own call format (issue 35 item 3): random walks over a
// synthetic vocabulary through the grammar of a call (or text) in the formats the suite's real
// templates write (Qwen2.5/Qwen3/Hermes `<tool_call>`, Llama 3.2's bare JSON with "parameters",
// Phi-4-mini's `<|tool_call|>`, Mistral v0.3's and Small 3.1's `[TOOL_CALLS] [...]` with ids,
// Schema.md's documented one): every text the grammar lets through that begins like a call reads
// back, in that format, as calls of declared tools with arguments valid against their parameters
// (one, or several where allowed and the format joins calls), Mistral's with 9-character ids;
// every other text holds no call. A format's markers that are special tokens of the tokenizer are
// written as those tokens and no other spelling.
import DataSchema
import Foundation
import Guidance
import ModelAssets
import TestSupport
import XCTest

final class ToolCallFormatGrammarTests: XCTestCase {
    /// A template of the conformance suite with the special tokens it is rendered with.
    static func callFormat(_ name: String, _ specials: [(name: String, text: String)]) throws -> ToolCallFormat {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("Tests/JinjaTests/Fixtures/templates/" + name), encoding: .utf8)
        let format = try ChatFormat(source: ChatTemplateSource(body: .jinja(text), origin: name), specialTokens: specials)
        return try format.toolCallFormat()
    }

    static func formats() throws -> [(String, ToolCallFormat)] {
        [("documented", .documented),
         ("qwen25", try callFormat("qwen25.jinja", [("eos_token", "<|im_end|>")])),
         ("llama32", try callFormat("llama32.jinja", [("bos_token", "<|begin_of_text|>"), ("eos_token", "<|eot_id|>")])),
         ("phi4mini", try callFormat("phi4mini_llamacpp.jinja", [("eos_token", "<|endoftext|>")])),
         ("mistral_v03", try callFormat("mistral_v03.jinja", [("bos_token", "<s>"), ("eos_token", "</s>")])),
         ("mistral_small_31", try callFormat("mistral_small_31.jinja", [("bos_token", "<s>"), ("eos_token", "</s>")]))]
    }

    func testWhatTheGrammarLetsThroughReadsBackAsACall() throws {
        let weather = try schema(#"{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}"#)
        let anything: JSONSchema? = nil
        let tools: [(name: String, parameters: JSONSchema?)] = [("get_weather", weather), ("note\"s", anything)]
        let vocabulary = TokenVocabulary.synthetic(size: 3000, seed: 7)
        for (label, format) in try Self.formats() {
            var calls = 0, texts = 0, several = 0
            // a call (tool_choice required), then a call or text (auto); one call, then several
            for (allowText, severalCalls) in [(false, false), (true, false), (false, true), (true, true)] {
                let grammar = try Grammar.toolCall(tools, allowText: allowText, format: format, severalCalls: severalCalls)
                let walker = Walker(TokenConstraint(grammar: grammar, vocabulary: vocabulary))
                for w in 0..<40 {
                    let result = try walker.walk(seed: UInt64(w), maxSteps: 300, closingBias: [0.3, 0.6, 0.9][w % 3], useForced: w % 2 == 0)
                    guard result.stopped, result.complete, let text = String(validating: result.bytes, as: UTF8.self) else { continue }
                    if text.first == format.lead {
                        let read = try XCTUnwrap(format.readCalls(text), "\(label) walk \(w): \(text.debugDescription)")
                        XCTAssertTrue(read.count == 1 || (severalCalls && format.allowsSeveralCalls), "\(label): \(read.count) calls in \(text.debugDescription)")
                        for call in read {
                            let tool = try XCTUnwrap(tools.first { $0.name == call.name }, "\(label): \(call.name)")
                            if let p = tool.parameters { XCTAssertEqual(p.validate(call.arguments).map(\.description), [], "\(label): \(text)") }
                            if format.idKey != nil {
                                XCTAssertTrue(call.id.map(ToolCallFormat.isValidID) ?? false, "\(label): id \(call.id ?? "none") in \(text)")
                            } else {
                                XCTAssertNil(call.id)
                            }
                        }
                        XCTAssertTrue(text.hasPrefix(format.replyOpening), "\(label): \(text.debugDescription)")
                        calls += 1
                        if read.count > 1 { several += 1 }
                    } else {
                        XCTAssertTrue(allowText, "\(label): a required call's grammar let text through: \(text.debugDescription)")
                        XCTAssertEqual(format.parse(text).calls.count, 0, "\(label): text \(text.debugDescription) holds a call")
                        texts += 1
                    }
                }
            }
            print("\(label): \(calls) replies with calls (\(several) with several) and \(texts) texts read back")
            XCTAssertGreaterThan(calls, 20, label)
            XCTAssertGreaterThan(texts, 5, label)
            if format.allowsSeveralCalls { XCTAssertGreaterThan(several, 3, label) } else { XCTAssertEqual(several, 0, label) }
        }
    }

    /// The grammar writes the model's own framing (its spacing, its keys) and nothing else: the
    /// documented format's text is not a Llama 3 call, and text may not begin like a call.
    func testTheGrammarIsTheFormatsAndNoOther() throws {
        let formats = Dictionary(uniqueKeysWithValues: try Self.formats())
        let llama = try XCTUnwrap(formats["llama32"])
        let g = try Grammar.toolCall([("f", nil)], allowText: true, format: llama)
        XCTAssertTrue(g.matches(#"{"name": "f", "parameters": {"x":1}}"#))
        XCTAssertFalse(g.matches(#"{"name":"f","parameters":{"x":1}}"#))
        XCTAssertFalse(g.matches(#"{"name": "f", "arguments": {"x":1}}"#))
        XCTAssertFalse(try Grammar.toolCall([("f", nil)], allowText: false, format: llama).matches("<tool_call>\n{\"name\":\"f\",\"arguments\":{}}\n</tool_call>"))
        XCTAssertFalse(g.matches("{not a call"))
        XCTAssertTrue(g.matches("<b>text</b> may begin with < here"))
        let documented = try Grammar.toolCall([("f", nil)], allowText: true)
        XCTAssertTrue(documented.matches("<tool_call>\n{\"name\":\"f\",\"arguments\":{}}\n</tool_call>"))
        XCTAssertFalse(documented.matches("<b>text</b>"))
        XCTAssertTrue(documented.matches("{text}"))
        // tool_choice none: text that cannot begin a call
        XCTAssertEqual(llama.textPattern, #"[^\{][\s\S]*"#)
        XCTAssertTrue(try Grammar.regex(llama.textPattern).matches("Sure."))
        XCTAssertFalse(try Grammar.regex(llama.textPattern).matches("{\"name\": 1}"))
    }

    /// Mistral's call: the template's spacing, the id after the arguments as exactly 9 ASCII
    /// letters and digits; several calls in the one list, joined by `, ` as the template joins
    /// them, only when several are allowed; Llama 3's format takes one call whatever is asked.
    func testMistralsIdSlotAndSeveralCalls() throws {
        let formats = Dictionary(uniqueKeysWithValues: try Self.formats())
        let mistral = try XCTUnwrap(formats["mistral_v03"])
        let one = try Grammar.toolCall([("f", nil), ("g", nil)], allowText: false, format: mistral)
        let call = #"[TOOL_CALLS] [{"name": "f", "arguments": {"x":1}, "id": "Ab3dE6gH9"}]"#
        XCTAssertTrue(one.matches(call))
        XCTAssertEqual(mistral.readCalls(call)?.map(\.id), ["Ab3dE6gH9"])
        for bad in ["Ab3dE6gH", "Ab3dE6gH90", "Ab3dE6gH-", "Ab3dE6gHé", ""] {
            XCTAssertFalse(one.matches(#"[TOOL_CALLS] [{"name": "f", "arguments": {"x":1}, "id": "\#(bad)"}]"#), "id \(bad.debugDescription)")
        }
        XCTAssertFalse(one.matches(#"[TOOL_CALLS] [{"name": "f", "arguments": {"x":1}}]"#), "the id is required")
        let two = #"[TOOL_CALLS] [{"name": "f", "arguments": {}, "id": "aaaaaaaaa"}, {"name": "g", "arguments": {"y":[2]}, "id": "B1B1B1B1B"}]"#
        XCTAssertFalse(one.matches(two), "one call unless several are allowed")
        let several = try Grammar.toolCall([("f", nil), ("g", nil)], allowText: false, format: mistral, severalCalls: true)
        XCTAssertTrue(several.matches(call))
        XCTAssertTrue(several.matches(two))
        XCTAssertFalse(several.matches(#"[TOOL_CALLS] [{"name": "f", "arguments": {}, "id": "aaaaaaaaa"},{"name": "g", "arguments": {}, "id": "bbbbbbbbb"}]"#), "joined as the template joins")
        XCTAssertFalse(several.matches(#"[TOOL_CALLS] [{"name": "f", "arguments": {}, "id": "aaaaaaaaa"}] [TOOL_CALLS] [{"name": "g", "arguments": {}, "id": "bbbbbbbbb"}]"#))
        XCTAssertEqual(mistral.readCalls(two)?.map(\.name), ["f", "g"])
        XCTAssertEqual(mistral.readCalls(two)?.map(\.id), ["aaaaaaaaa", "B1B1B1B1B"])
        // Hermes: several <tool_call> blocks on lines of their own
        let hermes = try XCTUnwrap(formats["qwen25"])
        let blocks = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"
        XCTAssertTrue(try Grammar.toolCall([("f", nil), ("g", nil)], allowText: false, format: hermes, severalCalls: true).matches(blocks))
        XCTAssertFalse(try Grammar.toolCall([("f", nil), ("g", nil)], allowText: false, format: hermes).matches(blocks))
        // Llama 3: one call a turn (its template raises on two), several asked or not
        let llama = try XCTUnwrap(formats["llama32"])
        XCTAssertNil(llama.separator)
        let llamaSeveral = try Grammar.toolCall([("f", nil)], allowText: false, format: llama, severalCalls: true)
        XCTAssertTrue(llamaSeveral.matches(#"{"name": "f", "parameters": {}}"#))
        XCTAssertFalse(llamaSeveral.matches(#"{"name": "f", "parameters": {}}{"name": "f", "parameters": {}}"#))
    }

    /// A tokenizer whose call markers are special tokens (Phi-4-mini's `<|tool_call|>` and
    /// `<|/tool_call|>`, Mistral's `[TOOL_CALLS]`): under the tool grammar the marker is that
    /// token and only it — the ordinary tokens that spell its text are not allowed there, the
    /// forced tokens are the special one, the other special tokens stay out — and the reply,
    /// decoded keeping the format's special tokens, reads back as its calls.
    func testAFormatsSpecialTokenMarkersAreWrittenAsThemselves() throws {
        var data = TinyAssets.tokenizer()
        let markers = ["<|tool_call|>", "<|/tool_call|>", "[TOOL_CALLS]", "<|other_special|>"]
        for t in markers {
            data.tokens.append(t)
            data.tokenTypes?.append(3)
        }
        let tokenizer = try BPETokenizer(data: data)
        let ids = try markers.map { try XCTUnwrap(tokenizer.tokenId($0)) }
        XCTAssertTrue(ids.allSatisfy(tokenizer.isSpecial))
        let end = try XCTUnwrap(tokenizer.tokenId("<|im_end|>"))
        let library = try ConstraintLibrary(tokenizer: tokenizer, stopTokens: [end])
        let formats = Dictionary(uniqueKeysWithValues: try Self.formats())
        let weather = try schema(#"{"type":"object","properties":{"city":{"enum":["Oslo","Paris"]}},"required":["city"],"additionalProperties":false}"#)
        for (label, marker) in [("phi4mini", ids[0]), ("mistral_v03", ids[2])] {
            let format = try XCTUnwrap(formats[label])
            XCTAssertEqual(format.specialTokens(in: tokenizer).contains(marker), true, label)
            let required = try library.toolCall([("weather", weather)], allowText: false, format: format, severalCalls: true)
            let start = required.start()
            XCTAssertEqual(required.forcedTokens(start).first, marker, "\(label): the call opens with the special token")
            let auto = try library.toolCall([("weather", weather)], allowText: true, format: format, severalCalls: true)
            let allowed = auto.allowedTokens(auto.start())
            XCTAssertTrue(allowed.contains(marker), label)
            XCTAssertFalse(allowed.contains(ids[3]), "\(label): a special token the format does not name stays out")
            let spelled = tokenizer.encode(String(tokenizer.decode([marker]).prefix(1)))
            XCTAssertFalse(required.allowedTokens(start).contains(spelled[0]), "\(label): the marker's text in ordinary tokens is not a call")
            // text (tool_choice auto) may not hold the marker token anywhere
            var state = auto.start()
            try state.advance(tokens: tokenizer.encode("Hi "))
            XCTAssertFalse(auto.allowedTokens(state).contains(marker), label)
            // walks: each reply decodes (keeping the format's special tokens) to calls read back whole
            var read = 0
            for w in 0..<30 {
                let r = try Walker(required).walk(seed: UInt64(w), maxSteps: 200, closingBias: 0.7, useForced: w % 2 == 0)
                guard r.stopped, r.complete else { continue }
                XCTAssertTrue(r.tokens.contains(marker), label)
                let text = format.decodeReply(r.tokens, tokenizer: tokenizer)
                let calls = try XCTUnwrap(format.readCalls(text), "\(label): \(text.debugDescription)")
                XCTAssertTrue(calls.allSatisfy { $0.name == "weather" && weather.validate($0.arguments).isEmpty }, text)
                XCTAssertEqual(TokenVocabulary.text(of: r.bytes), text, label)
                read += 1
            }
            XCTAssertGreaterThan(read, 10, label)
        }
        // a vocabulary without those special tokens spells the markers with ordinary tokens, as before
        let plain = try ConstraintLibrary(vocabulary: TokenVocabulary(tokenizer: tokenizer, stopTokens: [end]))
        let phi = try XCTUnwrap(formats["phi4mini"])
        let spelledOut = try plain.toolCall([("weather", weather)], allowText: false, format: phi)
        XCTAssertFalse(spelledOut.allowedTokens(spelledOut.start()).contains(ids[0]))
    }
}
