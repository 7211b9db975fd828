// The tool-call grammar in each model's own call format (issue 35 item 3): random walks over a
// synthetic vocabulary through the grammar of a call (or text) in the formats the suite's real
// templates write (Qwen2.5/Qwen3/Hermes `<tool_call>`, Llama 3.2's bare JSON with "parameters",
// Phi-4-mini's `<|tool_call|>`, Schema.md's documented one): every text the grammar lets through
// that begins like a call reads back, in that format, as one call of a declared tool with
// arguments valid against its parameters; every other text holds no call.
import DataSchema
import Foundation
import Guidance
import ModelAssets
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
         ("phi4mini", try callFormat("phi4mini_llamacpp.jinja", [("eos_token", "<|endoftext|>")]))]
    }

    func testWhatTheGrammarLetsThroughReadsBackAsACall() throws {
        let weather = try schema(#"{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}"#)
        let anything: JSONSchema? = nil
        let tools: [(name: String, parameters: JSONSchema?)] = [("get_weather", weather), ("note\"s", anything)]
        let vocabulary = TokenVocabulary.synthetic(size: 3000, seed: 7)
        for (label, format) in try Self.formats() {
            var calls = 0, texts = 0
            // a call (tool_choice required), then a call or text (auto)
            for allowText in [false, true] {
                let grammar = try Grammar.toolCall(tools, allowText: allowText, format: format)
                let walker = Walker(TokenConstraint(grammar: grammar, vocabulary: vocabulary))
                for w in 0..<40 {
                    let result = try walker.walk(seed: UInt64(w), maxSteps: 200, closingBias: [0.3, 0.6, 0.9][w % 3], useForced: w % 2 == 0)
                    guard result.stopped, result.complete, let text = String(validating: result.bytes, as: UTF8.self) else { continue }
                    if text.first == format.lead {
                        let call = try XCTUnwrap(format.readCall(text), "\(label) walk \(w): \(text.debugDescription)")
                        let tool = try XCTUnwrap(tools.first { $0.name == call.name }, "\(label): \(call.name)")
                        if let p = tool.parameters { XCTAssertEqual(p.validate(call.arguments).map(\.description), [], "\(label): \(text)") }
                        XCTAssertTrue(text.hasPrefix(format.opening), "\(label): \(text.debugDescription)")
                        calls += 1
                    } else {
                        XCTAssertTrue(allowText, "\(label): a required call's grammar let text through: \(text.debugDescription)")
                        XCTAssertEqual(format.parse(text).calls.count, 0, "\(label): text \(text.debugDescription) holds a call")
                        texts += 1
                    }
                }
            }
            print("\(label): \(calls) calls and \(texts) texts read back")
            XCTAssertGreaterThan(calls, 10, label)
            XCTAssertGreaterThan(texts, 5, label)
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
}
