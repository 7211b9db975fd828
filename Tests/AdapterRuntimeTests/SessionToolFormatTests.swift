// A session's tool calls in the model's own format (issue 35 item 3): the tiny random model
// under Llama 3.2's real template calls a tool in Llama 3's bare JSON (`{"name": ..., "parameters":
// ...}`, the only shape that format's reader accepts), the handler runs with valid arguments and
// the call and its result are recorded; under Mistral v0.3's template the calls carry the
// 9-character ids the model wrote, kept in the transcript so the template (which checks them)
// renders the next turn; a session with tools on Falcon 3's template is refused with a message
// that names the template.
@testable import AdapterRuntime
import DataSchema
import Foundation
import ModelAssets
import TestSupport
import XCTest

final class SessionToolFormatTests: XCTestCase {
    static let templates = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("JinjaTests/Fixtures/templates")

    func model(_ template: String, _ name: String = #function) throws -> LanguageModel {
        let text = try String(contentsOf: Self.templates.appendingPathComponent(template), encoding: .utf8)
        return try LanguageModel(path: try TinyAssets.writeModel(in: TinyAssets.tempDir(name), seed: 1, context: 2048),
                                 chatTemplate: .jinja(text, origin: template))
    }

    static let parameters = #"{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9},"b":{"type":"integer","minimum":0,"maximum":9}},"required":["a","b"],"additionalProperties":false}"#

    func testALlama32SessionCallsToolsInLlamasFormat() async throws {
        let lm = try model("llama32.jinja")
        guard case let .format(format) = lm.chatFormat.toolCalls else { return XCTFail("\(lm.chatFormat.toolCalls)") }
        XCTAssertEqual(format.argumentsKey, "parameters")
        XCTAssertEqual(format.opening, #"{"name": "#)
        let parameters = try JSONSchema(try JSONValue.parse(Self.parameters))
        final class Calls: @unchecked Sendable { var seen: [JSONValue] = []; let lock = NSLock() }
        let calls = Calls()
        let add = Tool(name: "add", description: "adds", parameters: parameters) { args in
            calls.lock.withLock { calls.seen.append(args) }
            return "3"
        }
        let session = LanguageModelSession(model: lm.plain, instructions: "use tools", tools: [add])
        session.maximumToolRounds = 2
        let r = try await session.respond(to: "1+2", options: GenerationOptions(temperature: 1, seed: 5, maximumResponseTokens: 120), toolChoice: .required)
        XCTAssertFalse(calls.seen.isEmpty, "a required call runs the handler")
        for args in calls.seen { XCTAssertEqual(parameters.validate(args), [], "arguments follow the tool's schema: \(args)") }
        XCTAssertFalse(r.content.hasPrefix("{"), "the final reply is text, not a call: \(r.content)")
        let entries = session.transcript.entries
        XCTAssertTrue(entries.contains { if case .toolCall(_, "add", _) = $0 { return true } else { return false } })
        XCTAssertTrue(entries.contains { if case .toolOutput(_, "add", "3") = $0 { return true } else { return false } })
    }

    func testAMistralSessionKeepsTheIdsItsModelWrote() async throws {
        let lm = try model("mistral_v03.jinja")
        guard case let .format(format) = lm.chatFormat.toolCalls else { return XCTFail("\(lm.chatFormat.toolCalls)") }
        XCTAssertEqual(format.idKey, "id")
        let parameters = try JSONSchema(try JSONValue.parse(Self.parameters))
        let add = Tool(name: "add", description: "adds", parameters: parameters) { _ in "3" }
        let session = LanguageModelSession(model: lm.plain, tools: [add])
        session.maximumToolRounds = 2
        _ = try await session.respond(to: "1+2", options: GenerationOptions(temperature: 1, seed: 5, maximumResponseTokens: 160), toolChoice: .required)
        let entries = session.transcript.entries
        let callIDs = entries.compactMap { if case let .toolCall(id, _, _) = $0 { return id } else { return nil } }
        let outputIDs = entries.compactMap { if case let .toolOutput(id, _, _) = $0 { return id } else { return nil } }
        XCTAssertFalse(callIDs.isEmpty, "a required call runs the handler")
        XCTAssertTrue(callIDs.allSatisfy(ToolCallFormat.isValidID), "\(callIDs)")
        XCTAssertEqual(callIDs, outputIDs)
        // the template, which requires 9-character ids, renders the conversation with them
        let messages = try session.transcript.messages()
        let prompt = try lm.chatFormat.promptText(messages)
        for id in callIDs { XCTAssertTrue(prompt.contains(#""call_id": "\#(id)"}"#), prompt) }
    }

    func testASessionWithToolsOnFalcon3sTemplateIsRefused() async throws {
        let lm = try model("falcon3.jinja")
        let tool = Tool(name: "add", description: "adds", parameters: try JSONSchema(try JSONValue.parse(Self.parameters))) { _ in "3" }
        let session = LanguageModelSession(model: lm.plain, tools: [tool])
        do {
            _ = try await session.respond(to: "1+2", options: GenerationOptions(maximumResponseTokens: 8), toolChoice: .auto)
            XCTFail("tools accepted on Falcon 3's format")
        } catch {
            let message = "\(error)" + ((error as? LocalizedError)?.errorDescription ?? "")
            XCTAssertTrue(message.contains("falcon3.jinja"), message)
            XCTAssertTrue(message.contains("guided tool calls are refused"), message)
        }
    }
}
