// Sample messages to the plain-text `ChatMessage`s a chat template renders: tool definitions
// into the system content, tool calls into <tool_call> tags, response_format schemas appended
// before the user content (Qwen2.5/Hermes-style wording). The exact text is specified in Schema.md
// ("Rendering rules"); a change here is a change to the trained format and must update it.
import ModelAssets

public enum ChatRendering {
    /// The header of the tools section appended to the system content.
    public static let toolsPreamble = """
        # Tools

        You may call one or more functions to assist with the user query.

        You are provided with function signatures within <tools></tools> XML tags:
        <tools>
        """

    /// The instruction after the tool list.
    public static let toolsPostamble = """
        </tools>

        For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
        <tool_call>
        {"name": <function-name>, "arguments": <args-json-object>}
        </tool_call>
        """

    /// The messages as plain text, one `ChatMessage` per turn, in order.
    public static func chatMessages(_ messages: [Message]) -> [ChatMessage] {
        messages.map { ChatMessage(role: $0.role, content: text(of: $0)) }
    }

    /// One turn's content per Schema.md.
    public static func text(of message: Message) -> String {
        switch message.role {
        case .system:
            guard !message.tools.isEmpty else { return message.content }
            let section = toolsSection(message.tools)
            return message.content.isEmpty ? section : message.content + "\n\n" + section
        case .user:
            guard let format = message.responseFormat else { return message.content }
            // The schema first: it is the same for every request of a task, so all samples of a
            // batch (and all prompts at inference) share that prefix and it is computed once.
            return responseFormatSection(format) + "\n\n" + message.content
        case .assistant:
            var parts: [String] = []
            // Reasoning given beside the content is written where thinking models write it.
            let content = message.reasoning.map { "<think>\n" + $0 + "\n</think>\n\n" + message.content } ?? message.content
            if !content.isEmpty { parts.append(content) }
            for call in message.toolCalls { parts.append(toolCallText(call)) }
            return parts.joined(separator: "\n")
        case .tool:
            return message.content
        }
    }

    /// `# Tools ... <tools>` + one compact JSON line per tool + `</tools> ...instruction`.
    public static func toolsSection(_ tools: [ToolDefinition]) -> String {
        var text = toolsPreamble + "\n"
        for tool in tools { text += toolJSON(tool).compactText + "\n" }
        return text + toolsPostamble
    }

    /// `{"type":"function","function":{"name":...,"description":...,"parameters":...}}`,
    /// description and parameters only when given, the schema's keys in written order.
    public static func toolJSON(_ tool: ToolDefinition) -> JSONValue {
        var function = [JSONMember(key: "name", value: .string(tool.name))]
        if let d = tool.description { function.append(JSONMember(key: "description", value: .string(d))) }
        if let p = tool.parameters { function.append(JSONMember(key: "parameters", value: p.root)) }
        return .object([JSONMember(key: "type", value: .string("function")),
                        JSONMember(key: "function", value: .object(function))])
    }

    /// `<tool_call>\n{"name":"f","arguments":{...}}\n</tool_call>` (compact JSON).
    public static func toolCallText(_ call: ToolCall) -> String {
        let json = JSONValue.object([JSONMember(key: "name", value: .string(call.name)),
                                     JSONMember(key: "arguments", value: call.arguments)])
        return "<tool_call>\n" + json.compactText + "\n</tool_call>"
    }

    /// Put before a user turn's content, with a blank line between.
    public static func responseFormatSection(_ format: ResponseFormat) -> String {
        var text = "Respond with a JSON value that conforms to the JSON schema \"\(format.name)\""
        if let d = format.description, !d.isEmpty { text += " (\(d))" }
        text += ". Reply with the JSON only.\n<schema>\n" + format.schema.root.compactText + "\n</schema>"
        return text
    }
}
