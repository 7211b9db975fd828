// The notes about tools a tool prints when loading a chat template (issue 35 item 3): only when
// the data it reads has tools or tool calls. `adapter-data render` with SmolLM2's template (which
// never reads tools) on the extraction example (no tools) prints the template's origin alone; on
// the tool-calling example it adds the "never reads `tools`" note; with Llama 3.2's template, the
// note names Llama 3's own call format. Runs the built executable, as HelpTextTests does.
import Foundation
import XCTest

final class ToolNotesTests: XCTestCase {
    func notes(_ data: String, template: String) throws -> [String] {
        let root = HelpTextTests.root
        let process = Process()
        process.executableURL = try HelpTextTests.productsDirectory().appendingPathComponent("adapter-data")
        process.arguments = ["render", root.appendingPathComponent("examples/" + data).path,
                             "--chat-template", root.appendingPathComponent("Tests/JinjaTests/Fixtures/templates/" + template).path]
        let err = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = err
        try process.run()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, text)
        return text.split(separator: "\n").map(String.init).filter { $0.hasPrefix("note: ") }
    }

    func testToolNotesOnlyWhenTheDataHasTools() throws {
        let plain = try notes("extraction/train.jsonl", template: "smollm2.jinja")
        XCTAssertEqual(plain.count, 1, "\(plain)")
        XCTAssertTrue(plain[0].contains("prompts are rendered with the chat template from"), plain[0])
        let tools = try notes("tool-calling/train.jsonl", template: "smollm2.jinja")
        XCTAssertEqual(tools.count, 2, "\(tools)")
        XCTAssertTrue(tools[1].contains("never reads `tools`"), tools[1])
        let llama = try notes("tool-calling/train.jsonl", template: "llama32.jinja")
        XCTAssertTrue(llama.contains { $0.contains(#"\"parameters\": ARGS"#) }, "\(llama)")
        XCTAssertFalse(try notes("extraction/train.jsonl", template: "llama32.jinja").contains { $0.contains("ARGS") })
    }
}
