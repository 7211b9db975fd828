// Reading JSONL: every accepted form, and each kind of bad input reported with its line
// (malformed JSON, wrong types, unknown role, missing content, invalid UTF-8, BOM, CRLF, blank
// lines, empty file, huge and over-limit lines, tool and response_format errors, turn order).
@testable import DataSchema
import ModelAssets
import XCTest

final class ReaderTests: XCTestCase {
    let pair = #"[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]"#

    func testAcceptedForms() throws {
        let text = [
            pair,
            #"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}]}"#,
            #"{"prompt":"2+2?","completion":"4"}"#,
            #"{"prompt":"2+3?","response":"5","metadata":{"source":"x"}}"#,
        ].joined(separator: "\n")
        let data = try TestData.read(text, skipInvalid: false)
        XCTAssertEqual(data.samples.count, 4)
        XCTAssertEqual(data.samples[2].messages.map(\.role), [.user, .assistant])
        XCTAssertEqual(data.samples[3].messages[1].content, "5")
        XCTAssertEqual(data.samples[3].line, 4)
        XCTAssertEqual(data.summary.accepted, 4)
    }

    func testEachBadLineIsReportedWithItsLine() throws {
        let lines = [
            pair,                                                                // 1 ok
            #"[{"role":"user","content":"Hi"},{"role":"assistant","content":"x"}"#, // 2 malformed
            #""just a string""#,                                                 // 3 wrong type
            #"[{"role":"bot","content":"Hi"}]"#,                                 // 4 unknown role
            #"[{"role":"user"},{"role":"assistant","content":"x"}]"#,           // 5 missing content
            #"[{"role":"user","content":5},{"role":"assistant","content":"x"}]"#, // 6 content type
            #"[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"assistant","content":"c"}]"#, // 7
            #"[{"role":"user","content":"a"},{"role":"assistant","content":"  "}]"#, // 8 empty
            #"[{"role":"user","content":"a"},{"role":"system","content":"s"},{"role":"assistant","content":"b"}]"#, // 9
            #"[{"role":"user","content":"a"}]"#,                                 // 10 last is user
            #"[{"role":"user","content":"a"},{"role":"tool","content":"r"},{"role":"assistant","content":"b"}]"#, // 11
            #"[{"role":"user","content":"a","tool_calls":[]},{"role":"assistant","content":"b"}]"#, // 12 misplaced key
            #"{"messages":[],"extra":1}"#,                                       // 13 unknown key
        ]
        let issues = try TestData.issues(lines.joined(separator: "\n"))
        XCTAssertEqual(issues, [
            "train.jsonl:2: malformed JSON at column 67: the line ends inside an array; expected ',' or ']'",
            "train.jsonl:3: a sample is a JSON array of messages, an object with \"messages\", an object with \"prompt\" and \"completion\", or an object with \"text\", got string",
            "train.jsonl:4: unknown role \"bot\" in turn 1; use system, user, assistant or tool",
            "train.jsonl:5: turn 1 (user) has no \"content\"; add the text of the turn",
            "train.jsonl:6: \"content\" of turn 1 must be a string, got number",
            "train.jsonl:7: assistant turn follows another assistant turn (turn 3)",
            "train.jsonl:8: assistant turn has empty content and no tool calls (turn 2)",
            "train.jsonl:9: system turn is not the first turn (turn 2); only the first turn may be system",
            "train.jsonl:9: assistant turn follows the system turn (turn 3); a user turn must come first",
            "train.jsonl:10: the sample has no assistant turn; training samples need at least one reply",
            "train.jsonl:11: tool turn does not follow an assistant turn with tool calls (turn 2)",
            "train.jsonl:12: \"tool_calls\" belongs on an assistant turn, not on a user turn (turn 1)",
            "train.jsonl:13: unknown key \"extra\" in a sample object; allowed keys are \"messages\", \"tools\", \"metadata\"",
        ])
    }

    func testDefaultStopsWithEveryErrorListedAndCapped() throws {
        let bad = #"[{"role":"user","content":"a"}]"#
        let text = ([pair] + Array(repeating: bad, count: 60)).joined(separator: "\n")
        XCTAssertThrowsError(try TestData.read(text, skipInvalid: false)) { error in
            guard case let .invalidData(path, listed, total, rejected, read) = error as? DataSchemaError else {
                return XCTFail("\(error)")
            }
            XCTAssertEqual(path, "train.jsonl")
            XCTAssertEqual(listed.count, 50)
            XCTAssertEqual(total, 60)
            XCTAssertEqual(rejected, 60)
            XCTAssertEqual(read, 61)
            let text = (error as! DataSchemaError).errorDescription!
            XCTAssertTrue(text.hasPrefix("train.jsonl: 60 of 61 samples are invalid"))
            XCTAssertTrue(text.contains("train.jsonl:2: the sample has no assistant turn"))
            XCTAssertTrue(text.hasSuffix("... and 10 more"))
        }
    }

    func testSkipInvalidKeepsTheRestAndCountsWhy() throws {
        let text = [pair, "{", #"[{"role":"x","content":"a"}]"#, pair, #"[{"role":"user","content":"a"}]"#].joined(separator: "\n")
        let data = try TestData.read(text)
        XCTAssertEqual(data.samples.map(\.line), [1, 4])
        XCTAssertEqual(data.summary.samplesRead, 5)
        XCTAssertEqual(data.summary.rejected, 3)
        XCTAssertEqual(data.summary.rejectedByKind, [.malformedJSON: 1, .unknownRole: 1, .missingField: 1])
        XCTAssertEqual(data.summary.description,
                       "read 5 samples: 2 accepted, 3 rejected (1 malformed JSON, 1 unknown role, 1 missing field), 0 truncated")
    }

    func testInvalidUTF8() throws {
        var bytes = Array(pair.utf8) + [0x0A]
        bytes += Array(#"[{"role":"user","content":"a"#.utf8) + [0xC3, 0x28] + Array(#""},{"role":"assistant","content":"b"}]"#.utf8)
        let data = try DataReader.read(bytes: bytes, file: "t.jsonl", options: ReadOptions(skipInvalid: true))
        XCTAssertEqual(data.issues.map(\.description), ["t.jsonl:2: invalid UTF-8 at byte 29 of the line (0xC3); save the file as UTF-8"])
    }

    func testByteOrderMarkCRLFAndBlankLines() throws {
        let bytes: [UInt8] = [0xEF, 0xBB, 0xBF] + Array((pair + "\r\n\r\n   \n" + pair + "\r\n\n").utf8)
        let data = try DataReader.read(bytes: bytes, file: "t.jsonl", options: ReadOptions())
        XCTAssertEqual(data.samples.map(\.line), [1, 4])
        XCTAssertTrue(data.summary.hadByteOrderMark)
        XCTAssertEqual(data.summary.blankLines, 3)
        XCTAssertEqual(data.summary.lines, 5)
        XCTAssertEqual(data.samples[0].messages[1].content, "Hello")
        // A BOM anywhere but the start of line 1 is an error.
        let late = try DataReader.read(bytes: Array((pair + "\n").utf8) + [0xEF, 0xBB, 0xBF] + Array(pair.utf8),
                                       file: "t.jsonl", options: ReadOptions(skipInvalid: true))
        XCTAssertEqual(late.issues.first?.description,
                       "t.jsonl:2: malformed JSON at column 1: unexpected byte-order mark (U+FEFF) where a value was expected")
    }

    func testEmptyFileAndBlankOnlyFile() {
        for (text, blanks) in [("", 0), ("\n  \n", 2)] {
            XCTAssertThrowsError(try TestData.read(text)) { error in
                XCTAssertEqual(error as? DataSchemaError, .noSamples(path: "train.jsonl", blankLines: blanks))
            }
        }
        XCTAssertThrowsError(try DataReader.read(path: "/nonexistent/train.jsonl")) { error in
            XCTAssertEqual(error as? DataSchemaError, .unreadableFile(path: "/nonexistent/train.jsonl", reason: "no such file"))
        }
    }

    func testTenMegabyteLineWorksAndOverLimitLineIsAnError() throws {
        let big = String(repeating: "abcdefghij", count: 1_000_000)
        let line = #"[{"role":"user","content":"\#(big)"},{"role":"assistant","content":"ok"}]"#
        let url = try TestData.temporaryDirectory().appendingPathComponent("big.jsonl")
        try Data((line + "\n" + pair + "\n").utf8).write(to: url)
        let data = try DataReader.read(path: url.path)
        XCTAssertEqual(data.samples.count, 2)
        XCTAssertEqual(data.samples[0].messages[0].content.utf8.count, 10_000_000)

        let limited = try DataReader.read(path: url.path, options: ReadOptions(skipInvalid: true, maxLineBytes: 1 << 20))
        XCTAssertEqual(limited.samples.map(\.line), [2])
        XCTAssertEqual(limited.issues.map(\.description), [
            "\(url.path):1: line is \(line.utf8.count) bytes, more than the 1048576-byte limit (ReadOptions.maxLineBytes); split the sample or raise the limit",
        ])
    }

    func testToolCallErrors() throws {
        let sys = TestData.weatherTools
        func sample(_ calls: String, extra: String = "") -> String {
            #"[\#(sys),{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":\#(calls)}\#(extra)]"#
        }
        let lines = [
            sample(#"[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]"#,
                   extra: #",{"role":"tool","content":"5C"},{"role":"assistant","content":"5C in Oslo."}"#),  // 1 ok
            sample(#"[{"type":"function","function":{"name":"get_time","arguments":{}}}]"#),                      // 2
            sample(#"[{"type":"function","function":{"name":"get_weather","arguments":"{city: Oslo}"}}]"#),       // 3
            sample(#"[{"type":"function","function":{"name":"get_weather","arguments":{"city":3,"unit":"k"}}}]"#), // 4
            sample(#"[{"type":"function","function":{"name":"get_weather","arguments":"[1]"}}]"#),               // 5
            #"[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{}}}]}]"#, // 6
            sample(#"[{"id":"a","function":{"name":"get_weather","arguments":{"city":"A"}}}]"#,
                   extra: #",{"role":"tool","tool_call_id":"b","content":"1"},{"role":"tool","content":"2"},{"role":"assistant","content":"ok"}"#), // 7
            sample(#"[{"function":{"name":"get_weather","arguments":{"city":"A"}}}]"#,
                   extra: #",{"role":"user","content":"and?"},{"role":"assistant","content":"ok"}"#), // 8
        ]
        let issues = try TestData.issues(lines.joined(separator: "\n"))
        XCTAssertEqual(issues, [
            "train.jsonl:2: tool call 1 of turn 3 calls undefined tool \"get_time\" (defined tools: get_weather)",
            "train.jsonl:3: arguments of tool call 1 of turn 3 (\"get_weather\") are not valid JSON: expected a key in double quotes, found 'c' (column 2); got \"{city: Oslo}\"",
            "train.jsonl:4: arguments of tool call 1 of turn 3 do not match the parameters of \"get_weather\": $.city: expected string, got number (and 1 more)",
            "train.jsonl:5: arguments of tool call 1 of turn 3 (\"get_weather\") must be a JSON object, got array",
            "train.jsonl:6: tool call 1 of turn 2 calls undefined tool \"get_weather\" (no tools are defined; add \"tools\" to the system turn)",
            "train.jsonl:7: tool turn answers tool_call_id \"b\", which no call of turn 3 has (turn 4)",
            "train.jsonl:7: tool turn 5 is result 2 for the 1 tool call of turn 3",
            "train.jsonl:8: user turn follows an assistant turn whose tool calls got no tool result (turn 4); add the tool turns",
        ])
    }

    func testResponseFormatReplyMustConform() throws {
        let format = #""response_format":{"type":"json_schema","json_schema":{"name":"Event","schema":{"type":"object","properties":{"title":{"type":"string"},"attendees":{"type":"array","items":{"type":"object","properties":{"email":{"type":"string"}}}}},"required":["title"]}}}"#
        let lines = [
            #"[{"role":"user","content":"Plan it.",\#(format)},{"role":"assistant","content":"{\"title\":\"Sync\",\"attendees\":[{\"email\":\"a@b\"}]}"}]"#,
            #"[{"role":"user","content":"Plan it.",\#(format)},{"role":"assistant","content":"{\"title\":\"Sync\",\"attendees\":[{\"email\":\"a@b\"},{\"email\":5}]}"}]"#,
            #"[{"role":"user","content":"Plan it.",\#(format)},{"role":"assistant","content":"Sure! Here it is."}]"#,
            #"[{"role":"user","content":"Plan it.","response_format":{"type":"json_object"}},{"role":"assistant","content":"{}"}]"#,
            #"[{"role":"user","content":"Plan it."},{"role":"assistant","content":"{}",\#(format)}]"#,
        ]
        let issues = try TestData.issues(lines.joined(separator: "\n"))
        XCTAssertEqual(issues, [
            "train.jsonl:2: assistant reply (turn 2) to the response_format \"Event\" of turn 1 does not match the schema: $.attendees[1].email: expected string, got number",
            "train.jsonl:3: assistant reply (turn 2) to the response_format \"Event\" of turn 1 is not JSON: unexpected 'S' where a value was expected (column 1)",
            "train.jsonl:4: \"response_format\" of turn 1: \"type\" must be \"json_schema\", got \"json_object\"",
            "train.jsonl:5: \"response_format\" belongs on a user turn, not on an assistant turn (turn 2)",
        ])
    }

    func testPromptMode() throws {
        let text = [#"[{"role":"user","content":"a"}]"#, #"{"prompt":"b"}"#, pair].joined(separator: "\n")
        let issues = try TestData.issues(text, mode: .prompt)
        XCTAssertEqual(issues, ["train.jsonl:3: the last turn is assistant (turn 2); prompts end with a user turn"])
    }
}
