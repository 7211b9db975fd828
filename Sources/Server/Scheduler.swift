// Continuous batching: requests wait in a bounded queue; up to `maxActive` are in flight. One
// decoding thread admits waiting requests (each prompt prefilled alone, with its own adapter),
// then advances every request in flight by one token per pass — one weight stream for all rows,
// each row adding its own adapter's low-rank term (InferenceModel.forward(batch:caches:adapters:)),
// its own sampling options and its own constraint mask. A row ends at a stop token, at its token
// budget, or when its consumer goes away (a client that disconnects), and frees its slot at once.
// A prompt that begins like a recent one with the same adapter copies those positions' keys and
// values (PromptCache). Leaves out: chunked prefill (a long prompt holds the batch for its prefill).
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

    public init(prompt: [Int], adapter: RowAdapter?, maxTokens: Int, stopTokens: Set<Int>, sampling: SamplingOptions = .init(),
                seed: UInt64 = 0, constraint: TokenConstraint? = nil) {
        self.prompt = prompt
        self.adapter = adapter
        self.maxTokens = maxTokens
        self.stopTokens = stopTokens
        self.sampling = sampling
        self.seed = seed
        self.constraint = constraint
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
    weak var scheduler: Scheduler?

    init(request: DecodeRequest, continuation: AsyncStream<DecodeEvent>.Continuation) {
        self.request = request
        self.continuation = continuation
    }

    public var isCancelled: Bool { lock.withLock { cancelled } }

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
    private let promptCache: PromptCache

    /// `promptCacheBytes`: keys and values of recent prompts kept at most, per adapter, for
    /// later prompts that begin alike (0: every prompt is prefilled whole).
    public init(model: InferenceModel, maxActive: Int, queueCapacity: Int, promptCacheBytes: Int = 128 << 20) {
        precondition(maxActive >= 1 && queueCapacity >= 0 && promptCacheBytes >= 0,
                     "[Scheduler] maxActive \(maxActive), queueCapacity \(queueCapacity), promptCacheBytes \(promptCacheBytes)")
        self.model = model
        self.maxActive = maxActive
        self.queueCapacity = queueCapacity
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

    /// A request in flight.
    struct Row {
        let ticket: DecodeTicket
        let cache: KVCache
        var rng: SeededRNG
        var state: ConstraintState?
        /// Tokens to feed, one per pass (the last chosen one, then those forced after it).
        var feed: [Int] = []
        var generated = 0
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
                    finish(t, .cancelled, generated: 0, complete: false)
                    continue
                }
                let r = t.request
                let t0 = monotonicSeconds()
                var row = Row(ticket: t, cache: model.makeCache(capacity: r.prompt.count + r.maxTokens + 1), rng: SeededRNG(seed: r.seed),
                              state: r.constraint?.start())
                let rest = promptCache.seed(row.cache, for: r.prompt, adapter: r.adapter)
                model.forward(Array(rest), cache: row.cache, adapter: r.adapter, into: &logits)  // [1, V]
                promptCache.keep(r.prompt, adapter: r.adapter, from: row.cache, model: model)
                if logits.withUnsafeMutableBufferPointer({ step(&row, logits: $0, row: 0) }) { rows.append(row) }
                let seconds = monotonicSeconds() - t0
                condition.lock()
                prefills += 1
                prefillTokens += r.prompt.count
                prefillSeconds += seconds
                promptCacheHits = promptCache.hits
                reusedTokens = promptCache.reusedTokens
                condition.unlock()
            }
            // one pass for every row in flight
            rows.removeAll { r in
                if r.ticket.isCancelled { finish(r.ticket, .cancelled, generated: r.generated, complete: false) }
                return r.ticket.isCancelled
            }
            if !rows.isEmpty {
                let t0 = monotonicSeconds()
                model.forward(batch: rows.map { $0.feed[0] }, caches: rows.map(\.cache), adapters: rows.map(\.ticket.request.adapter), into: &logits)  // [B, V]
                let t1 = monotonicSeconds()
                // rows with forced tokens still to feed need no choice; the others choose on every
                // core (each row's mask, sampler and stream are its own)
                for b in rows.indices { rows[b].feed.removeFirst() }
                let choosing = rows.indices.filter { rows[$0].feed.isEmpty }
                var going = [Bool](repeating: true, count: rows.count)
                rows.withUnsafeMutableBufferPointer { rp in
                    going.withUnsafeMutableBufferPointer { gp in
                        logits.withUnsafeMutableBufferPointer { lp in
                            WorkerPool.forEach(choosing.count) { i in
                                let b = choosing[i]
                                gp[b] = self.step(&rp[b], logits: lp, row: b)
                            }
                        }
                    }
                }
                let kept = rows.indices.filter { going[$0] }.map { rows[$0] }
                let t2 = monotonicSeconds()
                condition.lock()
                passes += 1
                rowSteps += rows.count
                passSeconds += t1 - t0
                chooseSeconds += t2 - t1
                condition.unlock()
                rows = kept
            }
            condition.lock()
            active = rows.count
            condition.unlock()
        }
    }

    /// Chooses the row's next token from logits row `row` (masked by its constraint), hands it and
    /// the tokens forced after it to the consumer; false when the reply ends here.
    private func step(_ r: inout Row, logits: UnsafeMutableBufferPointer<Float>, row: Int) -> Bool {
        let request = r.ticket.request
        let V = model.config.vocabSize
        let range = (row * V)..<((row + 1) * V)
        if let state = r.state {
            if state.isDead {
                finish(r.ticket, .noContinuation, generated: r.generated, complete: false)
                return false
            }
            // Near max_tokens only tokens after which the reply can still be completed in time.
            let remaining = request.maxTokens - r.generated
            _ = state.constraint.mask(logits: UnsafeMutableBufferPointer(rebasing: logits[range]), state, remaining: remaining)
        }
        let next = Sampler.sample(UnsafeBufferPointer(rebasing: logits[range]), request.sampling, rng: &r.rng)
        var forced: [Int] = []
        if var state = r.state {
            do {
                try state.advance(token: next)
                let room = request.maxTokens - r.generated - 1
                if !state.isFinished && room > 0 {
                    forced = Array(state.constraint.forcedTokens(state).prefix(room))
                    try state.advance(tokens: forced)
                }
            } catch {
                preconditionFailure("[Scheduler] the constraint refused a token its own mask allowed: \(error)")
            }
            r.state = state
        }
        if request.stopTokens.contains(next) {
            finish(r.ticket, .stop, generated: r.generated, complete: r.state?.isComplete ?? true)
            return false
        }
        let taken = [next] + forced
        r.generated += taken.count
        r.ticket.continuation.yield(.tokens(taken))
        if r.generated >= request.maxTokens {
            finish(r.ticket, .length, generated: r.generated, complete: false)
            return false
        }
        r.feed = taken
        return true
    }

    /// Called without the lock held.
    private func finish(_ t: DecodeTicket, _ reason: DecodeFinish, generated: Int, complete: Bool) {
        if reason == .cancelled {
            condition.lock()
            cancelled += 1
            condition.unlock()
        }
        t.continuation.yield(.finished(reason, completionTokens: generated, complete: complete))
        t.continuation.finish()
    }
}
