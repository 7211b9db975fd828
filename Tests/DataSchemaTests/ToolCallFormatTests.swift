// Each model's tool-call format, derived from its chat template (issue 35 item 3): the format
// read from every template of the conformance suite, the calls in transformers' renderings of
// assistant tool-call turns (Tests/JinjaTests/Fixtures/chat_template_cases.json) parsed back to
// the calls (and Mistral's ids) they came from, the refusal of Falcon 3's format (OpenAI objects,
// the id before the name) with a message that names the template and what to do, and the tool
// notes printed only with tools.
import DataSchema
import Foundation
import Jinja
import ModelAssets
import XCTest

final class ToolCallFormatTests: XCTestCase {
    /// The special tokens each template's conformance cases were rendered with.
    static func specials(_ template: String) throws -> [(name: String, text: String)] {
        try XCTUnwrap(try ChatFormatTests.cases().first { $0.template == template }).specials
    }

    static func format(_ template: String) throws -> ChatFormat {
        try ChatFormat(source: ChatTemplateSource(body: .jinja(try ChatFormatTests.template(template)), origin: template),
                       specialTokens: try specials(template), date: JinjaDate(year: 2024, month: 7, day: 26))
    }

    typealias Expected = (listOpen: String, opening: String, lead: String, idLead: String?, closing: String, separator: String?, listClose: String)
    static let hermes: Expected = ("", "<tool_call>\n{\"name\": ", ", \"arguments\": ", nil, "}\n</tool_call>", "\n", "")
    /// Mistral v0.3 and Small 3.1: `[TOOL_CALLS] [` + calls joined by `, ` + `]`, each call's id after its arguments.
    static let mistral: Expected = ("[TOOL_CALLS] [", "{\"name\": ", ", \"arguments\": ", ", \"id\": ", "}", ", ", "]")

    /// What each template of the suite writes for a call (read from the templates themselves).
    static let expected: [String: Expected] = [
        "qwen25.jinja": hermes,
        "qwen3.jinja": hermes,
        "hermes3_tool_use.jinja": hermes,
        "llama32.jinja": ("", "{\"name\": ", ", \"parameters\": ", nil, "}", nil, ""),
        "llama33.jinja": ("", "{\"name\": ", ", \"parameters\": ", nil, "}", nil, ""),
        "phi4mini_llamacpp.jinja": ("", "<|tool_call|>{\"name\": ", ", \"arguments\": ", nil, "}<|/tool_call|>", "", ""),
        "mistral_v03.jinja": mistral,
        "mistral_small_31.jinja": mistral,
    ]
    /// Templates whose calls are not one JSON object that begins with the name and arguments (Falcon 3's OpenAI objects).
    static let refused = ["falcon3.jinja"]
    /// Templates that read no tools or write no calls: Schema.md's documented format.
    static let documented = ["smollm2.jinja", "gemma2.jinja", "gemma3_training.jinja", "phi3.jinja", "phi35.jinja",
                             "granite33.jinja", "deepseek_r1_distill_qwen.jinja", "olmo2.jinja", "smollm3.jinja"]

    func testEachTemplatesCallFormatIsReadFromItsRendering() throws {
        let all = try FileManager.default.contentsOfDirectory(atPath: ChatFormatTests.templates.path).filter { $0.hasSuffix(".jinja") }
        XCTAssertEqual(Set(all), Set(Self.expected.keys).union(Self.refused).union(Self.documented), "every template of the suite is covered")
        for (name, e) in Self.expected {
            guard case let .format(f) = try Self.format(name).toolCalls else { XCTFail("\(name): \(try Self.format(name).toolCalls)"); continue }
            XCTAssertEqual(f.listOpen, e.listOpen, name)
            XCTAssertEqual(f.opening, e.opening, name)
            XCTAssertEqual(f.argumentsLead, e.lead, name)
            XCTAssertEqual(f.idLead, e.idLead, name)
            XCTAssertEqual(f.closing, e.closing, name)
            XCTAssertEqual(f.separator, e.separator, name)
            XCTAssertEqual(f.listClose, e.listClose, name)
        }
        for name in Self.documented {
            XCTAssertEqual(try Self.format(name).toolCalls, .format(.documented), name)
        }
        for name in Self.refused {
            guard case let .refused(reason) = try Self.format(name).toolCalls else { XCTFail("\(name) is not refused"); continue }
            XCTAssertTrue(reason.contains("its id"), reason)
        }
    }

    /// The refusal is an error that names the template, what it writes, and what to do.
    func testFalcon3sFormatIsRefusedWithAMessageThatSaysWhatToDo() throws {
        let format = try Self.format("falcon3.jinja")
        XCTAssertThrowsError(try format.toolCallFormat()) { error in
            let message = (error as? DataSchemaError)?.errorDescription ?? "\(error)"
            XCTAssertTrue(message.contains("falcon3.jinja"), message)
            XCTAssertTrue(message.contains("guided tool calls are refused"), message)
            XCTAssertTrue(message.contains("\\\"id\\\": \\\"call00001\\\""), message)
            XCTAssertTrue(message.contains("Falcon 3"), message)
            XCTAssertTrue(message.contains("--chat-template"), message)
        }
        XCTAssertTrue(format.toolNotes.contains { $0.contains("guided tool calls are refused") }, "\(format.toolNotes)")
        XCTAssertFalse(format.notes.contains { $0.contains("tool") }, "\(format.notes)")
    }

    /// Transformers' rendering of an assistant turn that calls tools reads back as those calls:
    /// the turn is what follows the prompt our rendering writes for it (equal to transformers'
    /// by the conformance suite), up to its end-of-turn marker.
    func testRenderedToolCallTurnsParseBackToTheirCalls() throws {
        var checked: [String] = []
        for c in try ChatFormatTests.cases() where c.conversation.hasPrefix("tools_call") || c.conversation == "tools_two_calls" {
            guard let out = c.expected else { continue }  // the template raised
            let format = try Self.format(c.template)
            guard format.readsTools && format.readsToolCalls, case let .format(f) = format.toolCalls else { continue }
            let data = try DataReader.read(bytes: Array(c.record.utf8), file: c.template,
                                           options: ReadOptions(mode: c.addGenerationPrompt ? .prompt : .train, skipInvalid: true))
            guard let sample = data.samples.first else {
                // a prompt that ends with a tool turn is no sample in Schema.md's terms
                print("not a sample: \(c.template)/\(c.conversation): \(data.issues.first?.message ?? "")")
                continue
            }
            let messages = sample.messages
            let i = try XCTUnwrap(messages.firstIndex { !$0.toolCalls.isEmpty })
            let prompt = try format.render(Array(messages[..<i]), addGenerationPrompt: true).text
            var turn: String
            if out.hasPrefix(prompt) {
                turn = String(out.dropFirst(prompt.count))
            } else {
                // Mistral v0.3 writes the system message into the last user turn, which the
                // prompt for the call's turn has and the whole conversation does not: the turn
                // is what follows that user turn's text
                XCTAssertEqual(c.template, "mistral_v03.jinja", "\(c.conversation): the prompt is not where transformers' rendering starts")
                let question = try XCTUnwrap(messages[..<i].last { $0.role == .user }).content
                turn = String(out[try XCTUnwrap(out.range(of: question, options: .backwards)).upperBound...])
            }
            if let end = format.endOfTurnMarkers.compactMap({ turn.range(of: $0)?.lowerBound }).min() { turn = String(turn[..<end]) }
            let parsed = f.parse(turn)
            XCTAssertEqual(parsed.calls.map(\.error), messages[i].toolCalls.map { _ in nil }, "\(c.template)/\(c.conversation): \(turn)")
            XCTAssertEqual(parsed.calls.map(\.name), messages[i].toolCalls.map(\.name), "\(c.template)/\(c.conversation)")
            XCTAssertEqual(parsed.calls.map(\.arguments), messages[i].toolCalls.map(\.arguments), "\(c.template)/\(c.conversation)")
            // Mistral's calls carry the ids the conversation gave them (transformers wrote them; v0.3 requires
            // 9 characters, Small 3.1 writes the last 9)
            XCTAssertEqual(parsed.calls.map(\.id), f.idKey == nil ? messages[i].toolCalls.map { _ in nil } : messages[i].toolCalls.map { $0.id.map { String($0.suffix(9)) } },
                           "\(c.template)/\(c.conversation)")
            // the content before the calls, where the template writes it (Hermes 3 drops it beside calls)
            if turn.contains(messages[i].content) {
                XCTAssertTrue(parsed.content.hasSuffix(messages[i].content), "\(c.template)/\(c.conversation): content \(parsed.content.debugDescription)")
            }
            checked.append("\(c.template)/\(c.conversation)")
        }
        print("tool-call turns parsed back: \(checked.count): \(checked.joined(separator: ", "))")
        // Qwen2.5, Qwen3, Hermes 3, Llama 3.2/3.3 and Phi-4-mini write calls; each has at least its one-call turn
        for name in Self.expected.keys {
            XCTAssertTrue(checked.contains("\(name)/tools_call_content_empty"), "\(name) was not checked")
        }
    }

    /// The text a format writes for a call reads back as that call, names and strings with
    /// quotes and non-ASCII included; several calls where the format has a separator.
    func testWrittenCallsReadBack() throws {
        var formats: [ToolCallFormat] = [.documented]
        for name in Self.expected.keys { if case let .format(f) = try Self.format(name).toolCalls { formats.append(f) } }
        let args: [JSONValue] = [
            try JSONValue.parse(#"{"city": "Oslo \"Ø\" }{", "n": [1, {"x": null}], "unit": "c"}"#),
            .object([]),
        ]
        for f in formats {
            for (name, a) in zip(["get_weather", "we\"ird"], args) {
                let text = f.text(name: name, arguments: a, id: "Ab3dE6gH9")
                let read = try XCTUnwrap(f.readCalls(text), "\(f.example): \(text)")
                XCTAssertEqual(read.map(\.name), [name])
                XCTAssertEqual(read.map(\.arguments), [a])
                XCTAssertEqual(read.map(\.id), [f.idKey == nil ? nil : "Ab3dE6gH9"], f.example)
                XCTAssertTrue(f.startsCall(text))
            }
            let calls = [ToolCall(id: "a1b2c3d4e", name: "a", arguments: args[0]), ToolCall(id: "f5g6h7i8j", name: "b", arguments: args[1])]
            // text before the calls is their content (Llama 3's bare JSON is a call only when the reply opens with it)
            let content = f.replyOpening.hasPrefix("{") ? "" : "Checking."
            let parsed = f.parse(content + " " + f.text(calls))
            XCTAssertEqual(parsed.content, content, f.example)
            XCTAssertEqual(parsed.calls.map(\.name), f.separator == nil ? ["a"] : ["a", "b"], f.example)
            XCTAssertEqual(parsed.calls.map(\.id), f.idKey == nil ? parsed.calls.map { _ in nil } : ["a1b2c3d4e", "f5g6h7i8j"], f.example)
            XCTAssertEqual(parsed.calls.compactMap(\.error), [], f.example)
            if f.idKey != nil {
                // an id that is not 9 letters and digits is a malformed call; a call without one reads with no id
                for bad in ["abc", "abcdefghij", "abcd-fghi"] {
                    let wrong = f.parse(f.text(name: "a", arguments: args[1], id: bad))
                    XCTAssertNotNil(wrong.calls.first?.error, "\(bad): \(wrong)")
                }
                let none = f.parse(f.listOpen + #"{"name": "a", "arguments": {}}"# + f.listClose)
                XCTAssertEqual(none.calls, [ToolCallFormat.ParsedCall(name: "a", arguments: .object([]))])
            }
            // text that is no call stays content; a cut call is a malformed one, never dropped
            XCTAssertEqual(f.parse("It is 5 C.").calls.count, 0)
            let cut = f.parse(String(f.text(name: "a", arguments: args[0]).dropLast(3)))
            XCTAssertEqual(cut.calls.count, 1, f.example)
            XCTAssertNotNil(cut.calls.first?.error, f.example)
        }
    }

    /// The notes about tools are apart from the others: printed only when the data has tools.
    func testToolNotesAreSeparate() throws {
        let smol = try Self.format("smollm2.jinja")
        XCTAssertTrue(smol.toolNotes.contains { $0.contains("never reads `tools`") }, "\(smol.toolNotes)")
        XCTAssertFalse(smol.notes.contains { $0.contains("never reads") }, "\(smol.notes)")
        let llama = try Self.format("llama32.jinja")
        let note = try XCTUnwrap(llama.toolNotes.first { $0.contains("own format") }, "\(llama.toolNotes)")
        XCTAssertTrue(note.contains(#"{\"name\": NAME, \"parameters\": ARGS}"#), note)
        XCTAssertEqual(try Self.format("qwen25.jinja").toolNotes.count, 1, "Qwen2.5 spaces its JSON: its own format is noted")
        XCTAssertEqual(try Self.format("granite33.jinja").toolNotes.count, 1, "Granite reads tools, not tool_calls")
    }
}
