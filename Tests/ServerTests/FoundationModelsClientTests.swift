// Apple's ChatCompletionsLanguageModel (the Foundation Models framework's OpenAI client, OS 27)
// against `serve`, replayed: its requests built and encoded as it builds them, sent as it sends
// them, its stream parsed and its tool-call deltas joined as it parses and joins them, over a
// live HTTP server. Ten request kinds (plain; multi-turn with text parts; streaming with options;
// greedy; guided with a nested `$defs` schema; guided beside tools; a tool round trip; tool
// choice none; tool choice required; errors), plus the request parsing of its shapes, the
// in-stream error event it decodes, and the keys it sends through `additionalHeaders`.
//
// Written from apple/foundation-models-utilities at commit 2aa12937e30d310687f40fc470ea35495816c9a4:
//   Sources/FoundationModelsUtilities/LanguageModels/ChatCompletionsLanguageModel.swift — the
//     request (ChatCompletionRequest: model, messages, temperature?, top_p?, max_completion_tokens?,
//     tools (always, maybe []), tool_choice (always: auto / required / none), response_format?,
//     stream true, stream_options.include_usage true), ChatMessage.encode (one text part as a
//     string, several as parts, no content when empty, tool_calls, tool_call_id,
//     reasoning_content), greedy sampling sent as top_p 0, the headers (Content-Type, Accept:
//     text/event-stream, User-Agent, then additionalHeaders) and the URL (/v1/chat/completions
//     appended to a base without a version segment); what it reads: parseStreamLine (trimmed
//     lines, ':' comments, 'data: ', [DONE], a chunk or else an error body), ChatCompletionChunk
//     (id, model, choices[].delta, usage with prompt_tokens, completion_tokens,
//     prompt_tokens_details.cached_tokens), processChunks (choices[0].delta only; tool-call
//     deltas routed by integer index, id and name concatenated across deltas, arguments
//     appended; content only when a delta has no tool_calls); on Linux the whole body read with
//     URLSession.data(for:) and split on "\n" — the path this test takes.
//   Tests/FoundationModelsUtilitiesTests/LanguageModelTests/ChatCompletionsTests+RequestFormat.swift
//     and ChatCompletionsTestUtilities.swift — model name, stream true, a system then a user
//     message, custom headers merged (Authorization: Bearer), the endpoint path.
// GenerationSchema's JSON (the framework is closed and not on Linux) is taken from a published
// capture of the framework's own requests (macOS 26.3: `Array<Pet>` with `$defs`, a tool's
// `Arguments` with `title`, `x-order`, `additionalProperties: false`), keys in no fixed order,
// slashes escaped as JSONEncoder writes them.
//
// With FM_REPLAY_URL (and FM_REPLAY_MODEL, FM_REPLAY_KEY) set, the same replay runs against that
// server: scripts/serve/check.sh points it at `serve` with the real model.
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
@testable import Server
import TestSupport
import XCTest

/// The client's wire types, declared again from its source with its field names, optionality and
/// coding, so that JSONEncoder and JSONDecoder treat them as they treat the client's.
enum FMWire {
    struct Request: Encodable {
        var model: String
        var messages: [Message]
        var temperature: Double?
        var topP: Double?
        var maxCompletionTokens: Int?
        var tools: [Tool]? = []
        var toolChoice: String? = "auto"
        var responseFormat: ResponseFormat?
        var stream = true
        var streamOptions = StreamOptions(includeUsage: true)

        struct StreamOptions: Encodable {
            var includeUsage: Bool
            enum CodingKeys: String, CodingKey { case includeUsage = "include_usage" }
        }

        enum CodingKeys: String, CodingKey {
            case model, messages, temperature, tools, stream
            case topP = "top_p", maxCompletionTokens = "max_completion_tokens", responseFormat = "response_format"
            case streamOptions = "stream_options", toolChoice = "tool_choice"
        }
    }

    struct Message: Encodable {
        var role: String
        var content: [Part] = []
        var toolCalls: [ToolCall]?
        var toolCallID: String?
        var reasoningContent: String?

        enum CodingKeys: String, CodingKey {
            case role, content
            case toolCalls = "tool_calls", toolCallID = "tool_call_id", reasoningContent = "reasoning_content"
        }

        /// One text part is sent as a string; several (or an image) as parts; none not at all.
        func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(role, forKey: .role)
            let hasToolCalls = toolCalls?.isEmpty == false
            if content.count == 1, let text = content[0].text {
                try c.encode(text, forKey: .content)
            } else if !hasToolCalls && !content.isEmpty {
                try c.encode(content, forKey: .content)
            }
            try c.encodeIfPresent(toolCalls, forKey: .toolCalls)
            try c.encodeIfPresent(toolCallID, forKey: .toolCallID)
            try c.encodeIfPresent(reasoningContent, forKey: .reasoningContent)
        }

        static func system(_ parts: String...) -> Message { Message(role: "system", content: parts.map(Part.init(text:))) }
        static func user(_ parts: String...) -> Message { Message(role: "user", content: parts.map(Part.init(text:))) }
        static func assistant(_ parts: String...) -> Message { Message(role: "assistant", content: parts.map(Part.init(text:))) }
    }

    struct Part: Encodable {
        var type: String
        var text: String?
        var imageURL: ImageURL?
        enum CodingKeys: String, CodingKey { case type, text, imageURL = "image_url" }
        init(text: String) { type = "text"; self.text = text }
        init(imageURL: String) { type = "image_url"; self.imageURL = ImageURL(url: imageURL) }
    }

    struct ImageURL: Encodable {
        var url: String
        var detail: String? = "auto"
    }

    struct ToolCall: Encodable {
        var id: String
        var type = "function"
        var function: Function
        struct Function: Encodable { var name: String; var arguments: String }
    }

    struct Tool: Encodable {
        var type = "function"
        var function: Function
        struct Function: Encodable { let name: String; let description: String; let parameters: Raw }
        init(_ name: String, _ description: String, _ parameters: String) throws {
            function = Function(name: name, description: description, parameters: Raw(try JSONValue.parse(parameters)))
        }
    }

    struct ResponseFormat: Encodable {
        var type = "json_schema"
        var jsonSchema: Wrapper
        enum CodingKeys: String, CodingKey { case type, jsonSchema = "json_schema" }
        struct Wrapper: Encodable {
            var name: String
            var description: String?
            var schema: Raw
            var strict = true
        }
        init(name: String, schema: String) throws { jsonSchema = Wrapper(name: name, schema: Raw(try JSONValue.parse(schema))) }
    }

    /// A GenerationSchema's JSON, encoded through JSONEncoder as the schema encodes itself.
    struct Raw: Encodable {
        let value: JSONValue
        init(_ value: JSONValue) { self.value = value }
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        func encode(to encoder: Encoder) throws {
            switch value {
            case .null: var c = encoder.singleValueContainer(); try c.encodeNil()
            case .bool(let b): var c = encoder.singleValueContainer(); try c.encode(b)
            case .number(let n):
                var c = encoder.singleValueContainer()
                if n.isInteger { try c.encode(Int64(n.doubleValue)) } else { try c.encode(n.doubleValue) }
            case .string(let s): var c = encoder.singleValueContainer(); try c.encode(s)
            case .array(let items):
                var c = encoder.unkeyedContainer()
                for item in items { try c.encode(Raw(item)) }
            case .object(let members):
                var c = encoder.container(keyedBy: Key.self)
                for m in members { try c.encode(Raw(m.value), forKey: Key(stringValue: m.key)) }
            }
        }
    }

    struct Chunk: Decodable {
        let id: String
        let model: String
        let choices: [Choice]
        let usage: Usage?

        struct Choice: Decodable {
            let delta: Delta
            struct Delta: Decodable {
                var role: String?
                var content: String?
                var reasoningContent: String?
                var toolCalls: [ToolCallDelta]?
                enum CodingKeys: String, CodingKey { case role, content, reasoningContent = "reasoning_content", toolCalls = "tool_calls" }
            }
        }

        struct ToolCallDelta: Decodable {
            let index: Int
            let id: String?
            let type: String?
            let function: FunctionDelta?
            struct FunctionDelta: Decodable { let name: String?; let arguments: String? }
        }

        struct Usage: Decodable {
            let promptTokens: Int
            let completionTokens: Int
            let promptTokensDetails: PromptDetails?
            let completionTokensDetails: CompletionDetails?
            struct PromptDetails: Decodable {
                let cachedTokens: Int?
                enum CodingKeys: String, CodingKey { case cachedTokens = "cached_tokens" }
            }
            struct CompletionDetails: Decodable {
                let reasoningTokens: Int?
                enum CodingKeys: String, CodingKey { case reasoningTokens = "reasoning_tokens" }
            }
            enum CodingKeys: String, CodingKey {
                case promptTokens = "prompt_tokens", completionTokens = "completion_tokens"
                case promptTokensDetails = "prompt_tokens_details", completionTokensDetails = "completion_tokens_details"
            }
        }
    }

    struct ErrorResponse: Decodable {
        var error: APIError
        struct APIError: Decodable, Equatable {
            var message: String
            var type: String?
            var param: String?
            var code: String?
        }
    }
}

/// The client's transport, stream parsing and event joining, as it does them on Linux.
struct FMClient {
    let base: URL
    var additionalHeaders: [String: String] = [:]

    enum Failure: Error, CustomStringConvertible {
        /// A status other than 200, with the body (the client's RequestError.httpError).
        case http(Int, Data)
        /// An error event in the stream (the client's APIError).
        case api(FMWire.ErrorResponse.APIError)

        var description: String {
            switch self {
            case let .http(status, body): return "HTTP \(status): \(String(decoding: body, as: UTF8.self))"
            case let .api(e): return "error event: \(e)"
            }
        }
    }

    /// What the client hands the framework: response text, reasoning, tool calls by id (in the
    /// order they appeared; arguments appended delta by delta) and the last usage.
    struct Outcome {
        var text = "", reasoning = ""
        var textDeltas = 0
        var calls: [(id: String, name: String, arguments: String, deltas: Int)] = []
        var usage: FMWire.Chunk.Usage?
        var chunks = 0
        var ids = Set<String>(), models = Set<String>()

        var cached: Int { usage?.promptTokensDetails?.cachedTokens ?? 0 }
    }

    func respond(_ request: FMWire.Request) async throws -> Outcome {
        let versioned = base.pathComponents.contains { $0.wholeMatch(of: #/v\d+/#) != nil }
        var urlRequest = URLRequest(url: base.appendingPathComponent(versioned ? "/chat/completions" : "/v1/chat/completions"))
        urlRequest.httpMethod = "POST"
        let headers = ["Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "com.apple.FoundationModels"]
            .merging(additionalHeaders) { _, custom in custom }
        for (k, v) in headers { urlRequest.setValue(v, forHTTPHeaderField: k) }
        urlRequest.httpBody = try JSONEncoder().encode(request)
        urlRequest.timeoutInterval = 600
        let (data, response) = try await URLSession(configuration: .ephemeral).data(for: urlRequest)
        let status = (response as! HTTPURLResponse).statusCode
        guard status == 200 else { throw Failure.http(status, data) }
        var outcome = Outcome()
        var routing: [Int: (id: String, name: String)] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
            guard let chunk = try Self.parse(String(line)) else { continue }
            outcome.chunks += 1
            outcome.ids.insert(chunk.id)
            outcome.models.insert(chunk.model)
            if let delta = chunk.choices.first?.delta {
                if let reasoning = delta.reasoningContent { outcome.reasoning += reasoning }
                if let deltas = delta.toolCalls {
                    for d in deltas {
                        let existing = routing[d.index] ?? (id: "", name: "")
                        let r = (id: existing.id + (d.id ?? ""), name: existing.name + (d.function?.name ?? ""))
                        routing[d.index] = r
                        guard !r.id.isEmpty, !r.name.isEmpty else { continue }
                        if let i = outcome.calls.firstIndex(where: { $0.id == r.id }) {
                            outcome.calls[i].name = r.name
                            outcome.calls[i].arguments += d.function?.arguments ?? ""
                            outcome.calls[i].deltas += 1
                        } else {
                            outcome.calls.append((r.id, r.name, d.function?.arguments ?? "", 1))
                        }
                    }
                } else if let text = delta.content {
                    outcome.text += text
                    outcome.textDeltas += 1
                }
            }
            if let usage = chunk.usage { outcome.usage = usage }
        }
        return outcome
    }

    /// One line of the stream: nil for blanks, comments and [DONE]; a chunk; or the error event's error.
    static func parse(_ line: String) throws -> FMWire.Chunk? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, !trimmed.hasPrefix(":") else { return nil }
        guard trimmed.hasPrefix("data: ") else { return nil }
        let json = String(trimmed.dropFirst(6))
        if json.trimmingCharacters(in: .whitespaces) == "[DONE]" { return nil }
        let decoder = JSONDecoder()
        do {
            return try decoder.decode(FMWire.Chunk.self, from: Data(json.utf8))
        } catch {
            if let e = try? decoder.decode(FMWire.ErrorResponse.self, from: Data(json.utf8)) { throw Failure.api(e.error) }
            throw error
        }
    }
}

final class FoundationModelsClientTests: XCTestCase {
    // MARK: what the framework sends

    static let instructions = "You are a helpful assistant. Answer briefly."
    /// A tool's Arguments as the framework encodes them (the capture's WeatherTool).
    static let weatherParameters = #"""
    {"additionalProperties":false,"properties":{"location":{"description":"The city and state, e.g. Chicago, IL","type":"string"},
     "unit":{"enum":["celsius","fahrenheit"],"type":"string"}},"required":["location"],"title":"Arguments","type":"object",
     "x-order":["location","unit"]}
    """#
    /// A tool whose Arguments hold a nested @Generable type (`$defs`, `#\/$defs\/...`).
    static let routeParameters = #"""
    {"x-order":["from","to"],"title":"Arguments","type":"object","additionalProperties":false,"required":["from","to"],
     "$defs":{"Place":{"title":"Place","type":"object","additionalProperties":false,"x-order":["city","country"],
                       "required":["city","country"],
                       "properties":{"country":{"type":"string","enum":["NO","FR","IT"]},"city":{"type":"string"}}}},
     "properties":{"to":{"$ref":"#\/$defs\/Place"},"from":{"$ref":"#\/$defs\/Place"}}}
    """#
    /// `[Pet]` with its `@Guide` descriptions and bound, as the capture has it.
    static let petsSchema = #"""
    {"$defs":{"Pet":{"additionalProperties":false,"properties":{
        "age":{"description":"Age of the pet. Measured in Earth solar years.","minimum":0,"type":"integer"},
        "name":{"description":"The name of the pet, as referred to by other people.","type":"string"},
        "species":{"description":"The species of the pet","type":"string"}},
      "required":["name","species","age"],"title":"Pet","type":"object","x-order":["name","species","age"]}},
     "items":{"$ref":"#\/$defs\/Pet"},"type":"array"}
    """#

    static func tools() throws -> [FMWire.Tool] {
        [try FMWire.Tool("get_weather", "Get the weather in a given location", weatherParameters),
         try FMWire.Tool("plan_route", "Plan a train route between two places", routeParameters)]
    }

    // MARK: the replay

    struct Target {
        let client: FMClient
        let model: String
        /// Another client with no key, and one with a wrong key (nil: the server has no keys).
        let keyless: FMClient?
        let health: URL
    }

    /// The ten request kinds; every field the client reads is checked.
    func replay(_ t: Target) async throws {
        let tools = try Self.tools()
        let weather = try JSONSchema(try JSONValue.parse(Self.weatherParameters))
        let route = try JSONSchema(try JSONValue.parse(Self.routeParameters))
        let pets = try JSONSchema(try JSONValue.parse(Self.petsSchema))
        func request(_ messages: [FMWire.Message], max: Int = 48) -> FMWire.Request {
            FMWire.Request(model: t.model, messages: messages, maxCompletionTokens: max)
        }
        func checkShape(_ o: FMClient.Outcome, _ what: String, file: StaticString = #filePath, line: UInt = #line) throws {
            XCTAssertEqual(o.ids.count, 1, "\(what): one id on every chunk", file: file, line: line)
            XCTAssertEqual(o.models, [t.model], "\(what): the model on every chunk", file: file, line: line)
            let usage = try XCTUnwrap(o.usage, "\(what): a usage chunk", file: file, line: line)
            XCTAssertGreaterThan(usage.promptTokens, 0, what, file: file, line: line)
            // the client sends no seed, so a sampled reply may end at its first token (an empty
            // reply, 0 completion tokens: seen once in a full run on the tiny model); a reply
            // with text or a call counts its tokens
            XCTAssertGreaterThanOrEqual(usage.completionTokens, o.text.isEmpty && o.calls.isEmpty ? 0 : 1, what, file: file, line: line)
            let cached = try XCTUnwrap(usage.promptTokensDetails?.cachedTokens, "\(what): prompt_tokens_details.cached_tokens", file: file, line: line)
            XCTAssertTrue((0...usage.promptTokens).contains(cached), "\(what): cached \(cached) of \(usage.promptTokens)", file: file, line: line)
        }
        /// One line per kind in the log (check.sh shows them): what came back.
        func note(_ kind: String, _ o: FMClient.Outcome) {
            let what = o.calls.first.map { "call \($0.name)(\($0.arguments.prefix(80))) in \($0.deltas) deltas" } ?? "text \(o.text.prefix(80).debugDescription) in \(o.textDeltas) deltas"
            print("replay: \(kind): \(what); usage \(o.usage.map { "\($0.promptTokens) prompt (\($0.promptTokensDetails?.cachedTokens ?? -1) cached), \($0.completionTokens) completion" } ?? "none")")
        }
        /// The reply's calls (the client sends no parallel_tool_calls, so several may come, each
        /// under its own index): each whole and valid, ids distinct; the first returned.
        func checkCall(_ o: FMClient.Outcome, _ what: String, file: StaticString = #filePath, line: UInt = #line) throws -> (id: String, name: String, arguments: String) {
            XCTAssertFalse(o.calls.isEmpty, "\(what): a call", file: file, line: line)
            XCTAssertEqual(Set(o.calls.map(\.id)).count, o.calls.count, "\(what): distinct ids: \(o.calls)", file: file, line: line)
            for call in o.calls {
                XCTAssertTrue(call.id.hasPrefix("call_"), call.id, file: file, line: line)
                XCTAssertTrue(["get_weather", "plan_route"].contains(call.name), "\(what): the name is sent once: \(call.name)", file: file, line: line)
                let arguments = try JSONValue.parse(call.arguments)
                XCTAssertEqual((call.name == "get_weather" ? weather : route).validate(arguments), [], "\(what): \(call.arguments)", file: file, line: line)
            }
            XCTAssertEqual(o.text, "", "\(what): no text beside the calls", file: file, line: line)
            let call = try XCTUnwrap(o.calls.first, file: file, line: line)
            return (call.id, call.name, call.arguments)
        }

        // 1. plain: instructions and a prompt, no tools ("tools": [], "tool_choice": "auto")
        let plain = try await t.client.respond(request([.system(Self.instructions), .user("Name three colours.")]))
        note("plain", plain)
        try checkShape(plain, "plain")
        XCTAssertFalse(plain.text.isEmpty, "plain: text")
        XCTAssertTrue(plain.calls.isEmpty)

        // 2. multi-turn with text parts (instructions of two segments, a prompt of text and a
        // structure), the second turn beginning like the first: the prompt cache's positions are
        // reported as cached_tokens
        let first: [FMWire.Message] = [.system(Self.instructions, " Use English."), .user("Name a colour.")]
        let turn1 = try await t.client.respond(request(first, max: 8))
        try checkShape(turn1, "turn 1")
        let turn2 = try await t.client.respond(request(first + [.assistant(turn1.text.isEmpty ? "Blue." : turn1.text),
                                                                 .user("And one more, like this: ", #"{"colour":"red"}"#)], max: 16))
        note("multi-turn with parts", turn2)
        try checkShape(turn2, "turn 2")
        XCTAssertGreaterThan(turn2.cached, 0, "the second turn reuses the first turn's prompt positions")

        // 3. streaming with options (temperature, maximumResponseTokens → max_completion_tokens)
        var streamed = request([.system(Self.instructions), .user("Tell me about trains.")], max: 12)
        streamed.temperature = 0.7
        let s = try await t.client.respond(streamed)
        note("streaming with options", s)
        try checkShape(s, "streamed")
        XCTAssertLessThanOrEqual(s.usage!.completionTokens, 12)
        if s.usage!.completionTokens >= 4 { XCTAssertGreaterThan(s.textDeltas, 1, "the text comes in pieces: \(s.textDeltas)") }

        // 4. greedy: top_p 0 and no temperature; the same request twice gives the same text
        var greedy = request([.user("Count from one to five.")], max: 16)
        greedy.topP = 0
        let g1 = try await t.client.respond(greedy), g2 = try await t.client.respond(greedy)
        note("greedy", g1)
        try checkShape(g1, "greedy")
        XCTAssertEqual(g1.text, g2.text, "greedy replies are the same")

        // 5. guided generation with a nested $defs schema: a value that validates, properties in x-order
        var guided = request([.system(Self.instructions), .user("Please provide a few ideas for pets.")], max: 200)
        guided.responseFormat = try FMWire.ResponseFormat(name: "Array<Pet>", schema: Self.petsSchema)
        let value = try await t.client.respond(guided)
        note("guided $defs", value)
        try checkShape(value, "guided")
        let parsed = try JSONValue.parse(value.text)
        XCTAssertEqual(pets.validate(parsed), [], value.text)
        for pet in parsed.arrayValue ?? [] { XCTAssertEqual(pet.objectMembers?.map(\.key), ["name", "species", "age"], "x-order: \(value.text)") }

        // 6. guided beside tools (tool_choice auto): a call of a tool or the schema's value
        var beside = guided
        beside.tools = tools
        let either = try await t.client.respond(beside)
        note("guided beside tools", either)
        try checkShape(either, "guided beside tools")
        if either.calls.isEmpty {
            XCTAssertEqual(pets.validate(try JSONValue.parse(either.text)), [], either.text)
        } else {
            _ = try checkCall(either, "guided beside tools")
        }

        // 7. a tool round trip: a call streamed in deltas and joined, then its output sent back
        var ask = request([.system(Self.instructions), .user("Plan a train route from Oslo to Paris.")], max: 120)
        ask.tools = tools
        ask.toolChoice = "required"
        let asked = try await t.client.respond(ask)
        note("tool round trip, the call", asked)
        try checkShape(asked, "tool call")
        let call = try checkCall(asked, "tool call")
        if asked.usage!.completionTokens > 8 { XCTAssertGreaterThan(asked.calls[0].deltas, 1, "the arguments come in pieces") }
        var back = ask
        back.toolChoice = "auto"
        back.messages += [FMWire.Message(role: "assistant", toolCalls: [FMWire.ToolCall(id: call.id, function: .init(name: call.name, arguments: call.arguments))]),
                          FMWire.Message(role: "tool", content: [FMWire.Part(text: "Oslo 07:00 -> Paris 21:30, one change in Hamburg.")], toolCallID: call.id)]
        let answered = try await t.client.respond(back)
        note("tool round trip, the answer", answered)
        try checkShape(answered, "after the tool's output")
        if answered.calls.isEmpty { XCTAssertFalse(answered.text.isEmpty) } else { _ = try checkCall(answered, "after the tool's output") }

        // 8. tool choice none (toolCallingMode disallowed): text, no call
        var none = request([.system(Self.instructions), .user("What is the weather like in Chicago?")], max: 24)
        none.tools = tools
        none.toolChoice = "none"
        let text = try await t.client.respond(none)
        note("tool choice none", text)
        try checkShape(text, "tool choice none")
        XCTAssertTrue(text.calls.isEmpty)
        XCTAssertFalse(text.text.isEmpty || text.text.hasPrefix("<"), text.text)

        // 9. tool choice required with one tool
        var required = none
        required.tools = [tools[0]]
        required.toolChoice = "required"
        required.maxCompletionTokens = 80
        let forced = try await t.client.respond(required)
        note("tool choice required", forced)
        try checkShape(forced, "tool choice required")
        XCTAssertEqual(try checkCall(forced, "tool choice required").name, "get_weather")

        // 10. errors: an OpenAI error body with the status (the client surfaces the body)
        func failure(_ c: FMClient, _ r: FMWire.Request) async -> (Int, FMWire.ErrorResponse.APIError?) {
            do {
                _ = try await c.respond(r)
                return (200, nil)
            } catch FMClient.Failure.http(let status, let data) {
                return (status, try? JSONDecoder().decode(FMWire.ErrorResponse.self, from: data).error)
            } catch {
                XCTFail("\(error)")
                return (0, nil)
            }
        }
        var unknown = request([.user("hi")])
        unknown.model = "no-such-model"
        var (status, error) = await failure(t.client, unknown)
        XCTAssertEqual(status, 404)
        XCTAssertEqual(error?.code, "model_not_found")
        let image = request([FMWire.Message(role: "user", content: [FMWire.Part(text: "What is this?"), FMWire.Part(imageURL: "data:image/jpeg;base64,AAAA")])])
        (status, error) = await failure(t.client, image)
        XCTAssertEqual(status, 400)
        XCTAssertEqual(error?.code, "unsupported_content")
        XCTAssertEqual(error?.param, "messages[0].content[1]")
        XCTAssertTrue(error?.message.contains("'\(t.model)' reads text only") == true, error?.message ?? "")
        if let keyless = t.keyless {
            let before = try await Self.health(t.health)["unauthorized"]
            (status, error) = await failure(keyless, request([.user("hi")]))
            XCTAssertEqual(status, 401)
            XCTAssertEqual(error?.code, "missing_api_key")
            var wrong = keyless
            wrong.additionalHeaders["Authorization"] = "Bearer not-the-key"
            (status, error) = await failure(wrong, request([.user("hi")]))
            XCTAssertEqual(status, 401)
            XCTAssertEqual(error?.code, "invalid_api_key")
            let after = try await Self.health(t.health)["unauthorized"]
            print("replay: errors: 404 unknown model, 400 image part, 401 without and with a wrong key")
            XCTAssertEqual(after.flatMap(\.doubleInt), before.flatMap(\.doubleInt).map { $0 + 2 }, "/health counts the refusals (and needs no key)")
        }
    }

    static func health(_ url: URL) async throws -> JSONValue {
        let (data, response) = try await URLSession(configuration: .ephemeral).data(from: url.appendingPathComponent("health"))
        XCTAssertEqual((response as! HTTPURLResponse).statusCode, 200)
        return try JSONValue.parse(String(decoding: data, as: UTF8.self))
    }

    // MARK: on the tiny model

    func makeService(_ name: String = #function) throws -> (OpenAIService, Scheduler) {
        let dir = TinyAssets.tempDir(name)
        // a byte-level tokenizer: the schemas and tools rendered in the prompt take ~2,000 tokens
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1, context: 8192), storage: .stored)
        let folder = dir + "/adapters"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try PEFTAdapter.write(SchedulerTests.randomAdapter(base, seed: 7), to: folder + "/alpha")
        let catalog = try AdapterCatalog(base: base, baseID: "tiny", folder: folder, rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 4, queueCapacity: 8)
        scheduler.start()
        return (try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 24, maxTokensLimit: 600)), scheduler)
    }

    func testTheClientsTenRequestKindsAgainstALiveServer() async throws {
        let (service, scheduler) = try makeService()
        defer { scheduler.shutdown() }
        let keys = try AccessKeys(["sk-first-key", "sk-second-key"])
        try await withLiveServer(service, keys: keys) { url in
            // the key as an app passes it: additionalHeaders ["Authorization": "Bearer ..."]
            let client = FMClient(base: url, additionalHeaders: ["Authorization": "Bearer sk-second-key"])
            try await replay(Target(client: client, model: "alpha", keyless: FMClient(base: url), health: url))
        }
    }

    /// The same replay against a running server (scripts/serve/check.sh: `serve` with the real model).
    func testTheClientsTenRequestKindsAgainstFMReplayURL() async throws {
        let env = ProcessInfo.processInfo.environment
        guard let address = env["FM_REPLAY_URL"], let url = URL(string: address), let model = env["FM_REPLAY_MODEL"] else {
            throw XCTSkip("FM_REPLAY_URL and FM_REPLAY_MODEL are not set: scripts/serve/check.sh sets them to a running serve with the real model")
        }
        let key = env["FM_REPLAY_KEY"]
        let client = FMClient(base: url, additionalHeaders: key.map { ["Authorization": "Bearer \($0)"] } ?? [:])
        try await replay(Target(client: client, model: model, keyless: key == nil ? nil : FMClient(base: url), health: url))
    }

    /// Runs the HTTP application on a free loopback port while `body` talks to it.
    func withLiveServer(_ service: OpenAIService, keys: AccessKeys, _ body: (URL) async throws -> Void) async throws {
        final class Port: @unchecked Sendable { var value = 0; let lock = NSLock() }
        let port = Port()
        let app = HTTPServer.application(service, host: "127.0.0.1", port: 0, keys: keys) { p in port.lock.withLock { port.value = p } }
        let server = Task { try await app.runService(gracefulShutdownSignals: []) }
        defer { server.cancel() }
        let deadline = Date().addingTimeInterval(20)
        while port.lock.withLock({ port.value }) == 0 && Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        let p = port.lock.withLock { port.value }
        XCTAssertGreaterThan(p, 0, "the server listens")
        try await body(URL(string: "http://127.0.0.1:\(p)")!)
    }

    // MARK: its requests, parsed

    func parse(_ r: FMWire.Request) throws -> ChatRequest {
        let data = try JSONEncoder().encode(r)
        return try ChatRequest(try OpenAIService.parse(Array(data)))
    }

    func testTheClientsRequestShapesParse() throws {
        let tools = try Self.tools()
        // no tools: "tools": [] with "tool_choice": "auto" (or none) is a plain request
        var r = FMWire.Request(model: "m", messages: [.system(Self.instructions), .user("hi")])
        var parsed = try parse(r)
        XCTAssertEqual(parsed.guide, Guide.none)
        XCTAssertTrue(parsed.tools.isEmpty)
        r.toolChoice = "none"
        XCTAssertEqual(try parse(r).guide, Guide.none)
        r.toolChoice = "required"
        XCTAssertThrowsError(try parse(r)) { XCTAssertEqual(($0 as? ServerError)?.param, "tool_choice") }
        // greedy: top_p 0 is temperature 0 (whatever temperature says); other values as given
        r.toolChoice = "auto"
        r.topP = 0
        XCTAssertEqual(try parse(r).sampling.temperature, 0)
        r.temperature = 0.9
        XCTAssertEqual(try parse(r).sampling.temperature, 0)
        r.topP = 0.5
        parsed = try parse(r)
        XCTAssertEqual(parsed.sampling.temperature, 0.9)
        XCTAssertEqual(parsed.sampling.topP, 0.5)
        // max_completion_tokens is max_tokens
        r.maxCompletionTokens = 33
        XCTAssertEqual(try parse(r).sampling.maxTokens, 33)
        XCTAssertEqual(try parse(r).sampling.maxTokensParam, "max_completion_tokens")
        // text parts are one text; empty instructions come as a system message without content
        r.messages = [FMWire.Message(role: "system"), .user("Describe ", #"{"colour":"red"}"#)]
        parsed = try parse(r)
        XCTAssertEqual(parsed.messages.map(\.content), ["", #"Describe {"colour":"red"}"#])
        // guided beside tools: one grammar of either; required / a named tool: a call; none: the value
        r.messages = [.system(Self.instructions), .user("pets?")]
        r.responseFormat = try FMWire.ResponseFormat(name: "Array<Pet>", schema: Self.petsSchema)
        r.tools = tools
        guard case .toolsOrValue(let offered, let schema, _) = try parse(r).guide else { return XCTFail("\(try parse(r).guide)") }
        XCTAssertEqual(offered.map(\.name), ["get_weather", "plan_route"])
        XCTAssertEqual(schema.root, try JSONValue.parse(Self.petsSchema))
        r.toolChoice = "required"
        guard case .tools(_, allowText: false) = try parse(r).guide else { return XCTFail("required") }
        r.toolChoice = "none"
        guard case .schema = try parse(r).guide else { return XCTFail("none") }
        // the tool parameters and the schema keep the `$ref`s the client escaped (`#\/$defs\/Place`)
        let route = try XCTUnwrap(try parse(r).tools.last?.parameters)
        XCTAssertEqual(route.root["properties"]?["to"]?["$ref"]?.stringValue, "#/$defs/Place")
        // reasoning given back is read into the turn, for a template that reads it; the service
        // refuses it by this name for one that does not (ReasoningTests)
        r.messages.append(FMWire.Message(role: "assistant", content: [FMWire.Part(text: "ok")], reasoningContent: "thinking"))
        r.messages.append(.user("and?"))
        XCTAssertEqual(try parse(r).reasoningParam, "messages[2].reasoning_content")
        XCTAssertEqual(try parse(r).messages.first { $0.role == .assistant }?.reasoning, "thinking")
    }

    func testToolParametersWithDefsAreServedAndBadOnesNamed() async throws {
        let (service, scheduler) = try makeService()
        defer { scheduler.shutdown() }
        var r = FMWire.Request(model: "tiny", messages: [.user("route?")], maxCompletionTokens: 100)
        r.tools = try Self.tools()
        r.toolChoice = "required"
        r.stream = false
        guard case .json(let reply) = try await service.chatCompletions(Array(try JSONEncoder().encode(r))) else { return XCTFail("json") }
        let call = try XCTUnwrap(reply["choices"]?.arrayValue?.first?["message"]?["tool_calls"]?.arrayValue?.first)
        XCTAssertNotNil(try JSONValue.parse(call["function"]!["arguments"]!.stringValue!))
        // a parameter schema generation cannot enforce is refused naming that tool's parameters
        r.tools = [try Self.tools()[0], try FMWire.Tool("half", "halves", #"{"type":"object","properties":{"n":{"type":"number","multipleOf":0.5}}}"#)]
        let body = Array(try JSONEncoder().encode(r))
        do throws(ServerError) {
            _ = try await service.chatCompletions(body)
            XCTFail("accepted")
        } catch {
            XCTAssertEqual(error.code, "unsupported_schema")
            XCTAssertEqual(error.param, "tools[1].function.parameters")
        }
    }

    // MARK: what it reads

    func testToolCallDeltasAreReadAsTheyAreDecoded() {
        let call = "<tool_call>\n{\"name\":\"plan_route\",\"arguments\":{\"from\":{\"city\":\"O}s\\\"lo\",\"country\":\"NO\"},\"to\":[1,{\"a\":\"]\"}]}}\n</tool_call>"
        let arguments = "{\"from\":{\"city\":\"O}s\\\"lo\",\"country\":\"NO\"},\"to\":[1,{\"a\":\"]\"}]}"
        for size in [1, 2, 3, 7, call.count] {
            var reader = ToolCallReader()
            var pieces: [ReplyPiece] = []
            var rest = Substring(call)
            while !rest.isEmpty {
                pieces += reader.feed(String(rest.prefix(size)))
                rest = rest.dropFirst(size)
            }
            XCTAssertEqual(pieces.first, .callStart(name: "plan_route", id: nil), "size \(size)")
            XCTAssertEqual(pieces.filter { if case .callStart = $0 { return true } else { return false } }.count, 1, "the name once")
            let joined = pieces.map { if case .arguments(let a) = $0 { return a } else { return "" } }.joined()
            XCTAssertEqual(joined, arguments, "size \(size)")
            XCTAssertEqual(reader.whole?.first?.name, "plan_route")
            XCTAssertEqual(reader.whole?.first?.arguments, arguments)
            if size == 1 { XCTAssertGreaterThan(pieces.count, 10, "arguments stream as they come") }
        }
        // scalar arguments end at the call's brace; a cut call is not whole; another shape is broken
        var scalar = ToolCallReader()
        _ = scalar.feed("<tool_call>\n{\"name\":\"n\",\"arguments\":12}\n</tool_call>")
        XCTAssertEqual(scalar.whole?.first?.arguments, "12")
        var cut = ToolCallReader()
        XCTAssertEqual(cut.feed("<tool_call>\n{\"name\":\"n\",\"arguments\":{\"a\":"), [.callStart(name: "n", id: nil), .arguments("{\"a\":")])
        XCTAssertNil(cut.whole)
        var other = ToolCallReader()
        XCTAssertEqual(other.feed("<tool_call>\n{\"arguments\":{},\"name\":\"n\"}\n</tool_call>"), [])
        XCTAssertTrue(other.broken)
    }

    func testAnErrorInTheStreamIsTheErrorEventTheClientDecodes() async throws {
        let (service, scheduler) = try makeService()
        var r = FMWire.Request(model: "tiny", messages: [.user("hi")], maxCompletionTokens: 600)
        r.responseFormat = try FMWire.ResponseFormat(name: "s", schema: #"{"type":"string","minLength":500}"#)
        guard case .stream(let stream) = try await service.chatCompletions(Array(try JSONEncoder().encode(r))) else { return XCTFail("a stream") }
        for _ in 0..<3 { _ = await stream.next() }
        scheduler.shutdown()  // the server stops mid-reply
        var lines: [String] = []
        while let e = await stream.next() { lines.append(contentsOf: e.split(separator: "\n").map(String.init)) }
        var thrown: Error?
        for line in lines {
            do { _ = try FMClient.parse(line) } catch { thrown = error; break }
        }
        guard case .api(let e)? = thrown as? FMClient.Failure else { return XCTFail("no error event: \(lines.suffix(3))") }
        XCTAssertEqual(e.type, "server_overloaded")
        XCTAssertFalse(e.message.isEmpty)
    }

    // MARK: keys

    func testKeysAreComparedWholeAndHostsJudged() throws {
        XCTAssertTrue(AccessKeys.equal(Array("sk-abc".utf8), Array("sk-abc".utf8)))
        for other in ["sk-ab", "sk-abcd", "sk-abd", "", "SK-abc"] { XCTAssertFalse(AccessKeys.equal(Array("sk-abc".utf8), Array(other.utf8)), other) }
        let keys = try AccessKeys(["one-key", "two-key"])
        XCTAssertNil(keys.check(authorization: "Bearer two-key"))
        XCTAssertNil(keys.check(authorization: "bearer one-key"))
        XCTAssertEqual(keys.check(authorization: nil), .unauthorized(missing: true))
        XCTAssertEqual(keys.check(authorization: "Basic b25lLWtleQ=="), .unauthorized(missing: true))
        XCTAssertEqual(keys.check(authorization: "Bearer three-key"), .unauthorized(missing: false))
        XCTAssertEqual(keys.refused, 3)
        XCTAssertNil(AccessKeys.open.check(authorization: nil))
        XCTAssertThrowsError(try AccessKeys(["has space"]))
        XCTAssertThrowsError(try AccessKeys([""]))
        let file = TinyAssets.tempDir() + "/keys"
        try "# serve keys\n\n  sk-1  \nsk-2\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(try AccessKeys.read(file: file), ["sk-1", "sk-2"])
        try "# none\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try AccessKeys.read(file: file)) { XCTAssertTrue("\($0.localizedDescription)".contains(file)) }
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"] { XCTAssertTrue(AccessKeys.isLoopback(host), host) }
        for host in ["0.0.0.0", "::", "192.168.1.2", "example.com", "128.0.0.1", "127.0.0.256", "127.0.0"] { XCTAssertFalse(AccessKeys.isLoopback(host), host) }
    }
}

extension JSONValue {
    /// An integer's value (for comparing /health counts).
    fileprivate var doubleInt: Int? {
        if case .number(let n) = self { return Int(n.doubleValue) }
        return nil
    }
}
