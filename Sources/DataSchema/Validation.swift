// Cross-turn validation of one decoded sample: turn order, empty content, tool calls against
// the defined tools and their schemas, tool results against their call batch, and replies
// against their user turn's response_format. Reports every problem, not just the first.
// Rules and their wording are listed in Schema.md ("Validation").
import ModelAssets

public enum SampleValidator {
    /// Every problem with `messages` as `(kind, message)`; empty when the sample is valid.
    public static func problems(in messages: [Message], mode: DataMode) -> [(kind: DataIssueKind, message: String)] {
        check(messages, mode: mode).map { ($0.kind, $0.message) }
    }

    static func check(_ messages: [Message], mode: DataMode) -> [LineProblem] {
        var out: [LineProblem] = []
        func report(_ kind: DataIssueKind, _ text: String) { out.append(LineProblem(kind, text)) }
        guard !messages.isEmpty else {
            report(.missingField, "the sample has no messages")
            return out
        }
        if let text = Message.plainText(of: messages) {
            // Plain text: no turns to order; every token is trained.
            if text.isEmpty { report(.emptyContent, "\"text\" is empty") }
            return out
        }

        var tools: [String: ToolDefinition] = [:]
        if messages[0].role == .system {
            for tool in messages[0].tools { tools[tool.name] = tool }
        }

        // The tool-call batch that tool turns currently answer.
        var batchTurn = 0
        var batch: [ToolCall] = []
        var answered = 0

        // Turns are numbered as the data wrote them: the holder of a record's "tools" is not one.
        let offset = messages[0].holdsRecordTools ? 1 : 0
        for (i, m) in messages.enumerated() {
            let turn = i + 1 - offset
            let previous = i > 0 ? messages[i - 1] : nil
            let blank = m.content.allSatisfy(\.isWhitespace)

            switch m.role {
            case .system:
                if i > 0 { report(.turnOrder, "system turn is not the first turn (turn \(turn)); only the first turn may be system") }
                if blank && m.tools.isEmpty { report(.emptyContent, "system turn has empty content (turn \(turn))") }
            case .user:
                if blank { report(.emptyContent, "user turn has empty content (turn \(turn))") }
                if let previous {
                    switch previous.role {
                    case .user: report(.turnOrder, "user turn follows another user turn (turn \(turn)); merge them or add the assistant reply between them")
                    case .tool: report(.turnOrder, "user turn follows a tool turn (turn \(turn)); an assistant turn must answer the tool results first")
                    case .assistant where !previous.toolCalls.isEmpty:
                        report(.turnOrder, "user turn follows an assistant turn whose tool calls got no tool result (turn \(turn)); add the tool turns")
                    default: break
                    }
                }
            case .assistant:
                if blank && m.toolCalls.isEmpty { report(.emptyContent, "assistant turn has empty content and no tool calls (turn \(turn))") }
                switch previous?.role {
                case nil: report(.turnOrder, "assistant turn is the first turn (turn \(turn)); a user turn must come first")
                case .system?: report(.turnOrder, "assistant turn follows the system turn (turn \(turn)); a user turn must come first")
                case .assistant?: report(.turnOrder, "assistant turn follows another assistant turn (turn \(turn))")
                default: break
                }
                var ids = Set<String>()
                for (k, call) in m.toolCalls.enumerated() {
                    let what = "tool call \(k + 1) of turn \(turn)"
                    if let id = call.id, !ids.insert(id).inserted {
                        report(.toolCall, "\(what) repeats the id \"\(id)\" of an earlier call in the same turn")
                    }
                    guard let tool = tools[call.name] else {
                        let known = tools.isEmpty
                            ? "no tools are defined; add \"tools\" to the system turn"
                            : "defined tools: " + tools.keys.sorted().joined(separator: ", ")
                        report(.toolCall, "\(what) calls undefined tool \"\(call.name)\" (\(known))")
                        continue
                    }
                    if let schema = tool.parameters {
                        let violations = schema.validate(call.arguments)
                        if let first = violations.first {
                            let more = violations.count > 1 ? " (and \(violations.count - 1) more)" : ""
                            report(.toolCall, "arguments of \(what) do not match the parameters of \"\(call.name)\": \(first)\(more)")
                        }
                    }
                }
            case .tool:
                if blank { report(.emptyContent, "tool turn has empty content (turn \(turn)); give the tool's result") }
                if let previous, previous.role == .assistant, !previous.toolCalls.isEmpty {
                    batchTurn = i
                    batch = previous.toolCalls
                    answered = 0
                } else if previous?.role != .tool || batch.isEmpty {
                    report(.turnOrder, "tool turn does not follow an assistant turn with tool calls (turn \(turn))")
                    batch = []
                    continue
                }
                answered += 1
                if answered > batch.count {
                    report(.turnOrder, "tool turn \(turn) is result \(answered) for the \(batch.count) tool call\(batch.count == 1 ? "" : "s") of turn \(batchTurn)")
                }
                if let id = m.toolCallId, batch.contains(where: { $0.id != nil }), !batch.contains(where: { $0.id == id }) {
                    report(.toolCall, "tool turn answers tool_call_id \"\(id)\", which no call of turn \(batchTurn) has (turn \(turn))")
                }
                if let name = m.name, !batch.contains(where: { $0.name == name }) {
                    report(.toolCall, "tool turn names \"\(name)\", which no call of turn \(batchTurn) calls (turn \(turn))")
                }
            }
        }

        if !messages.contains(where: { $0.role == .user }) {
            report(.missingField, "the sample has no user turn")
        }
        let last = messages[messages.count - 1]
        switch mode {
        case .train:
            if !messages.contains(where: { $0.role == .assistant }) {
                report(.missingField, "the sample has no assistant turn; training samples need at least one reply")
            } else if last.role != .assistant {
                report(.turnOrder, "the last turn is \(last.role.rawValue) (turn \(messages.count)); training samples end with an assistant turn")
            }
        case .prompt:
            if last.role != .user {
                report(.turnOrder, "the last turn is \(last.role.rawValue) (turn \(messages.count)); prompts end with a user turn")
            }
        case .any:
            break
        }

        checkResponseFormats(messages, into: &out)
        return out
    }

    /// The reply to a user turn is the last assistant turn before the next user turn (earlier
    /// assistant turns in that stretch may call tools). It must be JSON conforming to the schema.
    static func checkResponseFormats(_ messages: [Message], into out: inout [LineProblem]) {
        for (i, m) in messages.enumerated() {
            guard m.role == .user, let format = m.responseFormat else { continue }
            var reply: Int?
            var k = i + 1
            while k < messages.count, messages[k].role != .user {
                if messages[k].role == .assistant { reply = k }
                k += 1
            }
            guard let r = reply else { continue }
            let answer = messages[r]
            let what = "assistant reply (turn \(r + 1)) to the response_format \"\(format.name)\" of turn \(i + 1)"
            if !answer.toolCalls.isEmpty {
                out.append(LineProblem(.responseFormat, "\(what) calls tools; the reply must be JSON content only"))
                continue
            }
            let value: JSONValue
            do throws(DataSchemaError) {
                value = try JSONValue.parse(answer.content, context: "reply")
            } catch {
                var reason = error.errorDescription ?? ""
                if case let .malformedJSON(_, message) = error { reason = message }
                out.append(LineProblem(.responseFormat, "\(what) is not JSON: \(reason)"))
                continue
            }
            let violations = format.schema.validate(value)
            if let first = violations.first {
                let more = violations.count > 1 ? " (and \(violations.count - 1) more)" : ""
                out.append(LineProblem(.responseFormat, "\(what) does not match the schema: \(first)\(more)"))
            }
        }
    }
}
