// Tool calls in the model's own format through the OpenAI service (issue 35 item 3): the
// streaming reader and the reply assembler in Llama 3's bare-JSON format, Phi-4-mini's
// `<|tool_call|>` one and Mistral's `[TOOL_CALLS]` list with ids, one call and several, wherever
// the text is cut; the tiny random model under Llama 3.2's real template answering a tools
// request with a valid `tool_calls` reply, whole and streamed; under Mistral v0.3's, calls with
// the 9-character ids the model wrote (the template renders them back on the next turn),
// several calls in one reply (whole and streamed, by index), one when `parallel_tool_calls` is
// false; and a 400 that names the template for Falcon 3's format.
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

    static var mistral: ToolCallFormat {
        get throws { try format("mistral_v03.jinja", [("bos_token", "<s>"), ("eos_token", "</s>")]).toolCallFormat() }
    }

    static var hermes: ToolCallFormat {
        get throws { try format("qwen25.jinja", [("eos_token", "<|im_end|>")]).toolCallFormat() }
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
        for format in [try Self.llama, try Self.phi, try Self.mistral, .documented] {
            let id: String? = format.idKey == nil ? nil : "Zz9Yy8Xx7"
            let call = format.text(name: "plan_route", arguments: try JSONValue.parse(arguments), id: id)
            for size in [1, 2, 5, call.count] {
                var reader = ToolCallReader(format: format)
                let pieces = feed(&reader, call, size: size)
                XCTAssertEqual(pieces.first, .callStart(name: "plan_route", id: id), "\(format.example) size \(size)")
                XCTAssertEqual(reader.whole?.first?.id, id)
                XCTAssertEqual(pieces.map { if case .arguments(let a) = $0 { return a } else { return "" } }.joined(), arguments)
                XCTAssertEqual(reader.whole?.first?.name, "plan_route")
                XCTAssertEqual(reader.whole?.first?.arguments, arguments)
            }
            // another format's call is not this one's
            var other = ToolCallReader(format: format)
            _ = other.feed(format == .documented ? try Self.llama.text(name: "n", arguments: .object([])) : ToolCallFormat.documented.text(name: "n", arguments: .object([])))
            XCTAssertNil(other.whole, format.example)
        }
    }

    /// Several calls in one reply: each starts (in order, so its index is its place) with its
    /// name and, in Mistral's format, the id the model wrote, then its arguments; the reply is
    /// whole only when the last call (and Mistral's list) is closed; a wrong id breaks it.
    func testTheReaderReadsSeveralCallsAndTheirIds() throws {
        let first = try JSONValue.parse(#"{"city":"Oslo","n":[1,{"a":"]"}]}"#), second = try JSONValue.parse(#"{}"#)
        for format in [try Self.mistral, try Self.hermes, try Self.phi, .documented] {
            let ids: [String?] = format.idKey == nil ? [nil, nil] : ["a1b2c3d4e", "F5G6H7I8J"]
            let text = format.text([ToolCall(id: ids[0], name: "weather", arguments: first), ToolCall(id: ids[1], name: "time", arguments: second)])
            for size in [1, 3, 7, text.count] {
                var reader = ToolCallReader(format: format)
                let pieces = feed(&reader, text, size: size)
                let starts = pieces.compactMap { if case let .callStart(name, id) = $0 { return "\(name) \(id ?? "-")" } else { return nil } }
                XCTAssertEqual(starts, ["weather \(ids[0] ?? "-")", "time \(ids[1] ?? "-")"], "\(format.example) size \(size)")
                let whole = try XCTUnwrap(reader.whole, "\(format.example) size \(size)")
                XCTAssertEqual(whole.map(\.name), ["weather", "time"])
                XCTAssertEqual(whole.map(\.id), ids)
                XCTAssertEqual(try whole.map { try JSONValue.parse($0.arguments) }, [first, second])
                // the pieces in order rebuild each call's arguments
                var rebuilt: [String] = []
                for p in pieces {
                    if case .callStart = p { rebuilt.append("") }
                    if case let .arguments(a) = p { rebuilt[rebuilt.count - 1] += a }
                }
                XCTAssertEqual(rebuilt, whole.map(\.arguments))
            }
            // cut inside the second call: the first is whole, the reply is not
            var cut = ToolCallReader(format: format)
            _ = cut.feed(String(text.dropLast(format.listClose.count + format.closing.count + 1)))
            XCTAssertNil(cut.whole, format.example)
            XCTAssertTrue(cut.calls.first?.closed ?? false, format.example)
        }
        // Mistral: an id that is not 9 letters and digits is not a call of this format
        let mistral = try Self.mistral
        var wrong = ToolCallReader(format: mistral)
        XCTAssertEqual(wrong.feed(#"[TOOL_CALLS] [{"name": "n", "arguments": {}, "id": "abc-defgh"}]"#), [])
        XCTAssertTrue(wrong.broken)
        XCTAssertNil(wrong.whole)
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
            XCTAssertEqual(call.pieces.first, .callStart(name: "f", id: nil))
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

    func makeService(_ name: String = #function, template: String, specials: [String] = []) throws -> (OpenAIService, Scheduler) {
        let dir = TinyAssets.tempDir(name)
        var base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, extraSpecials: specials, context: 2048), storage: .stored)
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

    /// The tiny model under Mistral v0.3's real template: a required call in Mistral's format,
    /// its id the 9 letters and digits the model wrote (the grammar's id slot), returned as the
    /// call's `id`; the conversation then continues with that id in the assistant's tool_calls
    /// and the tool's tool_call_id, which the template checks (9 characters) and renders.
    func testAMistralModelAnswersWithCallsCarryingTheIdsItWrote() async throws {
        let (service, scheduler) = try makeService(template: "mistral_v03.jinja")
        defer { scheduler.shutdown() }
        let schema = try JSONSchema(try JSONValue.parse(Self.parameters))
        guard case .json(let whole) = try await service.chatCompletions(request(stream: false)) else { return XCTFail("expected JSON") }
        let c = try XCTUnwrap(whole["choices"]?.arrayValue?.first)
        XCTAssertEqual(c["finish_reason"]?.stringValue, "tool_calls")
        let calls = try XCTUnwrap(c["message"]?["tool_calls"]?.arrayValue)
        XCTAssertFalse(calls.isEmpty)
        for call in calls {
            XCTAssertEqual(call["function"]?["name"]?.stringValue, "weather")
            XCTAssertTrue(ToolCallFormat.isValidID(call["id"]?.stringValue ?? ""), "\(call)")
            XCTAssertEqual(schema.validate(try JSONValue.parse(try XCTUnwrap(call["function"]?["arguments"]?.stringValue))), [])
        }
        // the next turn: the calls and their results, ids as returned; the template renders them
        let results = calls.map { call in #"{"role":"tool","tool_call_id":\#(call["id"]!.compactText),"content":"sunny"}"# }.joined(separator: ",")
        let next = #"{"model":"tiny","messages":[{"role":"user","content":"weather in Paris?"},{"role":"assistant","content":"","tool_calls":\#(JSONValue.array(calls).compactText)},\#(results)],"max_tokens":8,"seed":1,"tools":\#(Self.tools)}"#
        let messages = try ChatRequest(OpenAIService.parse(Array(next.utf8))).messages
        let prompt = service.tokenizer.decode(try service.encoder.encodePrompt(messages))
        for call in calls {
            XCTAssertTrue(prompt.contains(#""id": \#(call["id"]!.compactText)}"#), prompt)
            XCTAssertTrue(prompt.contains(#""call_id": \#(call["id"]!.compactText)}[/TOOL_RESULTS]"#), prompt)
        }
        guard case .json = try await service.chatCompletions(Array(next.utf8)) else { return XCTFail("expected JSON") }
    }

    /// Several calls in one reply, whole and streamed: `tool_calls` holds them in order with the
    /// ids the model wrote; streamed, each call's deltas carry its index (its first delta the
    /// id, type and name). The reply is forced to two calls (the tiny random model rarely writes
    /// two); `parallel_tool_calls: false` makes the request's grammar take one call only.
    func testSeveralCallsInOneReplyWholeAndStreamed() async throws {
        let (service, scheduler) = try makeService(template: "mistral_v03.jinja")
        defer { scheduler.shutdown() }
        let mistral = try Self.mistral
        let two = mistral.text([ToolCall(id: "a1b2c3d4e", name: "weather", arguments: try JSONValue.parse(#"{"city":"Paris","days":2}"#)),
                                ToolCall(id: "Q9w8E7r6T", name: "weather", arguments: try JSONValue.parse(#"{"city":"Oslo","days":5}"#))])
        let request = try ChatRequest(OpenAIService.parse(request(stream: false)))
        XCTAssertTrue(request.parallelToolCalls, "OpenAI's default")
        // the request's own grammar takes the two calls; with parallel_tool_calls false it does not
        let several = try XCTUnwrap(try service.constraint(request.guide, tools: request.tools, format: mistral, severalCalls: request.parallelToolCalls))
        var state = several.start()
        XCTAssertNoThrow(try state.advance(tokens: service.tokenizer.encode(two)))
        XCTAssertTrue(state.isComplete)
        let single = try ChatRequest(OpenAIService.parse(Array(#"{"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":\#(Self.tools),"parallel_tool_calls":false}"#.utf8)))
        XCTAssertFalse(single.parallelToolCalls)
        let one = try XCTUnwrap(try service.constraint(single.guide, tools: single.tools, format: mistral, severalCalls: single.parallelToolCalls))
        var oneState = one.start()
        XCTAssertThrowsError(try oneState.advance(tokens: service.tokenizer.encode(two)), "one call only")
        XCTAssertThrowsError(try ChatRequest(OpenAIService.parse(Array(#"{"model":"tiny","messages":[{"role":"user","content":"x"}],"parallel_tool_calls":1}"#.utf8)))) { error in
            XCTAssertEqual((error as? ServerError)?.param, "parallel_tool_calls")
        }

        let forced = try service.constraints.choice([two])
        guard case .json(let whole) = try await service.chat(request, forcing: forced) else { return XCTFail("expected JSON") }
        let c = try XCTUnwrap(whole["choices"]?.arrayValue?.first)
        XCTAssertEqual(c["finish_reason"]?.stringValue, "tool_calls")
        XCTAssertEqual(c["message"]?["content"], .null)
        let calls = try XCTUnwrap(c["message"]?["tool_calls"]?.arrayValue)
        XCTAssertEqual(calls.map { $0["id"]?.stringValue }, ["a1b2c3d4e", "Q9w8E7r6T"])
        XCTAssertEqual(try calls.map { try JSONValue.parse($0["function"]?["arguments"]?.stringValue ?? "") },
                       [try JSONValue.parse(#"{"city":"Paris","days":2}"#), try JSONValue.parse(#"{"city":"Oslo","days":5}"#)])

        var streamed = request
        streamed.sampling.stream = true
        guard case .stream(let s) = try await service.chat(streamed, forcing: forced) else { return XCTFail("expected a stream") }
        let (byIndex, finish, firsts) = try await Self.streamedCalls(s)
        XCTAssertEqual(finish, ["tool_calls"])
        XCTAssertEqual(firsts, [0, 1], "each call's first delta once, in order")
        XCTAssertEqual(byIndex[0]?.id, "a1b2c3d4e")
        XCTAssertEqual(byIndex[1]?.id, "Q9w8E7r6T")
        XCTAssertEqual(byIndex.keys.sorted().map { byIndex[$0]!.arguments }, calls.map { $0["function"]?["arguments"]?.stringValue ?? "" })
    }

    /// Hermes (Qwen2.5's template): the model's own grammar lets one reply hold several
    /// `<tool_call>` blocks, and the server returns every one, with ids of its own.
    func testAHermesModelMayWriteSeveralBlocks() async throws {
        let (service, scheduler) = try makeService(template: "qwen25.jinja")
        defer { scheduler.shutdown() }
        let hermes = try service.toolCallFormat(model: "tiny")
        XCTAssertEqual(hermes.separator, "\n")
        let request = try ChatRequest(OpenAIService.parse(request(stream: false)))
        let blocks = hermes.text([ToolCall(id: nil, name: "weather", arguments: try JSONValue.parse(#"{"city":"Paris","days":1}"#)),
                                  ToolCall(id: nil, name: "weather", arguments: try JSONValue.parse(#"{"city":"Oslo","days":3}"#))])
        let grammar = try XCTUnwrap(try service.constraint(request.guide, tools: request.tools, format: hermes, severalCalls: true))
        var state = grammar.start()
        XCTAssertNoThrow(try state.advance(tokens: service.tokenizer.encode(blocks)))
        guard case .json(let whole) = try await service.chat(request, forcing: try service.constraints.choice([blocks])) else { return XCTFail("expected JSON") }
        let calls = try XCTUnwrap(whole["choices"]?.arrayValue?.first?["message"]?["tool_calls"]?.arrayValue)
        XCTAssertEqual(calls.count, 2)
        XCTAssertEqual(Set(calls.compactMap { $0["id"]?.stringValue }).count, 2, "ids of their own, distinct")
        XCTAssertTrue(calls.allSatisfy { $0["id"]?.stringValue?.hasPrefix("call_") == true })
    }

    /// Phi-4-mini's template on a tokenizer whose `<|tool_call|>` and `<|/tool_call|>` are
    /// special tokens (as Phi-4-mini's are): the request's grammar opens the reply with the
    /// special token itself (forced: its text in ordinary tokens is not allowed), and the reply,
    /// decoded keeping the format's special tokens, comes back as `tool_calls`.
    func testPhiMarkersAreWrittenAsTheirSpecialTokens() async throws {
        let (service, scheduler) = try makeService(template: "phi4mini_llamacpp.jinja", specials: ["<|tool_call|>", "<|/tool_call|>", "<|end|>", "<|tool|>", "<|/tool|>"])
        defer { scheduler.shutdown() }
        let open = try XCTUnwrap(service.tokenizer.tokenId("<|tool_call|>")), close = try XCTUnwrap(service.tokenizer.tokenId("<|/tool_call|>"))
        XCTAssertTrue(service.tokenizer.isSpecial(open) && service.tokenizer.isSpecial(close))
        let format = try service.toolCallFormat(model: "tiny")
        XCTAssertEqual(format.specialTokens(in: service.tokenizer), [open, close])
        let chat = try ChatRequest(OpenAIService.parse(request(stream: false)))
        let constraint = try XCTUnwrap(try service.constraint(chat.guide, tools: chat.tools, format: format, severalCalls: true))
        XCTAssertEqual(constraint.forcedTokens(constraint.start()).first, open)
        XCTAssertFalse(constraint.allowedTokens(constraint.start()).contains(try XCTUnwrap(service.tokenizer.tokenId("<"))))

        let schema = try JSONSchema(try JSONValue.parse(Self.parameters))
        guard case .json(let whole) = try await service.chatCompletions(request(stream: false)) else { return XCTFail("expected JSON") }
        let c = try XCTUnwrap(whole["choices"]?.arrayValue?.first)
        XCTAssertEqual(c["finish_reason"]?.stringValue, "tool_calls", "\(whole)")
        let calls = try XCTUnwrap(c["message"]?["tool_calls"]?.arrayValue)
        XCTAssertFalse(calls.isEmpty)
        for call in calls {
            XCTAssertEqual(call["function"]?["name"]?.stringValue, "weather")
            XCTAssertEqual(schema.validate(try JSONValue.parse(try XCTUnwrap(call["function"]?["arguments"]?.stringValue))), [])
        }
        // streamed (same seed): the same calls by index
        guard case .stream(let s) = try await service.chatCompletions(request(stream: true)) else { return XCTFail("expected a stream") }
        let (streamedCalls, finish, _) = try await Self.streamedCalls(s)
        XCTAssertEqual(finish, ["tool_calls"])
        XCTAssertEqual(streamedCalls.keys.sorted().map { streamedCalls[$0]!.arguments }, calls.map { $0["function"]?["arguments"]?.stringValue ?? "" })
    }

    struct StreamError: Error { let message: String }

    /// A streamed reply's tool calls joined per index (id and name from each call's first delta,
    /// whose type must be "function"), its finish reasons, and the index of each first delta in order.
    static func streamedCalls(_ s: ReplyStream) async throws
        -> (calls: [Int: (id: String, name: String, arguments: String)], finish: [String], firsts: [Int]) {
        var byIndex: [Int: (id: String, name: String, arguments: String)] = [:], finish: [String] = [], firsts: [Int] = []
        while let event = await s.next() {
            let data = String(event.dropFirst(6).dropLast(2))
            if data == "[DONE]" { break }
            let ch = try XCTUnwrap(try JSONValue.parse(data)["choices"]?.arrayValue?.first)
            for d in ch["delta"]?["tool_calls"]?.arrayValue ?? [] {
                guard case let .number(n)? = d["index"] else { throw StreamError(message: "no index in \(d)") }
                let i = Int(n.doubleValue)
                if let id = d["id"]?.stringValue {
                    firsts.append(i)
                    XCTAssertEqual(d["type"]?.stringValue, "function")
                    byIndex[i] = (id, d["function"]?["name"]?.stringValue ?? "", "")
                }
                byIndex[i]?.arguments += d["function"]?["arguments"]?.stringValue ?? ""
            }
            if let f = ch["finish_reason"]?.stringValue { finish.append(f) }
        }
        return (byIndex, finish, firsts)
    }

    func testFalcon3sFormatIsRefusedWithA400NamingTheTemplate() async throws {
        let (service, scheduler) = try makeService(template: "falcon3.jinja")
        defer { scheduler.shutdown() }
        do throws(ServerError) {
            _ = try await service.chatCompletions(request(stream: false))
            XCTFail("accepted tools for Falcon 3's format")
        } catch {
            XCTAssertEqual(error.param, "tools")
            XCTAssertTrue(error.localizedDescription.contains("falcon3.jinja"), error.localizedDescription)
            XCTAssertTrue(error.localizedDescription.contains("Falcon 3"), error.localizedDescription)
            XCTAssertTrue(error.localizedDescription.contains("--chat-template"), error.localizedDescription)
        }
        // without tools the model serves as before
        guard case .json = try await service.chatCompletions(Array(#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#.utf8)) else {
            return XCTFail("expected JSON")
        }
    }
}
