// The OpenAI-compatible API over the scheduler, apart from HTTP: a request body in, a JSON
// reply or a stream of server-sent events out. Chat prompts are rendered as training renders
// them (DataSchema's rendering and the model's chat template: tools on the system turn, a
// response_format schema before the last user turn), so an adapter sees the prompts it was
// trained on. Replies: `finish_reason` stop / length / tool_calls as OpenAI gives them; a
// guided reply cut by max_tokens is answered `length` (never as a whole value); a tool call is
// the model's own call (its chat template's format: Hermes' `<tool_call>` block, Llama 3's bare
// JSON, Mistral's `[TOOL_CALLS]` list with the ids its model writes, ...; ChatFormat.toolCallFormat)
// read back into `tool_calls` — several in one reply where the format joins calls and the request
// allows it (`parallel_tool_calls`) — streamed as OpenAI streams them (per call a delta with its
// index, id and name, then its arguments in pieces as decoded);
// usage counts the prompt positions the prompt cache supplied (`prompt_tokens_details.cached_tokens`);
// a thinking model's thinking (between its template's `<think>` markers) is `reasoning_content`.
// Reference: OpenAI's API reference (chat completion object, chunk object, completions), and
// what Apple's ChatCompletionsLanguageModel reads of a stream (docs/foundation-models-client.md).
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition

/// Limits a server puts on requests.
public struct ServiceLimits: Sendable {
    /// max_tokens when a chat request gives none (capped by the context left).
    public var defaultMaxTokens: Int
    /// The largest max_tokens accepted (nil: the model's context).
    public var maxTokensLimit: Int?
    /// The largest request body, in bytes.
    public var maxBodyBytes: Int

    public init(defaultMaxTokens: Int = 512, maxTokensLimit: Int? = nil, maxBodyBytes: Int = 4 << 20) {
        self.defaultMaxTokens = defaultMaxTokens
        self.maxTokensLimit = maxTokensLimit
        self.maxBodyBytes = maxBodyBytes
    }
}

public final class OpenAIService: @unchecked Sendable {
    public let catalog: AdapterCatalog
    public let scheduler: Scheduler
    public let constraints: ConstraintLibrary
    public let limits: ServiceLimits
    let encoder: TrainingEncoder
    var tokenizer: BPETokenizer { catalog.base.tokenizer }

    public enum Reply: Sendable {
        case json(JSONValue)
        /// Server-sent events; ends with `data: [DONE]`.
        case stream(ReplyStream)
    }

    public init(catalog: AdapterCatalog, scheduler: Scheduler, limits: ServiceLimits = .init()) throws {
        self.catalog = catalog
        self.scheduler = scheduler
        self.limits = limits
        let base = catalog.base
        constraints = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
        encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)
    }

    // MARK: models

    /// `GET /v1/models`: the base and every servable adapter; refused adapters under `refused`.
    public func models() -> JSONValue {
        let (models, refused) = catalog.listing()
        return object([
            ("object", .string("list")),
            ("data", .array(models.map(modelObject))),
            ("refused", .array(refused.map { r in object([("id", .string(r.id)), ("object", .string("model")), ("reason", .string(r.reason))]) })),
        ])
    }

    /// `GET /v1/models/{id}`.
    public func model(_ id: String) throws(ServerError) -> JSONValue { modelObject(try catalog.model(id)) }

    func modelObject(_ m: AdapterCatalog.Model) -> JSONValue {
        object([("id", .string(m.id)), ("object", .string("model")), ("created", number(m.created)), ("owned_by", .string("adapter-toolkit")),
                ("root", .string(catalog.baseID)), ("parent", m.adapter == nil ? .null : .string(catalog.baseID))])
    }

    // MARK: completions

    static func parse(_ body: [UInt8]) throws(ServerError) -> JSONValue {
        guard let text = String(validating: body, as: UTF8.self) else { throw .invalidRequest("The request body is not UTF-8 text.") }
        do throws(DataSchemaError) {
            return try JSONValue.parse(text, context: "request body")
        } catch {
            throw .invalidRequest("We could not parse the JSON body of your request: \(error.localizedDescription)", code: "invalid_json")
        }
    }

    /// `POST /v1/chat/completions`.
    public func chatCompletions(_ body: [UInt8]) async throws(ServerError) -> Reply {
        try await chat(ChatRequest(Self.parse(body)), forcing: nil)
    }

    /// A chat request read; `forcing` replaces the constraint its guide sets (tests force a reply's
    /// shape with it: a thinking block on a random tiny model).
    func chat(_ request: ChatRequest, forcing: TokenConstraint?) async throws(ServerError) -> Reply {
        let model = try catalog.model(request.model)
        let thinking = catalog.base.template.thinkingMarkers
        // Reasoning given back goes to a template that reads it (ChatFormat.readsReasoning: Qwen3's);
        // one that never does would get it written into the content, which its model never saw.
        if let param = request.reasoningParam, !((encoder.renderer as? ChatFormat)?.readsReasoning ?? false) {
            throw .invalidRequest("'\(param)' is given, but the model '\(request.model)' has no thinking block in its chat template to render it in; leave reasoning out of the conversation.",
                                  param: param, code: "unsupported_parameter")
        }
        let prompt: [Int]
        do throws(DataSchemaError) { prompt = try encoder.encodePrompt(request.messages) } catch {
            // The model's chat template refused the conversation (a system turn it does not allow, ...).
            throw .invalidRequest(error.errorDescription ?? "\(error)", param: "messages", code: "invalid_value")
        }
        var mode: ReplyAssembler.Mode = .text
        var callFormat = ToolCallFormat.documented
        switch request.guide {
        case .tools(_, let allowText):
            mode = allowText ? .textOrToolCall : .toolCall
            callFormat = try toolCallFormat(model: request.model)
        case .toolsOrValue:
            mode = .textOrToolCall  // a value is compact JSON, never the call's opening
            callFormat = try toolCallFormat(model: request.model)
        case .textOnly:
            if case let .format(f) = chatFormat?.toolCalls { callFormat = f }
        case .none, .schema: break
        }
        var constraint = forcing
        if forcing == nil {
            constraint = try self.constraint(request.guide, tools: request.tools, format: callFormat, severalCalls: request.parallelToolCalls)
        }
        return try await run(prompt: prompt, model: model, sampling: request.sampling, constraint: constraint, kind: .chat, mode: mode,
                             thinking: thinking, callFormat: callFormat)
    }

    /// The model's chat template, when it is one (a test's code template is not).
    var chatFormat: ChatFormat? { encoder.renderer as? ChatFormat }

    /// The format the model writes tool calls in; a 400 naming the template when guided tool
    /// calls are refused for it (a call that is not one JSON object beginning with the name: Falcon 3's).
    func toolCallFormat(model: String) throws(ServerError) -> ToolCallFormat {
        guard let chatFormat else { return .documented }
        do throws(DataSchemaError) { return try chatFormat.toolCallFormat() } catch {
            throw .invalidRequest("The model '\(model)' cannot be given tools: \(error.errorDescription ?? "\(error)")", param: "tools", code: "unsupported_parameter")
        }
    }

    /// `POST /v1/completions`: the prompt as plain text, no chat template.
    public func completions(_ body: [UInt8]) async throws(ServerError) -> Reply {
        let request = try CompletionRequest(Self.parse(body))
        let model = try catalog.model(request.model)
        let prompt = tokenizer.encodeText(request.prompt)  // BOS first when the tokenizer adds one, as vLLM and llama-server do
        guard !prompt.isEmpty else { throw .invalidRequest("'prompt' is empty: give at least one character to continue.", param: "prompt", code: "invalid_value") }
        return try await run(prompt: prompt, model: model, sampling: request.sampling, constraint: nil, kind: .completion, mode: .text)
    }

    /// The constraint of a guide; with tools, several calls in one reply where `severalCalls`
    /// (`parallel_tool_calls`, default true) and the model's format joins calls.
    func constraint(_ guide: Guide, tools: [ToolDefinition], format: ToolCallFormat = .documented, severalCalls: Bool = false) throws(ServerError) -> TokenConstraint? {
        do throws(GuidanceError) {
            switch guide {
            case .none: return nil
            case .schema(let schema, _): return try constraints.jsonSchema(schema)
            case .tools(let tools, let allowText):
                return try constraints.toolCall(tools.map { ($0.name, $0.parameters) }, allowText: allowText, format: format, severalCalls: severalCalls)
            case .toolsOrValue(let tools, let schema, _):
                return try constraints.toolCall(tools.map { ($0.name, $0.parameters) }, otherwise: .value(schema), format: format, severalCalls: severalCalls)
            case .textOnly: return try constraints.regex(format.textPattern)
            }
        } catch {
            // a tool's parameters are named by the tool (Grammar.toolCall's paths); the rest is the schema's
            if let name = error.toolName, let i = tools.firstIndex(where: { $0.name == name }) {
                throw .unsupportedGuide(error.localizedDescription, param: "tools[\(i)].function.parameters")
            }
            switch guide {
            case .schema(_, let param), .toolsOrValue(_, _, let param): throw .unsupportedGuide(error.localizedDescription, param: param)
            default: throw .unsupportedGuide(error.localizedDescription, param: "tools")
            }
        }
    }

    func run(prompt: [Int], model: AdapterCatalog.Model, sampling p: SamplingParameters, constraint: TokenConstraint?,
             kind: ReplyFormat.Kind, mode: ReplyAssembler.Mode, thinking: (open: String, close: String)? = nil,
             callFormat: ToolCallFormat = .documented) async throws(ServerError) -> Reply {
        let context = scheduler.model.config.maxPositionEmbeddings
        let room = context - prompt.count
        guard room >= 1 else { throw .contextExceeded(promptTokens: prompt.count, maxTokens: p.maxTokens ?? 1, limit: context) }
        let maxTokens = p.maxTokens ?? min(limits.defaultMaxTokens, room)
        if let cap = limits.maxTokensLimit, maxTokens > cap {
            throw .invalidRequest("'\(p.maxTokensParam)' is \(maxTokens), more than this server allows (\(cap)).", param: p.maxTokensParam, code: "invalid_value")
        }
        let request = DecodeRequest(prompt: prompt, adapter: model.adapter, maxTokens: maxTokens, stopTokens: catalog.base.stopTokenIds,
                                    sampling: SamplingOptions(temperature: Float(p.temperature), topK: p.topK, topP: p.topP.map(Float.init)),
                                    seed: p.seed ?? UInt64.random(in: 0...UInt64.max), constraint: constraint, draft: model.draft)
        let (events, ticket) = try scheduler.submit(request)
        let format = ReplyFormat(kind: kind, id: ReplyFormat.newID(kind), created: Int(Date().timeIntervalSince1970), model: model.id,
                                 promptTokens: prompt.count, includeUsage: p.includeUsage)
        var decoder = StreamingDecoder(tokenizer: tokenizer, skipSpecialTokens: true)
        // a tool reply's special tokens the call format writes (Phi-4-mini's <|tool_call|>, Mistral's [TOOL_CALLS]) are decoded, never skipped
        if mode != .text { decoder.keptTokens = callFormat.specialTokens(in: tokenizer) }
        var splitter: ThinkingSplitter?
        if let thinking {
            // the markers' own tokens (Qwen3's `<think>` is one) are decoded, never skipped
            decoder.keptTokens.formUnion([thinking.open, thinking.close].compactMap { tokenizer.tokenId($0) })
            splitter = ThinkingSplitter(open: thinking.open, close: thinking.close, prompt: tokenizer.decode(prompt))
        }
        let assembler = ReplyAssembler(decoder: decoder, stop: p.stop, mode: mode, thinking: splitter, callFormat: callFormat)
        let stream = ReplyStream(events: events, ticket: ticket, format: format, assembler: assembler)
        if p.stream { return .stream(stream) }
        // a caller that goes away (its task cancelled) frees the slot too
        let result: Result<JSONValue, ServerError> = await withTaskCancellationHandler {
            do throws(ServerError) {
                return .success(try await stream.whole())
            } catch {
                return .failure(error)
            }
        } onCancel: {
            ticket.cancel()
        }
        return .json(try result.get())
    }
}

// MARK: replies

/// What a reply hands its client as it is decoded: text, a thinking model's thinking (streamed
/// as `reasoning_content`), the start of a tool call (its name, known once the call's head is
/// decoded; its id too in a format whose model writes one), or more of that call's arguments.
enum ReplyPiece: Equatable {
    case text(String)
    case reasoning(String)
    /// A call begins (the next index): its name, and its id where the model writes one (Mistral's).
    case callStart(name: String, id: String?)
    /// More of the last begun call's arguments.
    case arguments(String)
}

/// A thinking model's reply split into its thinking and its answer as it is decoded, at the
/// markers its template writes (ChatTemplateSource.thinkingMarkers: `<think>` ... `</think>`).
/// The reply is thinking from the start when the prompt leaves a thinking block open
/// (DeepSeek-R1-Distill's generation prompt ends in `<think>\n`), and when it opens with the open
/// marker (Qwen3); otherwise, and when the prompt ends with a closed block (Qwen3 with
/// `enable_thinking: false`), all of it is the answer. Newlines next to the markers are dropped:
/// Qwen3's template writes reasoning given back as `<think>\n` + reasoning.strip('\n') +
/// `\n</think>\n\n` + content.lstrip('\n'), so the parts handed out render back as generated.
/// A tail that could still begin a marker (or be newlines before one) is held until decided.
struct ThinkingSplitter {
    enum State { case start, reasoningStart, reasoning, contentStart, content }
    let open: String, close: String
    private(set) var state: State
    private var buffer = ""

    init(open: String, close: String, prompt: String) {
        self.open = open
        self.close = close
        var tail = Substring(prompt)
        while let last = tail.last, last.isWhitespace { tail = tail.dropLast() }
        state = tail.hasSuffix(close) ? .content : tail.hasSuffix(open) ? .reasoningStart : .start
    }

    /// The reasoning and the answer text now decided (either may be empty).
    mutating func feed(_ text: String, final: Bool) -> (reasoning: String, content: String) {
        buffer += text
        var reasoning = "", content = ""
        while true {
            switch state {
            case .start:
                if buffer.hasPrefix(open) {
                    buffer.removeFirst(open.count)
                    state = .reasoningStart
                } else if !final && open.hasPrefix(buffer) {
                    return (reasoning, content)  // may still be the open marker
                } else {
                    state = .content
                }
            case .reasoningStart, .contentStart:
                while buffer.first == "\n" { buffer.removeFirst() }
                if buffer.isEmpty { return (reasoning, content) }
                state = state == .reasoningStart ? .reasoning : .content
            case .reasoning:
                if let r = buffer.range(of: close) {
                    var thought = buffer[..<r.lowerBound]
                    while thought.last == "\n" { thought = thought.dropLast() }
                    reasoning += thought
                    buffer = String(buffer[r.upperBound...])
                    state = .contentStart
                    continue
                }
                if final {
                    reasoning += buffer
                    buffer = ""
                    return (reasoning, content)
                }
                let keep = heldTail()
                reasoning += buffer.dropLast(keep)
                buffer = String(buffer.suffix(keep))
                return (reasoning, content)
            case .content:
                content += buffer
                buffer = ""
                return (reasoning, content)
            }
        }
    }

    /// How many trailing characters could be newlines and the start of the close marker.
    private func heldTail() -> Int {
        var marker = 0
        for n in stride(from: min(close.count - 1, buffer.count), to: 0, by: -1) where buffer.hasSuffix(String(close.prefix(n))) {
            marker = n
            break
        }
        var keep = marker
        for c in buffer.dropLast(marker).reversed() {
            guard c == "\n" else { break }
            keep += 1
        }
        return keep
    }
}

/// The text of a reply as it is decoded: held back while it could still begin a stop sequence,
/// cut at one; for tool replies, once it begins with the call format's opening, read as a call
/// (ToolCallReader); held while it could still be that opening (Llama 3's `{"name": ` beside a
/// response_format value, which is compact JSON: `{"name":`).
struct ReplyAssembler {
    enum Mode { case text, textOrToolCall, toolCall }
    var decoder: StreamingDecoder
    let stop: [String]
    var mode: Mode
    /// All text decoded.
    var raw = ""
    /// Released text not yet matched against every stop sequence.
    var held = ""
    var stoppedBySequence = false
    /// nil while a textOrToolCall reply has no text yet.
    var isCall: Bool?
    /// The call, when the reply is one.
    var call: ToolCallReader
    /// A thinking model's reply: its thinking is split off before the rest is read.
    var thinking: ThinkingSplitter?

    init(decoder: StreamingDecoder, stop: [String], mode: Mode, thinking: ThinkingSplitter? = nil, callFormat: ToolCallFormat = .documented) {
        self.decoder = decoder
        self.stop = stop
        self.mode = mode
        self.thinking = thinking
        call = ToolCallReader(format: callFormat)
        isCall = mode == .text ? false : mode == .toolCall ? true : nil
    }

    /// What to hand to the client now.
    mutating func take(_ ids: [Int]) -> [ReplyPiece] {
        var piece = ""
        for id in ids { piece += decoder.feed(id) }
        return split(piece, final: false)
    }

    mutating func finish() -> [ReplyPiece] { split(decoder.finish(), final: true) }

    private mutating func split(_ piece: String, final: Bool) -> [ReplyPiece] {
        guard thinking != nil, !stoppedBySequence else { return release(piece, final: final) }
        let (reasoning, content) = thinking!.feed(piece, final: final)
        return (reasoning.isEmpty ? [] : [.reasoning(reasoning)]) + release(content, final: final)
    }

    private mutating func release(_ piece: String, final: Bool) -> [ReplyPiece] {
        raw += piece
        if stoppedBySequence { return [] }
        var piece = piece
        if isCall == nil {
            // undecided until the text is the call's opening or cannot become it; the reader then
            // sees the call from its start, and text is released from its start
            if call.format.startsCall(raw) {
                isCall = true
                piece = raw
            } else if raw.isEmpty || (call.format.mayStartCall(raw) && !final) {
                return []
            } else {
                isCall = false
                piece = raw
            }
        }
        if isCall == true { return call.feed(piece) }
        let text = releaseText(piece, final: final)
        return text.isEmpty ? [] : [.text(text)]
    }

    private mutating func releaseText(_ piece: String, final: Bool) -> String {
        held += piece
        if stop.isEmpty || held.isEmpty {
            defer { held = "" }
            return held
        }
        if let cut = stop.compactMap({ held.range(of: $0)?.lowerBound }).min() {
            stoppedBySequence = true
            defer { held = "" }
            return String(held[..<cut])
        }
        if final {
            defer { held = "" }
            return held
        }
        // keep back the longest tail that begins a stop sequence
        var keep = 0
        for s in stop {
            for n in stride(from: min(s.count - 1, held.count), to: 0, by: -1) where n > keep && held.hasSuffix(String(s.prefix(n))) {
                keep = n
                break
            }
        }
        let out = String(held.dropLast(keep))
        held = String(held.suffix(keep))
        return out
    }
}

/// A reply that is calls in the model's format (ToolCallFormat: `listOpen`, then each call
/// `opening` NAME `argumentsLead` ARGS [`idLead` "ID"] `closing`, joined by `separator`, then
/// `listClose`; e.g. `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, Llama 3's
/// `{"name": "NAME", "parameters": ARGS}`, Mistral's `[TOOL_CALLS] [{"name": "NAME", "arguments":
/// ARGS, "id": "ID"}, ...]`), which the tool grammar generates, read as it is decoded: each call's
/// name once its string and the arguments' lead are whole, then the arguments' JSON text as it
/// comes, up to where the value ends (its depth of brackets back to zero outside strings; a
/// scalar ends at the call's closing `}`). A call whose id the model writes after the arguments
/// (Mistral's) starts once its id is read, its arguments then in one piece: a client takes a
/// call's id from its first delta. Pieces end at a decoded piece's end or at an ASCII byte, so
/// each is UTF-8 text.
struct ToolCallReader {
    let format: ToolCallFormat
    let listOpen: [UInt8], head: [UInt8], argumentsKey: [UInt8], idLead: [UInt8]?, tail: [UInt8], listClose: [UInt8]
    /// The separator and the next call's opening: what follows a call when another comes.
    let nextCall: [UInt8]?
    private static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")

    enum Stage { case listOpen, head, arguments, id, tail, between, done }
    /// One call as read: its id (formats whose model writes one), name, arguments' text, and
    /// whether its closing text came.
    struct Call: Equatable {
        var id: String?
        var name: String
        var arguments: String
        var closed = false
    }

    private(set) var bytes: [UInt8] = []
    private(set) var calls: [Call] = []
    /// The text is not calls in the expected shape (never with the tool grammar in force).
    private(set) var broken = false
    private var stage = Stage.listOpen
    /// Where the current stage's text begins.
    private var pos = 0
    private var argumentsStart = 0, scanned = 0, emitted = 0, depth = 0
    private var inString = false, escaped = false
    /// The call being read, before it is handed out (a format with ids hands it out at its id).
    private var pending: Call?

    init(format: ToolCallFormat = .documented) {
        self.format = format
        listOpen = Array(format.listOpen.utf8)
        head = Array(format.opening.utf8)
        argumentsKey = Array(format.argumentsLead.utf8)
        idLead = format.idLead.map { Array($0.utf8) }
        tail = Array(format.closing.utf8)
        listClose = Array(format.listClose.utf8)
        nextCall = format.separator.map { Array($0.utf8) + Array(format.opening.utf8) }
    }

    /// The name of the first call, once its head is decoded.
    var name: String? { calls.first?.name ?? pending?.name }

    /// How `literal` stands at `pos`: whole (the index after it), a prefix of it so far, or not it.
    private enum Match { case whole(Int), partial, no }
    private func match(_ literal: [UInt8], at i: Int) -> Match {
        let n = min(bytes.count - i, literal.count)
        guard bytes[i..<(i + n)].elementsEqual(literal[..<n]) else { return .no }
        return n == literal.count ? .whole(i + n) : .partial
    }

    mutating func feed(_ text: String) -> [ReplyPiece] {
        bytes += text.utf8
        var out: [ReplyPiece] = []
        loop: while !broken {
            switch stage {
            case .listOpen:
                switch match(listOpen, at: pos) {
                case .whole(let end): pos = end; stage = .head
                case .partial: break loop
                case .no: broken = true
                }
            case .head:
                guard let name = readHead() else { break loop }
                pending = Call(id: nil, name: name, arguments: "")
                if idLead == nil {
                    calls.append(pending!)
                    out.append(.callStart(name: name, id: nil))
                }
                stage = .arguments
                scanned = argumentsStart
                emitted = argumentsStart
                depth = 0
                inString = false
                escaped = false
            case .arguments:
                let end = scanArguments()
                if idLead == nil, scanned > emitted {
                    let piece = String(decoding: bytes[emitted..<scanned], as: UTF8.self)
                    calls[calls.count - 1].arguments += piece
                    out.append(.arguments(piece))
                    emitted = scanned
                }
                guard let end else { break loop }
                pending?.arguments = String(decoding: bytes[argumentsStart..<end], as: UTF8.self)
                pos = end
                stage = idLead == nil ? .tail : .id
            case .id:
                guard let id = readID() else { break loop }
                var call = pending!
                call.id = id
                calls.append(call)
                out.append(.callStart(name: call.name, id: id))
                out.append(.arguments(call.arguments))
            case .tail:
                switch match(tail, at: pos) {
                case .whole(let end):
                    pos = end
                    calls[calls.count - 1].closed = true
                    pending = nil
                    stage = .between
                case .partial: break loop
                case .no: broken = true
                }
            case .between:
                guard pos < bytes.count else { break loop }
                if !listClose.isEmpty {
                    switch match(listClose, at: pos) {
                    case .whole(let end): pos = end; stage = .done; continue loop
                    case .partial: break loop
                    case .no: break
                    }
                }
                guard let next = nextCall else { broken = true; break loop }
                switch match(next, at: pos) {
                case .whole:  // the separator and the next call's opening are whole
                    pos += next.count - head.count
                    stage = .head
                case .partial where bytes.count - pos > next.count - head.count:
                    // the separator is whole and the next call's opening has begun
                    pos += next.count - head.count
                    stage = .head
                case .partial: break loop
                default: broken = true
                }
            case .done:
                if pos < bytes.count { broken = true }  // text after the list's end
                break loop
            }
        }
        return out
    }

    /// The name, once the opening, the name's string and the arguments' lead are whole; marks
    /// the text broken as soon as it cannot be that.
    private mutating func readHead() -> String? {
        switch match(head, at: pos) {
        case .no: broken = true; return nil
        case .partial: return nil
        case .whole: break
        }
        let h = pos + head.count
        guard bytes.count > h else { return nil }
        guard bytes[h] == Self.quote else { broken = true; return nil }
        var i = h + 1, escape = false
        while i < bytes.count {
            if escape { escape = false } else if bytes[i] == Self.backslash { escape = true } else if bytes[i] == Self.quote { break }
            i += 1
        }
        guard i < bytes.count else { return nil }
        let nameEnd = i + 1
        switch match(argumentsKey, at: nameEnd) {
        case .no: broken = true; return nil
        case .partial: return nil
        case .whole: break
        }
        guard let name = (try? JSONValue.parse(String(decoding: bytes[h..<nameEnd], as: UTF8.self), context: "tool call name"))?.stringValue else {
            broken = true
            return nil
        }
        argumentsStart = nameEnd + argumentsKey.count
        return name
    }

    /// Scans the arguments from where it stopped; where they end (exclusive) once their value is whole.
    private mutating func scanArguments() -> Int? {
        while scanned < bytes.count {
            let c = bytes[scanned]
            if inString {
                if escaped {
                    escaped = false
                } else if c == Self.backslash {
                    escaped = true
                } else if c == Self.quote {
                    inString = false
                    if depth == 0 { scanned += 1; return scanned }
                }
            } else {
                switch c {
                case Self.quote: inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return scanned }  // a scalar value, ended by the call's `}`
                    depth -= 1
                    if depth == 0 { scanned += 1; return scanned }
                default: break
                }
            }
            scanned += 1
        }
        return nil
    }

    /// The id after the arguments (`idLead` then a JSON string of letters and digits), once whole.
    private mutating func readID() -> String? {
        guard let lead = idLead else { return nil }
        switch match(lead, at: pos) {
        case .no: broken = true; return nil
        case .partial: return nil
        case .whole(let end):
            guard end < bytes.count else { return nil }
            guard bytes[end] == Self.quote else { broken = true; return nil }
            guard let close = bytes[(end + 1)...].firstIndex(of: Self.quote) else {
                if bytes.count - end > ToolCallFormat.idLength + 1 { broken = true }
                return nil
            }
            let id = String(decoding: bytes[(end + 1)..<close], as: UTF8.self)
            guard ToolCallFormat.isValidID(id) else { broken = true; return nil }
            pos = close + 1
            stage = .tail
            return id
        }
    }

    /// The arguments' text of the last call decoded so far.
    var arguments: String { calls.last?.arguments ?? "" }

    /// The calls, when the text is whole calls: each closed, its arguments JSON, the list ended.
    var whole: [Call]? {
        guard !broken, !calls.isEmpty, calls.allSatisfy(\.closed),
              stage == .done || (stage == .between && listClose.isEmpty && pos == bytes.count),
              calls.allSatisfy({ (try? JSONValue.parse($0.arguments, context: "tool call arguments")) != nil }) else { return nil }
        return calls
    }
}

/// How a reply's objects look: ids, the object names of each endpoint, usage.
struct ReplyFormat {
    enum Kind { case chat, completion }
    let kind: Kind
    let id: String
    let created: Int
    let model: String
    let promptTokens: Int
    let includeUsage: Bool

    static func newID(_ kind: Kind) -> String {
        (kind == .chat ? "chatcmpl-" : "cmpl-") + String((0..<24).map { _ in "0123456789abcdef".randomElement()! })
    }

    /// `cachedTokens`: prompt positions the prompt cache supplied.
    func usage(_ completionTokens: Int, cachedTokens: Int) -> JSONValue {
        object([("prompt_tokens", number(promptTokens)), ("completion_tokens", number(completionTokens)),
                ("total_tokens", number(promptTokens + completionTokens)),
                ("prompt_tokens_details", object([("cached_tokens", number(cachedTokens))]))])
    }

    func head(_ objectName: String) -> [(String, JSONValue)] {
        [("id", .string(id)), ("object", .string(objectName)), ("created", number(created)), ("model", .string(model))]
    }

    /// One streamed tool-call delta (OpenAI's shape): the first of each call (its `index`, from
    /// 0 in the reply's order) gives the call's id, type and name with empty arguments, the next
    /// ones more of the arguments only (a client joins the deltas of one index; Apple's
    /// concatenates id and name across them, so they come once).
    struct ToolCallDelta {
        var index: Int
        var id: String?
        var name: String?
        var arguments: String
    }

    /// A streamed chunk with one choice.
    func chunk(content: String? = nil, reasoning: String? = nil, role: Bool = false, toolCall: ToolCallDelta? = nil, finishReason: String? = nil) -> JSONValue {
        let finish: JSONValue = finishReason.map { .string($0) } ?? .null
        switch kind {
        case .completion:
            let choice = object([("text", .string(content ?? "")), ("index", number(0)), ("logprobs", .null), ("finish_reason", finish)])
            return object(head("text_completion") + [("choices", .array([choice]))])
        case .chat:
            var delta: [(String, JSONValue)] = []
            if role { delta.append(("role", .string("assistant"))) }
            if let content { delta.append(("content", .string(content))) }
            if let reasoning { delta.append(("reasoning_content", .string(reasoning))) }
            if let call = toolCall {
                var entry: [(String, JSONValue)] = [("index", number(call.index))]
                if let id = call.id { entry += [("id", .string(id)), ("type", .string("function"))] }
                var function: [(String, JSONValue)] = []
                if let name = call.name { function.append(("name", .string(name))) }
                function.append(("arguments", .string(call.arguments)))
                entry.append(("function", object(function)))
                delta.append(("tool_calls", .array([object(entry)])))
            }
            let choice = object([("index", number(0)), ("delta", object(delta)), ("logprobs", .null), ("finish_reason", finish)])
            return object(head("chat.completion.chunk") + [("choices", .array([choice]))] + (includeUsage ? [("usage", .null)] : []))
        }
    }

    /// The last streamed chunk when usage was asked for: no choices, the usage.
    func usageChunk(_ completionTokens: Int, cachedTokens: Int) -> JSONValue {
        object(head(kind == .chat ? "chat.completion.chunk" : "text_completion") + [("choices", .array([])),
                                                                                    ("usage", usage(completionTokens, cachedTokens: cachedTokens))])
    }

    /// The whole (non-streamed) reply.
    func whole(content: String?, reasoning: String? = nil, toolCalls: [(id: String, name: String, arguments: String)], finishReason: String,
               completionTokens: Int, cachedTokens: Int) -> JSONValue {
        let usage = usage(completionTokens, cachedTokens: cachedTokens)
        switch kind {
        case .completion:
            let choice = object([("text", .string(content ?? "")), ("index", number(0)), ("logprobs", .null), ("finish_reason", .string(finishReason))])
            return object(head("text_completion") + [("choices", .array([choice])), ("usage", usage)])
        case .chat:
            var message: [(String, JSONValue)] = [("role", .string("assistant")), ("content", content.map { .string($0) } ?? .null)]
            if let reasoning { message.append(("reasoning_content", .string(reasoning))) }
            if !toolCalls.isEmpty {
                message.append(("tool_calls", .array(toolCalls.map { call in object([
                    ("id", .string(call.id)), ("type", .string("function")),
                    ("function", object([("name", .string(call.name)), ("arguments", .string(call.arguments))])),
                ]) })))
            }
            let choice = object([("index", number(0)), ("message", object(message)), ("logprobs", .null), ("finish_reason", .string(finishReason))])
            return object(head("chat.completion") + [("choices", .array([choice])), ("usage", usage)])
        }
    }
}

/// One reply's events turned into server-sent events (`next()`) or one JSON object (`whole()`).
/// Dropping it or calling `cancel()` frees the request's slot.
public final class ReplyStream: @unchecked Sendable {
    private var iterator: AsyncStream<DecodeEvent>.AsyncIterator
    public let ticket: DecodeTicket
    let format: ReplyFormat
    private var assembler: ReplyAssembler
    private var out: [String] = []
    private var started = false, done = false
    private var generated = 0
    /// The whole reply's parts, for `whole()`: its text, or its calls (id, name, arguments as streamed).
    private var text = ""
    /// A thinking model's thinking (nil when the reply has none).
    private var reasoning: String?
    private var finishReason = "stop"
    private var calls: [(id: String, name: String, arguments: String)] = []

    init(events: AsyncStream<DecodeEvent>, ticket: DecodeTicket, format: ReplyFormat, assembler: ReplyAssembler) {
        iterator = events.makeAsyncIterator()
        self.ticket = ticket
        self.format = format
        self.assembler = assembler
    }

    deinit { ticket.cancel() }

    public func cancel() { ticket.cancel() }

    /// The next server-sent event (`data: ...\n\n`), nil after `data: [DONE]`.
    public func next() async -> String? {
        while out.isEmpty {
            if done { return nil }
            if !started {
                started = true
                // the role alone: whether the reply is text or a call is not known yet
                if format.kind == .chat { emit(format.chunk(role: true)) }
                continue
            }
            guard let event = await iterator.next() else {
                end(nil, complete: false)
                continue
            }
            switch event {
            case .tokens(let ids):
                generated += ids.count
                send(assembler.take(ids))
                if assembler.stoppedBySequence {
                    ticket.cancel()  // the reply is over: free the slot now
                    end(.stop, complete: true)
                }
            case let .finished(reason, tokens, complete):
                generated = tokens
                end(reason, complete: complete)
            }
        }
        return out.removeFirst()
    }

    /// Reads the reply to its end and returns it as one object.
    func whole() async throws(ServerError) -> JSONValue {
        while await next() != nil {}
        if finishReason == "error" { throw .unavailable }
        return format.whole(content: calls.isEmpty ? text : nil, reasoning: reasoning, toolCalls: calls, finishReason: finishReason, completionTokens: generated,
                            cachedTokens: ticket.cachedPromptTokens)
    }

    private func emit(_ value: JSONValue) { out.append("data: " + value.compactText + "\n\n") }

    private func send(_ pieces: [ReplyPiece]) {
        for piece in pieces {
            switch piece {
            case .text(let t):
                text += t
                emit(format.chunk(content: t))
            case .reasoning(let r):
                reasoning = (reasoning ?? "") + r
                emit(format.chunk(reasoning: r))
            case let .callStart(name, given):
                // the model's own id where its format has one (Mistral's, which its template checks), else ours
                let id = given ?? ReplyFormat.newID(.chat).replacingOccurrences(of: "chatcmpl-", with: "call_")
                calls.append((id, name, ""))
                emit(format.chunk(toolCall: .init(index: calls.count - 1, id: id, name: name, arguments: "")))
            case .arguments(let a):
                guard !calls.isEmpty else { continue }
                calls[calls.count - 1].arguments += a
                emit(format.chunk(toolCall: .init(index: calls.count - 1, arguments: a)))
            }
        }
    }

    private func end(_ reason: DecodeFinish?, complete: Bool) {
        guard !done else { return }
        done = true
        send(assembler.finish())
        switch reason {
        case nil, .cancelled?:
            // the server stopped (a client that left reads nothing more): an OpenAI error event
            finishReason = "error"
            emit(object([("error", object([("message", .string(ServerError.unavailable.localizedDescription)), ("type", .string("server_overloaded")),
                                            ("param", .null), ("code", .null)]))]))
            out.append("data: [DONE]\n\n")
            return
        case .stop?:
            finishReason = "stop"
        case .length?, .noContinuation?:
            finishReason = "length"  // cut: a guided reply is not a whole value
        }
        if assembler.isCall == true {
            if !calls.isEmpty {
                // streamed as far as they came; whole only when the reply ended at a stop and reads back whole
                finishReason = reason == .stop && complete && assembler.call.whole != nil ? "tool_calls" : "length"
            } else {
                // cut before a call began (or not a call's shape): its text, reported as it ended
                text = assembler.raw
                emit(format.chunk(content: assembler.raw))
            }
        }
        emit(format.chunk(finishReason: finishReason))
        if format.includeUsage { emit(format.usageChunk(generated, cachedTokens: ticket.cachedPromptTokens)) }
        out.append("data: [DONE]\n\n")
    }
}

// MARK: JSON building

func object(_ members: [(String, JSONValue)]) -> JSONValue { .object(members.map { JSONMember(key: $0.0, value: $0.1) }) }
func number(_ n: Int) -> JSONValue { .number(JSONNumber(n)) }

extension ServerError {
    /// `{"error": {"message", "type", "param", "code"}}`.
    public var body: JSONValue {
        object([("error", object([("message", .string(localizedDescription)), ("type", .string(type)),
                                  ("param", param.map { .string($0) } ?? .null), ("code", code.map { .string($0) } ?? .null)]))])
    }
}
