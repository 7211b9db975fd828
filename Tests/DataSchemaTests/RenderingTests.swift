// Rendering rules and the loss mask: a multi-turn tool-calling sample rendered to text exactly
// as Schema.md specifies, its mask checked token by token with the byte tokenizer, training
// pairs shifted by one, truncation counted and no-target samples reported.
import DataSchema
import ModelAssets
import XCTest

final class RenderingTests: XCTestCase {
    let toolSample = [
        TestData.weatherTools,
        #"{"role":"user","content":"Weather in Oslo and Bergen?"}"#,
        #"{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Oslo\", \"unit\": \"c\"}"}},{"id":"2","type":"function","function":{"name":"get_weather","arguments":{"city":"Bergen"}}}]}"#,
        #"{"role":"tool","tool_call_id":"1","content":"5C"}"#,
        #"{"role":"tool","tool_call_id":"2","content":"7C"}"#,
        #"{"role":"assistant","content":"Oslo 5C, Bergen 7C."}"#,
        #"{"role":"user","content":"Thanks"}"#,
        #"{"role":"assistant","content":"You're welcome."}"#,
    ]

    var expectedTools: String {
        """
        You help with weather.

        # Tools

        You may call one or more functions to assist with the user query.

        You are provided with function signatures within <tools></tools> XML tags:
        <tools>
        {"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}}}
        </tools>

        For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
        <tool_call>
        {"name": <function-name>, "arguments": <args-json-object>}
        </tool_call>
        """
    }

    func testToolSampleRendersAndMasksTokenByToken() throws {
        let data = try TestData.read("[" + toolSample.joined(separator: ",") + "]", skipInvalid: false)
        let sample = data.samples[0]
        let calls = "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}\n</tool_call>\n"
            + "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Bergen\"}}\n</tool_call>"
        XCTAssertEqual(ChatRendering.chatMessages(sample.messages), [
            ChatMessage(role: .system, content: expectedTools),
            ChatMessage(role: .user, content: "Weather in Oslo and Bergen?"),
            ChatMessage(role: .assistant, content: calls),
            ChatMessage(role: .tool, content: "5C"),
            ChatMessage(role: .tool, content: "7C"),
            ChatMessage(role: .assistant, content: "Oslo 5C, Bergen 7C."),
            ChatMessage(role: .user, content: "Thanks"),
            ChatMessage(role: .assistant, content: "You're welcome."),
        ])

        // The expected text, piece by piece, with whether the loss covers it.
        let pieces: [(String, Bool)] = [
            ("<|im_start|>system\n" + expectedTools + "<|im_end|>\n", false),
            ("<|im_start|>user\nWeather in Oslo and Bergen?<|im_end|>\n<|im_start|>assistant\n", false),
            (calls + "<|im_end|>", true),
            ("\n<|im_start|>tool\n5C<|im_end|>\n<|im_start|>tool\n7C<|im_end|>\n<|im_start|>assistant\n", false),
            ("Oslo 5C, Bergen 7C.<|im_end|>", true),
            ("\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n", false),
            ("You're welcome.<|im_end|>", true),
            ("\n", false),
        ]
        let tokenizer = ByteTokenizer()
        var expectedIds: [Int] = []
        var expectedMask: [Bool] = []
        for (text, target) in pieces {
            let ids = tokenizer.encode(text)
            expectedIds += ids
            expectedMask += Array(repeating: target, count: ids.count)
        }
        let encoder = TrainingEncoder(tokenizer: tokenizer, template: FakeChatML(), maxSequenceLength: 4096)
        let encoded = try encoder.encode(sample.messages)
        XCTAssertEqual(tokenizer.decode(encoded.tokens), pieces.map(\.0).joined())
        XCTAssertEqual(encoded.tokens.count, expectedIds.count)
        for i in 0..<min(encoded.tokens.count, expectedIds.count) {
            XCTAssertEqual(encoded.tokens[i], expectedIds[i], "token \(i)")
            XCTAssertEqual(encoded.isTarget[i], expectedMask[i], "mask of token \(i) (\(tokenizer.decode([encoded.tokens[i]])))")
        }
        // The three end-of-turn tokens after assistant content are targets; no other special is.
        let imEnd = ByteTokenizer.specials["<|im_end|>"]!
        let targetEnds = encoded.tokens.indices.filter { encoded.tokens[$0] == imEnd && encoded.isTarget[$0] }
        XCTAssertEqual(targetEnds.count, 3)
        XCTAssertFalse(zip(encoded.tokens, encoded.isTarget).contains { $0.0 == ByteTokenizer.specials["<|im_start|>"]! && $0.1 })

        let example = TrainingEncoder.example(from: encoded, sampleIndex: 0, line: 1)
        XCTAssertEqual(example.inputs, Array(encoded.tokens.dropLast()))
        XCTAssertEqual(example.targets, Array(encoded.tokens.dropFirst()))
        XCTAssertEqual(example.targetMask, Array(encoded.isTarget.dropFirst()))
        XCTAssertEqual(example.targetTokenCount, pieces.filter(\.1).map { tokenizer.encode($0.0).count }.reduce(0, +))
    }

    func testResponseFormatComesBeforeTheUserContent() throws {
        let line = #"[{"role":"user","content":"Plan a sync.","response_format":{"type":"json_schema","json_schema":{"name":"Event","description":"A meeting","schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}}}},{"role":"assistant","content":"{\"title\":\"Sync\"}"}]"#
        let sample = try TestData.read(line, skipInvalid: false).samples[0]
        XCTAssertEqual(ChatRendering.chatMessages(sample.messages)[0].content, """
            Respond with a JSON value that conforms to the JSON schema "Event" (A meeting). Reply with the JSON only.
            <schema>
            {"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}
            </schema>

            Plan a sync.
            """)
    }

    func testTruncationIsCountedAndNoTargetSamplesAreReported() throws {
        let long = #"[{"role":"user","content":"\#(String(repeating: "x", count: 100))"},{"role":"assistant","content":"ok"}]"#
        let short = #"[{"role":"user","content":"hi"},{"role":"assistant","content":"\#(String(repeating: "y", count: 100))"}]"#
        let data = try TestData.read([long, short].joined(separator: "\n"))
        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), template: FakeChatML(), maxSequenceLength: 40)
        XCTAssertThrowsError(try encoder.encode(data)) { error in
            XCTAssertTrue((error as? DataSchemaError)?.errorDescription?.contains(
                "train.jsonl:1: no assistant token is left after truncating 123 tokens to 41 (maxSequenceLength 40)") ?? false, "\(error)")
        }
        let encoded = try encoder.encode(data, skipInvalid: true)
        XCTAssertEqual(encoded.examples.map(\.line), [2])
        XCTAssertEqual(encoded.examples[0].count, 40)
        XCTAssertEqual(encoded.summary.truncated, 2)
        XCTAssertEqual(encoded.summary.rejected, 1)
        XCTAssertEqual(encoded.summary.accepted, 1)
        XCTAssertEqual(encoded.summary.rejectedByKind, [.noTargetTokens: 1])
        XCTAssertEqual(encoded.issues.map(\.kind), [.noTargetTokens])
    }

    func testPromptEncodingEndsWithTheAssistantHeader() throws {
        let sample = try TestData.read(#"{"prompt":"hi"}"#, mode: .prompt, skipInvalid: false).samples[0]
        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), template: FakeChatML(), maxSequenceLength: 64)
        XCTAssertEqual(ByteTokenizer().decode(try encoder.encodePrompt(sample.messages)),
                       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    }

    func testRealChatTemplatePlugsIn() throws {
        let sample = try TestData.read(#"[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]"#, skipInvalid: false).samples[0]
        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), template: ChatTemplate(kind: .chatml), maxSequenceLength: 64)
        let encoded = try encoder.encode(sample.messages)
        let targets = zip(encoded.tokens, encoded.isTarget).filter(\.1).map(\.0)
        XCTAssertEqual(ByteTokenizer().decode(targets), "yo<|im_end|>")
    }
}
