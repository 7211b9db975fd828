// The model's chat template in DataSchema: SmolLM2's own template renders every example data set
// exactly as the built-in ChatML code did (same text, same loss mask, same prompts), so the
// examples keep their numbers; data records through ChatFormat reach transformers' renderings of
// the conformance suite; the loss mask located in every real template trains exactly the assistant
// turns up to their end-of-turn marker; refusals carry the template's message and the line.
import DataSchema
import Foundation
import Jinja
import ModelAssets
import XCTest

final class ChatFormatTests: XCTestCase {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let templates = repository.appendingPathComponent("Tests/JinjaTests/Fixtures/templates")

    static func template(_ name: String) throws -> String {
        try String(contentsOf: templates.appendingPathComponent(name), encoding: .utf8)
    }

    static let smolSpecials: [(name: String, text: String)] = [("bos_token", "<|im_start|>"), ("eos_token", "<|im_end|>"), ("pad_token", "<|im_end|>")]

    func testSmolLM2TemplateRendersTheExamplesAsTheChatMLCode() throws {
        let format = try ChatFormat(source: .jinja(try Self.template("smollm2.jinja")), specialTokens: Self.smolSpecials)
        XCTAssertFalse(format.readsTools, "SmolLM2's template never reads tools")
        XCTAssertTrue(format.toolNotes.contains { $0.contains("never reads `tools`") })
        let code = CodeTemplateRenderer(ChatTemplate.smolLM2)
        var samples = 0, prompts = 0
        for (file, mode) in [("extraction/train.jsonl", DataMode.train), ("extraction/eval.jsonl", .train), ("extraction/prompts.jsonl", .prompt),
                             ("house-style/train.jsonl", .train), ("tool-calling/train.jsonl", .train), ("tool-calling/eval.jsonl", .train)] {
            let path = Self.repository.appendingPathComponent("examples/" + file).path
            let data = try DataReader.read(path: path, options: ReadOptions(mode: mode))
            XCTAssertTrue(data.issues.isEmpty, file)
            for sample in data.samples {
                if mode == .train {
                    XCTAssertEqual(try format.trainingSequences(sample.messages), code.trainingSequences(sample.messages), "\(file):\(sample.line)")
                    samples += 1
                }
                // The prompt of every conversation up to its last user turn.
                if let u = sample.messages.lastIndex(where: { $0.role == .user }) {
                    let prefix = Array(sample.messages[...u])
                    XCTAssertEqual(try format.promptText(prefix), code.promptText(prefix), "\(file):\(sample.line)")
                    prompts += 1
                }
            }
        }
        XCTAssertGreaterThan(samples, 2000)
        XCTAssertGreaterThan(prompts, 2000)
    }

    /// The conformance cases of Tests/JinjaTests (transformers' renderings) as data records.
    struct Case {
        var template: String
        var conversation: String
        var record: String
        var addGenerationPrompt: Bool
        var specials: [(name: String, text: String)]
        var kwargs: String?
        var expected: String?
        var hasTools: Bool
    }

    static func cases() throws -> [Case] {
        let url = repository.appendingPathComponent("Tests/JinjaTests/Fixtures/chat_template_cases.json")
        // DataSchema's own JSON keeps key order, which tojson output shows.
        let root = try JSONValue.parse(String(decoding: try Data(contentsOf: url), as: UTF8.self), context: "chat_template_cases.json")
        return (root["cases"]?.arrayValue ?? []).map { c in
            var record = "{\"messages\": " + c["messages"]!.compactText
            let tools = c["tools"].flatMap { $0.arrayValue == nil ? nil : $0 }
            if let tools { record += ", \"tools\": " + tools.compactText }
            record += "}"
            var specials: [(name: String, text: String)] = []
            var extra: [String] = []
            for m in c["kwargs"]?.objectMembers ?? [] {
                if m.key.hasSuffix("_token"), let text = m.value.stringValue { specials.append((m.key, text)) } else {
                    extra.append(JSONValue.string(m.key).compactText + ":" + m.value.compactText)
                }
            }
            return Case(template: c["template"]!.stringValue!, conversation: c["conversation"]!.stringValue!, record: record,
                        addGenerationPrompt: c["add_generation_prompt"] == .bool(true), specials: specials,
                        kwargs: extra.isEmpty ? nil : "{" + extra.joined(separator: ",") + "}",
                        expected: c["expected"]?["out"]?.stringValue, hasTools: tools != nil)
        }
    }

    func testRecordsRenderAsTransformersThroughChatFormat() throws {
        var compared = 0, skipped: [String] = []
        for c in try Self.cases() {
            guard let expected = c.expected else { continue }
            let source = ChatTemplateSource(body: .jinja(try Self.template(c.template)), origin: c.template, kwargsJSON: c.kwargs)
            let format = try ChatFormat(source: source, specialTokens: c.specials, date: JinjaDate(year: 2024, month: 7, day: 26, hour: 9, minute: 5, second: 3))
            // The documented exception: tools for a template that never reads them (or their calls).
            if c.hasTools && !(format.readsTools && format.readsToolCalls) { continue }
            let data = try DataReader.read(bytes: Array(c.record.utf8), file: c.template,
                                           options: ReadOptions(mode: c.addGenerationPrompt ? .prompt : .train, skipInvalid: true))
            guard let sample = data.samples.first else {
                skipped.append("\(c.template)/\(c.conversation): \(data.issues.first?.message ?? "not a valid sample")")
                continue
            }
            let text = try format.render(sample.messages, addGenerationPrompt: c.addGenerationPrompt).text
            XCTAssertEqual(text, expected, "\(c.template) / \(c.conversation)")
            compared += 1
        }
        // Conversations the schema itself refuses (two user turns in a row; a prompt that ends with a
        // tool turn) are transformers-only cases.
        print("ChatFormat conformance: \(compared) cases compared; not valid samples in Schema.md's terms, so not compared: \(skipped.count)")
        for s in skipped { print("  \(s)") }
        XCTAssertGreaterThanOrEqual(compared, 120)
        XCTAssertTrue(skipped.allSatisfy { $0.contains("user turn follows another user turn") || $0.contains("the last turn is tool") }, "\(skipped)")
    }
}

extension ChatFormatTests {
    /// The loss mask on every real template: for each training conversation transformers
    /// renders, the trained text is exactly the assistant turns — each one contiguous region that
    /// holds that turn's content (or its calls) and ends with the template's end-of-turn marker,
    /// never a user or system turn's text — and the tokens marked for the loss decode to exactly
    /// that text (SmolLM2's real tokenizer when ADAPTER_BASE_MODEL is set, else the byte tokenizer).
    func testLossMaskTrainsExactlyTheAssistantTurnsOfEveryTemplate() throws {
        var tokenizer: any TextTokenizer = ByteTokenizer()
        if let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) {
            tokenizer = try BPETokenizer(data: try TokenizerData(gguf: try GGUFFile(path: path)))
        } else {
            print("ADAPTER_BASE_MODEL not set: token-level checks use the byte tokenizer")
        }
        var checked: Set<String> = [], perTurn = 0, regions = 0, refused: [String] = []
        for c in try Self.cases() where !c.addGenerationPrompt && c.expected != nil {
            let source = ChatTemplateSource(body: .jinja(try Self.template(c.template)), origin: c.template, kwargsJSON: c.kwargs)
            let format = try ChatFormat(source: source, specialTokens: c.specials, date: JinjaDate(year: 2024, month: 7, day: 26))
            let data = try DataReader.read(bytes: Array(c.record.utf8), file: c.template, options: ReadOptions(mode: .train, skipInvalid: true))
            guard let sample = data.samples.first else { continue }
            let name = "\(c.template) / \(c.conversation)"
            let sequences: [[TemplateSegment]]
            do { sequences = try format.trainingSequences(sample.messages) } catch {
                // A refusal must be the located-turn one (never a wrong mask), and is listed below.
                XCTAssertTrue("\(error)".contains("cannot locate assistant turn"), "\(name): \(error)")
                refused.append(name)
                continue
            }
            checked.insert(c.template)
            let assistants = sample.messages.filter { $0.role == .assistant }
            let others = sample.messages.filter { $0.role == .user || ($0.role == .system && !$0.content.isEmpty) }
            let trainedRegions = sequences.flatMap { $0.filter(\.isTarget).map(\.text) }
            if sequences.count == 1 {
                let full = try format.render(sample.messages, addGenerationPrompt: false).text
                XCTAssertEqual(sequences[0].map(\.text).joined(), full, "\(name): the segments are the rendering")
            } else {
                perTurn += 1
            }
            XCTAssertEqual(trainedRegions.count, assistants.count, "\(name): one trained region per assistant turn")
            for (region, turn) in zip(trainedRegions, assistants) {
                regions += 1
                let body = region.trimmingCharacters(in: .whitespacesAndNewlines)
                XCTAssertTrue(format.endOfTurnMarkers.contains { body.hasSuffix($0) }, "\(name): \(region.debugDescription) does not end its turn")
                let content = turn.content.trimmingCharacters(in: .whitespacesAndNewlines)
                let shown = content.contains("</think>") ? String(content.split(separator: "</think>").last ?? "").trimmingCharacters(in: .whitespacesAndNewlines) : content
                // (A template may leave content out: Mistral Small writes only the calls of a turn that has both.)
                let rendered = try format.render(sample.messages, addGenerationPrompt: false).text
                XCTAssertTrue(shown.isEmpty || !rendered.contains(shown) || region.contains(shown), "\(name): \(region.debugDescription) lacks the turn's content")
                for call in turn.toolCalls { XCTAssertTrue(region.contains(call.name), "\(name): \(region.debugDescription) lacks the call") }
                for other in others where !other.content.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                    XCTAssertFalse(region.contains(other.content.trimmingCharacters(in: .whitespacesAndNewlines)), "\(name): trains a \(other.role) turn")
                }
            }
            // Tokens: what the loss covers decodes to exactly the trained text.
            let encoder = TrainingEncoder(tokenizer: tokenizer, renderer: format, maxSequenceLength: 1 << 20)
            let encoded = try encoder.encodeAll(sample.messages)
            XCTAssertEqual(encoded.count, sequences.count)
            let trainedTokens = encoded.flatMap { e in zip(e.tokens, e.isTarget).filter(\.1).map(\.0) }
            XCTAssertEqual(tokenizer.decode(trainedTokens), trainedRegions.joined(), "\(name): trained tokens")
        }
        print("loss mask: \(regions) assistant turns checked over \(checked.count) templates; refused (turn not locatable): \(refused.joined(separator: ", "))")
        XCTAssertGreaterThanOrEqual(checked.count, 14, "templates checked: \(checked.sorted())")
        // The refusals are the templates whose earlier turns change once a later turn follows.
        let mayRefuse = ["deepseek", "falcon3", "hermes3", "mistral_v03"]
        XCTAssertTrue(refused.allSatisfy { name in mayRefuse.contains { name.hasPrefix($0) } }, "\(refused)")
        XCTAssertGreaterThan(perTurn, 0, "Qwen3's earlier thinking turns train one sequence per turn")
        XCTAssertGreaterThan(regions, 60)
    }

    func testATemplateThatRefusesNamesItsMessageAndTheLine() throws {
        let format = try ChatFormat(source: .jinja(try Self.template("gemma2.jinja")), specialTokens: [("bos_token", "<bos>"), ("eos_token", "<eos>")])
        let text = #"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"# + "\n"
            + #"{"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"#
        let data = try DataReader.read(bytes: Array(text.utf8), file: "train.jsonl", options: ReadOptions(mode: .train))
        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), renderer: format, maxSequenceLength: 256)
        XCTAssertThrowsError(try encoder.encode(data)) { error in
            let description = (error as? DataSchemaError)?.errorDescription ?? ""
            XCTAssertTrue(description.contains("train.jsonl:2: chat template: the template refused the conversation: System role not supported (template line 1, column"), description)
        }
        let kept = try encoder.encode(data, skipInvalid: true)
        XCTAssertEqual(kept.examples.count, 1)
        XCTAssertEqual(kept.summary.rejectedByKind[.chatTemplate], 1)
    }

    func testRecordToolsReachTheTemplateAsTools() throws {
        let format = try ChatFormat(source: .jinja(try Self.template("qwen25.jinja")), specialTokens: [("eos_token", "<|im_end|>")])
        let record = #"{"messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]}"#
        let sample = try XCTUnwrap(try DataReader.read(bytes: Array(record.utf8), file: "p.jsonl", options: ReadOptions(mode: .prompt)).samples.first)
        XCTAssertEqual(sample.messages.count, 2, "an empty system turn holds the record's tools")
        let text = try format.promptText(sample.messages)
        XCTAssertTrue(text.hasPrefix("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools"), text)
        XCTAssertTrue(text.contains(#"{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}"#), text)
        XCTAssertTrue(text.hasSuffix("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"), text)
        // Both a record's and a system turn's tools: refused.
        let both = #"{"messages": [{"role": "system", "content": "s", "tools": [{"type": "function", "function": {"name": "a"}}]}, {"role": "user", "content": "x"}], "tools": []}"#
        let issues = try DataReader.read(bytes: Array(both.utf8), file: "p.jsonl", options: ReadOptions(mode: .prompt, skipInvalid: true)).issues
        XCTAssertEqual(issues.first?.message, "tools are given both in the record's \"tools\" and on the system turn; give them once")
    }
}

extension ChatFormatTests {
    func testTextRecordsTrainEveryTokenWithoutATemplate() throws {
        let text = #"{"text": "Once upon a time"}"# + "\n" + #"{"text": 3}"# + "\n" + #"{"text": "x", "extra": 1}"#
        let data = try DataReader.read(bytes: Array(text.utf8), file: "t.jsonl", options: ReadOptions(mode: .train, skipInvalid: true))
        XCTAssertEqual(data.samples.count, 1)
        XCTAssertEqual(data.issues.map(\.message), ["\"text\" must be a string, got number",
                                                    "unknown key \"extra\" in a text sample; allowed keys are \"text\", \"metadata\""])
        let format = try ChatFormat(source: .jinja(try Self.template("qwen25.jinja")), specialTokens: [("eos_token", "<|im_end|>")])
        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), renderer: format, maxSequenceLength: 64)
        let encoded = try encoder.encodeAll(data.samples[0].messages)
        XCTAssertEqual(encoded.count, 1)
        XCTAssertEqual(ByteTokenizer().decode(encoded[0].tokens), "Once upon a time")
        XCTAssertTrue(encoded[0].isTarget.allSatisfy { $0 })
        XCTAssertEqual(ByteTokenizer().decode(try encoder.encodePrompt(data.samples[0].messages)), "Once upon a time")
        XCTAssertEqual(try format.render(data.samples[0].messages, addGenerationPrompt: true).text, "Once upon a time")
        // Stats count it as a text record, not as a user turn, and every token as trained.
        let stats = try DataStats.compute(data, encoder: encoder)
        XCTAssertEqual([stats.samples, stats.textSamples, stats.turns, stats.characters], [1, 1, 0, 16])
        XCTAssertEqual(stats.tokens?.targetTokens, 16)
    }

    func testReasoningReachesThinkingTemplatesAndIsWrittenOutForOthers() throws {
        let record = #"{"messages": [{"role": "user", "content": "17 * 3?"}, {"role": "assistant", "content": "51", "reasoning_content": "17 * 3 = 51"}]}"#
        let sample = try XCTUnwrap(try DataReader.read(bytes: Array(record.utf8), file: "r.jsonl", options: ReadOptions()).samples.first)
        XCTAssertEqual(sample.messages[1].reasoning, "17 * 3 = 51")
        let qwen3 = try ChatFormat(source: .jinja(try Self.template("qwen3.jinja")), specialTokens: [("eos_token", "<|im_end|>")])
        XCTAssertTrue(qwen3.readsReasoning)
        XCTAssertEqual(try qwen3.render(sample.messages, addGenerationPrompt: false).text,
                       "<|im_start|>user\n17 * 3?<|im_end|>\n<|im_start|>assistant\n<think>\n17 * 3 = 51\n</think>\n\n51<|im_end|>\n")
        let smol = try ChatFormat(source: .jinja(try Self.template("smollm2.jinja")), specialTokens: Self.smolSpecials)
        XCTAssertFalse(smol.readsReasoning)
        XCTAssertTrue(try smol.render(sample.messages, addGenerationPrompt: false).text
            .contains("<|im_start|>assistant\n<think>\n17 * 3 = 51\n</think>\n\n51<|im_end|>"))
        let both = #"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning": "r", "thinking": "t"}]}"#
        XCTAssertEqual(try DataReader.read(bytes: Array(both.utf8), file: "r.jsonl", options: ReadOptions(skipInvalid: true)).issues.first?.message,
                       "turn 2 gives \"reasoning\" and \"thinking\"; they are synonyms, keep one")
    }
}

