// The OpenAI API on the tiny model, apart from and through HTTP: reply and chunk shapes,
// streaming equal to the whole reply, response_format replies that validate (or are reported
// cut), tool calls read back into tool_calls, stop sequences, every kind of bad request answered
// with an OpenAI error (never a slot taken), the adapters folder (served, refused with the reason,
// picked up without a restart), and a streaming client that leaves freeing its slot.
import DataSchema
import Export
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Hummingbird
import Inference
import ModelAssets
import ModelDefinition
import NIOCore
@testable import Server
import TestSupport
import XCTest

final class ServiceTests: XCTestCase {
    struct Fixture {
        let base: BaseModel
        let folder: String
        let service: OpenAIService
        let scheduler: Scheduler
    }

    /// A tiny base, an adapters folder with one PEFT adapter ("alpha"), one made for another
    /// base ("foreign") and a damaged file ("broken"); a started scheduler.
    func fixture(_ name: String = #function, maxActive: Int = 4, queue: Int = 8, start: Bool = true) throws -> Fixture {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, context: 2048), storage: .stored)
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 2, name: "other", context: 2048), storage: .stored)
        let folder = dir + "/adapters"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try PEFTAdapter.write(SchedulerTests.randomAdapter(base, seed: 7), to: folder + "/alpha")
        try PEFTAdapter.write(SchedulerTests.randomAdapter(other, seed: 8), to: folder + "/foreign")
        try Data("not a safetensors file".utf8).write(to: URL(fileURLWithPath: folder + "/broken.safetensors"))
        try Data("notes".utf8).write(to: URL(fileURLWithPath: folder + "/README.txt"))
        let catalog = try AdapterCatalog(base: base, baseID: "tiny", folder: folder, rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: maxActive, queueCapacity: queue)
        if start { scheduler.start() }
        let service = try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 24, maxTokensLimit: 600))
        return Fixture(base: base, folder: folder, service: service, scheduler: scheduler)
    }

    func body(_ text: String) -> [UInt8] { Array(text.utf8) }

    func json(_ reply: OpenAIService.Reply) throws -> JSONValue {
        guard case .json(let v) = reply else { throw XCTSkip("expected a JSON reply") }
        return v
    }

    /// Every server-sent event's data, in order.
    func events(_ reply: OpenAIService.Reply) async throws -> [String] {
        guard case .stream(let s) = reply else { XCTFail("expected a stream"); return [] }
        var out: [String] = []
        while let e = await s.next() {
            XCTAssertTrue(e.hasPrefix("data: ") && e.hasSuffix("\n\n"), e)
            out.append(String(e.dropFirst(6).dropLast(2)))
        }
        return out
    }

    /// The error `op` throws, nil when it answers.
    func refusal(_ op: () async throws(ServerError) -> OpenAIService.Reply) async -> ServerError? {
        do {
            _ = try await op()
            return nil
        } catch {
            return error
        }
    }

    func choice(_ v: JSONValue) -> JSONValue { v["choices"]!.arrayValue![0] }

    func expectError(_ f: Fixture, _ text: String, path: String = "chat", status: Int, code: String? = nil, param: String? = nil,
                     file: StaticString = #filePath, line: UInt = #line) async {
        let error = await refusal { () async throws(ServerError) in
            path == "chat" ? try await f.service.chatCompletions(body(text)) : try await f.service.completions(body(text))
        }
        if let error {
            XCTAssertEqual(error.status, status, "\(text): \(error.localizedDescription)", file: file, line: line)
            if let code { XCTAssertEqual(error.code, code, "\(text)", file: file, line: line) }
            if let param { XCTAssertEqual(error.param, param, "\(text)", file: file, line: line) }
            XCTAssertFalse(error.localizedDescription.isEmpty)
            let b = error.body["error"]!
            XCTAssertNotNil(b["message"]?.stringValue, file: file, line: line)
            XCTAssertNotNil(b["type"]?.stringValue, file: file, line: line)
        } else {
            XCTFail("accepted: \(text)", file: file, line: line)
        }
        XCTAssertEqual(f.scheduler.status.queued + f.scheduler.status.active, 0, "a refused request takes no slot", file: file, line: line)
    }

    func testChatReplyShapesAndStreamingGivesTheSameText() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        for model in ["tiny", "alpha"] {
            let request = #"{"model":"\#(model)","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say alpha0"}],"max_tokens":12,"temperature":0}"#
            let whole = try json(try await f.service.chatCompletions(body(request)))
            XCTAssertEqual(whole["object"]?.stringValue, "chat.completion")
            XCTAssertEqual(whole["model"]?.stringValue, model)
            XCTAssertTrue(whole["id"]!.stringValue!.hasPrefix("chatcmpl-"))
            let c = choice(whole)
            XCTAssertEqual(c["message"]?["role"]?.stringValue, "assistant")
            let text = try XCTUnwrap(c["message"]?["content"]?.stringValue)
            let finish = c["finish_reason"]?.stringValue
            XCTAssertTrue(finish == "stop" || finish == "length", "\(String(describing: finish))")
            guard case .number(let p)? = whole["usage"]?["prompt_tokens"], case .number(let n)? = whole["usage"]?["completion_tokens"],
                  case .number(let t)? = whole["usage"]?["total_tokens"] else { return XCTFail("usage") }
            XCTAssertEqual(p.doubleValue + n.doubleValue, t.doubleValue)
            if finish == "length" { XCTAssertEqual(n.doubleValue, 12) }

            let streamed = try await events(try await f.service.chatCompletions(body(request.replacingOccurrences(of: "\"max_tokens\"", with: "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\""))))
            XCTAssertEqual(streamed.last, "[DONE]")
            let chunks = try streamed.dropLast().map { try JSONValue.parse($0) }
            XCTAssertEqual(choice(chunks[0])["delta"]?["role"]?.stringValue, "assistant")
            var pieces = ""
            var finishes: [String] = []
            for c in chunks where !(c["choices"]!.arrayValue!.isEmpty) {
                XCTAssertEqual(c["object"]?.stringValue, "chat.completion.chunk")
                pieces += choice(c)["delta"]?["content"]?.stringValue ?? ""
                if let r = choice(c)["finish_reason"]?.stringValue { finishes.append(r) }
            }
            XCTAssertEqual(pieces, text, "the streamed pieces make the whole reply (\(model))")
            XCTAssertEqual(finishes, [finish!])
            XCTAssertEqual(chunks.last?["usage"]?["completion_tokens"]?.description, whole["usage"]?["completion_tokens"]?.description)
        }
        // the adapter changes the replies: the request's model chose it (a random tiny model can
        // fall into the same repetition with and without it, so over several prompts)
        var differ = 0
        for prompt in ["say alpha0", "bravo", "q", "hotel2 india"] {
            let plain = try json(try await f.service.completions(body(#"{"model":"tiny","prompt":"\#(prompt)","max_tokens":24,"temperature":0}"#)))
            let adapted = try json(try await f.service.completions(body(#"{"model":"alpha","prompt":"\#(prompt)","max_tokens":24,"temperature":0}"#)))
            XCTAssertEqual(plain["object"]?.stringValue, "text_completion")
            if choice(plain)["text"]?.stringValue != choice(adapted)["text"]?.stringValue { differ += 1 }
        }
        XCTAssertGreaterThan(differ, 0, "the adapter changes some reply")
    }

    /// /v1/completions tokenizes its prompt as a whole text input: the BOS the tokenizer adds goes
    /// first (as vLLM and llama-server do); a chat prompt is the template's text with nothing added.
    func testCompletionsPromptGetsTheBOSItsTokenizerAdds() async throws {
        let dir = TinyAssets.tempDir(#function)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, context: 2048, addBOS: true), storage: .stored)
        let bos = try XCTUnwrap(base.tokenizer.bosTokenId)
        XCTAssertEqual(base.tokenizer.textPrefix, [bos])
        try FileManager.default.createDirectory(atPath: dir + "/adapters", withIntermediateDirectories: true)
        let catalog = try AdapterCatalog(base: base, baseID: "tiny", folder: dir + "/adapters", rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 4)
        scheduler.start()
        defer { scheduler.shutdown() }
        let service = try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 4, maxTokensLimit: 600))
        let prompt = "the other one"
        let plain = try json(try await service.completions(body(#"{"model":"tiny","prompt":"\#(prompt)","max_tokens":2,"temperature":0}"#)))
        XCTAssertEqual(plain["usage"]?["prompt_tokens"], .number(JSONNumber(base.tokenizer.encode(prompt).count + 1)))
        let chat = try json(try await service.chatCompletions(body(#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0}"#)))
        let rendered = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)
            .encodePrompt([Message(role: .user, content: "hi")])
        XCTAssertEqual(chat["usage"]?["prompt_tokens"], .number(JSONNumber(rendered.count)))
    }

    func testResponseFormatRepliesValidateOrAreReportedCut() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        let schemaText = #"{"type":"object","properties":{"p":{"enum":["a","b"]},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["p","n"],"additionalProperties":false}"#
        let schema = try JSONSchema(try JSONValue.parse(schemaText))
        for (seed, maxTokens) in [(1, 60), (2, 60), (3, 60), (4, 3)] {
            let request = #"{"model":"alpha","messages":[{"role":"user","content":"pick"}],"max_tokens":\#(maxTokens),"temperature":1,"seed":\#(seed),"response_format":{"type":"json_schema","json_schema":{"name":"pick","strict":true,"schema":\#(schemaText)}}}"#
            let c = choice(try json(try await f.service.chatCompletions(body(request))))
            let text = c["message"]!["content"]!.stringValue!
            if c["finish_reason"]?.stringValue == "stop" {
                XCTAssertEqual(schema.validate(try JSONValue.parse(text)), [], text)
            } else {
                XCTAssertEqual(c["finish_reason"]?.stringValue, "length")
                XCTAssertEqual(maxTokens, 3, "only the short budget cuts: \(text)")
            }
        }
        let obj = choice(try json(try await f.service.chatCompletions(body(#"{"model":"tiny","messages":[{"role":"user","content":"json"}],"max_tokens":80,"seed":3,"response_format":{"type":"json_object"}}"#))))
        if obj["finish_reason"]?.stringValue == "stop" {
            guard case .object = try JSONValue.parse(obj["message"]!["content"]!.stringValue!) else { return XCTFail("json_object gives an object") }
        }
    }

    func testToolCallsComeBackAsToolCalls() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        let parameters = #"{"type":"object","properties":{"city":{"enum":["Paris","Oslo"]},"days":{"type":"integer","minimum":1,"maximum":5}},"required":["city","days"],"additionalProperties":false}"#
        let schema = try JSONSchema(try JSONValue.parse(parameters))
        let tools = #"[{"type":"function","function":{"name":"weather","description":"forecast","parameters":\#(parameters)}},{"type":"function","function":{"name":"time","parameters":{"type":"object","properties":{"zone":{"enum":["utc","cet"]}},"required":["zone"],"additionalProperties":false}}}]"#
        for (choiceText, stream) in [(#""required""#, false), (#"{"type":"function","function":{"name":"weather"}}"#, false), (#""required""#, true)] {
            let request = #"{"model":"alpha","messages":[{"role":"user","content":"weather in Paris?"}],"max_tokens":200,"seed":5,"tools":\#(tools),"tool_choice":\#(choiceText),"stream":\#(stream)}"#
            let reply = try await f.service.chatCompletions(body(request))
            var call: JSONValue
            if stream {
                // the first delta names the call, the next ones add to its arguments
                let chunks = try await events(reply).dropLast().map { try JSONValue.parse($0) }
                let deltas = chunks.compactMap { choice($0)["delta"]?["tool_calls"]?.arrayValue?.first }
                XCTAssertGreaterThan(deltas.count, 1, "arguments in pieces")
                XCTAssertEqual(deltas.compactMap { $0["index"]?.description }, Array(repeating: "0", count: deltas.count))
                XCTAssertEqual(deltas.compactMap { $0["id"] }.count, 1, "the id once")
                XCTAssertEqual(deltas.compactMap { $0["function"]?["name"] }.count, 1, "the name once")
                XCTAssertEqual(chunks.compactMap { choice($0)["finish_reason"]?.stringValue }, ["tool_calls"])
                let arguments = deltas.map { $0["function"]!["arguments"]!.stringValue! }.joined()
                call = object([("id", deltas[0]["id"]!), ("type", deltas[0]["type"]!),
                               ("function", object([("name", deltas[0]["function"]!["name"]!), ("arguments", .string(arguments))]))])
            } else {
                let c = choice(try json(reply))
                XCTAssertEqual(c["finish_reason"]?.stringValue, "tool_calls")
                guard case .null? = c["message"]?["content"] else { return XCTFail("content is null beside tool calls") }
                call = try XCTUnwrap(c["message"]?["tool_calls"]?.arrayValue?.first)
            }
            XCTAssertEqual(call["type"]?.stringValue, "function")
            XCTAssertTrue(call["id"]!.stringValue!.hasPrefix("call_"))
            let name = call["function"]!["name"]!.stringValue!
            let arguments = try JSONValue.parse(call["function"]!["arguments"]!.stringValue!)
            if choiceText.contains("weather") { XCTAssertEqual(name, "weather") }
            if name == "weather" { XCTAssertEqual(schema.validate(arguments), [], "\(arguments)") }
        }
        // tool_choice none: text, never a call
        let none = choice(try json(try await f.service.chatCompletions(body(#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"seed":1,"tools":\#(tools),"tool_choice":"none"}"#))))
        XCTAssertNil(none["message"]?["tool_calls"])
        XCTAssertFalse(none["message"]!["content"]!.stringValue!.hasPrefix("<"))
        // a conversation that already holds a call and its result renders and answers
        let followUp = #"{"model":"alpha","messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\",\"days\":2}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}],"max_tokens":8,"tools":\#(tools)}"#
        _ = try json(try await f.service.chatCompletions(body(followUp)))
    }

    func testStopSequencesCutTheReply() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        let request = #"{"model":"tiny","prompt":"say alpha0","max_tokens":30,"temperature":0}"#
        let text = choice(try json(try await f.service.completions(body(request))))["text"]!.stringValue!
        guard text.count >= 6 else { throw XCTSkip("the tiny model's reply is too short to cut: \(text.debugDescription)") }
        let stop = String(text.dropFirst(text.count / 2).prefix(3))
        let expected = String(text[..<text.range(of: stop)!.lowerBound])
        for stream in [false, true] {
            let r = try await f.service.completions(body(request.replacingOccurrences(of: "}", with: #","stop":["zzzzzz",\#(JSONValue.string(stop).compactText)],"stream":\#(stream)}"#)))
            if stream {
                let chunks = try await events(r).dropLast().map { try JSONValue.parse($0) }
                XCTAssertEqual(chunks.map { choice($0)["text"]!.stringValue! }.joined(), expected)
                XCTAssertEqual(chunks.compactMap { choice($0)["finish_reason"]?.stringValue }, ["stop"])
            } else {
                let c = choice(try json(r))
                XCTAssertEqual(c["text"]?.stringValue, expected)
                XCTAssertEqual(c["finish_reason"]?.stringValue, "stop")
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while f.scheduler.status.active > 0 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
        XCTAssertEqual(f.scheduler.status.active, 0, "a reply cut by a stop sequence frees its slot")
    }

    func testBadRequestsGetOpenAIErrors() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        let user = #""messages":[{"role":"user","content":"hi"}]"#
        await expectError(f, #"{"model": "tiny", "messages": [}"#, status: 400, code: "invalid_json")
        await expectError(f, "[1,2]", status: 400)
        await expectError(f, #"{"messages":[{"role":"user","content":"hi"}]}"#, status: 400, param: "model")
        await expectError(f, #"{"model":"nope",\#(user)}"#, status: 404, code: "model_not_found")
        await expectError(f, #"{"model":"foreign",\#(user)}"#, status: 400, code: "model_refused")
        await expectError(f, #"{"model":"tiny","messages":[]}"#, status: 400, param: "messages")
        await expectError(f, #"{"model":"tiny","messages":[{"role":"wizard","content":"hi"}]}"#, status: 400, param: "messages[0].role")
        await expectError(f, #"{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#, status: 400,
                          code: "unsupported_content", param: "messages[0].content[0]")
        await expectError(f, #"{"model":"tiny",\#(user),"max_tokens":0}"#, status: 400, param: "max_tokens")
        await expectError(f, #"{"model":"tiny",\#(user),"max_tokens":-5}"#, status: 400, param: "max_tokens")
        await expectError(f, #"{"model":"tiny",\#(user),"max_tokens":1.5}"#, status: 400, param: "max_tokens")
        await expectError(f, #"{"model":"tiny",\#(user),"max_tokens":601}"#, status: 400, param: "max_tokens")
        await expectError(f, #"{"model":"tiny",\#(user),"temperature":3}"#, status: 400, param: "temperature")
        await expectError(f, #"{"model":"tiny",\#(user),"temperature":"hot"}"#, status: 400, param: "temperature")
        await expectError(f, #"{"model":"tiny",\#(user),"top_p":-0.1}"#, status: 400, param: "top_p")
        await expectError(f, #"{"model":"tiny",\#(user),"top_p":1.5}"#, status: 400, param: "top_p")
        await expectError(f, #"{"model":"tiny",\#(user),"n":2}"#, status: 400, param: "n")
        await expectError(f, #"{"model":"tiny",\#(user),"logprobs":true}"#, status: 400, param: "logprobs")
        await expectError(f, #"{"model":"tiny",\#(user),"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","if":{"type":"object"}}}}}"#,
                          status: 400, code: "unsupported_schema")
        await expectError(f, #"{"model":"tiny",\#(user),"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"(a|b)*\\1"}}}}"#,
                          status: 400, code: "unsupported_schema")
        await expectError(f, #"{"model":"tiny",\#(user),"response_format":{"type":"yaml"}}"#, status: 400, param: "response_format.type")
        await expectError(f, #"{"model":"tiny",\#(user),"tool_choice":"required"}"#, status: 400, param: "tool_choice")
        await expectError(f, #"{"model":"tiny",\#(user),"tools":[{"type":"function","function":{"name":"a b"}}]}"#, status: 400)
        await expectError(f, #"{"model":"tiny",\#(user),"response_format":{"type":"json_object"},"stop":"}"}"#, status: 400, param: "stop")
        let long = String(repeating: "word ", count: 3000)
        await expectError(f, #"{"model":"tiny","messages":[{"role":"user","content":"\#(long)"}]}"#, status: 400, code: "context_length_exceeded")
        await expectError(f, #"{"model":"tiny","prompt":"","max_tokens":4}"#, path: "completions", status: 400, param: "prompt")
        await expectError(f, #"{"model":"tiny","prompt":[1,2]}"#, path: "completions", status: 400, param: "prompt")
        await expectError(f, #"{"model":"tiny","prompt":"hi","echo":true}"#, path: "completions", status: 400, param: "echo")
        await expectError(f, String(decoding: [0xff, 0xfe], as: UTF8.self), status: 400)
    }

    func testTheAdaptersFolderIsListedRefusedAndRescanned() async throws {
        let f = try fixture()
        defer { f.scheduler.shutdown() }
        var listing = f.service.models()
        XCTAssertEqual(listing["data"]!.arrayValue!.map { $0["id"]!.stringValue! }, ["tiny", "alpha"])
        let refused = listing["refused"]!.arrayValue!
        XCTAssertEqual(refused.map { $0["id"]!.stringValue! }, ["broken", "foreign"])
        let foreign = refused[1]["reason"]!.stringValue!
        XCTAssertTrue(foreign.contains(f.base.signature), "the wrong-base reason names the loaded base's signature: \(foreign)")
        XCTAssertTrue(foreign.contains("was trained on base model"), foreign)
        // an adapter added while serving is served at once, and one removed is gone
        try PEFTAdapter.write(SchedulerTests.randomAdapter(f.base, seed: 9), to: f.folder + "/bravo")
        try FileManager.default.removeItem(atPath: f.folder + "/alpha")
        listing = f.service.models()
        XCTAssertEqual(listing["data"]!.arrayValue!.map { $0["id"]!.stringValue! }, ["tiny", "bravo"])
        let reply = try json(try await f.service.chatCompletions(body(#"{"model":"bravo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}"#)))
        XCTAssertEqual(reply["model"]?.stringValue, "bravo")
        XCTAssertEqual(try f.service.model("bravo")["id"]?.stringValue, "bravo")
    }

    func testAStreamingClientThatLeavesFreesItsSlot() async throws {
        let f = try fixture(maxActive: 1, queue: 0)
        defer { f.scheduler.shutdown() }
        // a string of at least 500 characters: the reply cannot end before the client leaves
        let request = #"{"model":"alpha","messages":[{"role":"user","content":"hi"}],"max_tokens":600,"stream":true,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"string","minLength":500}}}}"#
        do {
            guard case .stream(let s) = try await f.service.chatCompletions(body(request)) else { return XCTFail("a stream") }
            for _ in 0..<3 { _ = await s.next() }
            XCTAssertEqual(f.scheduler.status.active, 1)
            // the one slot is taken, no queue: the next request is refused with 503
            let error = await refusal { () async throws(ServerError) in try await f.service.chatCompletions(body(request)) }
            XCTAssertEqual(error?.status, 503, "a full server refuses")
        }  // the stream is dropped here, as the HTTP writer drops it when the client goes away
        let deadline = Date().addingTimeInterval(10)
        while f.scheduler.status.active > 0 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
        XCTAssertEqual(f.scheduler.status.active, 0)
        _ = try json(try await f.service.chatCompletions(body(#"{"model":"alpha","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#)))
    }

    /// Runs the HTTP application on a free loopback port while `body` talks to it with URLSession.
    func withLiveServer(_ service: OpenAIService, _ body: (URL) async throws -> Void) async throws {
        final class Port: @unchecked Sendable { var value = 0; let lock = NSLock() }
        let port = Port()
        let app = HTTPServer.application(service, host: "127.0.0.1", port: 0) { p in port.lock.withLock { port.value = p } }
        let server = Task { try await app.runService(gracefulShutdownSignals: []) }
        defer { server.cancel() }
        let deadline = Date().addingTimeInterval(20)
        while port.lock.withLock({ port.value }) == 0 && Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        let p = port.lock.withLock { port.value }
        XCTAssertGreaterThan(p, 0, "the server listens")
        try await body(URL(string: "http://127.0.0.1:\(p)")!)
    }

    func call(_ url: URL, _ path: String, method: String = "POST", body: String? = nil) async throws -> (Int, [String: String], JSONValue) {
        var request = URLRequest(url: url.appendingPathComponent(path))
        request.httpMethod = method
        if let body {
            request.httpBody = Data(body.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var headers: [String: String] = [:]
        for (k, v) in http.allHeaderFields { headers[String(describing: k).lowercased()] = String(describing: v) }
        return (http.statusCode, headers, try JSONValue.parse(String(decoding: data, as: UTF8.self)))
    }

    func testHTTPRoutesAndErrorBodies() async throws {
        let f = try fixture(maxActive: 1, queue: 0, start: false)
        defer { f.scheduler.shutdown() }
        try await withLiveServer(f.service) { url in
            var (status, headers, v) = try await call(url, "v1/models", method: "GET")
            XCTAssertEqual(status, 200)
            XCTAssertEqual(headers["content-type"], "application/json")
            XCTAssertEqual(v["object"]?.stringValue, "list")
            (status, _, v) = try await call(url, "v1/nothing", method: "GET")
            XCTAssertEqual(status, 404)
            XCTAssertNotNil(v["error"]?["message"]?.stringValue)
            (status, _, v) = try await call(url, "v1/chat/completions", body: "{nope")
            XCTAssertEqual(status, 400)
            XCTAssertEqual(v["error"]?["type"]?.stringValue, "invalid_request_error")
            XCTAssertEqual(v["error"]?["code"]?.stringValue, "invalid_json")
            (status, _, v) = try await call(url, "v1/chat/completions", body: String(repeating: " ", count: 5 << 20))
            XCTAssertEqual(status, 413)
            XCTAssertNotNil(v["error"]?["message"]?.stringValue)
            // the scheduler is not running: one request waits in the only slot; the next gets 503
            _ = try f.scheduler.submit(DecodeRequest(prompt: [1, 2], adapter: nil, maxTokens: 2, stopTokens: []))
            (status, headers, v) = try await call(url, "v1/completions", body: #"{"model":"tiny","prompt":"hi"}"#)
            XCTAssertEqual(status, 503)
            XCTAssertEqual(headers["retry-after"], "1")
            XCTAssertEqual(v["error"]?["code"]?.stringValue, "queue_full")
        }
    }
}
