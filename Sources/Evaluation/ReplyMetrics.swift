// Scoring one generated reply against the reference assistant turn: exact match (whitespace at
// the ends trimmed), JSON validity and schema conformance when the user turn asked for a
// response_format, and tool-call name/argument accuracy with calls parsed in the model's own
// call format (DataSchema's ToolCallFormat, from its chat template; Schema.md's `<tool_call>` text
// for templates that read no tools). Pure functions on text; no model here.
import DataSchema
import Foundation

/// One tool call of a generated reply: its name, its arguments object (an OpenAI-style string
/// holding an object is parsed) and why it is unusable (nil when well formed); the format's own
/// reading of a call (DataSchema).
public typealias ParsedToolCall = ToolCallFormat.ParsedCall

/// A generated assistant turn split as Schema.md renders one: text content, then tool calls.
public struct ParsedReply: Sendable, Equatable {
    /// The text before the first call, trimmed.
    public var content: String
    public var calls: [ParsedToolCall]
}

/// The JSON checks of a reply whose user turn has a response_format.
public struct JSONCheck: Sendable, Equatable, Codable {
    /// The trimmed reply is one JSON value.
    public var valid: Bool
    /// Valid and conforming to the schema.
    public var conforms: Bool
    /// Schema violations (`PATH: reason`), or the parse error when not valid; at most 5.
    public var problems: [String]
    /// Equal to the reference reply as JSON values (key order and number spelling ignored).
    public var equalsReference: Bool
}

/// The tool-call checks of a turn where the reference or the reply calls tools.
public struct ToolCallCheck: Sendable, Equatable, Codable {
    public var referenceCalls: Int
    public var predictedCalls: Int
    /// Reference calls matched by a predicted call of the same name.
    public var namesCorrect: Int
    /// Reference calls matched by a predicted call of the same name and equal arguments.
    public var argumentsCorrect: Int
    /// Predicted calls that could not be parsed.
    public var malformed: Int
    /// Predicted calls no reference call matched by name.
    public var unexpected: Int
}

public struct TurnScore: Sendable, Equatable, Codable {
    public var exactMatch: Bool
    public var json: JSONCheck?
    public var toolCalls: ToolCallCheck?
}

public enum ReplyMetrics {
    /// The reply with whitespace and newlines at both ends removed.
    public static func trimmed(_ text: String) -> String {
        text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public static func exactMatch(_ output: String, _ reference: String) -> Bool {
        trimmed(output) == trimmed(reference)
    }

    /// The text the reference assistant turn is generated as: its content, then its tool calls
    /// in `format` (on a line of their own after content, as Schema.md's rendering writes them).
    public static func referenceText(_ message: Message, format: ToolCallFormat = .documented) -> String {
        guard !message.toolCalls.isEmpty, format != .documented else { return ChatRendering.text(of: message) }
        var parts: [String] = []
        let content = message.reasoning.map { "<think>\n" + $0 + "\n</think>\n\n" + message.content } ?? message.content
        if !content.isEmpty { parts.append(content) }
        parts.append(format.text(message.toolCalls))
        return parts.joined(separator: "\n")
    }

    /// Validity, conformance and equality of a reply that should be JSON under `format`.
    public static func checkJSON(output: String, reference: String, format: ResponseFormat) -> JSONCheck {
        let value: JSONValue
        do {
            value = try JSONValue.parse(trimmed(output), context: "reply")
        } catch {
            return JSONCheck(valid: false, conforms: false, problems: [error.localizedDescription], equalsReference: false)
        }
        let violations = format.schema.validate(value)
        let expected = try? JSONValue.parse(trimmed(reference), context: "reference")
        return JSONCheck(valid: true, conforms: violations.isEmpty, problems: violations.prefix(5).map(\.description),
                         equalsReference: expected.map { $0 == value } ?? false)
    }

    /// Splits generated text into content and the calls written in `format` (the model's own,
    /// ChatFormat.toolCallFormat; by default Schema.md's `<tool_call>` blocks). A call that is not
    /// one JSON object with a string "name" and an object under the format's arguments key, or
    /// lacks its closing text, is kept with an error (it counts as a malformed call, never
    /// silently dropped).
    public static func parseReply(_ text: String, format: ToolCallFormat = .documented) -> ParsedReply {
        let parsed = format.parse(text)
        return ParsedReply(content: parsed.content, calls: parsed.calls)
    }

    /// Matches reference calls to predicted ones regardless of order: each reference call takes
    /// the first unused predicted call with its name and equal arguments, else the first unused
    /// one with its name. Arguments compare as JSON values (`1 == 1.0`, key order ignored).
    public static func checkToolCalls(predicted: [ParsedToolCall], reference: [ToolCall]) -> ToolCallCheck {
        var used = [Bool](repeating: false, count: predicted.count)
        var names = 0, args = 0
        for ref in reference {
            if let i = predicted.indices.first(where: { !used[$0] && predicted[$0].name == ref.name && predicted[$0].arguments == ref.arguments }) {
                used[i] = true
                names += 1
                args += 1
            } else if let i = predicted.indices.first(where: { !used[$0] && predicted[$0].name == ref.name }) {
                used[i] = true
                names += 1
            }
        }
        let malformed = predicted.filter { $0.error != nil }.count
        let unexpected = predicted.indices.filter { !used[$0] }.count
        return ToolCallCheck(referenceCalls: reference.count, predictedCalls: predicted.count, namesCorrect: names,
                             argumentsCorrect: args, malformed: malformed, unexpected: unexpected)
    }

    /// Every check of one reply. `format` is the response_format this turn answers, if any;
    /// `calls` the format the model writes tool calls in.
    public static func score(output: String, reference: Message, format: ResponseFormat?, calls: ToolCallFormat = .documented) -> TurnScore {
        let refText = referenceText(reference, format: calls)
        var score = TurnScore(exactMatch: exactMatch(output, refText), json: nil, toolCalls: nil)
        if let format {
            score.json = checkJSON(output: output, reference: reference.content, format: format)
        }
        let parsed = parseReply(output, format: calls)
        if !reference.toolCalls.isEmpty || !parsed.calls.isEmpty {
            score.toolCalls = checkToolCalls(predicted: parsed.calls, reference: reference.toolCalls)
        }
        return score
    }
}
