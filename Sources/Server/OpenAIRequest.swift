// OpenAI request bodies read into what the decoder needs: `/v1/chat/completions` (messages,
// sampling, `response_format`, `tools` + `tool_choice` + `parallel_tool_calls`, `stop`, `stream`)
// and `/v1/completions`.
// Every field is checked, and a wrong one is answered 400 naming it (`param`) and what it must
// be. Fields the API has but this server cannot honour (n > 1, logprobs, penalties) are refused,
// never ignored; fields that change nothing here (user, metadata, store, ...) are accepted.
// Reference: OpenAI's API reference, "Create chat completion" and "Create completion"; the
// shapes Apple's ChatCompletionsLanguageModel (apple/foundation-models-utilities) sends are
// taken as it sends them: `"tools": []` with `"tool_choice": "auto"`, greedy as `"top_p": 0`,
// `max_completion_tokens`, content as text parts, a system message without content (empty
// instructions), `response_format` beside tools.
import DataSchema
import Foundation
import ModelAssets

/// A JSON object's fields, read with errors that name the field's path.
struct Fields {
    let members: [JSONMember]
    let path: String

    init(_ value: JSONValue, path: String) throws(ServerError) {
        guard case .object(let m) = value else {
            throw .invalidRequest(path.isEmpty ? "The request body must be a JSON object, got \(value.typeName)." : "'\(path)' must be an object, got \(value.typeName).",
                                  param: path.isEmpty ? nil : path)
        }
        members = m
        self.path = path
    }

    func name(_ key: String) -> String { path.isEmpty ? key : path + "." + key }

    /// The value at `key`; a JSON null counts as absent (OpenAI's optional fields take null).
    subscript(key: String) -> JSONValue? {
        guard let v = members.last(where: { $0.key == key })?.value else { return nil }
        if case .null = v { return nil }
        return v
    }

    func wrong(_ key: String, _ expected: String) -> ServerError {
        .invalidRequest("'\(name(key))' must be \(expected), got \(self[key]?.compactText.prefix(80) ?? "nothing").", param: name(key))
    }

    func string(_ key: String) throws(ServerError) -> String? {
        guard let v = self[key] else { return nil }
        guard case .string(let s) = v else { throw wrong(key, "a string") }
        return s
    }

    func required(_ key: String) throws(ServerError) -> JSONValue {
        guard let v = self[key] else { throw .invalidRequest("'\(name(key))' is required.", param: name(key), code: "missing_required_parameter") }
        return v
    }

    func int(_ key: String) throws(ServerError) -> Int? {
        guard let v = self[key] else { return nil }
        guard case .number(let n) = v, n.isInteger, abs(n.doubleValue) < 1e15 else { throw wrong(key, "an integer") }
        return Int(n.doubleValue)
    }

    func number(_ key: String) throws(ServerError) -> Double? {
        guard let v = self[key] else { return nil }
        guard case .number(let n) = v, n.doubleValue.isFinite else { throw wrong(key, "a number") }
        return n.doubleValue
    }

    func bool(_ key: String) throws(ServerError) -> Bool? {
        guard let v = self[key] else { return nil }
        guard case .bool(let b) = v else { throw wrong(key, "true or false") }
        return b
    }

    func array(_ key: String) throws(ServerError) -> [JSONValue]? {
        guard let v = self[key] else { return nil }
        guard case .array(let a) = v else { throw wrong(key, "an array") }
        return a
    }

    func object(_ key: String) throws(ServerError) -> Fields? {
        guard let v = self[key] else { return nil }
        return try Fields(v, path: name(key))
    }
}

/// Sampling and length settings common to both endpoints.
struct SamplingParameters: Equatable {
    var maxTokens: Int?
    /// The field max_tokens came from (max_completion_tokens wins when both are given).
    var maxTokensParam = "max_tokens"
    var temperature = 1.0
    var topP: Double?
    var topK: Int?
    var seed: UInt64?
    var stop: [String] = []
    var stream = false
    var includeUsage = false

    init(_ f: Fields) throws(ServerError) {
        let completionTokens = try f.int("max_completion_tokens"), plainMaxTokens = try f.int("max_tokens")
        let given = completionTokens ?? plainMaxTokens
        let key = f["max_completion_tokens"] != nil ? "max_completion_tokens" : "max_tokens"
        if let m = given, m < 1 {
            throw .invalidRequest("'\(key)' must be at least 1, got \(m).", param: key, code: "invalid_value")
        }
        maxTokens = given
        maxTokensParam = key
        if let t = try f.number("temperature") {
            guard (0...2).contains(t) else { throw .invalidRequest("'temperature' must be between 0 and 2, got \(t).", param: "temperature", code: "invalid_value") }
            temperature = t
        }
        if let p = try f.number("top_p") {
            guard p >= 0 && p <= 1 else { throw .invalidRequest("'top_p' must be between 0 and 1, got \(p).", param: "top_p", code: "invalid_value") }
            // 0 keeps only the most likely token: greedy, whatever the temperature (Apple's
            // ChatCompletionsLanguageModel sends its greedy sampling mode so)
            if p == 0 { temperature = 0 }
            topP = p > 0 && p < 1 ? p : nil
        }
        if let k = try f.int("top_k") {
            guard k >= 1 else { throw .invalidRequest("'top_k' must be at least 1, got \(k).", param: "top_k", code: "invalid_value") }
            topK = k
        }
        if let s = try f.int("seed") { seed = UInt64(bitPattern: Int64(s)) }
        if let n = try f.int("n"), n != 1 {
            throw .invalidRequest("'n' must be 1: this server returns one choice per request (send several requests; they are batched together).", param: "n", code: "unsupported_value")
        }
        for key in ["presence_penalty", "frequency_penalty"] {
            if let v = try f.number(key), v != 0 {
                throw .invalidRequest("'\(key)' is not supported by this server (only 0).", param: key, code: "unsupported_parameter")
            }
        }
        if f["logprobs"] != nil, case .bool(true) = f["logprobs"]! {
            throw .invalidRequest("'logprobs' is not supported by this server.", param: "logprobs", code: "unsupported_parameter")
        }
        if f["logprobs"] != nil, case .number = f["logprobs"]! {
            throw .invalidRequest("'logprobs' is not supported by this server.", param: "logprobs", code: "unsupported_parameter")
        }
        if f["logit_bias"] != nil, let o = try f.object("logit_bias"), !o.members.isEmpty {
            throw .invalidRequest("'logit_bias' is not supported by this server.", param: "logit_bias", code: "unsupported_parameter")
        }
        if let v = f["stop"] {
            switch v {
            case .string(let s): stop = [s]
            case .array(let a):
                stop = try a.enumerated().map { i, e throws(ServerError) in
                    guard case .string(let s) = e else { throw .invalidRequest("'stop[\(i)]' must be a string.", param: "stop") }
                    return s
                }
                guard stop.count <= 4 else { throw .invalidRequest("'stop' takes at most 4 sequences, got \(stop.count).", param: "stop") }
            default: throw f.wrong("stop", "a string or an array of strings")
            }
            guard !stop.contains("") else { throw .invalidRequest("'stop' sequences must not be empty.", param: "stop", code: "invalid_value") }
        }
        stream = try f.bool("stream") ?? false
        if let o = try f.object("stream_options") { includeUsage = try o.bool("include_usage") ?? false }
    }
}

/// How a chat reply is constrained.
enum Guide: Equatable {
    case none
    /// response_format json_schema / json_object.
    case schema(JSONSchema, param: String)
    /// Tools: a call (or, with `allowText`, text not starting with `<`).
    case tools([ToolDefinition], allowText: Bool)
    /// A call of one of the tools or the schema's value (response_format beside tools, tool_choice auto).
    case toolsOrValue([ToolDefinition], JSONSchema, param: String)
    /// The prompt shows tools but the reply is text (tool_choice none): text not starting with `<`.
    case textOnly
}

/// A chat completion request, read and checked.
struct ChatRequest {
    var model: String
    var messages: [Message]
    var sampling: SamplingParameters
    var guide: Guide
    /// Tools declared in the request (rendered on the system turn).
    var tools: [ToolDefinition]
    /// `parallel_tool_calls` (OpenAI's default true): a reply may hold several calls, where the
    /// model's call format joins calls.
    var parallelToolCalls = true
    /// Where the first reasoning given back is (`messages[N].reasoning_content`), for the error
    /// when the model's template has no thinking block to render it in.
    var reasoningParam: String?

    init(_ body: JSONValue) throws(ServerError) {
        let f = try Fields(body, path: "")
        guard case .string(let m) = try f.required("model") else { throw f.wrong("model", "a string") }
        model = m
        sampling = try SamplingParameters(f)
        guard case .array(let list) = try f.required("messages") else { throw f.wrong("messages", "an array of messages") }
        guard !list.isEmpty else { throw .invalidRequest("'messages' must contain at least one message.", param: "messages", code: "invalid_value") }
        var callNames: [String: String] = [:]
        messages = []
        for (i, item) in list.enumerated() {
            messages.append(try Self.message(try Fields(item, path: "messages[\(i)]"), model: model, callNames: &callNames))
            if reasoningParam == nil, messages[i].reasoning != nil { reasoningParam = "messages[\(i)].reasoning_content" }
        }
        tools = try Self.tools(f)
        let choice = try Self.toolChoice(f, tools: tools)
        parallelToolCalls = try f.bool("parallel_tool_calls") ?? true
        if !tools.isEmpty {
            if let i = messages.firstIndex(where: { $0.role == .system }) {
                messages[i].tools = tools
            } else {
                messages.insert(Message(role: .system, content: "", tools: tools), at: 0)
            }
        }
        var value: (schema: JSONSchema, param: String)?
        if let rf = try f.object("response_format") {
            let type = try rf.string("type") ?? "text"
            switch type {
            case "text": break
            case "json_object":
                value = (Self.anyObject, "response_format")
            case "json_schema":
                guard let js = try rf.object("json_schema") else { throw .invalidRequest("'response_format.json_schema' is required when type is json_schema.", param: "response_format.json_schema") }
                let name = try js.string("name") ?? "response"
                let schemaValue = try js.required("schema")
                let schema: JSONSchema
                do throws(DataSchemaError) {
                    schema = try JSONSchema(schemaValue, context: "response_format.json_schema.schema")
                } catch {
                    throw .unsupportedGuide(error.localizedDescription, param: "response_format.json_schema.schema")
                }
                guard let u = messages.lastIndex(where: { $0.role == .user }) else {
                    throw .invalidRequest("'response_format' needs a user message to answer.", param: "messages")
                }
                // the schema is rendered before the last user turn, as training renders a response_format
                messages[u].responseFormat = ResponseFormat(name: name, description: try js.string("description"), strict: try js.bool("strict"), schema: schema)
                value = (schema, "response_format.json_schema.schema")
            default:
                throw .invalidRequest("'response_format.type' must be text, json_object or json_schema, got '\(type)'.", param: "response_format.type", code: "invalid_value")
            }
        }
        // tool_choice decides whether a call may, must or must not come; a response_format is
        // the reply when no call comes (with auto: a call, or the value)
        let offered = tools
        var guide = Guide.none
        if let value { guide = .schema(value.schema, param: value.param) }
        if !offered.isEmpty {
            switch (choice, value) {
            case (.none, nil): guide = .textOnly
            case (.none, _?): break
            case (.auto, let value?): guide = .toolsOrValue(offered, value.schema, param: value.param)
            case (.auto, nil): guide = .tools(offered, allowText: true)
            case (.required, _): guide = .tools(offered, allowText: false)
            case (.named(let n), _): guide = .tools(offered.filter { $0.name == n }, allowText: false)
            }
        }
        if guide != .none, !sampling.stop.isEmpty {
            throw .invalidRequest("'stop' cannot be combined with response_format or tools: a stop sequence could cut a guided value.", param: "stop")
        }
        self.guide = guide
    }

    enum ToolChoice: Equatable { case none, auto, required, named(String) }

    /// json_object's schema: any object (a constant the schema checker accepts).
    static let anyObject = try! JSONSchema(.object([JSONMember(key: "type", value: .string("object"))]))

    static func toolChoice(_ f: Fields, tools: [ToolDefinition]) throws(ServerError) -> ToolChoice {
        guard let v = f["tool_choice"] else { return tools.isEmpty ? .none : .auto }
        let choice: ToolChoice
        switch v {
        case .string("none"): choice = .none
        case .string("auto"): choice = .auto
        case .string("required"): choice = .required
        case .object:
            let o = try Fields(v, path: "tool_choice")
            guard let fn = try o.object("function"), let name = try fn.string("name") else {
                throw .invalidRequest("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}.", param: "tool_choice")
            }
            guard tools.contains(where: { $0.name == name }) else {
                throw .invalidRequest("'tool_choice' names the function '\(name)', which is not among the tools (\(tools.map(\.name).joined(separator: ", "))).", param: "tool_choice.function.name")
            }
            choice = .named(name)
        default:
            throw .invalidRequest("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}.", param: "tool_choice")
        }
        // no tools (absent or `[]`, as Apple's client sends every request without tools): auto
        // and none mean the same, a call cannot be required
        if tools.isEmpty && choice != .none && choice != .auto {
            throw .invalidRequest("'tool_choice' asks for a tool call but no tools are given.", param: "tool_choice")
        }
        return choice
    }

    static func tools(_ f: Fields) throws(ServerError) -> [ToolDefinition] {
        guard let list = try f.array("tools") else { return [] }
        var out: [ToolDefinition] = []
        for (i, item) in list.enumerated() {
            let t = try Fields(item, path: "tools[\(i)]")
            if let type = try t.string("type"), type != "function" {
                throw .invalidRequest("'tools[\(i)].type' must be function, got '\(type)'.", param: "tools[\(i)].type")
            }
            guard let fn = try t.object("function") else { throw .invalidRequest("'tools[\(i)].function' is required.", param: "tools[\(i)].function") }
            guard let name = try fn.string("name"), !name.isEmpty, name.count <= 64,
                  name.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "_" || $0 == "-" }) else {
                throw .invalidRequest("'tools[\(i)].function.name' must be 1-64 letters, digits, underscores or dashes.", param: "tools[\(i)].function.name")
            }
            guard !out.contains(where: { $0.name == name }) else {
                throw .invalidRequest("two tools are named '\(name)'.", param: "tools[\(i)].function.name")
            }
            var parameters: JSONSchema? = nil
            if let p = fn["parameters"] {
                do throws(DataSchemaError) {
                    parameters = try JSONSchema(p, context: "tools[\(i)].function.parameters")
                } catch {
                    throw .unsupportedGuide(error.localizedDescription, param: "tools[\(i)].function.parameters")
                }
            }
            out.append(ToolDefinition(name: name, description: try fn.string("description"), parameters: parameters))
        }
        return out
    }

    /// A message's text: a string, or an array of text parts (joined without a separator, as
    /// the parts of one text). Image, audio and file parts are refused naming the model: every
    /// model served here reads text only.
    static func content(_ f: Fields, allowMissing: Bool, model: String) throws(ServerError) -> String {
        guard let v = f["content"] else {
            if allowMissing { return "" }
            throw .invalidRequest("'\(f.name("content"))' is required.", param: f.name("content"), code: "missing_required_parameter")
        }
        switch v {
        case .string(let s): return s
        case .array(let parts):
            var text = ""
            for (i, part) in parts.enumerated() {
                let p = try Fields(part, path: f.name("content[\(i)]"))
                let type = try p.string("type")
                switch type {
                case "text":
                    guard let t = try p.string("text") else { throw .invalidRequest("'\(p.name("text"))' is required in a text part.", param: p.name("text"), code: "missing_required_parameter") }
                    text += t
                case "image_url", "input_image", "input_audio", "file":
                    throw .invalidRequest("'\(p.path)' is a '\(type!)' part, but the model '\(model)' reads text only: send the message as text (a string or {\"type\": \"text\", \"text\": ...} parts).",
                                          param: p.path, code: "unsupported_content")
                default:
                    throw .invalidRequest("'\(p.path)' must be a text part {\"type\": \"text\", \"text\": ...}, got type \(type.map { "'\($0)'" } ?? "nothing"); the model '\(model)' reads text only.",
                                          param: p.name("type"))
                }
            }
            return text
        default: throw f.wrong("content", "a string or an array of text parts")
        }
    }

    static func message(_ f: Fields, model: String, callNames: inout [String: String]) throws(ServerError) -> Message {
        guard let roleName = try f.string("role") else { throw .invalidRequest("'\(f.name("role"))' is required.", param: f.name("role"), code: "missing_required_parameter") }
        switch roleName {
        case "system", "developer":
            // Apple's client sends empty instructions as a system message without content
            return Message(role: .system, content: try content(f, allowMissing: true, model: model))
        case "user":
            return Message(role: .user, content: try content(f, allowMissing: false, model: model))
        case "assistant":
            var calls: [ToolCall] = []
            for (i, item) in (try f.array("tool_calls") ?? []).enumerated() {
                let c = try Fields(item, path: f.name("tool_calls[\(i)]"))
                guard let fn = try c.object("function"), let name = try fn.string("name") else {
                    throw .invalidRequest("'\(c.path).function.name' is required.", param: c.path + ".function.name")
                }
                let argumentsText = try fn.string("arguments") ?? "{}"
                let arguments: JSONValue
                do throws(DataSchemaError) {
                    arguments = try JSONValue.parse(argumentsText, context: c.path + ".function.arguments")
                } catch {
                    throw .invalidRequest("'\(c.path).function.arguments' must be a JSON text: \(error.localizedDescription)", param: c.path + ".function.arguments")
                }
                let id = try c.string("id")
                if let id { callNames[id] = name }
                calls.append(ToolCall(id: id, name: name, arguments: arguments))
            }
            // Reasoning given back (Apple's client returns a reasoning model's thinking on the
            // next assistant message): rendered by a template that reads it, refused (never
            // silently dropped) for one that does not (OpenAIService.chat).
            let text = try content(f, allowMissing: !calls.isEmpty, model: model)
            var message = Message(role: .assistant, content: text, toolCalls: calls)
            if let reasoning = try f.string("reasoning_content"), !reasoning.isEmpty { message.reasoning = reasoning }
            return message
        case "tool":
            let id = try f.string("tool_call_id")
            return Message(role: .tool, content: try content(f, allowMissing: false, model: model), toolCallId: id,
                           name: try f.string("name") ?? id.flatMap { callNames[$0] })
        default:
            throw .invalidRequest("'\(f.name("role"))' must be system, developer, user, assistant or tool, got '\(roleName)'.", param: f.name("role"), code: "invalid_value")
        }
    }
}

/// A text completion request, read and checked.
struct CompletionRequest {
    var model: String
    var prompt: String
    var sampling: SamplingParameters

    init(_ body: JSONValue) throws(ServerError) {
        let f = try Fields(body, path: "")
        guard case .string(let m) = try f.required("model") else { throw f.wrong("model", "a string") }
        model = m
        switch try f.required("prompt") {
        case .string(let s): prompt = s
        case .array(let a) where a.count == 1:
            guard case .string(let s) = a[0] else { throw f.wrong("prompt", "a string (or an array of one string)") }
            prompt = s
        default: throw f.wrong("prompt", "a string (or an array of one string)")
        }
        sampling = try SamplingParameters(f)
        if sampling.maxTokens == nil { sampling.maxTokens = 16 }  // the API's default for completions
        if try f.bool("echo") == true { throw .invalidRequest("'echo' is not supported by this server.", param: "echo", code: "unsupported_parameter") }
        if let s = try f.string("suffix"), !s.isEmpty { throw .invalidRequest("'suffix' is not supported by this server.", param: "suffix", code: "unsupported_parameter") }
        if let b = try f.int("best_of"), b != 1 { throw .invalidRequest("'best_of' must be 1 here.", param: "best_of", code: "unsupported_value") }
    }
}
