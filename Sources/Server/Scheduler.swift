// Continuous batching: requests wait in a bounded queue; up to `maxActive` are in flight. One
// decoding thread admits waiting requests, prefills their prompts (each alone, with its own
// adapter) and advances every request whose prompt is done by one token per pass — one weight
// stream for all rows, each row adding its own adapter's low-rank term
// (InferenceModel.forward(batch:caches:adapters:)), its own sampling options and its own
// constraint mask. While replies are being decoded, prompts are prefilled in chunks between two
// passes (`PrefillChunk`: by default as many tokens as take about half a second at the rate
// measured so far), so a long prompt delays them by one chunk's time per token instead of its
// whole prefill; a prompt with no reply to delay is prefilled whole (every chunk unpacks the
// stored weights again: on SmolLM2 a 1,300-token prompt took ~1.3x as long in 128-token chunks). A row ends at a stop token, at its token budget, or when its consumer goes
// away (a client that disconnects, also during its prefill), and frees its slot at once. A prompt
// that begins like a recent one with the same adapter copies those positions' keys and values
// (PromptCache). A prompt's first token is chosen from the last row of its prefill, as the
// generation loop chooses it. A row carries every token it has to feed into one pass: the tokens a grammar forced
// after its choice, and, when the request has a draft (a package's own, or prompt lookup) and few
// rows are decoding, the draft's proposals, which the pass verifies (speculative decoding; each row a
// `SpeculativeReply`, so a reply is the one the generation loop gives it alone).
import Autograd
import Foundation
import Guidance
import Inference

/// What one request asks the decoder for.
public struct DecodeRequest: Sendable {
    public var prompt: [Int]
    /// The row's adapter over the shared base (nil: the base alone).
    public var adapter: RowAdapter?
    public var maxTokens: Int
    public var stopTokens: Set<Int>
    public var sampling: SamplingOptions
    public var seed: UInt64
    /// Guided generation: each token is chosen among those the constraint allows; tokens it
    /// forces are taken without a choice; the reply ends at a stop token only once it is whole.
    public var constraint: TokenConstraint?
    /// Speculative decoding's draft and γ (nil: none); used while few rows decode (`Scheduler.draftRowLimit`).
    public var draft: (drafter: Drafter, tokens: Int)?

    public init(prompt: [Int], adapter: RowAdapter?, maxTokens: Int, stopTokens: Set<Int>, sampling: SamplingOptions = .init(),
                seed: UInt64 = 0, constraint: TokenConstraint? = nil, draft: (drafter: Drafter, tokens: Int)? = nil) {
        self.prompt = prompt
        self.adapter = adapter
        self.maxTokens = maxTokens
        self.stopTokens = stopTokens
        self.sampling = sampling
        self.seed = seed
        self.constraint = constraint
        self.draft = draft
    }

    /// The generation loop's request for the same reply.
    var generation: GenerationRequest {
        GenerationRequest(prompt: prompt, maxNewTokens: maxTokens, stopTokens: stopTokens, sampling: sampling, seed: seed, constraint: constraint)
    }
}

/// Why a reply ended.
public enum DecodeFinish: String, Sendable, Equatable {
    /// A stop token (for a guided reply: only once the text is a whole value).
    case stop
    /// The token budget ran out (a guided reply is then incomplete).
    case length
    /// A guided reply no token could continue: incomplete.
    case noContinuation
    /// The consumer went away (or the server stopped).
    case cancelled
}

public enum DecodeEvent: Sendable, Equatable {
    /// The reply's next tokens (a chosen one and those the constraint forced after it).
    case tokens([Int])
    /// The last event: why it ended, and whether a guided reply is a whole value.
    case finished(DecodeFinish, completionTokens: Int, complete: Bool)
}

/// One request's place in the scheduler; `cancel()` frees its slot (or its place in the queue).
public final class DecodeTicket: @unchecked Sendable {
    let request: DecodeRequest
    let continuation: AsyncStream<DecodeEvent>.Continuation
    private let lock = NSLock()
    private var cancelled = false
    private var cached = 0
    weak var scheduler: Scheduler?

    init(request: DecodeRequest, continuation: AsyncStream<DecodeEvent>.Continuation) {
        self.request = request
        self.continuation = continuation
    }

    public var isCancelled: Bool { lock.withLock { cancelled } }

    /// Prompt positions copied from the prompt cache instead of computed (set when the request
    /// is admitted, before its first token; OpenAI's usage.prompt_tokens_details.cached_tokens).
    public var cachedPromptTokens: Int {
        get { lock.withLock { cached } }
        set { lock.withLock { cached = newValue } }
    }

    public func cancel() {
        lock.withLock { cancelled = true }
        scheduler?.wake()
    }
}

public final class Scheduler: @unchecked Sendable {
    public let model: InferenceModel
    /// Requests decoded together at most (rows of a pass).
    public let maxActive: Int
    /// Requests waiting at most; more are refused (`ServerError.overloaded`).
    public let queueCapacity: Int
    /// How much of the prompts is prefilled between two decoding passes while replies are in flight.
    public let prefillChunk: PrefillChunk
    /// Rows with a draft propose tokens only while at most this many rows decode: a batch already
    /// shares each weight stream among its rows, and a verified row costs a pass more rows.
    public let draftRowLimit: Int
    /// Seconds per prompt token of the prefills so far (a moving average; decoding thread only).
    private var prefillRate: Double?

    private let condition = NSCondition()
    private var queue: [DecodeTicket] = []
    private var active = 0
    private var stopping = false
    private var thread: Thread?
    /// Passes run, rows advanced (for the figures of a load run).
    private var passes = 0, rowSteps = 0
    /// Where the decoding thread's time went: prompts prefilled (and their tokens), batched
    /// passes through the model, choosing tokens (masks, sampling, handing them on).
    private var prefills = 0, prefillTokens = 0, reusedTokens = 0, promptCacheHits = 0
    private var prefillSeconds = 0.0, passSeconds = 0.0, chooseSeconds = 0.0
    /// Requests ended early: their consumer left (a client gone, a stop sequence met) or the server stopped.
    private var cancelled = 0

    /// Prompts' keys and values kept for later prompts that begin alike (decoding thread only).
    let promptCache: PromptCache
    /// What the decoding thread did, in order (set before `start()`; the tests' view of the interleaving).
    enum Step: Equatable {
        /// A chunk of a prompt prefilled, while `decoding` rows had replies in flight.
        case prefill(tokens: Int, decoding: Int)
        /// A pass advancing `rows` replies while `prefilling` prompts waited for the rest of their prefill.
        case pass(rows: Int, prefilling: Int)
    }
    var observer: ((Step) -> Void)?

    /// `promptCacheBytes`: keys and values of recent prompts kept at most, per adapter, for
    /// later prompts that begin alike (0: every prompt is prefilled whole). `prefillChunk`: how
    /// much of the prompts is prefilled between two passes while replies are in flight (a
    /// chunk's logits are a whole prefill's to float rounding).
    public init(model: InferenceModel, maxActive: Int, queueCapacity: Int, promptCacheBytes: Int = 128 << 20,
                prefillChunk: PrefillChunk = .seconds(0.5), draftRowLimit: Int = 1) {
        precondition(maxActive >= 1 && queueCapacity >= 0 && promptCacheBytes >= 0 && prefillChunk.isValid && draftRowLimit >= 0,
                     "[Scheduler] maxActive \(maxActive), queueCapacity \(queueCapacity), promptCacheBytes \(promptCacheBytes), prefillChunk \(prefillChunk), draftRowLimit \(draftRowLimit)")
        self.model = model
        self.maxActive = maxActive
        self.queueCapacity = queueCapacity
        self.prefillChunk = prefillChunk
        self.draftRowLimit = draftRowLimit
        promptCache = PromptCache(budget: promptCacheBytes)
    }

    /// Requests in flight and waiting, passes run and rows they advanced, requests cancelled.
    public var status: (active: Int, queued: Int, passes: Int, rowSteps: Int, cancelled: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (active, queue.count, passes, rowSteps, cancelled)
    }

    /// The decoding thread's time so far: prompts prefilled (their count, tokens and seconds,
    /// their first token's choice included), batched passes through the model, and choosing the
    /// passes' tokens (constraint masks, sampling, handing tokens to their consumers).
    public var timing: (prefills: Int, prefillTokens: Int, prefillSeconds: Double, passSeconds: Double, chooseSeconds: Double) {
        condition.lock()
        defer { condition.unlock() }
        return (prefills, prefillTokens, prefillSeconds, passSeconds, chooseSeconds)
    }

    /// Prompts that began like a kept one, and the prompt positions they copied instead of computing.
    public var promptCacheUse: (hits: Int, reusedTokens: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (promptCacheHits, reusedTokens)
    }

    /// Starts the decoding thread.
    public func start() {
        condition.lock()
        defer { condition.unlock() }
        guard thread == nil else { return }
        let t = Thread { [self] in self.run() }
        t.name = "decode"
        t.stackSize = 8 << 20
        thread = t
        t.start()
    }

    /// Stops the decoding thread; every request still waiting or in flight ends `cancelled`.
    public func shutdown() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    func wake() {
        condition.lock()
        condition.signal()
        condition.unlock()
    }

    /// Queues `request`; its events arrive on the stream as they are decoded. Ending the
    /// stream's iteration (or `ticket.cancel()`) frees the request's slot.
    public func submit(_ request: DecodeRequest) throws(ServerError) -> (events: AsyncStream<DecodeEvent>, ticket: DecodeTicket) {
        guard !request.prompt.isEmpty else { throw .invalidRequest("the prompt is empty", param: "messages") }
        guard request.maxTokens >= 1 else { throw .invalidRequest("max_tokens must be at least 1", param: "max_tokens") }
        let limit = model.config.maxPositionEmbeddings
        guard request.prompt.count + request.maxTokens <= limit else {
            throw .contextExceeded(promptTokens: request.prompt.count, maxTokens: request.maxTokens, limit: limit)
        }
        let (stream, continuation) = AsyncStream<DecodeEvent>.makeStream(bufferingPolicy: .unbounded)
        let ticket = DecodeTicket(request: request, continuation: continuation)
        ticket.scheduler = self
        condition.lock()
        defer { condition.unlock() }
        if stopping { throw .unavailable }
        // requests that can start at once (free slots) never count as waiting; the rest are bounded
        if queue.count >= max(0, maxActive - active) + queueCapacity {
            throw .overloaded(queued: queue.count, retryAfter: 1)
        }
        queue.append(ticket)
        continuation.onTermination = { [weak ticket] _ in ticket?.cancel() }
        condition.signal()
        return (stream, ticket)
    }

    // MARK: the decoding thread

    /// Prompt tokens prefilled between two passes while replies are in flight.
    public enum PrefillChunk: Sendable, Equatable {
        /// Every admitted prompt whole before the next pass.
        case whole
        /// At most this many tokens.
        case tokens(Int)
        /// As many tokens as take about this long at the rate measured so far (`minimumTokens` at
        /// least, so that a chunk keeps the products' efficiency; `firstTokens` before any measure).
        case seconds(Double)

        static let minimumTokens = 32, firstTokens = 64

        var isValid: Bool {
            switch self {
            case .whole: true
            case .tokens(let n): n >= 1
            case .seconds(let t): t > 0 && t.isFinite
            }
        }

        /// Tokens of the next chunk, given the seconds per token measured so far.
        func tokens(rate: Double?) -> Int {
            switch self {
            case .whole: Int.max
            case .tokens(let n): n
            case .seconds(let t): rate.map { Swift.max(Self.minimumTokens, Int((t / Swift.max($0, 1e-9)).rounded(.down))) } ?? Self.firstTokens
            }
        }
    }

    /// A request in flight.
    struct Row {
        let ticket: DecodeTicket
        let cache: KVCache
        /// Prompt tokens still to prefill (after a kept prefix); once none are left, the first token
        /// has been chosen from the prompt's last row and the row decodes.
        var pending: ArraySlice<Int>
        /// The reply, round by round: what the next pass feeds (the last chosen token, the tokens
        /// forced after it, a draft's proposals) and what its logits decide.
        var reply: SpeculativeReply
        var generated: Int { reply.out.count }
    }

    private func run() {
        var rows: [Row] = []
        var logits: [Float] = []
        while true {
            condition.lock()
            while !stopping && queue.isEmpty && rows.isEmpty {
                condition.wait()
            }
            if stopping {
                let waiting = queue
                queue.removeAll()
                active = 0
                condition.unlock()
                for t in waiting { finish(t, .cancelled, generated: 0, complete: false) }
                for r in rows { finish(r.ticket, .cancelled, generated: r.generated, complete: false) }
                return
            }
            // drop waiting requests whose consumer left; admit as many as there are free slots
            let gone = queue.filter(\.isCancelled)
            queue.removeAll(where: \.isCancelled)
            let admitted = Array(queue.prefix(max(0, maxActive - rows.count)))
            queue.removeFirst(admitted.count)
            active = rows.count + admitted.count
            condition.unlock()
            for t in gone { finish(t, .cancelled, generated: 0, complete: false) }

            for t in admitted {
                if t.isCancelled {
                    finish(t, .cancelled, generated: 0, complete: false, leavesActive: true)
                    continue
                }
                let r = t.request
                let t0 = monotonicSeconds()
                let cache = model.makeCache(capacity: r.prompt.count + r.maxTokens + (r.draft?.tokens ?? 0) + 2)
                let rest = promptCache.seed(cache, for: r.prompt, adapter: r.adapter)
                t.cachedPromptTokens = r.prompt.count - rest.count
                rows.append(Row(ticket: t, cache: cache, pending: rest,
                                reply: SpeculativeReply(r.generation, drafter: r.draft?.drafter, draftTokens: r.draft?.tokens ?? 1)))
                addPrefillSeconds(monotonicSeconds() - t0)
            }
            rows.removeAll { r in
                if r.ticket.isCancelled { finish(r.ticket, .cancelled, generated: r.generated, complete: false, leavesActive: true) }
                return r.ticket.isCancelled
            }
            // prompts in admission order: while replies are being decoded, the chunk's budget of
            // tokens (`prefillChunk` at the measured rate) before their next pass; with none, the whole prompt
            var used = 0
            let budget = prefillChunk.tokens(rate: prefillRate)
            var ended: Set<Int> = []  // rows whose reply ended at its first token
            for b in rows.indices where !rows[b].pending.isEmpty {
                let decoding = rows.indices.count(where: { rows[$0].pending.isEmpty })
                let take = decoding == 0 ? rows[b].pending.count : min(rows[b].pending.count, budget - used)
                if take <= 0 { break }
                let t0 = monotonicSeconds()
                let r = rows[b].ticket.request
                let chunk = rows[b].pending.prefix(take)
                model.forward(Array(chunk), cache: rows[b].cache, adapter: r.adapter, into: &logits)  // [1, V]: the chunk's last row
                observer?(.prefill(tokens: take, decoding: decoding))
                rows[b].pending.removeFirst(take)
                used += take
                let done = rows[b].pending.isEmpty
                let seconds = monotonicSeconds() - t0
                let rate = seconds / Double(take)
                prefillRate = prefillRate.map { 0.5 * $0 + 0.5 * rate } ?? rate
                var choosing = 0.0
                if done {
                    // the prompt's positions, all in the cache now, offered to the prompt cache;
                    // then the first token chosen from the prompt's last row, as `generate` chooses
                    // it (SpeculativeReply.preparePromptRow; RealModelSchedulerTests)
                    promptCache.keep(r.prompt, adapter: r.adapter, from: rows[b].cache, model: model)
                    let t1 = monotonicSeconds()
                    rows[b].reply.preparePromptRow()
                    let going = logits.withUnsafeMutableBufferPointer { advance(&rows[b], logits: $0) }
                    if !going { ended.insert(b) }
                    choosing = monotonicSeconds() - t1
                }
                condition.lock()
                prefillSeconds += seconds
                chooseSeconds += choosing
                if done {
                    prefills += 1
                    prefillTokens += r.prompt.count
                    promptCacheHits = promptCache.hits
                    reusedTokens = promptCache.reusedTokens
                }
                condition.unlock()
            }
            if !ended.isEmpty { rows = rows.indices.filter { !ended.contains($0) }.map { rows[$0] } }
            // one pass for every row whose prompt is done: each feeds its pending tokens (the last
            // chosen token, the tokens forced after it) and, while few rows decode,
            // its draft's proposals; its logit rows decide its next tokens
            let decoding = rows.indices.filter { rows[$0].pending.isEmpty }
            if !decoding.isEmpty {
                let t0 = monotonicSeconds()
                let speculate = decoding.count <= draftRowLimit
                var segments: [InferenceModel.PassSegment] = []
                for b in decoding {
                    let (tokens, logitRows) = rows[b].reply.prepare(cached: rows[b].cache.count, speculate: speculate)
                    segments.append(.init(tokens: tokens, cache: rows[b].cache, adapter: rows[b].ticket.request.adapter, logitRows: logitRows))
                }
                model.forward(segments: segments, into: &logits)  // [Σ logit rows, V]
                let t1 = monotonicSeconds()
                // before the rows' tokens reach their consumers, who may look at the steps as soon as they end
                observer?(.pass(rows: decoding.count, prefilling: rows.count - decoding.count))
                var offsets: [Int] = [0]
                for s in segments { offsets.append(offsets.last! + s.logitRows.count) }
                // each row's masks, sampling and stream are its own: on every core
                let V = model.config.vocabSize
                var going = [Bool](repeating: true, count: rows.count)
                rows.withUnsafeMutableBufferPointer { rp in
                    going.withUnsafeMutableBufferPointer { gp in
                        logits.withUnsafeMutableBufferPointer { lp in
                            WorkerPool.forEach(decoding.count) { i in
                                let b = decoding[i]
                                let part = UnsafeMutableBufferPointer(rebasing: lp[(offsets[i] * V)..<(offsets[i + 1] * V)])
                                gp[b] = self.advance(&rp[b], logits: part)
                            }
                        }
                    }
                }
                let t2 = monotonicSeconds()
                condition.lock()
                passes += 1
                rowSteps += decoding.count
                passSeconds += t1 - t0
                chooseSeconds += t2 - t1
                condition.unlock()
                rows = rows.indices.filter { going[$0] }.map { rows[$0] }
            }
            condition.lock()
            active = rows.count
            condition.unlock()
        }
    }

    private func addPrefillSeconds(_ seconds: Double) {
        condition.lock()
        prefillSeconds += seconds
        condition.unlock()
    }

    /// Decides the row's round from its logit rows (masked by its constraint), hands the new tokens
    /// to the consumer, rolls the cache back past rejected proposals; false when the reply ends here.
    private func advance(_ r: inout Row, logits: UnsafeMutableBufferPointer<Float>) -> Bool {
        let ticket = r.ticket
        var taken: [Int] = []
        let keep = r.reply.accept(logits) { token in
            taken.append(token)
            return true
        }
        r.cache.truncate(to: keep)  // never below the prompt
        if !taken.isEmpty { ticket.continuation.yield(.tokens(taken)) }
        guard r.reply.isFinished else { return true }
        let g = r.reply.stats.generation
        if g.stoppedAtEndOfTurn {
            finish(ticket, .stop, generated: r.generated, complete: !g.incomplete || ticket.request.constraint == nil, leavesActive: true)
        } else if r.generated >= ticket.request.maxTokens {
            finish(ticket, .length, generated: r.generated, complete: false, leavesActive: true)
        } else {
            finish(ticket, .noContinuation, generated: r.generated, complete: false, leavesActive: true)
        }
        return false
    }

    /// Called without the lock held.
    /// `leavesActive`: the ticket was counted in `active` (admitted, or a row); it leaves the count
    /// before its consumer hears the end, so a status read after the last event is already settled.
    private func finish(_ t: DecodeTicket, _ reason: DecodeFinish, generated: Int, complete: Bool, leavesActive: Bool = false) {
        if reason == .cancelled || leavesActive {
            condition.lock()
            if reason == .cancelled { cancelled += 1 }
            if leavesActive { active = max(0, active - 1) }
            condition.unlock()
        }
        t.continuation.yield(.finished(reason, completionTokens: generated, complete: complete))
        t.continuation.finish()
    }
}
