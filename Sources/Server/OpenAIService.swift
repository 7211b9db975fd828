// The OpenAI-compatible API over the scheduler, apart from HTTP: a request body in, a JSON
// reply or a stream of server-sent events out. Chat prompts are rendered as training renders
// them (DataSchema's rendering and the model's chat template: tools on the system turn, a
// response_format schema before the last user turn), so an adapter sees the prompts it was
// trained on. Replies: `finish_reason` stop / length / tool_calls as OpenAI gives them; a
// guided reply cut by max_tokens is answered `length` (never as a whole value); a tool call is
// the model's `<tool_call>` block (Schema.md) read back into `tool_calls`.
// Reference: OpenAI's API reference (chat completion object, chunk object, completions).
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
        let request = try ChatRequest(Self.parse(body))
        let model = try catalog.model(request.model)
        let prompt: [Int]
        do throws(DataSchemaError) { prompt = try encoder.encodePrompt(request.messages) } catch {
            // The model's chat template refused the conversation (a system turn it does not allow, ...).
            throw .invalidRequest(error.errorDescription ?? "\(error)", param: "messages", code: "invalid_value")
        }
        let constraint = try constraint(request.guide)
        var mode: ReplyAssembler.Mode = .text
        if case .tools(_, let allowText) = request.guide { mode = allowText ? .textOrToolCall : .toolCall }
        return try await run(prompt: prompt, model: model, sampling: request.sampling, constraint: constraint, kind: .chat, mode: mode)
    }

    /// `POST /v1/completions`: the prompt as plain text, no chat template.
    public func completions(_ body: [UInt8]) async throws(ServerError) -> Reply {
        let request = try CompletionRequest(Self.parse(body))
        let model = try catalog.model(request.model)
        let prompt = tokenizer.encode(request.prompt)
        guard !prompt.isEmpty else { throw .invalidRequest("'prompt' is empty: give at least one character to continue.", param: "prompt", code: "invalid_value") }
        return try await run(prompt: prompt, model: model, sampling: request.sampling, constraint: nil, kind: .completion, mode: .text)
    }

    func constraint(_ guide: Guide) throws(ServerError) -> TokenConstraint? {
        do throws(GuidanceError) {
            switch guide {
            case .none: return nil
            case .schema(let schema, _): return try constraints.jsonSchema(schema)
            case .tools(let tools, let allowText): return try constraints.toolCall(tools.map { ($0.name, $0.parameters) }, allowText: allowText)
            case .textOnly: return try constraints.regex(#"[^<][\s\S]*"#)
            }
        } catch {
            switch guide {
            case .schema(_, let param): throw .unsupportedGuide(error.localizedDescription, param: param)
            default: throw .unsupportedGuide(error.localizedDescription, param: "tools")
            }
        }
    }

    func run(prompt: [Int], model: AdapterCatalog.Model, sampling p: SamplingParameters, constraint: TokenConstraint?,
             kind: ReplyFormat.Kind, mode: ReplyAssembler.Mode) async throws(ServerError) -> Reply {
        let context = scheduler.model.config.maxPositionEmbeddings
        let room = context - prompt.count
        guard room >= 1 else { throw .contextExceeded(promptTokens: prompt.count, maxTokens: p.maxTokens ?? 1, limit: context) }
        let maxTokens = p.maxTokens ?? min(limits.defaultMaxTokens, room)
        if let cap = limits.maxTokensLimit, maxTokens > cap {
            throw .invalidRequest("'max_tokens' is \(maxTokens), more than this server allows (\(cap)).", param: "max_tokens", code: "invalid_value")
        }
        let request = DecodeRequest(prompt: prompt, adapter: model.adapter, maxTokens: maxTokens, stopTokens: catalog.base.stopTokenIds,
                                    sampling: SamplingOptions(temperature: Float(p.temperature), topK: p.topK, topP: p.topP.map(Float.init)),
                                    seed: p.seed ?? UInt64.random(in: 0...UInt64.max), constraint: constraint)
        let (events, ticket) = try scheduler.submit(request)
        let format = ReplyFormat(kind: kind, id: ReplyFormat.newID(kind), created: Int(Date().timeIntervalSince1970), model: model.id,
                                 promptTokens: prompt.count, includeUsage: p.includeUsage)
        let assembler = ReplyAssembler(decoder: StreamingDecoder(tokenizer: tokenizer, skipSpecialTokens: true), stop: p.stop, mode: mode)
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

/// The text of a reply as it is decoded: held back while it could still begin a stop sequence,
/// cut at one; for tool replies, held whole once it begins with `<` (a call).
struct ReplyAssembler {
    enum Mode { case text, textOrToolCall, toolCall }
    var decoder: StreamingDecoder
    let stop: [String]
    var mode: Mode
    /// All text decoded (what a tool call is read from).
    var raw = ""
    /// Released text not yet matched against every stop sequence.
    var held = ""
    var stoppedBySequence = false
    /// nil while a textOrToolCall reply has no text yet.
    var isCall: Bool?

    init(decoder: StreamingDecoder, stop: [String], mode: Mode) {
        self.decoder = decoder
        self.stop = stop
        self.mode = mode
        isCall = mode == .text ? false : mode == .toolCall ? true : nil
    }

    /// Text to hand to the client now.
    mutating func take(_ ids: [Int]) -> String {
        var piece = ""
        for id in ids { piece += decoder.feed(id) }
        return release(piece, final: false)
    }

    mutating func finish() -> String { release(decoder.finish(), final: true) }

    private mutating func release(_ piece: String, final: Bool) -> String {
        raw += piece
        if stoppedBySequence { return "" }
        if isCall == nil, let first = raw.first { isCall = first == "<" }
        guard isCall == false else { return "" }
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

    /// The tool call of a whole `<tool_call>` reply, or nil.
    var toolCall: (name: String, arguments: JSONValue)? {
        let open = "<tool_call>\n", close = "\n</tool_call>"
        guard raw.hasPrefix(open), raw.hasSuffix(close), raw.count >= open.count + close.count,
              let call = try? JSONValue.parse(String(raw.dropFirst(open.count).dropLast(close.count)), context: "tool call"),
              let name = call["name"]?.stringValue, let arguments = call["arguments"] else { return nil }
        return (name, arguments)
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

    func usage(_ completionTokens: Int) -> JSONValue {
        object([("prompt_tokens", number(promptTokens)), ("completion_tokens", number(completionTokens)),
                ("total_tokens", number(promptTokens + completionTokens))])
    }

    func head(_ objectName: String) -> [(String, JSONValue)] {
        [("id", .string(id)), ("object", .string(objectName)), ("created", number(created)), ("model", .string(model))]
    }

    /// A streamed chunk with one choice.
    func chunk(content: String? = nil, role: Bool = false, toolCall: (id: String, name: String, arguments: String)? = nil,
               finishReason: String? = nil) -> JSONValue {
        let finish: JSONValue = finishReason.map { .string($0) } ?? .null
        switch kind {
        case .completion:
            let choice = object([("text", .string(content ?? "")), ("index", number(0)), ("logprobs", .null), ("finish_reason", finish)])
            return object(head("text_completion") + [("choices", .array([choice]))])
        case .chat:
            var delta: [(String, JSONValue)] = []
            if role { delta.append(("role", .string("assistant"))) }
            if let content { delta.append(("content", .string(content))) }
            if let call = toolCall {
                delta.append(("tool_calls", .array([object([
                    ("index", number(0)), ("id", .string(call.id)), ("type", .string("function")),
                    ("function", object([("name", .string(call.name)), ("arguments", .string(call.arguments))])),
                ])])))
            }
            let choice = object([("index", number(0)), ("delta", object(delta)), ("logprobs", .null), ("finish_reason", finish)])
            return object(head("chat.completion.chunk") + [("choices", .array([choice]))] + (includeUsage ? [("usage", .null)] : []))
        }
    }

    /// The last streamed chunk when usage was asked for: no choices, the usage.
    func usageChunk(_ completionTokens: Int) -> JSONValue {
        object(head(kind == .chat ? "chat.completion.chunk" : "text_completion") + [("choices", .array([])), ("usage", usage(completionTokens))])
    }

    /// The whole (non-streamed) reply.
    func whole(content: String?, toolCall: (id: String, name: String, arguments: String)?, finishReason: String, completionTokens: Int) -> JSONValue {
        switch kind {
        case .completion:
            let choice = object([("text", .string(content ?? "")), ("index", number(0)), ("logprobs", .null), ("finish_reason", .string(finishReason))])
            return object(head("text_completion") + [("choices", .array([choice])), ("usage", usage(completionTokens))])
        case .chat:
            var message: [(String, JSONValue)] = [("role", .string("assistant")), ("content", content.map { .string($0) } ?? .null)]
            if let call = toolCall {
                message.append(("tool_calls", .array([object([
                    ("id", .string(call.id)), ("type", .string("function")),
                    ("function", object([("name", .string(call.name)), ("arguments", .string(call.arguments))])),
                ])])))
            }
            let choice = object([("index", number(0)), ("message", object(message)), ("logprobs", .null), ("finish_reason", .string(finishReason))])
            return object(head("chat.completion") + [("choices", .array([choice])), ("usage", usage(completionTokens))])
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
    /// The whole reply's parts, for `whole()`.
    private var text = ""
    private var finishReason = "stop"
    private var call: (id: String, name: String, arguments: String)?

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
                if format.kind == .chat { emit(format.chunk(content: "", role: true)) }
                continue
            }
            guard let event = await iterator.next() else {
                end(nil, complete: false)
                continue
            }
            switch event {
            case .tokens(let ids):
                generated += ids.count
                let piece = assembler.take(ids)
                text += piece
                if !piece.isEmpty { emit(format.chunk(content: piece)) }
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
        return format.whole(content: call == nil ? text : nil, toolCall: call, finishReason: finishReason, completionTokens: generated)
    }

    private func emit(_ value: JSONValue) { out.append("data: " + value.compactText + "\n\n") }

    private func end(_ reason: DecodeFinish?, complete: Bool) {
        guard !done else { return }
        done = true
        let tail = assembler.finish()
        text += tail
        if !tail.isEmpty { emit(format.chunk(content: tail)) }
        switch reason {
        case nil, .cancelled?:
            // the server stopped (a client that left reads nothing more)
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
            if reason == .stop, complete, let c = assembler.toolCall {
                call = (ReplyFormat.newID(.chat).replacingOccurrences(of: "chatcmpl-", with: "call_"), c.name, c.arguments.compactText)
                finishReason = "tool_calls"
                emit(format.chunk(toolCall: call))
            } else {
                // a call cut by max_tokens: its text, reported as cut
                text = assembler.raw
                emit(format.chunk(content: assembler.raw))
            }
        }
        emit(format.chunk(finishReason: finishReason))
        if format.includeUsage { emit(format.usageChunk(generated)) }
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
