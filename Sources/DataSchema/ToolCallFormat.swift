// How a model writes a tool call, as its chat template writes one: one JSON object holding the
// tool's name (`"name"`) and its arguments (`"arguments"`, or Llama 3's `"parameters"`), between
// the template's text before it (`<tool_call>\n`, `<|tool_call|>`, nothing for Llama 3's bare
// JSON) and after it (`\n</tool_call>`, `<|/tool_call|>`), and what joins two calls. ChatFormat
// derives it from the template's rendering of a probe call; the tool-call grammar (Guidance),
// the server's and the session's readers and evaluation's metrics all take it from there.
// Leaves out formats whose calls carry an id the model invents (Mistral's `[TOOL_CALLS]`) or
// whose name is not a JSON string: ChatFormat refuses those (docs/chat-templates.md).
import Foundation
import ModelAssets

/// A model's tool-call format: a call is `opening` + the name as a JSON string + `argumentsLead`
/// + the arguments as JSON + `closing`; several calls are joined by `separator`.
public struct ToolCallFormat: Sendable, Hashable {
    /// Up to the name: the template's text before the call, then `{"name": ` (as it spaces it).
    public let opening: String
    /// Between the name and the arguments: `, "arguments": ` (or `"parameters"`).
    public let argumentsLead: String
    /// After the arguments: `}` and the template's text after the call.
    public let closing: String
    /// Between two calls of one turn; nil when the template writes one call a turn (Llama 3).
    public let separator: String?
    /// The key the arguments are written under (`arguments`, `parameters`).
    public let argumentsKey: String
    /// The template's text before the call's JSON object (`<tool_call>\n`; empty for bare JSON).
    public let wrapperOpen: String
    /// The template's text after the call's JSON object (`\n</tool_call>`).
    public let wrapperClose: String

    /// Checks the layout: `opening` ends with `{ "name" :`, `argumentsLead` is `, "KEY" :` and
    /// `closing` begins with `}` (whitespace anywhere between); nil when it is not so.
    public init?(opening: String, argumentsLead: String, closing: String, separator: String?) {
        self.opening = opening
        self.argumentsLead = argumentsLead
        self.closing = closing
        self.separator = separator
        // opening: WRAPPER { ws "name" ws : ws
        var o = Substring(opening)
        while o.last?.isWhitespace == true { o.removeLast() }
        guard o.hasSuffix(":") else { return nil }
        o.removeLast()
        while o.last?.isWhitespace == true { o.removeLast() }
        guard o.hasSuffix("\"name\"") else { return nil }
        o.removeLast(6)
        while o.last?.isWhitespace == true { o.removeLast() }
        guard o.hasSuffix("{") else { return nil }
        o.removeLast()
        wrapperOpen = String(o)
        // argumentsLead: ws , ws "KEY" ws : ws
        var l = Substring(argumentsLead)
        func skip() { while l.first?.isWhitespace == true { l.removeFirst() } }
        skip()
        guard l.first == "," else { return nil }
        l.removeFirst()
        skip()
        guard let used = ToolCallFormat.jsonStringLength(atStartOf: l),
              case let .string(name)? = try? JSONValue.parse(String(l.prefix(used)), context: "key") else { return nil }
        argumentsKey = name
        l = l.dropFirst(used)
        skip()
        guard l.first == ":" else { return nil }
        l.removeFirst()
        skip()
        guard l.isEmpty else { return nil }
        // closing: ws } WRAPPER
        var c = Substring(closing)
        while c.first?.isWhitespace == true { c.removeFirst() }
        guard c.first == "}" else { return nil }
        wrapperClose = String(c.dropFirst())
    }

    /// Schema.md's rendering (`ChatRendering.toolCallText`): `<tool_call>\n{"name":NAME,"arguments":ARGS}\n</tool_call>`
    /// in compact JSON, calls on lines of their own. What templates that never read `tools` (or
    /// `tool_calls`) get, and the built-in templates.
    public static let documented = ToolCallFormat(opening: "<tool_call>\n{\"name\":", argumentsLead: ",\"arguments\":",
                                                  closing: "}\n</tool_call>", separator: "\n")!

    /// One call as this format writes it, the arguments in compact JSON (as the grammar generates them).
    public func text(name: String, arguments: JSONValue) -> String {
        opening + JSONValue.string(name).compactText + argumentsLead + arguments.compactText + closing
    }

    /// Calls as this format writes them, joined by its separator (the first call alone when it has none).
    public func text(_ calls: [ToolCall]) -> String {
        let written = calls.map { text(name: $0.name, arguments: $0.arguments) }
        guard let separator else { return written.first ?? "" }
        return written.joined(separator: separator)
    }

    /// The first character of a call: text that is not a call must not begin with it (the
    /// tool grammar's text alternative, tool_choice none).
    public var lead: Character { opening.first ?? "<" }

    /// A regular expression (Guidance's `regex`) for text that does not begin with `lead`.
    public var textPattern: String {
        let c = lead
        let escaped = c.isASCII && !(c.isLetter || c.isNumber) ? "\\" + String(c) : String(c)
        return "[^" + escaped + #"][\s\S]*"#
    }

    /// Whether `text` begins a call (its `opening` whole).
    public func startsCall(_ text: String) -> Bool { text.utf8.starts(with: opening.utf8) }

    /// Whether `text` could still become the opening of a call (a prefix of it).
    public func mayStartCall(_ text: String) -> Bool { opening.utf8.starts(with: text.utf8) }

    /// The tokenizer's special tokens this format writes (Phi-4-mini's `<|tool_call|>` and
    /// `<|/tool_call|>`): a reply decoded with special tokens skipped must keep these, or its
    /// calls lose their wrapper.
    public func specialTokens(in tokenizer: BPETokenizer) -> Set<Int> {
        Set(tokenizer.specialTokenIds.filter { id in
            let text = tokenizer.decode([id])
            return !text.isEmpty && (opening.contains(text) || closing.contains(text))
        })
    }

    /// A generated reply's text with special tokens skipped, except those this format writes.
    public func decodeReply(_ tokens: [Int], tokenizer: BPETokenizer) -> String {
        let kept = specialTokens(in: tokenizer)
        return tokenizer.decode(tokens.filter { kept.contains($0) || !tokenizer.isSpecial($0) })
    }

    /// A short human form for notes: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`.
    public var example: String { opening + "NAME" + argumentsLead + "ARGS" + closing }

    // MARK: reading calls back

    /// One call read from text: its name and arguments, or why it is unusable.
    public struct ParsedCall: Sendable, Equatable {
        public var name: String?
        public var arguments: JSONValue?
        public var error: String?
        public init(name: String?, arguments: JSONValue?, error: String? = nil) {
            self.name = name
            self.arguments = arguments
            self.error = error
        }
    }

    /// Splits generated text into its content and its calls in this format. With a wrapper
    /// (`<tool_call>` ... `</tool_call>`) every wrapped block is a call and the text before the
    /// first is the content; a block that is not one JSON object with a string `"name"` and an
    /// object under the arguments key, or lacks its closing text, is kept with an error (it is a
    /// malformed call, never dropped). Without one (Llama 3's bare JSON), the reply is a call when
    /// it begins with `{` and `"name"`, and holds only calls (joined by the separator).
    public func parse(_ text: String) -> (content: String, calls: [ParsedCall]) {
        let openTag = Self.trimmed(wrapperOpen), closeTag = Self.trimmed(wrapperClose)
        if !openTag.isEmpty {
            guard let first = text.range(of: openTag) else { return (Self.trimmed(text), []) }
            let content = Self.trimmed(String(text[..<first.lowerBound]))
            var calls: [ParsedCall] = []
            var rest = text[first.upperBound...]
            while true {
                var inner: Substring
                var missingClose = false
                if !closeTag.isEmpty, let close = rest.range(of: closeTag) {
                    inner = rest[..<close.lowerBound]
                    rest = rest[close.upperBound...]
                } else if closeTag.isEmpty, let next = rest.range(of: openTag) {
                    inner = rest[..<next.lowerBound]
                    rest = rest[next.lowerBound...]
                } else {
                    inner = rest
                    rest = rest[rest.endIndex...]
                    missingClose = !closeTag.isEmpty
                }
                var call = parseBody(String(inner))
                if missingClose && call.error == nil { call.error = "no closing \(closeTag)" }
                calls.append(call)
                guard let next = rest.range(of: openTag) else { break }
                rest = rest[next.upperBound...]
            }
            return (content, calls)
        }
        // Bare JSON: calls only when the reply opens with one.
        var rest = Substring(Self.trimmed(text))
        guard Self.opensNameObject(rest) else { return (Self.trimmed(text), []) }
        var calls: [ParsedCall] = []
        while !rest.isEmpty {
            let end = Self.jsonValueEnd(rest) ?? rest.endIndex
            var call = parseBody(String(rest[..<end]))
            rest = rest[end...]
            if !closeTag.isEmpty, Self.trimmed(String(rest)).hasPrefix(closeTag) {
                rest = rest[rest.range(of: closeTag)!.upperBound...]
            }
            rest = rest.drop { $0.isWhitespace }
            if let separator, !Self.trimmed(separator).isEmpty, rest.hasPrefix(Self.trimmed(separator)) {
                rest = rest.dropFirst(Self.trimmed(separator).count).drop { $0.isWhitespace }
            }
            if !rest.isEmpty && (separator == nil || !Self.opensNameObject(rest)) {
                if call.error == nil { call.error = "text after the tool call: \(String(rest.prefix(40)).debugDescription)" }
                calls.append(call)
                break
            }
            calls.append(call)
        }
        return ("", calls)
    }

    /// One call's JSON object: a string "name" and an object (or a JSON string holding one, as
    /// OpenAI sends arguments) under the arguments key.
    public func parseBody(_ body: String) -> ParsedCall {
        let value: JSONValue
        do { value = try JSONValue.parse(Self.trimmed(body), context: "tool call") } catch {
            return ParsedCall(name: nil, arguments: nil, error: error.localizedDescription)
        }
        guard case .object = value else {
            return ParsedCall(name: nil, arguments: nil, error: "a tool call is a JSON object, got \(value.typeName)")
        }
        guard let name = value["name"]?.stringValue else {
            return ParsedCall(name: nil, arguments: nil, error: "the tool call has no string \"name\"")
        }
        switch value[argumentsKey] {
        case .some(.object(let members)):
            return ParsedCall(name: name, arguments: .object(members))
        case .some(.string(let s)):
            if let parsed = try? JSONValue.parse(s, context: argumentsKey), case .object = parsed {
                return ParsedCall(name: name, arguments: parsed)
            }
            return ParsedCall(name: name, arguments: nil, error: "\"\(argumentsKey)\" is a string that is not a JSON object")
        case .none:
            return ParsedCall(name: name, arguments: nil, error: "the tool call has no \"\(argumentsKey)\"")
        case .some(let other):
            return ParsedCall(name: name, arguments: nil, error: "\"\(argumentsKey)\" is a JSON \(other.typeName), not an object")
        }
    }

    /// Exactly one well-formed call and nothing else (what the tool grammar generates): its name
    /// and arguments, else nil.
    public func readCall(_ text: String) -> (name: String, arguments: JSONValue)? {
        let parsed = parse(text)
        guard parsed.content.isEmpty, parsed.calls.count == 1, let call = parsed.calls.first, call.error == nil,
              let name = call.name, let arguments = call.arguments else { return nil }
        return (name, arguments)
    }

    static func trimmed(_ s: String) -> String { s.trimmingCharacters(in: .whitespacesAndNewlines) }

    /// `{` then whitespace then `"name"`.
    static func opensNameObject(_ s: Substring) -> Bool {
        guard s.first == "{" else { return false }
        return s.dropFirst().drop { $0.isWhitespace }.hasPrefix("\"name\"")
    }

    /// The length in characters of the JSON string literal that `s` begins with, nil when it begins with none.
    static func jsonStringLength(atStartOf s: Substring) -> Int? {
        guard s.first == "\"" else { return nil }
        var escaped = false, n = 1
        for c in s.dropFirst() {
            n += 1
            if escaped { escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { return n }
        }
        return nil
    }

    /// Where the JSON object or array that `s` begins with ends (after its closing bracket),
    /// counting brackets outside strings; nil when it does not end.
    static func jsonValueEnd(_ s: Substring) -> Substring.Index? {
        var depth = 0, inString = false, escaped = false
        var i = s.startIndex
        while i < s.endIndex {
            let c = s[i]
            if inString {
                if escaped { escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { inString = false }
            } else if c == "\"" {
                inString = true
            } else if c == "{" || c == "[" {
                depth += 1
            } else if c == "}" || c == "]" {
                depth -= 1
                if depth == 0 { return s.index(after: i) }
            }
            i = s.index(after: i)
        }
        return nil
    }
}

