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

    /// One reply with several calls (Mistral's list): the calls are recorded first, then each
    /// handler runs in the calls' order and its output is recorded, so the next prompt has one
    /// assistant turn with every call and then the results, as the template writes them. The
    /// tiny random model writes two calls for some seeds; the first seed of 1...16 that does is
    /// checked (with parallelToolCalls false, no seed gives two).
    func testSeveralCallsOfOneReplyRunInOrder() async throws {
        let lm = try model("mistral_v03.jinja")
        let parameters = try JSONSchema(try JSONValue.parse(Self.parameters))
        final class Seen: @unchecked Sendable { var args: [JSONValue] = []; let lock = NSLock() }
        var checked = false
        for parallel in [true, false] {
            for seed in UInt64(1)...16 {
                let seen = Seen()
                let add = Tool(name: "add", description: "adds", parameters: parameters) { args in
                    seen.lock.withLock { seen.args.append(args) }
                    return "r\(seen.lock.withLock { seen.args.count })"
                }
                let session = LanguageModelSession(model: lm.plain, tools: [add])
                session.maximumToolRounds = 1
                session.parallelToolCalls = parallel
                _ = try await session.respond(to: "1+2 and 3+4", options: GenerationOptions(temperature: 1, seed: seed, maximumResponseTokens: 200), toolChoice: .required)
                let entries = session.transcript.entries
                // the first round: its calls, then their outputs
                let calls = entries.prefix { if case .toolCall = $0 { return true }; if case .prompt = $0 { return true }; return false }
                    .compactMap { if case let .toolCall(id, _, arguments) = $0 { return (id, arguments) } else { return nil } }
                guard calls.count >= 2 else { continue }
                XCTAssertTrue(parallel, "seed \(seed): several calls with parallelToolCalls false")
                let outputs = entries.dropFirst(1 + calls.count).prefix(calls.count).compactMap { if case let .toolOutput(id, _, content) = $0 { return (id, content) } else { return nil } }
                XCTAssertEqual(outputs.map(\.0), calls.map(\.0), "each call's output, in the calls' order")
                XCTAssertEqual(outputs.map(\.1), (1...calls.count).map { "r\($0)" }, "the handlers ran in the calls' order")
                XCTAssertEqual(try calls.map { try JSONValue.parse($0.1) }, Array(seen.args.prefix(calls.count)))
                let prompt = try lm.chatFormat.promptText(try session.transcript.messages())
                XCTAssertEqual(prompt.components(separatedBy: "[TOOL_CALLS]").count, 2, "one assistant turn holds the calls: \(prompt)")
                let results = try XCTUnwrap(prompt.range(of: "[TOOL_RESULTS]"))
                for (id, _) in calls {
                    let call = try XCTUnwrap(prompt.range(of: #""id": "\#(id)"}"#), prompt)
                    XCTAssertLessThan(call.lowerBound, results.lowerBound, "the calls come before the results")
                    XCTAssertTrue(prompt.contains(#""call_id": "\#(id)"}[/TOOL_RESULTS]"#), prompt)
                }
                checked = true
                break
            }
        }
        XCTAssertTrue(checked, "no seed of 1...16 gave a reply with two calls")
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
