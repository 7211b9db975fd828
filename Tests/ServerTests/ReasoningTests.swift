// A thinking model's reply through the OpenAI API (issue 38 item 3): the thinking between the
// template's markers is handed out as `reasoning_content` (streamed deltas, the whole message)
// and the rest as `content`, whatever the token boundaries; reasoning given back renders as
// transformers renders it (the conformance fixture's Qwen3 case) and is refused with a 400 for a
// template that never reads it. The tiny model takes Qwen3's real template; its reply is forced
// into a think block by a regex constraint (it is random otherwise).
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import TestSupport
import XCTest

final class ReasoningTests: XCTestCase {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fixtures = repository.appendingPathComponent("Tests/JinjaTests/Fixtures")

    static func template(_ name: String) throws -> String {
        try String(contentsOf: fixtures.appendingPathComponent("templates/" + name), encoding: .utf8)
    }

    /// The conformance case of `template` named `conversation` (made by transformers).
    static func fixtureCase(_ template: String, _ conversation: String) throws -> JSONValue {
        let text = try String(contentsOf: fixtures.appendingPathComponent("chat_template_cases.json"), encoding: .utf8)
        let cases = try XCTUnwrap(try JSONValue.parse(text)["cases"]?.arrayValue)
        return try XCTUnwrap(cases.first { $0["template"]?.stringValue == template && $0["conversation"]?.stringValue == conversation })
    }

    // MARK: the splitter

    /// The split of a whole reply, written independently of the streaming splitter: thinking when
    /// the prompt left a block open or the reply opens one, up to the close marker, newlines next
    /// to the markers dropped.
    static func reference(_ reply: String, startsInside: Bool, disabled: Bool = false) -> (reasoning: String, content: String) {
        let open = "<think>", close = "</think>"
        if disabled { return ("", reply) }
        var body = Substring(reply)
        if !startsInside {
            guard body.hasPrefix(open) else { return ("", reply) }
            body = body.dropFirst(open.count)
        }
        while body.first == "\n" { body = body.dropFirst() }
        guard let r = body.range(of: close) else { return (String(body), "") }
        var thought = body[..<r.lowerBound], answer = body[r.upperBound...]
        while thought.last == "\n" { thought = thought.dropLast() }
        while answer.first == "\n" { answer = answer.dropFirst() }
        return (String(thought), String(answer))
    }

    func testTheSplitterGivesTheSameSplitWhereverTheTextIsCut() throws {
        // prompts as transformers renders them: Qwen3 (the reply may open a block), Qwen3 with
        // enable_thinking false (closed: no thinking), DeepSeek-R1-Distill (left open)
        let qwen = try XCTUnwrap(Self.fixtureCase("qwen3.jinja", "one_turn_prompt")["expected"]?["out"]?.stringValue)
        let disabled = try XCTUnwrap(Self.fixtureCase("qwen3.jinja", "thinking_disabled_prompt")["expected"]?["out"]?.stringValue)
        let deepseek = try XCTUnwrap(Self.fixtureCase("deepseek_r1_distill_qwen.jinja", "one_turn_prompt")["expected"]?["out"]?.stringValue)
        XCTAssertEqual(ThinkingSplitter(open: "<think>", close: "</think>", prompt: qwen).state, .start)
        XCTAssertEqual(ThinkingSplitter(open: "<think>", close: "</think>", prompt: disabled).state, .content)
        XCTAssertEqual(ThinkingSplitter(open: "<think>", close: "</think>", prompt: deepseek).state, .reasoningStart)

        let replies = [
            "<think>\n17 * 3: 17 * 3 = 51.\n\nSo 51.\n</think>\n\n51",
            "<think>\nnot </thin yet <think> \n</th still\n</think>\n\nIt is </think> 51\n",
            "<think>\n\n</think>\n\nshort",
            "<think>\ncut before closing\n\n</th",
            "<thin is not a marker",
            "<",
            "plain answer <think>x</think>",
            "17 * 3 = 51\n</think>\n\n51",
            "",
        ]
        for (prompt, inside, off) in [(qwen, false, false), (disabled, false, true), (deepseek, true, false)] {
            for reply in replies {
                let expected = Self.reference(reply, startsInside: inside, disabled: off)
                let chars = Array(reply)
                // every cut into three pieces (two cut points), and one character at a time
                var cuts: [[Int]] = [Array(0...chars.count)]
                for i in 0...chars.count { for j in i...chars.count { cuts.append([0, i, j, chars.count]) } }
                for points in cuts {
                    var s = ThinkingSplitter(open: "<think>", close: "</think>", prompt: prompt)
                    var reasoning = "", content = ""
                    for k in 1..<points.count {
                        let (r, c) = s.feed(String(chars[points[k - 1]..<points[k]]), final: false)
                        reasoning += r
                        content += c
                    }
                    let (r, c) = s.feed("", final: true)
                    reasoning += r
                    content += c
                    XCTAssertEqual(reasoning, expected.reasoning, "\(reply.debugDescription) cut at \(points.dropFirst().dropLast())")
                    XCTAssertEqual(content, expected.content, "\(reply.debugDescription) cut at \(points.dropFirst().dropLast())")
                }
            }
        }
    }

    func testTheMarkersComeFromTheTemplate() throws {
        for name in ["qwen3.jinja", "deepseek_r1_distill_qwen.jinja"] {
            let m = ChatTemplateSource(body: .jinja(try Self.template(name)), origin: name).thinkingMarkers
            XCTAssertEqual(m?.open, "<think>", name)
            XCTAssertEqual(m?.close, "</think>", name)
        }
        for name in ["smollm2.jinja", "qwen25.jinja", "llama32.jinja", "mistral_small_31.jinja"] {
            XCTAssertNil(ChatTemplateSource(body: .jinja(try Self.template(name)), origin: name).thinkingMarkers, name)
        }
    }

    func testAKeptSpecialMarkerTokenIsDecoded() throws {
        // GGUF marks Qwen3's <think> user-defined (type 4), which this tokenizer skips as special
        var data = TinyAssets.tokenizer()
        data.tokens.append("<think>")
        data.tokenTypes?.append(4)
        let tokenizer = try BPETokenizer(data: data)
        let think = try XCTUnwrap(tokenizer.tokenId("<think>"))
        var skipping = StreamingDecoder(tokenizer: tokenizer, skipSpecialTokens: true)
        XCTAssertEqual(skipping.feed(think), "")
        skipping.keptTokens = [think]
        XCTAssertEqual(skipping.feed(think), "<think>")
    }

    // MARK: through the service

    /// The tiny model with Qwen3's template (and `kwargs` as --chat-template-kwargs gives them).
    func makeService(_ name: String = #function, template: String = "qwen3.jinja", kwargs: String? = nil) throws -> (OpenAIService, Scheduler) {
        let dir = TinyAssets.tempDir(name)
        var base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, context: 2048), storage: .stored)
        base.template = ChatTemplateSource(body: .jinja(try Self.template(template)), origin: template, kwargsJSON: kwargs)
        let catalog = try AdapterCatalog(base: base, baseID: "tiny", folder: nil, rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 4)
        scheduler.start()
        return (try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 80)), scheduler)
    }

    /// A think block, then an answer: what the forced replies look like.
    static let forced = "<think>\n[a-z]{2,6}( [a-z]{2,6}){1,3}\n</think>\n\n[a-z]{2,6}"

    func request(_ stream: Bool) -> [UInt8] {
        Array(#"{"model": "tiny", "messages": [{"role": "user", "content": "17 * 3?"}], "seed": 5, "temperature": 1, "max_tokens": 80, "stream": \#(stream)}"#.utf8)
    }

    func testAThinkingReplyStreamsReasoningThenContentAndTheWholeReplyCarriesBoth() async throws {
        let (service, scheduler) = try makeService()
        defer { scheduler.shutdown() }
        let words = try Regex("^[a-z]{2,6}( [a-z]{2,6}){1,3}$"), word = try Regex("^[a-z]{2,6}$")

        guard case .json(let whole) = try await service.chat(try ChatRequest(OpenAIService.parse(request(false))), forcing: try service.constraints.regex(Self.forced)) else {
            return XCTFail("expected a JSON reply")
        }
        let message = try XCTUnwrap(whole["choices"]?.arrayValue?.first?["message"])
        let reasoning = try XCTUnwrap(message["reasoning_content"]?.stringValue)
        let content = try XCTUnwrap(message["content"]?.stringValue)
        XCTAssertNotNil(reasoning.wholeMatch(of: words), reasoning.debugDescription)
        XCTAssertNotNil(content.wholeMatch(of: word), content.debugDescription)

        guard case .stream(let s) = try await service.chat(try ChatRequest(OpenAIService.parse(request(true))), forcing: try service.constraints.regex(Self.forced)) else {
            return XCTFail("expected a stream")
        }
        var streamedReasoning = "", streamedContent = "", order: [String] = []
        while let event = await s.next() {
            let data = String(event.dropFirst(6).dropLast(2))
            if data == "[DONE]" { break }
            guard let delta = try JSONValue.parse(data)["choices"]?.arrayValue?.first?["delta"] else { continue }
            if let r = delta["reasoning_content"]?.stringValue { streamedReasoning += r; order.append("reasoning") }
            if let c = delta["content"]?.stringValue { streamedContent += c; order.append("content") }
        }
        // the same seed: the same reply, in the same two parts, thinking first
        XCTAssertEqual(streamedReasoning, reasoning)
        XCTAssertEqual(streamedContent, content)
        XCTAssertEqual(order.first, "reasoning")
        XCTAssertEqual(order.last, "content")
        XCTAssertFalse(order.drop { $0 == "reasoning" }.contains("reasoning"), "\(order)")
    }

    func testAPromptThatOpensTheBlockMakesTheReplyThinkingFromItsStart() async throws {
        // DeepSeek-R1-Distill's generation prompt ends in `<think>\n`: the model writes no open marker
        let (service, scheduler) = try makeService(template: "deepseek_r1_distill_qwen.jinja")
        defer { scheduler.shutdown() }
        let forced = try service.constraints.regex("[a-z]{2,6}( [a-z]{2,6}){1,3}\n</think>\n\n[a-z]{2,6}")
        guard case .stream(let s) = try await service.chat(try ChatRequest(OpenAIService.parse(request(true))), forcing: forced) else {
            return XCTFail("expected a stream")
        }
        var reasoning = "", content = ""
        while let event = await s.next() {
            let data = String(event.dropFirst(6).dropLast(2))
            if data == "[DONE]" { break }
            guard let delta = try JSONValue.parse(data)["choices"]?.arrayValue?.first?["delta"] else { continue }
            reasoning += delta["reasoning_content"]?.stringValue ?? ""
            content += delta["content"]?.stringValue ?? ""
        }
        XCTAssertNotNil(reasoning.wholeMatch(of: try Regex("^[a-z]{2,6}( [a-z]{2,6}){1,3}$")), reasoning.debugDescription)
        XCTAssertNotNil(content.wholeMatch(of: try Regex("^[a-z]{2,6}$")), content.debugDescription)
    }

    func testThinkingSwitchedOffGivesNoReasoningPart() async throws {
        let (service, scheduler) = try makeService(kwargs: #"{"enable_thinking": false}"#)
        defer { scheduler.shutdown() }
        guard case .json(let whole) = try await service.chat(try ChatRequest(OpenAIService.parse(request(false))), forcing: try service.constraints.regex("[a-z]{2,6}")) else {
            return XCTFail("expected a JSON reply")
        }
        let message = try XCTUnwrap(whole["choices"]?.arrayValue?.first?["message"])
        XCTAssertNil(message["reasoning_content"])
        XCTAssertNotNil(message["content"]?.stringValue?.wholeMatch(of: try Regex("^[a-z]{2,6}$")))
    }

    func testReasoningGivenBackRendersAsTransformersRendersIt() async throws {
        let (service, scheduler) = try makeService()
        defer { scheduler.shutdown() }
        // transformers' rendering of the conversation (conformance suite), then Qwen3's generation prompt
        let fixture = try Self.fixtureCase("qwen3.jinja", "reasoning_content_field")
        let expected = try XCTUnwrap(fixture["expected"]?["out"]?.stringValue) + "<|im_start|>assistant\n"
        let messages = try XCTUnwrap(fixture["messages"])
        let body = #"{"model": "tiny", "max_tokens": 2, "messages": \#(messages.compactText)}"#
        let request = try ChatRequest(OpenAIService.parse(Array(body.utf8)))
        XCTAssertEqual(request.messages.last?.reasoning, "17 * 3 = 51")
        let prompt = try service.encoder.encodePrompt(request.messages)
        XCTAssertEqual(service.tokenizer.decode(prompt), expected)
        // and the request is served
        guard case .json(let reply) = try await service.chat(request, forcing: nil) else { return XCTFail("expected a JSON reply") }
        XCTAssertEqual(reply["usage"]?["prompt_tokens"], .number(JSONNumber(prompt.count)))
    }

    func testReasoningGivenBackToATemplateWithoutThinkingIsRefusedByName() async throws {
        let (service, scheduler) = try makeService(template: "qwen25.jinja")
        defer { scheduler.shutdown() }
        let body = #"{"model": "tiny", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}, {"role": "user", "content": "and?"}]}"#
        do {
            _ = try await service.chatCompletions(Array(body.utf8))
            XCTFail("accepted reasoning for a template that never reads it")
        } catch {
            XCTAssertEqual(error.status, 400)
            XCTAssertEqual(error.param, "messages[1].reasoning_content")
            XCTAssertEqual(error.code, "unsupported_parameter")
        }
        XCTAssertEqual(scheduler.status.queued + scheduler.status.active, 0, "a refused request takes no slot")
    }
}
