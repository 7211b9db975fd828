// The sample schema of Schema.md as Swift values (Sample, Message, ToolDefinition, ToolCall,
// ResponseFormat) and their decoding from one parsed JSONL record, refusing unknown keys and
// wrong types with a reason. Turn-order and cross-turn checks live in Validation.swift.
// Follows the Foundation Models adapter toolkit's schema (tools on the system message).
import ModelAssets

/// Training data ends each sample with an assistant turn; prompts (for generation or
/// evaluation) end with a user turn; `any` takes conversations ending in any turn (for showing
/// how they render).
public enum DataMode: String, Sendable, Codable, CaseIterable {
    case train, prompt, any
}

/// A function the model may call, defined on the system message.
public struct ToolDefinition: Sendable, Equatable {
    public var name: String
    public var description: String?
    /// The JSON schema of the arguments object; nil when the definition gives none.
    public var parameters: JSONSchema?

    public init(name: String, description: String? = nil, parameters: JSONSchema? = nil) {
        self.name = name
        self.description = description
        self.parameters = parameters
    }
}

/// One function call made by an assistant turn.
public struct ToolCall: Sendable, Equatable {
    public var id: String?
    public var name: String
    /// Always a JSON object (given as an object, or as a JSON string that parsed to one).
    public var arguments: JSONValue
    /// The JSON string the arguments were given as, when they were (OpenAI's form); a chat
    /// template sees that string, as transformers passes it, instead of the object.
    public var argumentsText: String?

    public init(id: String? = nil, name: String, arguments: JSONValue, argumentsText: String? = nil) {
        self.id = id
        self.name = name
        self.arguments = arguments
        self.argumentsText = argumentsText
    }
}

/// A user turn's request for a JSON reply that conforms to `schema` (guided generation).
public struct ResponseFormat: Sendable, Equatable {
    public var name: String
    public var description: String?
    /// Recorded as given; replies are validated against `schema` either way.
    public var strict: Bool?
    public var schema: JSONSchema

    public init(name: String, description: String? = nil, strict: Bool? = nil, schema: JSONSchema) {
        self.name = name
        self.description = description
        self.strict = strict
        self.schema = schema
    }

    /// Decodes `{"type": "json_schema", "json_schema": {"name", "description"?, "strict"?, "schema"}}`.
    public init(json: JSONValue, context: String = "response_format") throws(DataSchemaError) {
        do throws(LineProblem) {
            self = try Decoding.responseFormat(json)
        } catch {
            throw DataSchemaError.invalidOption(name: context, message: error.message)
        }
    }
}

public struct Message: Sendable, Equatable {
    public var role: ChatRole
    /// The text as written; empty for an assistant turn that only calls tools.
    public var content: String
    /// Tool definitions (system turn only).
    public var tools: [ToolDefinition]
    /// Tool calls (assistant turn only).
    public var toolCalls: [ToolCall]
    /// The id of the call a tool turn answers, when given.
    public var toolCallId: String?
    /// The function name a tool turn answers, when given.
    public var name: String?
    /// Guided generation request (user turn only).
    public var responseFormat: ResponseFormat?
    /// An assistant turn that only calls tools and gave no "content" (missing or null): a chat
    /// template sees no content key, as transformers drops None values; "" stays "".
    public var contentOmitted = false
    /// An assistant turn's reasoning given beside its content ("reasoning_content", or its
    /// synonyms "reasoning" and "thinking"), as thinking models' templates read it.
    public var reasoning: String?
    /// The empty system turn put first to hold a record's top-level "tools" (not a turn of the
    /// data: turn numbers in messages skip it).
    public var holdsRecordTools = false
    /// A plain-text record (`{"text": ...}`): no chat template, every token trained.
    public var isPlainText = false

    /// A plain-text record's message.
    public static func plainText(_ text: String) -> Message {
        var m = Message(role: .user, content: text)
        m.isPlainText = true
        return m
    }

    /// The text of `messages` when they are a plain-text record, else nil.
    public static func plainText(of messages: [Message]) -> String? {
        messages.count == 1 && messages[0].isPlainText ? messages[0].content : nil
    }

    public init(role: ChatRole, content: String, tools: [ToolDefinition] = [], toolCalls: [ToolCall] = [],
                toolCallId: String? = nil, name: String? = nil, responseFormat: ResponseFormat? = nil) {
        self.role = role
        self.content = content
        self.tools = tools
        self.toolCalls = toolCalls
        self.toolCallId = toolCallId
        self.name = name
        self.responseFormat = responseFormat
    }
}

/// One accepted line of a data file.
public struct Sample: Sendable, Equatable {
    public var messages: [Message]
    /// 0-based position among the file's samples (non-blank lines, valid or not).
    public var index: Int
    /// The file and 1-based line it came from.
    public var file: String
    public var line: Int

    public init(messages: [Message], index: Int, file: String = "<memory>", line: Int = 0) {
        self.messages = messages
        self.index = index
        self.file = file
        self.line = line
    }
}

/// A problem with one line, before the file and line number are attached.
struct LineProblem: Error {
    var kind: DataIssueKind
    var message: String
    init(_ kind: DataIssueKind, _ message: String) {
        self.kind = kind
        self.message = message
    }
}

enum Decoding {
    static let sampleShape = "a sample is a JSON array of messages, an object with \"messages\", an object with \"prompt\" and \"completion\", or an object with \"text\""

    /// Decodes one record (an array of messages, {"messages": [...]}, or {"prompt", "completion"}).
    static func record(_ value: JSONValue) throws(LineProblem) -> [Message] {
        switch value {
        case let .array(items):
            return try messages(items)
        case let .object(members):
            let keys = Set(members.map(\.key))
            if keys.contains("messages") {
                try allowOnly(members, ["messages", "tools", "metadata"], in: "a sample object", hint: preferenceHint)
                guard let items = value["messages"]!.arrayValue else {
                    throw LineProblem(.wrongType, "\"messages\" must be an array of messages, got \(value["messages"]!.typeName)")
                }
                var out = try messages(items)
                if let tools = value["tools"] { try attachRecordTools(tools, to: &out) }
                return out
            }
            if keys.contains("prompt") {
                try allowOnly(members, ["prompt", "completion", "response", "metadata"], in: "a prompt/completion sample",
                              hint: preferenceHint)
                if keys.contains("completion") && keys.contains("response") {
                    throw LineProblem(.unknownKey, "both \"completion\" and \"response\" are given; keep one")
                }
                guard let prompt = value["prompt"]!.stringValue else {
                    throw LineProblem(.wrongType, "\"prompt\" must be a string, got \(value["prompt"]!.typeName)")
                }
                var out = [Message(role: .user, content: prompt)]
                if let reply = value["completion"] ?? value["response"] {
                    let key = keys.contains("completion") ? "completion" : "response"
                    guard let text = reply.stringValue else {
                        throw LineProblem(.wrongType, "\"\(key)\" must be a string, got \(reply.typeName)")
                    }
                    out.append(Message(role: .assistant, content: text))
                }
                return out
            }
            if keys.contains("text") {
                try allowOnly(members, ["text", "metadata"], in: "a text sample")
                guard let text = value["text"]!.stringValue else {
                    throw LineProblem(.wrongType, "\"text\" must be a string, got \(value["text"]!.typeName)")
                }
                return [Message.plainText(text)]
            }
            if keys.contains("chosen") || keys.contains("rejected") {
                throw LineProblem(.unknownKey, "the object is a preference pair\(preferenceHint("chosen")); \(sampleShape)")
            }
            throw LineProblem(.missingField, "the object has neither \"messages\", \"prompt\" nor \"text\"; \(sampleShape)")
        default:
            throw LineProblem(.wrongType, "\(sampleShape), got \(value.typeName)")
        }
    }

    /// Said of a "chosen" or "rejected" key in a supervised sample.
    static func preferenceHint(_ key: String) -> String {
        key == "chosen" || key == "rejected"
            ? " (preference pairs, prompt/chosen/rejected, train with train-adapter --objective dpo, ipo or orpo)" : ""
    }

    /// A record's top-level "tools" (OpenAI's chat-completions and fine-tuning form) go where the
    /// schema keeps tools: on the system turn, or on an empty system turn put first when there is
    /// none (such a turn only carries tools; templates that read `tools` do not render it).
    static func attachRecordTools(_ value: JSONValue, to messages: inout [Message]) throws(LineProblem) {
        guard let list = value.arrayValue else {
            throw LineProblem(.wrongType, "\"tools\" of the record must be an array, got \(value.typeName)")
        }
        var tools: [ToolDefinition] = []
        var names = Set<String>()
        for (i, item) in list.enumerated() {
            let tool = try toolDefinition(item, number: i + 1, turn: 0, where: "tool \(i + 1) of the record's \"tools\"")
            guard names.insert(tool.name).inserted else {
                throw LineProblem(.toolDefinition, "tool \"\(tool.name)\" is defined twice in the record's \"tools\"")
            }
            tools.append(tool)
        }
        if messages.first?.role == .system {
            guard messages[0].tools.isEmpty else {
                throw LineProblem(.toolDefinition, "tools are given both in the record's \"tools\" and on the system turn; give them once")
            }
            messages[0].tools = tools
        } else if !tools.isEmpty {
            var holder = Message(role: .system, content: "", tools: tools)
            holder.holdsRecordTools = true
            messages.insert(holder, at: 0)
        }
    }

    static func allowOnly(_ members: [JSONMember], _ allowed: [String], in what: String,
                          hint: (String) -> String = { _ in "" }) throws(LineProblem) {
        for m in members where !allowed.contains(m.key) {
            let list = allowed.map { "\"\($0)\"" }.joined(separator: ", ")
            throw LineProblem(.unknownKey, "unknown key \"\(m.key)\" in \(what)\(hint(m.key)); allowed keys are \(list)")
        }
    }

    static func messages(_ items: [JSONValue]) throws(LineProblem) -> [Message] {
        if items.isEmpty { throw LineProblem(.missingField, "the sample has no messages") }
        var out: [Message] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            out.append(try message(item, turn: i + 1))
        }
        return out
    }

    static func message(_ value: JSONValue, turn: Int) throws(LineProblem) -> Message {
        guard let members = value.objectMembers else {
            throw LineProblem(.wrongType, "turn \(turn) must be a JSON object with \"role\" and \"content\", got \(value.typeName)")
        }
        guard let roleValue = value["role"] else {
            throw LineProblem(.missingField, "turn \(turn) has no \"role\"; use system, user, assistant or tool")
        }
        guard let roleText = roleValue.stringValue else {
            throw LineProblem(.wrongType, "\"role\" of turn \(turn) must be a string, got \(roleValue.typeName)")
        }
        guard let role = ChatRole(rawValue: roleText) else {
            throw LineProblem(.unknownRole, "unknown role \"\(roleText)\" in turn \(turn); use system, user, assistant or tool")
        }
        var allowed = ["role", "content"]
        switch role {
        case .system: allowed.append("tools")
        case .user: allowed.append("response_format")
        case .assistant: allowed += ["tool_calls", "reasoning_content", "reasoning", "thinking"]
        case .tool: allowed += ["tool_call_id", "name"]
        }
        for m in members where !allowed.contains(m.key) {
            let owner: String? = switch m.key {
            case "tools": "the system turn"
            case "response_format": "a user turn"
            case "tool_calls": "an assistant turn"
            case "tool_call_id", "name": "a tool turn"
            default: nil
            }
            if let owner {
                let article = role == .assistant ? "an" : "a"
                throw LineProblem(.unknownKey, "\"\(m.key)\" belongs on \(owner), not on \(article) \(role.rawValue) turn (turn \(turn))")
            }
            let list = allowed.map { "\"\($0)\"" }.joined(separator: ", ")
            throw LineProblem(.unknownKey, "unknown key \"\(m.key)\" in turn \(turn) (\(role.rawValue)); allowed keys are \(list)")
        }
        var message = Message(role: role, content: "")

        if case let .array(calls)? = value["tool_calls"] {
            for (i, call) in calls.enumerated() {
                message.toolCalls.append(try toolCall(call, number: i + 1, turn: turn))
            }
        } else if let other = value["tool_calls"] {
            throw LineProblem(.wrongType, "\"tool_calls\" of turn \(turn) must be an array, got \(other.typeName)")
        }

        switch value["content"] {
        case let .string(text)?:
            message.content = text
        case .null? where !message.toolCalls.isEmpty, nil where !message.toolCalls.isEmpty:
            message.content = ""
            message.contentOmitted = true
        case nil:
            throw LineProblem(.missingField, "turn \(turn) (\(role.rawValue)) has no \"content\"; add the text of the turn")
        case let other?:
            throw LineProblem(.wrongType, "\"content\" of turn \(turn) must be a string, got \(other.typeName)")
        }

        if let tools = value["tools"] {
            guard let list = tools.arrayValue else {
                throw LineProblem(.wrongType, "\"tools\" of turn \(turn) must be an array, got \(tools.typeName)")
            }
            var names = Set<String>()
            for (i, item) in list.enumerated() {
                let tool = try toolDefinition(item, number: i + 1, turn: turn)
                guard names.insert(tool.name).inserted else {
                    throw LineProblem(.toolDefinition, "tool \"\(tool.name)\" is defined twice in turn \(turn)")
                }
                message.tools.append(tool)
            }
        }
        if let id = value["tool_call_id"] {
            guard let text = id.stringValue else {
                throw LineProblem(.wrongType, "\"tool_call_id\" of turn \(turn) must be a string, got \(id.typeName)")
            }
            message.toolCallId = text
        }
        if let name = value["name"] {
            guard let text = name.stringValue else {
                throw LineProblem(.wrongType, "\"name\" of turn \(turn) must be a string, got \(name.typeName)")
            }
            message.name = text
        }
        let reasoningKeys = ["reasoning_content", "reasoning", "thinking"].filter { value[$0] != nil }
        if reasoningKeys.count > 1 {
            throw LineProblem(.unknownKey, "turn \(turn) gives \(reasoningKeys.map { "\"\($0)\"" }.joined(separator: " and ")); they are synonyms, keep one")
        }
        if let key = reasoningKeys.first {
            switch value[key]! {
            case let .string(text): message.reasoning = text
            case .null: break
            case let other: throw LineProblem(.wrongType, "\"\(key)\" of turn \(turn) must be a string, got \(other.typeName)")
            }
        }
        if let format = value["response_format"] {
            do throws(LineProblem) {
                message.responseFormat = try responseFormat(format)
            } catch {
                throw LineProblem(error.kind, "\"response_format\" of turn \(turn): \(error.message)")
            }
        }
        return message
    }

    static func toolDefinition(_ value: JSONValue, number: Int, turn: Int, where place: String? = nil) throws(LineProblem) -> ToolDefinition {
        let what = place ?? "tool \(number) of turn \(turn)"
        guard let members = value.objectMembers else {
            throw LineProblem(.wrongType, "\(what) must be an object {\"type\": \"function\", \"function\": {...}}, got \(value.typeName)")
        }
        try allowOnly(members, ["type", "function"], in: what)
        if let type = value["type"], type.stringValue != "function" {
            throw LineProblem(.toolDefinition, "\(what) has \"type\" \(type.compactText); only \"function\" is supported")
        }
        guard let function = value["function"], let fields = function.objectMembers else {
            throw LineProblem(.toolDefinition, "\(what) needs a \"function\" object with \"name\", \"description\" and \"arguments\" (its JSON schema)")
        }
        try allowOnly(fields, ["name", "description", "arguments", "parameters"], in: "\"function\" of \(what)")
        guard let name = function["name"]?.stringValue, !name.isEmpty else {
            throw LineProblem(.toolDefinition, "\(what) needs a non-empty string \"name\"")
        }
        var tool = ToolDefinition(name: name)
        if let d = function["description"] {
            guard let text = d.stringValue else {
                throw LineProblem(.wrongType, "\"description\" of tool \"\(name)\" must be a string, got \(d.typeName)")
            }
            tool.description = text
        }
        if function["arguments"] != nil && function["parameters"] != nil {
            throw LineProblem(.toolDefinition, "tool \"\(name)\" gives both \"arguments\" and \"parameters\"; they are synonyms, keep one")
        }
        if let schema = function["arguments"] ?? function["parameters"] {
            do throws(DataSchemaError) {
                tool.parameters = try JSONSchema(schema, context: "tool \"\(name)\"")
            } catch {
                throw LineProblem(.schema, "\(error.errorDescription ?? "unusable schema") (\(turn > 0 ? "turn \(turn)" : what))")
            }
        }
        return tool
    }

    static func toolCall(_ value: JSONValue, number: Int, turn: Int) throws(LineProblem) -> ToolCall {
        let what = "tool call \(number) of turn \(turn)"
        guard let members = value.objectMembers else {
            throw LineProblem(.wrongType, "\(what) must be an object {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}, got \(value.typeName)")
        }
        try allowOnly(members, ["id", "type", "function"], in: what)
        if let type = value["type"], type.stringValue != "function" {
            throw LineProblem(.toolCall, "\(what) has \"type\" \(type.compactText); only \"function\" is supported")
        }
        var id: String?
        if let idValue = value["id"] {
            guard let text = idValue.stringValue else {
                throw LineProblem(.wrongType, "\"id\" of \(what) must be a string, got \(idValue.typeName)")
            }
            id = text
        }
        guard let function = value["function"], let fields = function.objectMembers else {
            throw LineProblem(.toolCall, "\(what) needs a \"function\" object with \"name\" and \"arguments\"")
        }
        try allowOnly(fields, ["name", "arguments"], in: "\"function\" of \(what)")
        guard let name = function["name"]?.stringValue, !name.isEmpty else {
            throw LineProblem(.toolCall, "\(what) needs a non-empty string \"name\"")
        }
        var arguments: JSONValue
        var argumentsText: String?
        switch function["arguments"] {
        case nil:
            throw LineProblem(.toolCall, "\(what) (\"\(name)\") has no \"arguments\"; give a JSON object, {} when there are none")
        case let .string(text)?:
            argumentsText = text
            do throws(DataSchemaError) {
                arguments = try JSONValue.parse(text, context: "arguments")
            } catch {
                let shown = text.count <= 60 ? text : String(text.prefix(57)) + "..."
                let reason: String
                if case let .malformedJSON(_, message) = error { reason = message } else { reason = error.errorDescription ?? "" }
                throw LineProblem(.toolCall, "arguments of \(what) (\"\(name)\") are not valid JSON: \(reason); got \(JSONValue.string(shown).compactText)")
            }
        case let other?:
            arguments = other
        }
        guard case .object = arguments else {
            throw LineProblem(.toolCall, "arguments of \(what) (\"\(name)\") must be a JSON object, got \(arguments.typeName)")
        }
        return ToolCall(id: id, name: name, arguments: arguments, argumentsText: argumentsText)
    }

    static func responseFormat(_ value: JSONValue) throws(LineProblem) -> ResponseFormat {
        guard let members = value.objectMembers else {
            throw LineProblem(.wrongType, "must be an object {\"type\": \"json_schema\", \"json_schema\": {...}}, got \(value.typeName)")
        }
        try allowOnly(members, ["type", "json_schema"], in: "response_format")
        guard value["type"]?.stringValue == "json_schema" else {
            throw LineProblem(.responseFormat, "\"type\" must be \"json_schema\", got \(value["type"]?.compactText ?? "nothing")")
        }
        guard let body = value["json_schema"], let fields = body.objectMembers else {
            throw LineProblem(.responseFormat, "needs a \"json_schema\" object with \"name\" and \"schema\"")
        }
        try allowOnly(fields, ["name", "description", "strict", "schema"], in: "\"json_schema\"")
        guard let name = body["name"]?.stringValue, !name.isEmpty else {
            throw LineProblem(.responseFormat, "\"json_schema\" needs a non-empty string \"name\"")
        }
        var description: String?
        if let d = body["description"] {
            guard let text = d.stringValue else {
                throw LineProblem(.wrongType, "\"description\" must be a string, got \(d.typeName)")
            }
            description = text
        }
        var strict: Bool?
        if let s = body["strict"] {
            guard case let .bool(flag) = s else {
                throw LineProblem(.wrongType, "\"strict\" must be true or false, got \(s.typeName)")
            }
            strict = flag
        }
        guard let schemaValue = body["schema"] else {
            throw LineProblem(.responseFormat, "\"json_schema\" \"\(name)\" needs a \"schema\"")
        }
        do throws(DataSchemaError) {
            let schema = try JSONSchema(schemaValue, context: "schema \"\(name)\"")
            return ResponseFormat(name: name, description: description, strict: strict, schema: schema)
        } catch {
            throw LineProblem(.schema, error.errorDescription ?? "unusable schema")
        }
    }
}
