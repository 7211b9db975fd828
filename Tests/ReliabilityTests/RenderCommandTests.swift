// `adapter-data render` as a user runs it: records rendered by a real template give transformers'
// text (the conformance fixture's expected renderings), a record the template refuses gives its
// message and the exit status 1, a plain-text record prints as it is, --date fixes strftime_now,
// and --json gives one object per record line.
import Foundation
import TestSupport
import XCTest

final class RenderCommandTests: XCTestCase {
    static let jinjaFixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("JinjaTests/Fixtures")

    /// The conformance case (messages, expected text; "" where transformers raised) of `template` / `conversation`.
    func fixture(_ template: String, _ conversation: String) throws -> (messages: Any, text: String) {
        let root = try JSONSerialization.jsonObject(with: Data(contentsOf: Self.jinjaFixtures.appendingPathComponent("chat_template_cases.json"))) as! [String: Any]
        let c = (root["cases"] as! [[String: Any]]).first { $0["template"] as? String == template && $0["conversation"] as? String == conversation }!
        return (c["messages"]!, (c["expected"] as! [String: Any])["out"] as? String ?? "")
    }

    func line(_ object: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    func testRenderPrintsWhatTransformersRendersAndFailsOnRefusals() throws {
        let tool = try ChildProcess.tool("adapter-data")
        let dir = TinyAssets.tempDir()
        let (training, expected) = try fixture("gemma2.jinja", "training")
        let (withSystem, _) = try fixture("gemma2.jinja", "training_with_system")
        let file = dir + "/records.jsonl"
        try [try line(["messages": training]), try line(["messages": withSystem]), #"{"text": "Once upon a time"}"#,
             #"{"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]}"#]
            .joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let template = Self.jinjaFixtures.appendingPathComponent("templates/gemma2.jinja").path
        let r = ChildProcess.run(tool, ["render", file, "--chat-template", template, "--bos-token", "<bos>", "--eos-token", "<eos>", "--json"],
                                 logPath: dir + "/render.log")
        XCTAssertEqual(r.status, 1, r.output)
        let objects = r.output.split(separator: "\n").filter { $0.hasPrefix("{") }
            .map { try! JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        XCTAssertEqual(objects.count, 4, r.output)
        XCTAssertEqual(objects[0]["text"] as? String, expected)
        XCTAssertEqual(objects[1]["line"] as? Int, 2)
        XCTAssertTrue((objects[1]["error"] as? String ?? "").contains("System role not supported"), "\(objects[1])")
        XCTAssertEqual(objects[2]["text"] as? String, "Once upon a time")
        // A line with two problems is one object holding both.
        XCTAssertEqual(objects[3]["line"] as? Int, 4)
        XCTAssertEqual(objects[3]["error"] as? String, "user turn has empty content (turn 1); assistant turn has empty content and no tool calls (turn 2)")
        XCTAssertTrue(r.output.contains("2 of 4 records could not be rendered"), r.output)
    }

    func testDateFixesStrftimeNowAndTheGenerationPromptEndsTheText() throws {
        let tool = try ChildProcess.tool("adapter-data")
        let dir = TinyAssets.tempDir()
        let (messages, expected) = try fixture("llama32.jinja", "one_turn_prompt")
        let file = dir + "/prompt.jsonl"
        try line(["messages": messages]).write(toFile: file, atomically: true, encoding: .utf8)
        let template = Self.jinjaFixtures.appendingPathComponent("templates/llama32.jinja").path
        let r = ChildProcess.run(tool, ["render", file, "--chat-template", template, "--bos-token", "<|begin_of_text|>",
                                        "--eos-token", "<|eot_id|>", "--date", "2024-07-26", "--add-generation-prompt", "--json"],
                                 logPath: dir + "/render.log")
        XCTAssertEqual(r.status, 0, r.output)
        let object = try JSONSerialization.jsonObject(with: Data(r.output.split(separator: "\n").first { $0.hasPrefix("{") }!.utf8)) as! [String: Any]
        XCTAssertEqual(object["text"] as? String, expected)
        XCTAssertTrue(expected.contains("Today Date: 26 Jul 2024"))
    }
}
