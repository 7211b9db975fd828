// A conversation with an adapted model, shaped like Foundation Models' LanguageModelSession:
// instructions, a Codable transcript, respond / streamResponse, guided replies constrained to a
// JSON schema (valid by construction, or an error: never an invalid value), and prewarm, which
// computes the instructions (and a prompt prefix) into the session's KV cache ahead of time.
// The cache is kept between turns: each turn prefills only what the cache does not hold yet.
// Tools: a call is constrained to the model's own call format (its chat template's:
// ChatFormat.toolCallFormat; Schema.md's `<tool_call>` for templates that read no tools) and the
// tool's argument schema — several calls in one reply where the format joins calls — the session
// runs each Swift handler in order, appends the calls and their results to the transcript and
// generates again, as Foundation Models does; the ids a format's model writes (Mistral's) are
// kept. Leaves out the @Generable macro (a Decodable type and its JSON schema stand in).
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition

/// What was said, in order: Codable, so a conversation can be saved and resumed.
public struct Transcript: Sendable, Codable, Equatable {
    public enum Entry: Sendable, Codable, Equatable {
        case instructions(String)
        /// A user prompt, with the JSON schema its reply was guided by (compact text), if any.
        case prompt(String, responseSchema: String?)
        case response(String)
        /// The model's call of a tool (arguments as compact JSON) and the handler's output.
        case toolCall(id: String, name: String, arguments: String)
        case toolOutput(id: String, name: String, content: String)
    }
    public var entries: [Entry] = []
    public init(entries: [Entry] = []) { self.entries = entries }

    /// The chat messages the model sees; `tools` go on the system message.
    func messages(tools: [ToolDefinition] = []) throws -> [Message] {
        var out: [Message] = []
        if !tools.isEmpty, !entries.contains(where: { if case .instructions = $0 { return true } else { return false } }) {
            out.append(Message(role: .system, content: "", tools: tools))
        }
        for e in entries {
            switch e {
            case .instructions(let text): out.append(Message(role: .system, content: text, tools: tools))
            case let .toolCall(id, name, arguments):
                let call = ToolCall(id: id, name: name, arguments: try JSONValue.parse(arguments, context: "transcript tool call"))
                if let last = out.last, last.role == .assistant, !last.toolCalls.isEmpty {
                    out[out.count - 1].toolCalls.append(call)
                } else {
                    out.append(Message(role: .assistant, content: "", toolCalls: [call]))
                }
            case let .toolOutput(id, name, content): out.append(Message(role: .tool, content: content, toolCallId: id, name: name))
            case let .prompt(text, schema):
                var m = Message(role: .user, content: text)
                if let schema {
                    m.responseFormat = ResponseFormat(name: "response", schema: try JSONSchema(try JSONValue.parse(schema, context: "transcript schema")))
                }
                out.append(m)
            case .response(let text): out.append(Message(role: .assistant, content: text))
            }
        }
        return out
    }
}

/// A reply: its content (text, or a value decoded from a guided reply), the raw text, and figures.
public struct Response<Content: Sendable>: Sendable {
    public let content: Content
    public let rawContent: String
    public let promptTokens: Int
    /// Prompt tokens the session's cache already held (earlier turns, prewarm): not computed again.
    public let reusedPromptTokens: Int
    public let generatedTokens: Int
    /// Tokens the guide forced (appended without a choice).
    public let forcedTokens: Int
    public let tokensPerSecond: Double
    /// Speculative decoding (a model with a draft): tokens the draft proposed and the model kept.
    public var draftTokensProposed = 0
    public var draftTokensAccepted = 0

    /// The same reply with its content decoded.
    func with<T: Sendable>(content value: T) -> Response<T> {
        Response<T>(content: value, rawContent: rawContent, promptTokens: promptTokens, reusedPromptTokens: reusedPromptTokens,
                    generatedTokens: generatedTokens, forcedTokens: forcedTokens, tokensPerSecond: tokensPerSecond,
                    draftTokensProposed: draftTokensProposed, draftTokensAccepted: draftTokensAccepted)
    }
}

/// A function the model may call: its name, description and argument schema (as Schema.md
/// declares tools), and the Swift handler that runs it and returns its output as text.
public struct Tool: Sendable {
    public var name: String
    public var description: String?
    public var parameters: JSONSchema?
    public var call: @Sendable (JSONValue) async throws -> String

    public init(name: String, description: String? = nil, parameters: JSONSchema? = nil,
                call: @escaping @Sendable (JSONValue) async throws -> String) {
        self.name = name
        self.description = description
        self.parameters = parameters
        self.call = call
    }
}

/// Whether a reply may call tools: `auto` lets the model choose between a call and text,
/// `required` makes the first reply a call, `none` allows text only.
public enum ToolChoice: String, Sendable, Codable {
    case auto, required, none
}

public final class LanguageModelSession: @unchecked Sendable {
    public let tools: [Tool]
    /// Tool rounds per prompt before the model must answer in text.
    public var maximumToolRounds = 4
    /// Whether one reply may call several tools (where the model's call format joins calls;
    /// Llama 3's takes one); the handlers run in the order of the calls.
    public var parallelToolCalls = true
    public let model: AdaptedModel
    private let lock = NSLock()
    private var _transcript: Transcript
    private var responding = false
    private var cache: KVCache
    private var cachedTokens: [Int] = []
    private let encoder: TrainingEncoder

    /// A session over `model`; `instructions` become the system message (the chat template's
    /// default one when nil).
    public init(model: AdaptedModel, instructions: String? = nil, tools: [Tool] = []) {
        self.model = model
        self.tools = tools
        _transcript = Transcript(entries: instructions.map { [.instructions($0)] } ?? [])
        cache = model.engine.makeCache(capacity: 1024)
        encoder = TrainingEncoder(tokenizer: model.model.base.tokenizer, renderer: model.model.chatFormat, maxSequenceLength: Int.max)
    }

    /// A session that continues `transcript` (its next prompt prefills the whole conversation once).
    public init(model: AdaptedModel, transcript: Transcript, tools: [Tool] = []) {
        self.model = model
        self.tools = tools
        _transcript = transcript
        cache = model.engine.makeCache(capacity: 1024)
        encoder = TrainingEncoder(tokenizer: model.model.base.tokenizer, renderer: model.model.chatFormat, maxSequenceLength: Int.max)
    }

    public var transcript: Transcript { lock.withLock { _transcript } }
    public var isResponding: Bool { lock.withLock { responding } }

    /// Computes the instructions and, when given, the start of the next prompt into the cache, so
    /// the next reply begins sooner.
    public func prewarm(promptPrefix: String? = nil) throws {
        try begin()
        defer { end() }
        var messages = try _transcript.messages(tools: toolDefinitions)
        var ids = try encoder.encodePrompt(messages)
        if let promptPrefix, !promptPrefix.isEmpty {
            messages.append(Message(role: .user, content: promptPrefix))
            // the rendered prompt up to the end of the prefix's text (what a longer prompt shares)
            let full = try encoder.encodePrompt(messages)
            let suffix = model.model.base.tokenizer.encode(promptPrefix)
            if let end = Self.endOfText(suffix, in: full) { ids = Array(full[..<end]) }
        }
        // leave the last token to run with the real prompt (generation needs one prompt token)
        try advanceCache(to: Array(ids.dropLast()))
    }

    /// The model's reply to `prompt`.
    /// With tools, the model may call them first (`toolChoice`): each call runs its handler and
    /// the model continues from the result; the response is its text reply after the calls.
    public func respond(to prompt: String, options: GenerationOptions = .init(), toolChoice: ToolChoice = .auto) async throws -> Response<String> {
        try await run(prompt: prompt, schema: nil, options: options, toolChoice: toolChoice, onText: nil)
    }

    /// The model's reply to `prompt` as it is produced: pieces of text, in order.
    public func streamResponse(to prompt: String, options: GenerationOptions = .init()) -> AsyncThrowingStream<String, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    _ = try await self.run(prompt: prompt, schema: nil, options: options, toolChoice: .auto) { continuation.yield($0) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// A reply constrained to `schema` as it is produced: the value spelled out so far, each time it
    /// grows (open strings, arrays and objects closed where the text stops; see
    /// `JSONValue.partial`). The last element is the whole reply, which the schema validates; a
    /// reply cut by the token limit ends the sequence with `RuntimeError.incomplete`.
    public func streamResponse(to prompt: String, schema: JSONSchema, options: GenerationOptions = .init()) -> AsyncThrowingStream<JSONValue, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    var text = ""
                    var last: JSONValue? = nil
                    let r = try await self.run(prompt: prompt, schema: schema, options: options, toolChoice: .none) { piece in
                        text += piece
                        if let v = JSONValue.partial(text), v != last {
                            last = v
                            continuation.yield(v)
                        }
                    }
                    let whole = try JSONValue.parse(r.rawContent, context: "guided reply")
                    if whole != last { continuation.yield(whole) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// A reply constrained to `schema`: compact JSON the schema validates, by construction. The
    /// prompt shows the schema as training renders a `response_format`. Throws
    /// `RuntimeError.incomplete` when the token limit cuts the reply.
    public func respond(to prompt: String, schema: JSONSchema, options: GenerationOptions = .init()) async throws -> Response<JSONValue> {
        let r = try await run(prompt: prompt, schema: schema, options: options, toolChoice: .none, onText: nil)
        let value = try JSONValue.parse(r.rawContent, context: "guided reply")
        return r.with(content: value)
    }

    /// A reply constrained to `schema` and decoded as `type` (the schema should describe it).
    public func respond<T: Decodable & Sendable>(to prompt: String, generating type: T.Type, schema: JSONSchema,
                                                 options: GenerationOptions = .init()) async throws -> Response<T> {
        let r = try await run(prompt: prompt, schema: schema, options: options, toolChoice: .none, onText: nil)
        let value: T
        do {
            value = try JSONDecoder().decode(T.self, from: Data(r.rawContent.utf8))
        } catch {
            throw RuntimeError.decoding("\(T.self) from \(r.rawContent.prefix(200)): \(error)")
        }
        return r.with(content: value)
    }

    // MARK: the turn

    private func begin() throws(RuntimeError) {
        lock.lock()
        defer { lock.unlock() }
        if responding { throw RuntimeError.busy }
        responding = true
    }

    private func end() { lock.withLock { responding = false } }

    private var toolDefinitions: [ToolDefinition] { tools.map { ToolDefinition(name: $0.name, description: $0.description, parameters: $0.parameters) } }

    /// The constraint of a reply: the schema's, or with tools a call (or text, or text only).
    private func constraint(schema: JSONSchema?, toolChoice: ToolChoice) throws(RuntimeError) -> TokenConstraint? {
        var format = ToolCallFormat.documented
        if schema == nil && !tools.isEmpty { format = try callFormat() }
        do throws(GuidanceError) {
            if let schema { return try model.model.constraints.jsonSchema(schema) }
            if tools.isEmpty { return nil }
            switch toolChoice {
            case .none: return try model.model.constraints.regex(format.textPattern)
            case .auto, .required:
                return try model.model.constraints.toolCall(tools.map { ($0.name, $0.parameters) }, allowText: toolChoice == .auto, format: format,
                                                            severalCalls: parallelToolCalls)
            }
        } catch {
            throw RuntimeError.unsupportedGuide(error.localizedDescription)
        }
    }

    /// How the model writes a tool call (its chat template's format); throws when the template's
    /// format is refused (a call that is not one JSON object beginning with the name: Falcon 3's).
    private func callFormat() throws(RuntimeError) -> ToolCallFormat {
        do throws(DataSchemaError) { return try model.model.chatFormat.toolCallFormat() } catch {
            throw RuntimeError.unsupportedGuide(error.errorDescription ?? "\(error)")
        }
    }

    private func run(prompt: String, schema: JSONSchema?, options: GenerationOptions, toolChoice: ToolChoice,
                     onText: ((String) -> Void)?) async throws -> Response<String> {
        try options.check()
        try begin()
        defer { end() }
        var entries = _transcript.entries
        entries.append(.prompt(prompt, responseSchema: schema.map { $0.root.compactText }))
        var choice = toolChoice
        var round = 0
        while true {
            let last = round >= maximumToolRounds
            let guide = try constraint(schema: schema, toolChoice: last ? .none : choice)
            // a cut guided value or call is an error; cut plain text is a reply, as without tools
            var format = ToolCallFormat.documented
            if schema == nil && !tools.isEmpty { format = try callFormat() }
            let (text, r, stats) = try generate(entries: entries, constraint: guide, options: options, onText: choice == .none || tools.isEmpty ? onText : nil,
                                                keeping: guide == nil ? [] : format.specialTokens(in: model.model.base.tokenizer))
            if guide != nil && stats.incomplete && (schema != nil || text.first == format.lead) {
                throw RuntimeError.incomplete(partial: text, maximumResponseTokens: options.maximumResponseTokens)
            }
            guard schema == nil, !tools.isEmpty, format.startsCall(text) else {
                if !tools.isEmpty && choice != .none { onText?(text) }  // held back while it could have been a call
                entries.append(.response(text))
                _transcript.entries = entries
                return r
            }
            // calls: record them, run each handler in order, record the results, continue from them
            guard let read = format.readCalls(text), read.allSatisfy({ call in tools.contains { $0.name == call.name } }) else {
                throw RuntimeError.decoding("tool call \(text.prefix(200))")
            }
            let first = entries.count
            let ids = read.enumerated().map { i, call in call.id ?? "call\(first + i)" }
            for (call, id) in zip(read, ids) { entries.append(.toolCall(id: id, name: call.name, arguments: call.arguments.compactText)) }
            for (call, id) in zip(read, ids) {
                let output = try await tools.first { $0.name == call.name }!.call(call.arguments)
                entries.append(.toolOutput(id: id, name: call.name, content: output))
            }
            if choice == .required { choice = .auto }
            round += 1
        }
    }

    /// One reply to the conversation `entries`, reusing what the cache holds of its prompt.
    /// `keeping`: special tokens decoded as text (a tool-call format's markers), others skipped.
    private func generate(entries: [Transcript.Entry], constraint: TokenConstraint?, options: GenerationOptions,
                          onText: ((String) -> Void)?, keeping: Set<Int> = []) throws -> (String, Response<String>, GenerationStats) {
        let ids = try encoder.encodePrompt(try Transcript(entries: entries).messages(tools: toolDefinitions))
        let limit = model.engine.config.maxPositionEmbeddings
        if ids.count + options.maximumResponseTokens > limit {
            throw RuntimeError.contextExceeded(tokens: ids.count + options.maximumResponseTokens, limit: limit)
        }
        // keep what the cache already holds of this prompt
        let shared = PromptPrefix.common(cachedTokens, ids)
        cache.truncate(toAtMost: min(shared, ids.count - 1))  // 0 when sliding layers dropped what that needs
        cachedTokens = Array(ids[..<cache.count])
        let reused = cache.count
        let base = model.model.base
        let request = GenerationRequest(prompt: ids, maxNewTokens: options.maximumResponseTokens, stopTokens: base.stopTokenIds,
                                        sampling: options.sampling, seed: options.seed, constraint: constraint)
        var decoder = StreamingDecoder(tokenizer: base.tokenizer, skipSpecialTokens: true)
        decoder.keptTokens = keeping
        let onToken: (Int) -> Bool = { id in
            let piece = decoder.feed(id)
            if !piece.isEmpty { onText?(piece) }
            return !Task.isCancelled
        }
        let (tokens, stats) = model.draft.map {
            let r = SpeculativeDecoder(target: model.engine, drafter: $0.drafter, draftTokens: $0.tokens).generate(request, cache: cache, onToken: onToken)
            return (r.tokens, r.stats.generation)
        } ?? Generator.generate(model.engine, request, cache: cache, onToken: onToken)
        let tail = decoder.finish()
        if !tail.isEmpty { onText?(tail) }
        cachedTokens = Array((ids + tokens).prefix(cache.count))
        let text = base.tokenizer.decode(tokens.filter { keeping.contains($0) || !base.tokenizer.isSpecial($0) })
        return (text, Response(content: text, rawContent: text, promptTokens: ids.count, reusedPromptTokens: reused,
                               generatedTokens: stats.generatedTokens, forcedTokens: stats.forcedTokens, tokensPerSecond: stats.tokensPerSecond,
                               draftTokensProposed: stats.draftTokensProposed, draftTokensAccepted: stats.draftTokensAccepted), stats)
    }

    /// Runs `ids` into the cache after what it already holds of them.
    private func advanceCache(to ids: [Int]) throws {
        let shared = PromptPrefix.common(cachedTokens, ids)
        let kept = cache.truncate(toAtMost: shared)  // 0 when sliding layers dropped what `shared` needs
        if ids.count > kept {
            _ = model.engine.forward(Array(ids[kept...]), cache: cache)
        }
        cachedTokens = ids
    }

    /// Where `text`'s tokens end inside `ids` (the last occurrence), or nil.
    static func endOfText(_ text: [Int], in ids: [Int]) -> Int? {
        guard !text.isEmpty, text.count <= ids.count else { return nil }
        for start in stride(from: ids.count - text.count, through: 0, by: -1) where ids[start..<(start + text.count)].elementsEqual(text) {
            return start + text.count
        }
        return nil
    }
}

enum PromptPrefix {
    static func common(_ a: [Int], _ b: [Int]) -> Int {
        var n = 0
        while n < a.count && n < b.count && a[n] == b[n] { n += 1 }
        return n
    }
}
