// A conversation through the model's chat template: Messages become the values transformers
// hands a template (messages, tools, the tokenizer's named special tokens, --chat-template-kwargs),
// the Jinja template renders them, and the loss mask is found in that rendering — from its
// {% generation %} spans, or turn by turn (each assistant turn is what the template writes after
// the prompt it renders for that turn, up to its end-of-turn marker). Tools and tool calls go to
// templates that read them; a template that never reads `tools` (or `tool_calls`) gets them
// written into the turns as Schema.md's rendering rules say; how a template writes a call is read
// off its rendering of a probe call (ToolCallFormat). Models without a template render with
// the built-in code templates. Reference: transformers' apply_chat_template and render_jinja_template.
import Foundation
import Jinja
import ModelAssets

/// Renders conversations for training (token segments with the loss mask) and for prompts.
public protocol ConversationRenderer: Sendable {
    /// The training sequences of one sample, as text segments marked for the loss: one sequence,
    /// or one per assistant turn when the template writes earlier turns differently from how it
    /// prompts for them (Qwen3 drops earlier thinking).
    func trainingSequences(_ messages: [Message]) throws(DataSchemaError) -> [[TemplateSegment]]
    /// A prompt: the messages and the generation prompt (the assistant header).
    func promptText(_ messages: [Message]) throws(DataSchemaError) -> String
}

/// The built-in code templates (ChatML, Llama-3, or a test's): Schema.md's rendering rules make
/// each turn plain text first.
public struct CodeTemplateRenderer: ConversationRenderer {
    public let template: any ChatTemplating
    public init(_ template: any ChatTemplating) { self.template = template }

    public func trainingSequences(_ messages: [Message]) -> [[TemplateSegment]] {
        [template.render(ChatRendering.chatMessages(messages), addGenerationPrompt: false)]
    }

    public func promptText(_ messages: [Message]) -> String {
        template.render(ChatRendering.chatMessages(messages), addGenerationPrompt: true).map(\.text).joined()
    }
}

/// The model's chat template (or a built-in one), ready to render.
public struct ChatFormat: ConversationRenderer {
    enum Engine: Sendable {
        case jinja(JinjaTemplate)
        case builtIn(ChatTemplate)
    }

    let engine: Engine
    public let source: ChatTemplateSource
    /// Template variables besides messages/tools/add_generation_prompt: the named special tokens, then the kwargs.
    public let variables: [(name: String, value: JinjaValue)]
    /// What `strftime_now` sees; nil is the time of rendering.
    public var date: JinjaDate?
    /// The template reads `tools` / renders `tool_calls`; when not, they are written into the turns.
    public let readsTools: Bool
    public let readsToolCalls: Bool
    /// The template reads an assistant turn's `reasoning_content` (or `thinking`); when not, reasoning is written into the content.
    public let readsReasoning: Bool
    /// Strings that end an assistant turn in this template's output (EOS and the end-of-turn tokens it writes).
    public let endOfTurnMarkers: [String]
    /// What a user should know about how prompts are rendered (printed by the executables when loading).
    public private(set) var notes: [String]
    /// What a user should know about tools with this template (printed only when tools are present).
    public private(set) var toolNotes: [String]
    /// How the template writes a tool call (guided tool calls generate and read that format).
    public private(set) var toolCalls: ToolCallSupport

    /// - Parameters:
    ///   - specialTokens: the tokenizer's named special tokens (`bos_token`, `eos_token`, ...).
    ///   - date: fixes what `strftime_now` sees (tests, `adapter-data render --date`).
    public init(source: ChatTemplateSource, specialTokens: [(name: String, text: String)], date: JinjaDate? = nil) throws(DataSchemaError) {
        self.source = source
        self.date = date
        var vars: [(String, JinjaValue)] = specialTokens.map { ($0.name, .string($0.text)) }
        if let json = source.kwargsJSON {
            let parsed: JSONValue
            do throws(DataSchemaError) { parsed = try JSONValue.parse(json, context: "--chat-template-kwargs") } catch {
                throw .invalidOption(name: "--chat-template-kwargs", message: "\(error.errorDescription ?? "not JSON"); give a JSON object such as '{\"enable_thinking\": false}'")
            }
            guard case let .object(members) = parsed else {
                throw .invalidOption(name: "--chat-template-kwargs", message: "must be a JSON object such as '{\"enable_thinking\": false}', got \(parsed.typeName)")
            }
            for m in members {
                if ["messages", "tools", "documents", "add_generation_prompt"].contains(m.key) {
                    throw .invalidOption(name: "--chat-template-kwargs", message: "\"\(m.key)\" is set by the toolkit from the data; leave it out")
                }
                vars.removeAll { $0.0 == m.key }
                vars.append((m.key, JinjaBridge.value(m.value)))
            }
        }
        variables = vars
        let eos = specialTokens.first { $0.name == "eos_token" }?.text
        var notes: [String] = [], toolNotes: [String] = []
        switch source.body {
        case let .jinja(text):
            let template: JinjaTemplate
            do throws(JinjaError) { template = try JinjaTemplate(text) } catch {
                throw .chatTemplate(origin: source.origin, message: "does not load: \(error)")
            }
            engine = .jinja(template)
            readsTools = template.referencedNames.contains("tools")
            readsToolCalls = template.referencedAttributes.contains("tool_calls")
            readsReasoning = template.referencedAttributes.contains("reasoning_content") || template.referencedAttributes.contains("thinking")
            var markers = ChatTemplateSource.endOfTurnSpellings.filter { text.contains($0) }
            if let eos, !markers.contains(eos) { markers.append(eos) }
            endOfTurnMarkers = markers
            notes.append("prompts are rendered with the chat template from \(source.origin)")
            if !readsTools {
                toolNotes.append("the chat template never reads `tools`: a conversation with tools gets them written into its system turn and its tool calls as <tool_call> blocks (Schema.md, \"Rendering rules\")")
            } else if !readsToolCalls {
                toolNotes.append("the chat template never reads `tool_calls`: a conversation's tool calls are written into its assistant turns as <tool_call> blocks (Schema.md)")
            }
        case let .builtIn(t):
            engine = .builtIn(t)
            readsTools = false
            readsToolCalls = false
            readsReasoning = false
            endOfTurnMarkers = [t.endOfTurn] + (eos.map { [$0] } ?? [])
            notes.append("prompts are rendered with \(source.origin)")
        }
        self.notes = notes
        self.toolNotes = toolNotes
        // How the model writes a tool call: the template's own format where it writes calls,
        // else the documented <tool_call> format our rendering writes into the turns.
        toolCalls = .format(.documented)
        if readsTools && readsToolCalls {
            toolCalls = deriveToolCallFormat()
            switch toolCalls {
            case let .format(f) where f != .documented:
                self.toolNotes.append("tool calls are generated and read back in this template's own format, \(f.example.debugDescription) (docs/chat-templates.md, \"Guided tool calls\")")
            case let .refused(reason):
                self.toolNotes.append("guided tool calls are refused with this template: \(reason)")
            default: break
            }
        }
    }

    /// How the template writes calls: the format, or why guided tool calls are refused.
    public enum ToolCallSupport: Sendable, Equatable {
        case format(ToolCallFormat)
        /// A sentence saying what the template writes and what to do.
        case refused(String)
    }

    /// The format guided tool calls are generated in and read back in (the session API, serve,
    /// evaluate-adapter's metrics); throws, naming the template, when it is refused.
    public func toolCallFormat() throws(DataSchemaError) -> ToolCallFormat {
        switch toolCalls {
        case let .format(f): return f
        case let .refused(reason): throw .chatTemplate(origin: source.origin, message: "guided tool calls are refused: " + reason)
        }
    }

    static let probeName = "probe_tool", probeID = "call00001"
    /// The probe tool's parameters: one integer, as the probe calls pass it.
    static let probeParameters = try! JSONSchema(.object([
        JSONMember(key: "type", value: .string("object")),
        JSONMember(key: "properties", value: .object([JSONMember(key: "probe_argument", value: .object([JSONMember(key: "type", value: .string("integer"))]))])),
        JSONMember(key: "required", value: .array([.string("probe_argument")])),
    ]))

    /// The format of a call, read from how the template writes an assistant turn that calls
    /// the probe tool once (and twice, for what joins two calls): the text before the name,
    /// between the name and the arguments, the call's id where the template writes one after the
    /// arguments (Mistral's `, "id": "..."`, which the model writes too), and the text after. Of
    /// the text around the calls, what the two-call turn repeats around each call is the call's
    /// own (`<tool_call>\n`), the rest is the list's (`[TOOL_CALLS] [` ... `]`). Refused when
    /// the call is not one JSON object with the name and the arguments first in it (Falcon 3's
    /// OpenAI objects, which hold the id before a nested function).
    func deriveToolCallFormat() -> ToolCallSupport {
        let fix = "give --chat-template a template whose calls are a JSON object with \"name\" and \"arguments\" (or \"parameters\"), such as Hermes' <tool_call> format, or use the model without tools"
        let one: JSONValue = .object([JSONMember(key: "probe_argument", value: .number(JSONNumber(1)))])
        let two: JSONValue = .object([JSONMember(key: "probe_argument", value: .number(JSONNumber(2)))])
        guard let written = probeToolCall([one]) else {
            return .refused("the template writes no call for a probe assistant turn that calls a tool (or refuses it), so how its model calls tools is not known; " + fix)
        }
        let quotedName = JSONValue.string(Self.probeName).compactText
        guard let nameRange = written.range(of: quotedName),
              let argKey = written.range(of: "\"probe_argument\"", range: nameRange.upperBound..<written.endIndex),
              let argOpen = written[nameRange.upperBound..<argKey.lowerBound].lastIndex(of: "{"),
              let argEnd = ToolCallFormat.jsonValueEnd(written[argOpen...]),
              (try? JSONValue.parse(String(written[argOpen..<argEnd]), context: "probe")) == one else {
            return .refused("it writes a call as \(String(written.prefix(120)).debugDescription), not as one JSON object holding the name as a JSON string and the arguments under one key; " + fix)
        }
        // the id, where the template writes it: right after the arguments as `, "KEY": "ID"`
        var idLead: String?
        var closing = written[argEnd...]
        if let idAt = written.range(of: Self.probeID) {
            let quotedID = JSONValue.string(Self.probeID).compactText
            guard idAt.lowerBound > argEnd, let q = written.range(of: quotedID, range: argEnd..<written.endIndex),
                  ToolCallFormat.leadKey(String(written[argEnd..<q.lowerBound])) != nil else {
                return .refused("it writes each call with its id (\(String(written.prefix(140)).debugDescription) for a call with id \"\(Self.probeID)\") elsewhere than right after the arguments, so the call is not one JSON object that begins with the name and the arguments (as Falcon 3's template does: it writes OpenAI's tool_calls objects, while its system prompt asks the model for another shape); " + fix)
            }
            idLead = String(written[argEnd..<q.lowerBound])
            closing = written[q.upperBound...]
        }
        guard let single = ToolCallFormat(opening: String(written[..<nameRange.lowerBound]),
                                          argumentsLead: String(written[nameRange.upperBound..<argOpen]),
                                          closing: String(closing), separator: nil, idLead: idLead) else {
            return .refused("it writes a call as \(String(written.prefix(120)).debugDescription), not as one JSON object holding the name as a JSON string and the arguments under one key; " + fix)
        }
        return .format(Self.withSecondCall(single, one: written, both: probeToolCall([one, two]), quotedName: quotedName))
    }

    /// `single` (read off a one-call turn, `one`) with what joins two calls, read off the two-call
    /// turn `both`: `both` is the text up to the first call's closing `}`, then MID, then the
    /// second call's object, then the one-call turn's tail (what follows its `}`). What MID and
    /// the text before the first object end with is each call's opening text; what MID and the
    /// tail begin with is each call's closing text; the rest of MID joins two calls, and the rest
    /// of the text before and after is the list's. Without a two-call turn in that shape (Llama
    /// 3's template refuses two calls), one call a turn.
    static func withSecondCall(_ single: ToolCallFormat, one: String, both: String?, quotedName: String) -> ToolCallFormat {
        let tail = single.wrapperClose, before = single.wrapperOpen
        let objectOpening = String(single.opening.dropFirst(before.count))
        let head = String(one.dropLast(tail.count))
        guard let both, both.hasPrefix(head) else { return single }
        let rest = both.dropFirst(head.count)
        guard let second = rest.range(of: objectOpening + quotedName), let secondEnd = ToolCallFormat.jsonValueEnd(rest[second.lowerBound...]),
              rest[secondEnd...] == Substring(tail) else { return single }
        let mid = String(rest[..<second.lowerBound])
        var callClose = String(zip(tail, mid).prefix { $0 == $1 }.map(\.0))
        var callOpen = String(String(zip(before.reversed(), mid.reversed()).prefix { $0 == $1 }.map(\.0)).reversed())
        if callClose.count + callOpen.count > mid.count {
            callOpen = String(callOpen.suffix(max(0, mid.count - callClose.count)))
            if callClose.count > mid.count { callClose = String(callClose.prefix(mid.count)) }
        }
        let separator = String(mid.dropFirst(callClose.count).dropLast(callOpen.count))
        let closingHead = String(single.closing.dropLast(tail.count))
        return ToolCallFormat(opening: callOpen + objectOpening, argumentsLead: single.argumentsLead, closing: closingHead + callClose,
                              separator: separator, listOpen: String(before.dropLast(callOpen.count)),
                              listClose: String(tail.dropFirst(callClose.count)), idLead: single.idLead) ?? single
    }

    /// How the template writes an assistant turn that calls the probe tool with each of
    /// `arguments`: the text after the user turn's generation prompt, without a leading empty
    /// thinking block and the end-of-turn marker (nil when the template refuses the probe or
    /// does not show the call).
    func probeToolCall(_ arguments: [JSONValue]) -> String? {
        var holder = Message(role: .system, content: "", tools: [ToolDefinition(name: Self.probeName, description: "A probe.", parameters: Self.probeParameters)])
        holder.holdsRecordTools = true
        let calls = arguments.enumerated().map { ToolCall(id: $0.offset == 0 ? Self.probeID : "call0000\($0.offset + 1)", name: Self.probeName, arguments: $0.element) }
        let question = "Which probe?", asked = [holder, Message(role: .user, content: question)]
        // content "" (Qwen3 reads it), else none for a template that refuses that
        var call = Message(role: .assistant, content: "", toolCalls: calls)
        var rendered = try? render(asked + [call], addGenerationPrompt: false).text
        if rendered == nil {
            call.contentOmitted = true
            rendered = try? render(asked + [call], addGenerationPrompt: false).text
        }
        guard let text = rendered, let r = text.range(of: question, options: .backwards) else { return nil }
        // What follows the generation prompt when the template keeps it, else what follows the question.
        var after = String(text[r.upperBound...])
        if let prompt = try? render(asked, addGenerationPrompt: true).text, text.utf8.starts(with: prompt.utf8) {
            after = String(decoding: text.utf8.dropFirst(prompt.utf8.count), as: UTF8.self)
        }
        guard after.contains(Self.probeName) else { return nil }
        // Qwen3 writes an empty thinking block before a last turn's call; the thinking splitter
        // (serve) and the grammar (no thinking under a tool constraint) leave it out.
        if let m = source.thinkingMarkers, after.hasPrefix(m.open), let end = after.range(of: m.close) {
            after = String(after[end.upperBound...].drop { $0.isWhitespace })
        }
        var turn = trainedPart(of: after)
        // the end-of-turn markers (Phi-4-mini's `<|end|>`, then EOS at the conversation's end)
        while let marker = endOfTurnMarkers.first(where: { !$0.isEmpty && turn.hasSuffix($0) }) {
            turn = String(turn.dropLast(marker.count))
        }
        return turn
    }

    /// The model's own template (or the one set on the base), with the tokenizer's special tokens.
    public init(base template: ChatTemplateSource, tokenizer: BPETokenizer, date: JinjaDate? = nil) throws(DataSchemaError) {
        try self.init(source: template, specialTokens: tokenizer.namedSpecialTokens, date: date)
    }

    // MARK: the values a template sees

    /// Whether `m` is an empty system turn that only holds tools (a record's top-level "tools",
    /// or tools offered with no instructions): a template that reads `tools` gets them there.
    static func onlyHoldsTools(_ m: Message) -> Bool {
        m.role == .system && !m.tools.isEmpty && m.content.isEmpty
    }

    /// The template variables for `messages`, as transformers passes them: `messages` (each turn
    /// {role, content, tool_calls, tool_call_id, name}, None-valued keys left out), `tools` (or
    /// None), `documents` None, `add_generation_prompt`, then the special tokens and kwargs.
    public func context(_ messages: [Message], addGenerationPrompt: Bool) -> [String: JinjaValue] {
        var context: [String: JinjaValue] = [:]
        for (name, value) in variables { context[name] = value }
        let tools = messages.flatMap(\.tools)
        var turns: [JinjaValue] = []
        for m in messages {
            if readsTools && Self.onlyHoldsTools(m) { continue }
            turns.append(JinjaBridge.message(m, toolsInTemplate: readsTools, toolCallsInTemplate: readsToolCalls, reasoningInTemplate: readsReasoning))
        }
        context["messages"] = .list(turns)
        context["tools"] = readsTools && !tools.isEmpty ? .list(tools.map { JinjaBridge.value(ChatRendering.toolJSON($0)) }) : JinjaValue.none
        context["documents"] = JinjaValue.none
        context["add_generation_prompt"] = .bool(addGenerationPrompt)
        return context
    }

    /// The rendered text (and {% generation %} spans) of `messages`.
    public func render(_ messages: [Message], addGenerationPrompt: Bool) throws(DataSchemaError) -> JinjaRendering {
        if let text = Message.plainText(of: messages) { return JinjaRendering(text: text, generationRanges: []) }
        switch engine {
        case let .builtIn(t):
            let text = t.renderText(ChatRendering.chatMessages(messages), addGenerationPrompt: addGenerationPrompt)
            return JinjaRendering(text: text, generationRanges: [])
        case let .jinja(template):
            do throws(JinjaError) {
                return try template.render(context(messages, addGenerationPrompt: addGenerationPrompt),
                                           environment: JinjaEnvironment(date: date))
            } catch {
                throw .chatTemplate(origin: source.origin, message: error.kind == .raised
                    ? "the template refused the conversation: \(error.message) (\(error.description.prefix { $0 != ":" }))"
                    : "rendering failed: \(error)")
            }
        }
    }

    public func promptText(_ messages: [Message]) throws(DataSchemaError) -> String {
        try render(messages, addGenerationPrompt: true).text
    }

    // MARK: the loss mask

    public func trainingSequences(_ messages: [Message]) throws(DataSchemaError) -> [[TemplateSegment]] {
        guard case let .jinja(template) = engine else {
            guard case let .builtIn(t) = engine else { return [] }
            return [t.render(ChatRendering.chatMessages(messages), addGenerationPrompt: false)]
        }
        let full = try render(messages, addGenerationPrompt: false)
        if template.hasGenerationBlocks {
            return [Self.segments(full.text, targets: full.generationRanges)]
        }
        // Turn by turn: the prompt the template writes before assistant turn i, and the conversation
        // ending at turn i; the turn is what the second adds to the first, up to its end-of-turn marker.
        var targets: [Range<Int>] = []
        var turns: [(prompt: String, trained: String)] = []
        var prefixPreserving = true
        let holder = messages.first?.holdsRecordTools == true ? 1 : 0  // turns are numbered as the data wrote them
        for (i, m) in messages.enumerated() where m.role == .assistant {
            let before = try render(Array(messages[..<i]), addGenerationPrompt: true).text
            let through = i == messages.count - 1 ? full.text : try render(Array(messages[...i]), addGenerationPrompt: false).text
            guard through.utf8.starts(with: before.utf8) else {
                throw .chatTemplate(origin: source.origin, message: """
                    cannot locate assistant turn \(i + 1 - holder) in the rendering: the conversation rendered through that \
                    turn does not begin with the prompt the template writes for generating it (the template renders the \
                    earlier turns differently once the turn follows, e.g. a system prompt only beside the last user turn, \
                    or text that depends on which turn is last), so no trained span would be what the model generates \
                    after that prompt. Give a template whose assistant turns follow its generation prompt, or one with \
                    {% generation %} blocks, with --chat-template
                    """)
            }
            let added = String(decoding: through.utf8.dropFirst(before.utf8.count), as: UTF8.self)
            let trained = trainedPart(of: added)
            guard !trained.isEmpty else {
                throw .chatTemplate(origin: source.origin, message: "assistant turn \(i + 1 - holder) renders as no text after its prompt; nothing to train on")
            }
            turns.append((before, trained))
            if prefixPreserving && full.text.utf8.starts(with: through.utf8) {
                let start = before.utf8.count
                targets.append(start..<(start + trained.utf8.count))
            } else {
                prefixPreserving = false
            }
        }
        if prefixPreserving {
            return [Self.segments(full.text, targets: targets)]
        }
        // The template rewrites earlier turns: each assistant turn is trained after its own prompt.
        return turns.map { [TemplateSegment(text: $0.prompt, isTarget: false), TemplateSegment(text: $0.trained, isTarget: true)].filter { !$0.text.isEmpty } }
    }

    /// The part of an assistant turn's text the model generates: up to and including the last
    /// end-of-turn marker in it (what follows, a newline before the next turn, is the template's).
    func trainedPart(of turn: String) -> String {
        var best: String.Index?
        for marker in endOfTurnMarkers {
            if let r = turn.range(of: marker, options: .backwards), best.map({ r.upperBound > $0 }) ?? true { best = r.upperBound }
        }
        guard let end = best else { return turn }
        return String(turn[..<end])
    }

    /// `text` cut into segments at the UTF-8 ranges in `targets` (sorted, disjoint).
    static func segments(_ text: String, targets: [Range<Int>]) -> [TemplateSegment] {
        let bytes = Array(text.utf8)
        var out: [TemplateSegment] = []
        var at = 0
        func add(_ range: Range<Int>, _ target: Bool) {
            guard !range.isEmpty else { return }
            let piece = String(decoding: bytes[range], as: UTF8.self)
            if let last = out.last, last.isTarget == target {
                out[out.count - 1].text += piece
            } else {
                out.append(TemplateSegment(text: piece, isTarget: target))
            }
        }
        for r in targets.sorted(by: { $0.lowerBound < $1.lowerBound }) where r.lowerBound >= at && r.upperBound <= bytes.count {
            add(at..<r.lowerBound, false)
            add(r, true)
            at = r.upperBound
        }
        add(at..<bytes.count, false)
        return out
    }
}

/// DataSchema's values as template values, the way Python's json.loads would have made them.
public enum JinjaBridge {
    /// JSON as Python sees it: integers (written without a fraction or exponent) as int, other
    /// numbers as float, objects as dicts in written order.
    public static func value(_ json: JSONValue) -> JinjaValue {
        switch json {
        case .null: return .none
        case let .bool(b): return .bool(b)
        case let .number(n):
            let text = n.literal
            if !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let i = Int(text) { return .int(i) }
            return .float(n.doubleValue)
        case let .string(s): return .string(s)
        case let .array(items): return .list(items.map(value))
        case let .object(members):
            var d = JinjaDict()
            for m in members { d[m.key] = value(m.value) }
            return .dict(d)
        }
    }

    /// One turn as a template sees it: role and content (left out when an assistant turn that
    /// only calls tools gave none), `tool_calls` as OpenAI's {id?, type, function: {name,
    /// arguments}} with arguments as given (an object, or the JSON string), a tool turn's
    /// `tool_call_id` and `name` when given. Tools, tool calls and response formats a template
    /// does not read are written into the content (Schema.md).
    static func message(_ m: Message, toolsInTemplate: Bool, toolCallsInTemplate: Bool, reasoningInTemplate: Bool = true) -> JinjaValue {
        var d = JinjaDict()
        var m = m
        if let reasoning = m.reasoning, !reasoningInTemplate {
            // A template that reads no reasoning field sees it where thinking models write it.
            m.content = "<think>\n" + reasoning + "\n</think>\n\n" + m.content
            m.reasoning = nil
        }
        // transformers aliases reasoning: {"thinking": r, **message, "reasoning_content": r}.
        if let reasoning = m.reasoning { d["thinking"] = .string(reasoning) }
        d["role"] = .string(m.role.rawValue)
        switch m.role {
        case .system:
            d["content"] = .string(toolsInTemplate ? m.content : ChatRendering.text(of: m))
        case .user:
            d["content"] = .string(ChatRendering.text(of: m))
        case .assistant:
            if toolCallsInTemplate || m.toolCalls.isEmpty {
                if !m.contentOmitted { d["content"] = .string(m.content) }
                if !m.toolCalls.isEmpty {
                    d["tool_calls"] = .list(m.toolCalls.map { call in
                        var c = JinjaDict()
                        if let id = call.id { c["id"] = .string(id) }
                        c["type"] = .string("function")
                        c["function"] = .dict(JinjaDict([("name", .string(call.name)),
                                                         ("arguments", call.argumentsText.map { .string($0) } ?? value(call.arguments))]))
                        return .dict(c)
                    })
                }
            } else {
                d["content"] = .string(ChatRendering.text(of: m))
            }
            if let reasoning = m.reasoning { d["reasoning_content"] = .string(reasoning) }
        case .tool:
            d["content"] = .string(m.content)
            if let id = m.toolCallId { d["tool_call_id"] = .string(id) }
            if let name = m.name { d["name"] = .string(name) }
        }
        return .dict(d)
    }
}
