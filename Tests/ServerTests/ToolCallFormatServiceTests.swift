// Tool calls in the model's own format through the OpenAI service (issue 35 item 3): the
// streaming reader and the reply assembler in Llama 3's bare-JSON format and Phi-4-mini's
// `<|tool_call|>` one, wherever the text is cut; the tiny random model under Llama 3.2's real
// template answering a tools request with a valid `tool_calls` reply, whole and streamed; and a
// 400 that names the template for Mistral's format, whose calls carry ids the model invents.
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import TestSupport
import XCTest

final class ToolCallFormatServiceTests: XCTestCase {
    static func format(_ template: String, _ specials: [(name: String, text: String)]) throws -> ChatFormat {
        try ChatFormat(source: ChatTemplateSource(body: .jinja(try ReasoningTests.template(template)), origin: template), specialTokens: specials)
    }

    static var llama: ToolCallFormat {
        get throws { try format("llama32.jinja", [("bos_token", "<|begin_of_text|>"), ("eos_token", "<|eot_id|>")]).toolCallFormat() }
    }

    static var phi: ToolCallFormat {
        get throws { try format("phi4mini_llamacpp.jinja", [("eos_token", "<|endoftext|>")]).toolCallFormat() }
    }

    /// Pieces of `text` fed `size` characters at a time.
    func feed(_ reader: inout ToolCallReader, _ text: String, size: Int) -> [ReplyPiece] {
        var pieces: [ReplyPiece] = []
        var rest = Substring(text)
        while !rest.isEmpty {
            pieces += reader.feed(String(rest.prefix(size)))
            rest = rest.dropFirst(size)
        }
        return pieces
    }

    func testTheReaderReadsEachFormatWhereverTheTextIsCut() throws {
        let arguments = #"{"city":"O}s\"lo","to":[1,{"a":"]"}]}"#
        for format in [try Self.llama, try Self.phi, .documented] {
            let call = format.text(name: "plan_route", arguments: try JSONValue.parse(arguments))
            for size in [1, 2, 5, call.count] {
                var reader = ToolCallReader(format: format)
                let pieces = feed(&reader, call, size: size)
                XCTAssertEqual(pieces.first, .callStart(name: "plan_route"), "\(format.example) size \(size)")
                XCTAssertEqual(pieces.map { if case .arguments(let a) = $0 { return a } else { return "" } }.joined(), arguments)
                XCTAssertEqual(reader.whole?.name, "plan_route")
                XCTAssertEqual(reader.whole?.arguments, arguments)
            }
            // another format's call is not this one's
            var other = ToolCallReader(format: format)
            _ = other.feed(format == .documented ? try Self.llama.text(name: "n", arguments: .object([])) : ToolCallFormat.documented.text(name: "n", arguments: .object([])))
            XCTAssertNil(other.whole, format.example)
        }
    }

    /// tool_choice auto in Llama 3's format: a reply is a call once it is the call's opening,
    /// text once it cannot become it — and a response_format value (compact JSON, `{"name":`)
    /// beside tools is text, though it begins as a call does.
    func testTheAssemblerDecidesCallOrTextByTheFormatsOpening() throws {
        let llama = try Self.llama
        let tokenizer = try BPETokenizer(data: TinyAssets.tokenizer())
        func assemble(_ text: String, size: Int) -> (pieces: [ReplyPiece], isCall: Bool?) {
            var a = ReplyAssembler(decoder: StreamingDecoder(tokenizer: tokenizer, skipSpecialTokens: true), stop: [], mode: .textOrToolCall, callFormat: llama)
            var pieces: [ReplyPiece] = []
            var rest = Substring(text)
            while !rest.isEmpty {
                pieces += a.take(tokenizer.encode(String(rest.prefix(size))))
                rest = rest.dropFirst(size)
            }
            pieces += a.finish()
            return (pieces, a.isCall)
        }
        for size in [1, 3, 100] {
            let call = assemble(#"{"name": "f", "parameters": {"x":1}}"#, size: size)
            XCTAssertEqual(call.isCall, true)
            XCTAssertEqual(call.pieces.first, .callStart(name: "f"))
            let value = assemble(#"{"name":"Ada","age":3}"#, size: size)
            XCTAssertEqual(value.isCall, false)
            XCTAssertEqual(value.pieces.map { if case .text(let t) = $0 { return t } else { return "?" } }.joined(), #"{"name":"Ada","age":3}"#)
            let text = assemble("Sure: {\"name\": 1}", size: size)
            XCTAssertEqual(text.isCall, false)
            let short = assemble("{\"na", size: size)  // ends while it could still have been a call: text
            XCTAssertEqual(short.pieces, [.text("{\"na")])
        }
    }

    // MARK: through the service, on the tiny model

    func makeService(_ name: String = #function, template: String) throws -> (OpenAIService, Scheduler) {
        let dir = TinyAssets.tempDir(name)
        var base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, context: 2048), storage: .stored)
        base.template = ChatTemplateSource(body: .jinja(try ReasoningTests.template(template)), origin: template)
        let catalog = try AdapterCatalog(base: base, baseID: "tiny", folder: nil, rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 4)
        scheduler.start()
        return (try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 200)), scheduler)
    }

    static let parameters = #"{"type":"object","properties":{"city":{"enum":["Paris","Oslo"]},"days":{"type":"integer","minimum":1,"maximum":5}},"required":["city","days"],"additionalProperties":false}"#
    static let tools = #"[{"type":"function","function":{"name":"weather","description":"forecast","parameters":\#(parameters)}}]"#

    func request(stream: Bool, choice: String = #""required""#) -> [UInt8] {
        Array(#"{"model":"tiny","messages":[{"role":"user","content":"weather in Paris?"}],"max_tokens":200,"seed":5,"temperature":1,"tools":\#(Self.tools),"tool_choice":\#(choice),"stream":\#(stream)}"#.utf8)
    }

    func testLlama32ModelAnswersToolsWithToolCallsInItsOwnFormat() async throws {
        let (service, scheduler) = try makeService(template: "llama32.jinja")
        defer { scheduler.shutdown() }
        let schema = try JSONSchema(try JSONValue.parse(Self.parameters))
        // the prompt lists the tools as Llama 3.2's template does (in the user turn), not in a ChatML system turn
        let prompt = service.tokenizer.decode(try service.encoder.encodePrompt(try ChatRequest(OpenAIService.parse(request(stream: false))).messages))
        XCTAssertTrue(prompt.contains("Given the following functions"), prompt)
        XCTAssertTrue(prompt.hasSuffix("<|start_header_id|>assistant<|end_header_id|>\n\n"), prompt)

        guard case .json(let whole) = try await service.chatCompletions(request(stream: false)) else { return XCTFail("expected JSON") }
        let c = try XCTUnwrap(whole["choices"]?.arrayValue?.first)
        XCTAssertEqual(c["finish_reason"]?.stringValue, "tool_calls")
        let call = try XCTUnwrap(c["message"]?["tool_calls"]?.arrayValue?.first)
        XCTAssertEqual(call["function"]?["name"]?.stringValue, "weather")
        let arguments = try JSONValue.parse(try XCTUnwrap(call["function"]?["arguments"]?.stringValue))
        XCTAssertEqual(schema.validate(arguments), [], "\(arguments)")

        // streamed: the same call (same seed), its arguments in pieces
        guard case .stream(let s) = try await service.chatCompletions(request(stream: true)) else { return XCTFail("expected a stream") }
        var deltas: [JSONValue] = [], finish: [String] = []
        while let event = await s.next() {
            let data = String(event.dropFirst(6).dropLast(2))
            if data == "[DONE]" { break }
            let ch = try XCTUnwrap(try JSONValue.parse(data)["choices"]?.arrayValue?.first)
            if let d = ch["delta"]?["tool_calls"]?.arrayValue?.first { deltas.append(d) }
            if let f = ch["finish_reason"]?.stringValue { finish.append(f) }
        }
        XCTAssertEqual(finish, ["tool_calls"])
        XCTAssertEqual(deltas.first?["function"]?["name"]?.stringValue, "weather")
        XCTAssertEqual(try JSONValue.parse(deltas.compactMap { $0["function"]?["arguments"]?.stringValue }.joined()), arguments)

        // tool_choice none: text that cannot begin a call (no `{`)
        guard case .json(let none) = try await service.chatCompletions(request(stream: false, choice: #""none""#)) else { return XCTFail("expected JSON") }
        let text = try XCTUnwrap(none["choices"]?.arrayValue?.first?["message"]?["content"]?.stringValue)
        XCTAssertFalse(text.hasPrefix("{"), text)
    }

    func testMistralsFormatIsRefusedWithA400NamingTheTemplate() async throws {
        let (service, scheduler) = try makeService(template: "mistral_v03.jinja")
        defer { scheduler.shutdown() }
        do throws(ServerError) {
            _ = try await service.chatCompletions(request(stream: false))
            XCTFail("accepted tools for Mistral's format")
        } catch {
            XCTAssertEqual(error.param, "tools")
            XCTAssertTrue(error.localizedDescription.contains("mistral_v03.jinja"), error.localizedDescription)
            XCTAssertTrue(error.localizedDescription.contains("[TOOL_CALLS]"), error.localizedDescription)
            XCTAssertTrue(error.localizedDescription.contains("--chat-template"), error.localizedDescription)
        }
        // without tools the model serves as before
        guard case .json = try await service.chatCompletions(Array(#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#.utf8)) else {
            return XCTFail("expected JSON")
        }
    }
}
