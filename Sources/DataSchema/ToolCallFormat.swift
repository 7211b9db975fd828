// How a model writes tool calls, as its chat template writes them: each call one JSON object
// holding the tool's name (`"name"`) and its arguments (`"arguments"`, or Llama 3's
// `"parameters"`), and in Mistral's format the call's id after them (`"id"`, 9 letters and
// digits); the template's text around each call (`<tool_call>\n` ... `\n</tool_call>`,
// `<|tool_call|>` ... `<|/tool_call|>`, nothing for Llama 3's bare JSON), around the reply's
// list of calls (Mistral's `[TOOL_CALLS] [` ... `]`), and what joins two calls. ChatFormat
// derives it from the template's rendering of probe calls; the tool-call grammar (Guidance),
// the server's and the session's readers and evaluation's metrics all take it from there.
// Leaves out formats whose id comes before the name or whose name is not a JSON string (Falcon
// 3's OpenAI objects): ChatFormat refuses those (docs/chat-templates.md).
import Foundation
import ModelAssets

/// A model's tool-call format: a call is `opening` + the name as a JSON string + `argumentsLead`
/// + the arguments as JSON (+ `idLead` + the id as a JSON string, for formats whose calls carry
/// one) + `closing`; a reply's calls are `listOpen`, the calls joined by `separator`, `listClose`.
public struct ToolCallFormat: Sendable, Hashable {
    /// Up to the name: the template's text before each call, then `{"name": ` (as it spaces it).
    public let opening: String
    /// Between the name and the arguments: `, "arguments": ` (or `"parameters"`).
    public let argumentsLead: String
    /// After the arguments (and the id): `}` and the template's text after each call.
    public let closing: String
    /// Between two calls of one turn; nil when the template writes one call a turn (Llama 3).
    public let separator: String?
    /// The template's text once before a turn's calls (Mistral's `[TOOL_CALLS] [`); empty when
    /// it wraps each call instead.
    public let listOpen: String
    /// The template's text once after a turn's calls (Mistral's `]`).
    public let listClose: String
    /// Between the arguments and the call's id as a JSON string (Mistral's `, "id": `); nil when
    /// the template writes calls without ids.
    public let idLead: String?
    /// The key the id is written under (`id`), when calls carry one.
    public let idKey: String?
    /// The key the arguments are written under (`arguments`, `parameters`).
    public let argumentsKey: String
    /// The template's text before each call's JSON object (`<tool_call>\n`; empty for bare JSON and Mistral's list).
    public let wrapperOpen: String
    /// The template's text after each call's JSON object (`\n</tool_call>`).
    public let wrapperClose: String

    /// Characters of an id the model writes (Mistral's templates require 9, and mistral_common's
    /// ids are 9 letters and digits).
    public static let idLength = 9

    /// Checks the layout: `opening` ends with `{ "name" :`, `argumentsLead` and `idLead` are
    /// `, "KEY" :` and `closing` begins with `}` (whitespace anywhere between); nil when it is not so.
    public init?(opening: String, argumentsLead: String, closing: String, separator: String?,
                 listOpen: String = "", listClose: String = "", idLead: String? = nil) {
        self.opening = opening
        self.argumentsLead = argumentsLead
        self.closing = closing
        self.separator = separator
        self.listOpen = listOpen
        self.listClose = listClose
        self.idLead = idLead
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
        guard let key = Self.leadKey(argumentsLead) else { return nil }
        argumentsKey = key
        if let idLead {
            guard let key = Self.leadKey(idLead) else { return nil }
            idKey = key
        } else {
            idKey = nil
        }
        // closing: ws } WRAPPER
        var c = Substring(closing)
        while c.first?.isWhitespace == true { c.removeFirst() }
        guard c.first == "}" else { return nil }
        wrapperClose = String(c.dropFirst())
    }

    /// The key of a lead `ws , ws "KEY" ws : ws`, nil when `lead` is not one.
    static func leadKey(_ lead: String) -> String? {
        var l = Substring(lead)
        func skip() { while l.first?.isWhitespace == true { l.removeFirst() } }
        skip()
        guard l.first == "," else { return nil }
        l.removeFirst()
        skip()
        guard let used = ToolCallFormat.jsonStringLength(atStartOf: l),
              case let .string(name)? = try? JSONValue.parse(String(l.prefix(used)), context: "key") else { return nil }
        l = l.dropFirst(used)
        skip()
        guard l.first == ":" else { return nil }
        l.removeFirst()
        skip()
        return l.isEmpty ? name : nil
    }

    /// Schema.md's rendering (`ChatRendering.toolCallText`): `<tool_call>\n{"name":NAME,"arguments":ARGS}\n</tool_call>`
    /// in compact JSON, calls on lines of their own. What templates that never read `tools` (or
    /// `tool_calls`) get, and the built-in templates.
    public static let documented = ToolCallFormat(opening: "<tool_call>\n{\"name\":", argumentsLead: ",\"arguments\":",
                                                  closing: "}\n</tool_call>", separator: "\n")!

    /// Whether a reply may hold several calls (the template joins them; Llama 3's takes one).
    public var allowsSeveralCalls: Bool { separator != nil }

    /// Whether `id` is an id this format's calls carry: `idLength` ASCII letters and digits.
    public static func isValidID(_ id: String) -> Bool {
        id.utf8.count == idLength && id.utf8.allSatisfy { (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) }
    }

    /// A fresh id for a call of this format (for a call read without one): `idLength` random letters and digits.
    public static func newID() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<idLength).map { _ in alphabet.randomElement()! })
    }

    /// One call's text, without the list's text around it, the arguments in compact JSON (as the
    /// grammar generates them); the id only where the format writes one.
    public func callText(name: String, arguments: JSONValue, id: String? = nil) -> String {
        let idPart = idLead.map { $0 + JSONValue.string(id ?? "").compactText } ?? ""
        return opening + JSONValue.string(name).compactText + argumentsLead + arguments.compactText + idPart + closing
    }

    /// A reply of one call, as this format writes it.
    public func text(name: String, arguments: JSONValue, id: String? = nil) -> String {
        listOpen + callText(name: name, arguments: arguments, id: id) + listClose
    }

    /// Calls as this format writes them, joined by its separator (the first call alone when it has none).
    public func text(_ calls: [ToolCall]) -> String {
        let written = calls.map { callText(name: $0.name, arguments: $0.arguments, id: $0.id) }
        guard let separator else { return listOpen + (written.first ?? "") + listClose }
        return listOpen + written.joined(separator: separator) + listClose
    }

    /// What a reply that calls tools begins with: the list's text, then the first call's opening.
    public var replyOpening: String { listOpen + opening }

    /// The first character of a call: text that is not a call must not begin with it (the
    /// tool grammar's text alternative, tool_choice none).
    public var lead: Character { replyOpening.first ?? "<" }

    /// A regular expression (Guidance's `regex`) for text that does not begin with `lead`.
    public var textPattern: String {
        let c = lead
        let escaped = c.isASCII && !(c.isLetter || c.isNumber) ? "\\" + String(c) : String(c)
        return "[^" + escaped + #"][\s\S]*"#
    }

    /// Whether `text` begins a call (the reply's opening whole).
    public func startsCall(_ text: String) -> Bool { text.utf8.starts(with: replyOpening.utf8) }

    /// Whether `text` could still become the opening of a call (a prefix of it).
    public func mayStartCall(_ text: String) -> Bool { replyOpening.utf8.starts(with: text.utf8) }

    /// The tokenizer's special tokens this format writes (Phi-4-mini's `<|tool_call|>` and
    /// `<|/tool_call|>`, Mistral's `[TOOL_CALLS]`): a reply decoded with special tokens skipped
    /// must keep these, or its calls lose their markers; guided generation writes them as the
    /// tokens they are (Guidance's ConstraintLibrary).
    public func specialTokens(in tokenizer: BPETokenizer) -> Set<Int> {
        // markers are words in brackets: a special token spelled as punctuation or whitespace
        // alone (`{`, `\n`) is never taken for one, or every brace would become it
        let framing = [listOpen, opening, closing, separator ?? "", listClose]
        return Set(tokenizer.specialTokenIds.filter { id in
            let text = tokenizer.decode([id])
            return text.contains(where: \.isLetter) && framing.contains { $0.contains(text) }
        })
    }

    /// A generated reply's text with special tokens skipped, except those this format writes.
    public func decodeReply(_ tokens: [Int], tokenizer: BPETokenizer) -> String {
        let kept = specialTokens(in: tokenizer)
        return tokenizer.decode(tokens.filter { kept.contains($0) || !tokenizer.isSpecial($0) })
    }

    /// A short human form for notes: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`,
    /// `[TOOL_CALLS] [{"name": NAME, "arguments": ARGS, "id": "ID"}]`.
    public var example: String {
        listOpen + opening + "NAME" + argumentsLead + "ARGS" + (idLead.map { $0 + "\"ID\"" } ?? "") + closing + listClose
    }

    // MARK: reading calls back

    /// One call read from text: its name, arguments and id (formats whose calls carry one), or
    /// why it is unusable.
    public struct ParsedCall: Sendable, Equatable {
        public var name: String?
        public var arguments: JSONValue?
        public var error: String?
        public var id: String?
        public init(name: String?, arguments: JSONValue?, error: String? = nil, id: String? = nil) {
            self.name = name
            self.arguments = arguments
            self.error = error
            self.id = id
        }
    }

    /// Splits generated text into its content and its calls in this format. With a wrapper
    /// (`<tool_call>` ... `</tool_call>`) every wrapped block is a call and the text before the
    /// first is the content; a block that is not one JSON object with a string `"name"` and an
    /// object under the arguments key, or lacks its closing text, is kept with an error (it is a
    /// malformed call, never dropped). Without one (Llama 3's bare JSON), the reply is a call when
    /// it begins with `{` and `"name"`, and holds only calls (joined by the separator). With a
    /// list (Mistral's `[TOOL_CALLS] [` ... `]`) the text before it is the content and the calls
    /// are the list's objects (whitespace in the list's framing is not compared).
    public func parse(_ text: String) -> (content: String, calls: [ParsedCall]) {
        if !Self.trimmed(listOpen).isEmpty { return parseList(text) }
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

    /// A reply whose calls are in one list: the text before the list is the content; each call
    /// is its own framing around one JSON object, the calls joined by the separator; a call cut
    /// short or a list without its end is kept with an error.
    func parseList(_ text: String) -> (content: String, calls: [ParsedCall]) {
        let openWords = Self.trimmed(listOpen).split(whereSeparator: \.isWhitespace)
        guard let marker = openWords.first, let found = text.range(of: marker) else { return (Self.trimmed(text), []) }
        let content = Self.trimmed(String(text[..<found.lowerBound]))
        var rest = text[found.lowerBound...]
        guard let afterOpen = Self.matchLoosely(listOpen, at: rest) else { return (Self.trimmed(text), []) }
        rest = rest[afterOpen...]
        let callOpen = Self.trimmed(wrapperOpen), callClose = Self.trimmed(wrapperClose)
        let join = Self.trimmed(separator ?? ""), close = Self.trimmed(listClose)
        var calls: [ParsedCall] = []
        while true {
            if !callOpen.isEmpty {
                guard let i = Self.matchLoosely(callOpen, at: rest) else {
                    calls.append(ParsedCall(name: nil, arguments: nil, error: "no \(callOpen) before a call"))
                    break
                }
                rest = rest[i...]
            }
            rest = rest.drop { $0.isWhitespace }
            guard rest.first == "{", let end = Self.jsonValueEnd(rest) else {
                calls.append(ParsedCall(name: nil, arguments: nil, error: rest.isEmpty ? "the list of calls ends before a call" : "a call is not a whole JSON object: \(String(rest.prefix(40)).debugDescription)"))
                break
            }
            var call = parseBody(String(rest[..<end]))
            rest = rest[end...]
            if !callClose.isEmpty {
                guard let i = Self.matchLoosely(callClose, at: rest) else {
                    if call.error == nil { call.error = "no closing \(callClose)" }
                    calls.append(call)
                    break
                }
                rest = rest[i...]
            }
            rest = rest.drop { $0.isWhitespace }
            if separator != nil, !join.isEmpty, let i = Self.matchLoosely(join, at: rest) {
                calls.append(call)
                rest = rest[i...]
                continue
            }
            if separator != nil, join.isEmpty, !rest.isEmpty, (callOpen.isEmpty ? rest.first == "{" : Self.matchLoosely(callOpen, at: rest) != nil) {
                calls.append(call)
                continue
            }
            if !close.isEmpty, Self.matchLoosely(close, at: rest) == nil, call.error == nil {
                call.error = rest.isEmpty ? "the list of calls has no closing \(close)" : "text after a call where \(close) should be: \(String(rest.prefix(40)).debugDescription)"
            }
            calls.append(call)
            break
        }
        return (content, calls)
    }

    /// Where `literal` ends when `s` begins with it, whitespace in either ignored; nil otherwise.
    static func matchLoosely(_ literal: String, at s: Substring) -> Substring.Index? {
        var i = s.startIndex
        for c in literal where !c.isWhitespace {
            while i < s.endIndex, s[i].isWhitespace { i = s.index(after: i) }
            guard i < s.endIndex, s[i] == c else { return nil }
            i = s.index(after: i)
        }
        return i
    }

    /// One call's JSON object: a string "name" and an object (or a JSON string holding one, as
    /// OpenAI sends arguments) under the arguments key, and for formats whose calls carry one,
    /// the id (`idLength` letters and digits; a call without one reads with no id).
    public func parseBody(_ body: String) -> ParsedCall {
        var call = parseNameAndArguments(body)
        guard let idKey, call.error == nil, let value = try? JSONValue.parse(Self.trimmed(body), context: "tool call") else { return call }
        switch value[idKey] {
        case .none: break
        case .some(.string(let id)) where Self.isValidID(id): call.id = id
        case .some(let other):
            call.error = "the call's \"\(idKey)\" must be \(Self.idLength) letters and digits, got \(other.compactText.prefix(40))"
        }
        return call
    }

    func parseNameAndArguments(_ body: String) -> ParsedCall {
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

    /// Exactly one well-formed call and nothing else: its name and arguments, else nil.
    public func readCall(_ text: String) -> (name: String, arguments: JSONValue)? {
        guard let calls = readCalls(text), calls.count == 1 else { return nil }
        return (calls[0].name, calls[0].arguments)
    }

    /// Well-formed calls and nothing else (what the tool grammar generates): each one's name,
    /// arguments and id (nil for formats without ids), else nil.
    public func readCalls(_ text: String) -> [(name: String, arguments: JSONValue, id: String?)]? {
        let parsed = parse(text)
        guard parsed.content.isEmpty, !parsed.calls.isEmpty else { return nil }
        var out: [(name: String, arguments: JSONValue, id: String?)] = []
        for call in parsed.calls {
            guard call.error == nil, let name = call.name, let arguments = call.arguments else { return nil }
            out.append((name, arguments, call.id))
        }
        return out
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

