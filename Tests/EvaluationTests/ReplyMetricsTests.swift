// The evaluator's scores on hand-made replies: exact match with trimmed ends, JSON validity,
// schema conformance and equality, tool-call parsing per Schema.md's rendering (content, several
// calls, string arguments, malformed and unclosed blocks) and in a model's own format (Llama 3's
// bare JSON; Phi-4-mini's special-token wrapper kept when decoding), name/argument accuracy.
import DataSchema
@testable import Evaluation
import ModelAssets
import TestSupport
import XCTest

final class ReplyMetricsTests: XCTestCase {
    func json(_ text: String) throws -> JSONValue { try JSONValue.parse(text) }

    func eventFormat() throws -> ResponseFormat {
        let schema = try JSONSchema(json(#"{"type":"object","properties":{"title":{"type":"string"},"minutes":{"type":["integer","null"]}},"required":["title","minutes"],"additionalProperties":false}"#))
        return ResponseFormat(name: "Event", schema: schema)
    }

    func testExactMatchTrimsOnlyTheEnds() {
        XCTAssertTrue(ReplyMetrics.exactMatch("  Paris.\n", "Paris."))
        XCTAssertTrue(ReplyMetrics.exactMatch("a\nb", "\na\nb  "))
        XCTAssertFalse(ReplyMetrics.exactMatch("a  b", "a b"))
        XCTAssertFalse(ReplyMetrics.exactMatch("paris.", "Paris."))
    }

    func testJSONValidityConformanceAndEquality() throws {
        let f = try eventFormat()
        let ref = #"{"title":"Lunch","minutes":60}"#
        let same = ReplyMetrics.checkJSON(output: ref, reference: ref, format: f)
        XCTAssertEqual(same, JSONCheck(valid: true, conforms: true, problems: [], equalsReference: true))
        // other spacing, key order and number spelling: still equal as JSON, not an exact match
        let spaced = ReplyMetrics.checkJSON(output: #" { "minutes": 60.0, "title": "Lunch" } "#, reference: ref, format: f)
        XCTAssertTrue(spaced.valid && spaced.conforms && spaced.equalsReference)
        let other = ReplyMetrics.checkJSON(output: #"{"title":"Lunch","minutes":30}"#, reference: ref, format: f)
        XCTAssertTrue(other.conforms)
        XCTAssertFalse(other.equalsReference)
        let bad = ReplyMetrics.checkJSON(output: #"{"title":"Lunch","minutes":"1h","x":1}"#, reference: ref, format: f)
        XCTAssertTrue(bad.valid)
        XCTAssertFalse(bad.conforms)
        XCTAssertEqual(bad.problems.count, 2, "\(bad.problems)")
        XCTAssertTrue(bad.problems.contains { $0.hasPrefix("$.minutes:") })
        let prose = ReplyMetrics.checkJSON(output: "Sure! Here is the event: {\"title\":\"Lunch\"}", reference: ref, format: f)
        XCTAssertFalse(prose.valid)
        XCTAssertFalse(prose.conforms)
        XCTAssertEqual(prose.problems.count, 1)
        let cut = ReplyMetrics.checkJSON(output: #"{"title":"Lunch","minu"#, reference: ref, format: f)
        XCTAssertFalse(cut.valid)
    }

    func testToolCallParsingFollowsTheRenderingRules() throws {
        let text = "Let me check.\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Bergen\\\"}\"}\n</tool_call>"
        let parsed = ReplyMetrics.parseReply(text)
        XCTAssertEqual(parsed.content, "Let me check.")
        XCTAssertEqual(parsed.calls.count, 2)
        XCTAssertEqual(parsed.calls[0], ParsedToolCall(name: "get_weather", arguments: try json(#"{"city":"Oslo","unit":"c"}"#)))
        XCTAssertEqual(parsed.calls[1].arguments, try json(#"{"city":"Bergen"}"#))
        XCTAssertNil(parsed.calls[1].error)

        let plain = ReplyMetrics.parseReply("  It is 5C in Oslo. ")
        XCTAssertEqual(plain, ParsedReply(content: "It is 5C in Oslo.", calls: []))

        let broken = ReplyMetrics.parseReply("<tool_call>\n{name: get_weather}\n</tool_call>\n<tool_call>\n{\"name\":\"set_timer\",\"arguments\":{\"minutes\":5}}")
        XCTAssertEqual(broken.calls.count, 2)
        XCTAssertNotNil(broken.calls[0].error)
        XCTAssertNil(broken.calls[0].name)
        XCTAssertEqual(broken.calls[1].name, "set_timer")
        XCTAssertEqual(broken.calls[1].error, "no closing </tool_call>")

        let noArgs = ReplyMetrics.parseReply("<tool_call>{\"name\":\"f\"}</tool_call>")
        XCTAssertEqual(noArgs.calls.first?.name, "f")
        XCTAssertNotNil(noArgs.calls.first?.error)
        let arrayArgs = ReplyMetrics.parseReply("<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>")
        XCTAssertNotNil(arrayArgs.calls.first?.error)
    }

    func testToolCallAccuracyMatchesByNameThenArgumentsInAnyOrder() throws {
        let reference = [ToolCall(name: "get_weather", arguments: try json(#"{"city":"Oslo","unit":"c"}"#)),
                         ToolCall(name: "convert_currency", arguments: try json(#"{"amount":10,"from":"EUR","to":"USD"}"#))]
        // both calls, swapped order, keys reordered, 10 written as 10.0: all right
        let good = ReplyMetrics.parseReply("<tool_call>\n{\"name\":\"convert_currency\",\"arguments\":{\"to\":\"USD\",\"from\":\"EUR\",\"amount\":10.0}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"unit\":\"c\",\"city\":\"Oslo\"}}\n</tool_call>")
        XCTAssertEqual(ReplyMetrics.checkToolCalls(predicted: good.calls, reference: reference),
                       ToolCallCheck(referenceCalls: 2, predictedCalls: 2, namesCorrect: 2, argumentsCorrect: 2, malformed: 0, unexpected: 0))
        // right names, one wrong argument, plus an extra call
        let partial = ReplyMetrics.parseReply("<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Bergen\",\"unit\":\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"convert_currency\",\"arguments\":{\"amount\":10,\"from\":\"EUR\",\"to\":\"USD\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"set_timer\",\"arguments\":{\"minutes\":3}}\n</tool_call>")
        XCTAssertEqual(ReplyMetrics.checkToolCalls(predicted: partial.calls, reference: reference),
                       ToolCallCheck(referenceCalls: 2, predictedCalls: 3, namesCorrect: 2, argumentsCorrect: 1, malformed: 0, unexpected: 1))
        // no calls at all
        XCTAssertEqual(ReplyMetrics.checkToolCalls(predicted: [], reference: reference),
                       ToolCallCheck(referenceCalls: 2, predictedCalls: 0, namesCorrect: 0, argumentsCorrect: 0, malformed: 0, unexpected: 0))
    }

    func testScoreOfAToolCallingTurnUsesTheRenderedReference() throws {
        let reference = Message(role: .assistant, content: "", toolCalls: [ToolCall(id: "1", name: "set_timer", arguments: try json(#"{"minutes":5}"#))])
        let exact = "<tool_call>\n{\"name\":\"set_timer\",\"arguments\":{\"minutes\":5}}\n</tool_call>"
        let s = ReplyMetrics.score(output: exact + "\n", reference: reference, format: nil)
        XCTAssertTrue(s.exactMatch)
        XCTAssertNil(s.json)
        XCTAssertEqual(s.toolCalls?.argumentsCorrect, 1)
        let spaced = ReplyMetrics.score(output: "<tool_call>{\"name\": \"set_timer\", \"arguments\": {\"minutes\": 5}}</tool_call>", reference: reference, format: nil)
        XCTAssertFalse(spaced.exactMatch)
        XCTAssertEqual(spaced.toolCalls?.argumentsCorrect, 1, "arguments compare as JSON values, not text")
        // a plain answer where none was called: no tool-call check
        let answer = ReplyMetrics.score(output: "Done.", reference: Message(role: .assistant, content: "Done."), format: nil)
        XCTAssertTrue(answer.exactMatch)
        XCTAssertNil(answer.toolCalls)
    }

    func testTargetsPickTheReplyThatAnswersTheResponseFormat() throws {
        let f = try eventFormat()
        let tool = ToolCall(id: "1", name: "f", arguments: try json("{}"))
        let messages = [
            Message(role: .system, content: "s"),
            Message(role: .user, content: "u1", responseFormat: f),
            Message(role: .assistant, content: "", toolCalls: [tool]),
            Message(role: .tool, content: "r"),
            Message(role: .assistant, content: #"{"title":"a","minutes":null}"#),
            Message(role: .user, content: "u2"),
            Message(role: .assistant, content: "plain"),
        ]
        let sample = Sample(messages: messages, index: 0, line: 1)
        let last = Evaluator.targets(of: [sample], turns: .last)
        XCTAssertEqual(last.map(\.turnIndex), [6])
        XCTAssertNil(last[0].format)
        XCTAssertEqual(last[0].prompt.count, 6)
        let all = Evaluator.targets(of: [sample], turns: .all)
        XCTAssertEqual(all.map(\.turnIndex), [2, 4, 6])
        XCTAssertEqual(all.map { $0.format != nil }, [false, true, false])
    }
}

extension ReplyMetricsTests {
    /// A model whose template writes Llama 3's bare JSON (`"parameters"`) is scored on calls in
    /// that format: its reference is written so, and its replies are read so; the documented
    /// `<tool_call>` reading finds no call in the same reply.
    func testToolCallsAreReadInTheModelsOwnFormat() throws {
        let llama = try XCTUnwrap(ToolCallFormat(opening: "{\"name\": ", argumentsLead: ", \"parameters\": ", closing: "}", separator: nil))
        let reference = Message(role: .assistant, content: "", toolCalls: [ToolCall(name: "get_weather", arguments: try json(#"{"city":"Oslo"}"#))])
        XCTAssertEqual(ReplyMetrics.referenceText(reference, format: llama), #"{"name": "get_weather", "parameters": {"city":"Oslo"}}"#)
        let output = #" {"name": "get_weather", "parameters": {"city": "Oslo"}}"#
        let score = ReplyMetrics.score(output: output, reference: reference, format: nil, calls: llama)
        XCTAssertEqual(score.toolCalls?.argumentsCorrect, 1)
        XCTAssertEqual(score.toolCalls?.malformed, 0)
        XCTAssertEqual(ReplyMetrics.score(output: output, reference: reference, format: nil).toolCalls?.predictedCalls, 0)
        // a reply with the other key is a malformed call, and text after the call is named
        let wrongKey = ReplyMetrics.parseReply(#"{"name": "get_weather", "arguments": {}}"#, format: llama)
        XCTAssertEqual(wrongKey.calls.first?.error, "the tool call has no \"parameters\"")
        let trailing = ReplyMetrics.parseReply(#"{"name": "f", "parameters": {}} and more"#, format: llama)
        XCTAssertEqual(trailing.calls.count, 1)
        XCTAssertTrue(trailing.calls.first?.error?.contains("text after the tool call") == true)
        XCTAssertEqual(ReplyMetrics.parseReply("It is 5 C.", format: llama).calls, [])
    }
}

extension ReplyMetricsTests {
    /// A format whose wrapper is special tokens of the vocabulary (Phi-4-mini's `<|tool_call|>`):
    /// the reply keeps them when decoded for scoring, so its call is read; other special tokens
    /// (the end of turn) are still skipped.
    func testAFormatsSpecialTokensSurviveDecoding() throws {
        var data = TinyAssets.tokenizer()
        for t in ["<|tool_call|>", "<|/tool_call|>"] {
            data.tokens.append(t)
            data.tokenTypes?.append(3)
        }
        let tokenizer = try BPETokenizer(data: data)
        let open = try XCTUnwrap(tokenizer.tokenId("<|tool_call|>")), close = try XCTUnwrap(tokenizer.tokenId("<|/tool_call|>"))
        let phi = try XCTUnwrap(ToolCallFormat(opening: "<|tool_call|>{\"name\": ", argumentsLead: ", \"arguments\": ", closing: "}<|/tool_call|>", separator: ""))
        XCTAssertEqual(phi.specialTokens(in: tokenizer), [open, close])
        XCTAssertEqual(ToolCallFormat.documented.specialTokens(in: tokenizer), [])
        let end = try XCTUnwrap(tokenizer.tokenId("<|im_end|>"))
        let tokens = [open] + tokenizer.encode(#"{"name": "f", "arguments": {"a": 1}}"#) + [close, end]
        let text = phi.decodeReply(tokens, tokenizer: tokenizer)
        XCTAssertEqual(text, #"<|tool_call|>{"name": "f", "arguments": {"a": 1}}<|/tool_call|>"#)
        XCTAssertEqual(ReplyMetrics.parseReply(text, format: phi).calls, [ParsedToolCall(name: "f", arguments: try json(#"{"a":1}"#))])
        XCTAssertEqual(ReplyMetrics.parseReply(tokenizer.decode(tokens, skipSpecialTokens: true), format: phi).calls, [], "skipping every special token loses the call")
    }
}
