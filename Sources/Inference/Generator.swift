// The generation loop: prefill the prompt into the KV cache, then one token per forward pass
// until a stop token or the token budget, handing each token to a callback as it is chosen
// (the CLI streams text from it); and the batched loop, several conversations advancing
// together so their steps share one weight stream (evaluation). Speculative decoding with a
// draft is SpeculativeDecoder.
import Autograd
import Foundation
import Guidance

public struct GenerationStats: Sendable, Equatable {
    public var promptTokens = 0
    public var generatedTokens = 0
    public var prefillSeconds = 0.0
    public var decodeSeconds = 0.0
    public var stoppedAtEndOfTurn = false
    /// Speculative decoding only: tokens the draft proposed, and how many the target kept.
    public var draftTokensProposed = 0
    public var draftTokensAccepted = 0
    public var targetForwardCalls = 0
    /// Constrained generation only: tokens the grammar forced (appended without choosing), and
    /// whether the reply stopped before it was a whole value (cut by the token limit, or no
    /// token could continue it): such a reply is not valid and must not be used as one.
    public var forcedTokens = 0
    public var incomplete = false
    /// Constrained generation only: near the token limit the constraint allowed only tokens
    /// after which the reply could still be completed in time, and that removed a choice at
    /// least once: the reply is whole and valid, but may be shorter than the model would have
    /// made it (a string closed early, optional members left out).
    public var closedByLimit = false

    public var tokensPerSecond: Double { decodeSeconds > 0 ? Double(generatedTokens) / decodeSeconds : 0 }
    public var acceptanceRatio: Double {
        draftTokensProposed > 0 ? Double(draftTokensAccepted) / Double(draftTokensProposed) : 0
    }
}

public struct GenerationRequest: Sendable {
    public var prompt: [Int]
    public var maxNewTokens: Int
    public var stopTokens: Set<Int>
    public var sampling: SamplingOptions
    public var seed: UInt64
    /// Guided generation: every token is chosen among those the constraint allows, tokens it
    /// forces are appended without choosing (several fed to one forward pass), and the reply
    /// ends only at a stop token the constraint allows (when the text is a whole value).
    public var constraint: TokenConstraint?
    /// `stopTokens` gains the constraint's own stop tokens: a stop token the constraint allows
    /// ends the reply even when the caller's set lacks it (an empty set with a constraint went on
    /// past the constraint's end, where no token is allowed, and stopped the process).
    public init(prompt: [Int], maxNewTokens: Int, stopTokens: Set<Int>, sampling: SamplingOptions = .init(), seed: UInt64 = 0,
                constraint: TokenConstraint? = nil) {
        self.prompt = prompt
        self.maxNewTokens = maxNewTokens
        self.stopTokens = constraint.map { stopTokens.union($0.vocabulary.stopTokens) } ?? stopTokens
        self.sampling = sampling
        self.seed = seed
        self.constraint = constraint
    }
}

/// One reply's progress through its constraint: masks a row of logits before the choice,
/// advances on each token, and hands out the tokens the grammar forces.
struct GuidedReply {
    let constraint: TokenConstraint
    var state: ConstraintState

    init?(_ request: GenerationRequest) {
        guard let c = request.constraint else { return nil }
        constraint = c
        state = c.start()
    }

    /// Logits of disallowed tokens set to −infinity, `remaining` tokens (this one included) left
    /// in the budget (`TokenConstraint.allowedTokens(_:remaining:)`): nil when no token is allowed
    /// at all, else whether the limit narrowed the choice.
    func mask(_ row: UnsafeMutableBufferPointer<Float>, remaining: Int) -> Bool? {
        if state.isDead { return nil }
        return constraint.mask(logits: row, state, remaining: remaining)
    }

    /// The tokens allowed with `remaining` tokens left (`TokenConstraint.allowedTokens(_:remaining:)`):
    /// nil when none is, else the mask and whether the limit narrowed it.
    func allowed(remaining: Int) -> (mask: TokenMask, narrowed: Bool)? {
        if state.isDead { return nil }
        return constraint.allowedTokens(state, remaining: remaining)
    }

    /// Takes `token` (allowed by the mask, so this cannot fail) and returns the tokens forced
    /// after it, at most `room`, each taken too.
    mutating func take(_ token: Int, room: Int) -> [Int] {
        do {
            try state.advance(token: token)
            if state.isFinished || room <= 0 { return [] }
            let forced = Array(constraint.forcedTokens(state).prefix(room))
            try state.advance(tokens: forced)
            return forced
        } catch {
            preconditionFailure("[Generator] the constraint refused a token its own mask allowed: \(error)")
        }
    }

    var isComplete: Bool { state.isComplete }
}

public enum Generator {
    /// Generates up to `maxNewTokens` tokens. `onToken` receives each token as it is chosen
    /// (a stop token is reported in the stats, not passed on); returning false stops early.
    ///
    /// `cache`, when given, already holds the keys and values of a prefix of the prompt (a
    /// session's earlier turns, a prewarmed prefix; at least one prompt token must be left to
    /// run); only the rest is prefilled, and afterwards it holds the prompt and every reply token
    /// that was fed back (all of them when the reply ended at a stop token).
    @discardableResult
    public static func generate(_ model: InferenceModel, _ request: GenerationRequest, cache given: KVCache? = nil,
                                onToken: (Int) -> Bool = { _ in true }) -> (tokens: [Int], stats: GenerationStats) {
        var stats = GenerationStats()
        stats.promptTokens = request.prompt.count
        guard !request.prompt.isEmpty, request.maxNewTokens > 0 else { return ([], stats) }
        var rng = SeededRNG(seed: request.seed)
        let cache = given ?? model.makeCache(capacity: request.prompt.count + request.maxNewTokens + 1)
        precondition(cache.count < request.prompt.count, "[Generator.generate] the cache holds \(cache.count) positions of a \(request.prompt.count)-token prompt; leave one to run")
        let t0 = monotonicSeconds()
        var logits: [Float] = []
        model.forward(Array(request.prompt[cache.count...]), cache: cache, into: &logits)
        stats.targetForwardCalls += 1
        let t1 = monotonicSeconds()
        stats.prefillSeconds = t1 - t0
        var out: [Int] = []
        var guided = GuidedReply(request)
        decoding: while out.count < request.maxNewTokens {
            if let g = guided {
                let remaining = request.maxNewTokens - out.count
                guard let narrowed = logits.withUnsafeMutableBufferPointer({ g.mask(UnsafeMutableBufferPointer(rebasing: $0[0..<model.config.vocabSize]), remaining: remaining) }) else {
                    break  // nothing can continue the text: incomplete
                }
                if narrowed { stats.closedByLimit = true }
            }
            let next = Sampler.sample(logits[...], request.sampling, rng: &rng)
            let forced = guided?.take(next, room: request.maxNewTokens - out.count - 1) ?? []
            if request.stopTokens.contains(next) {
                stats.stoppedAtEndOfTurn = true
                break
            }
            stats.forcedTokens += forced.count
            for t in [next] + forced {
                out.append(t)
                if !onToken(t) { break decoding }
            }
            if out.count == request.maxNewTokens { break }
            model.forward([next] + forced, cache: cache, into: &logits)  // the last row's logits
            stats.targetForwardCalls += 1
        }
        stats.decodeSeconds = monotonicSeconds() - t1
        stats.generatedTokens = out.count
        if let guided { stats.incomplete = !(stats.stoppedAtEndOfTurn && guided.isComplete) }
        return (out, stats)
    }

    /// Generates every request, up to `batchSize` conversations at a time: each prompt is
    /// prefilled alone, then the conversations in flight advance one token per pass together
    /// (`InferenceModel.forward(batch:)`), a finished one making room for the next request.
    /// Each result is the one `generate(model, request)` gives (a batched row computes the same
    /// bits as a single one). `onFinish(index, tokens, stats)` is called as each request ends, in
    /// the order they end. Timing: a request's prefill is its own; each batched pass's time is
    /// shared equally among the conversations it advanced, so decode seconds add up to wall time
    /// and summed tokens over summed seconds is the batch's throughput.
    ///
    /// Prompts that begin alike (a task's system message and schema) share their prefill: when a
    /// prompt and the next one have at least `sharedPrefixMinimum` tokens in common, that prefix
    /// is computed once and its keys and values copied into each conversation's cache, which then
    /// prefills only its own rest (`PromptPrefixCache`; 0 turns it off). Logits then agree with a
    /// whole-prompt prefill to float rounding, not bit for bit.
    @discardableResult
    public static func generateBatch(_ model: InferenceModel, _ requests: [GenerationRequest], batchSize: Int,
                                     sharedPrefixMinimum: Int = 32,
                                     onFinish: (Int, [Int], GenerationStats) throws -> Void = { _, _, _ in }) rethrows
        -> [(tokens: [Int], stats: GenerationStats)] {
        precondition(batchSize >= 1, "[Generator.generateBatch] batch size \(batchSize)")
        struct Conversation {
            var index: Int
            var cache: KVCache
            var rng: SeededRNG
            var out: [Int] = []
            var stats = GenerationStats()
            var pending = 0  // the last chosen token, fed in the next pass
            var guided: GuidedReply?
            var forced: [Int] = []  // forced tokens still to append, one per pass
        }
        let V = model.config.vocabSize
        var results = [(tokens: [Int], stats: GenerationStats)](repeating: ([], GenerationStats()), count: requests.count)
        var active: [Conversation] = []
        var nextRequest = 0
        var logits: [Float] = []
        let prefixes = PromptPrefixCache(model: model, minimumLength: sharedPrefixMinimum)

        func finish(_ c: Conversation) throws {
            var c = c
            c.stats.generatedTokens = c.out.count
            if let g = c.guided { c.stats.incomplete = !(c.stats.stoppedAtEndOfTurn && g.isComplete) }
            results[c.index] = (c.out, c.stats)
            try onFinish(c.index, c.out, c.stats)
        }
        /// Takes the token chosen from the logits row at `row` (or a forced token, leaving the row
        /// unused); false when the conversation ends with it.
        func choose(_ c: inout Conversation, row: Int) -> Bool {
            let request = requests[c.index]
            if !c.forced.isEmpty {
                c.pending = c.forced.removeFirst()
                c.out.append(c.pending)
                return c.out.count < request.maxNewTokens
            }
            let r = (row * V)..<((row + 1) * V)
            if let g = c.guided {
                let remaining = request.maxNewTokens - c.out.count
                guard let narrowed = logits.withUnsafeMutableBufferPointer({ g.mask(UnsafeMutableBufferPointer(rebasing: $0[r]), remaining: remaining) }) else {
                    return false  // nothing can continue the text: incomplete
                }
                if narrowed { c.stats.closedByLimit = true }
            }
            let next = Sampler.sample(logits[r], request.sampling, rng: &c.rng)
            let forced = c.guided?.take(next, room: request.maxNewTokens - c.out.count - 1) ?? []
            if request.stopTokens.contains(next) {
                c.stats.stoppedAtEndOfTurn = true
                return false
            }
            c.out.append(next)
            c.pending = next
            c.forced = forced
            c.stats.forcedTokens += forced.count
            return c.out.count < request.maxNewTokens
        }

        while nextRequest < requests.count || !active.isEmpty {
            // fill free slots: prefill alone, choose the first token
            while active.count < batchSize && nextRequest < requests.count {
                let request = requests[nextRequest]
                var c = Conversation(index: nextRequest, cache: model.makeCache(capacity: request.prompt.count + request.maxNewTokens + 1),
                                     rng: SeededRNG(seed: request.seed), guided: GuidedReply(request))
                nextRequest += 1
                c.stats.promptTokens = request.prompt.count
                guard !request.prompt.isEmpty, request.maxNewTokens > 0 else {
                    try finish(c)
                    continue
                }
                let t0 = monotonicSeconds()
                prefixes.prefill(request.prompt, into: c.cache, upcoming: nextRequest < requests.count ? requests[nextRequest].prompt : nil,
                                 logits: &logits)
                c.stats.targetForwardCalls += 1
                c.stats.prefillSeconds = monotonicSeconds() - t0
                let t1 = monotonicSeconds()
                let goOn = choose(&c, row: 0)
                c.stats.decodeSeconds += monotonicSeconds() - t1
                if goOn { active.append(c) } else { try finish(c) }
            }
            guard !active.isEmpty else { continue }
            // one pass for every conversation in flight
            let t0 = monotonicSeconds()
            model.forward(batch: active.map(\.pending), caches: active.map(\.cache), into: &logits)  // [B, V]
            var ended: [Int] = []
            for b in active.indices {
                active[b].stats.targetForwardCalls += 1
                if !choose(&active[b], row: b) { ended.append(b) }
            }
            let share = (monotonicSeconds() - t0) / Double(active.count)
            for b in active.indices { active[b].stats.decodeSeconds += share }
            for b in ended.reversed() { try finish(active.remove(at: b)) }
        }
        return results
    }
}

/// A prompt prefix's keys and values, computed once, for the caches of prompts that extend it
/// (batched generation's `PromptPrefixCache`, draft distillation's `PrefixTeacher`).
public struct CachedPrefix {
    public let tokens: [Int]
    public let cache: KVCache

    public init(tokens: [Int], cache: KVCache) {
        self.tokens = tokens
        self.cache = cache
    }

    /// How many leading tokens `a` and `b` share.
    public static func commonLength(_ a: [Int], _ b: [Int]) -> Int {
        var n = 0
        while n < a.count && n < b.count && a[n] == b[n] { n += 1 }
        return n
    }

    /// True when `prompt` begins with the prefix and has tokens of its own after it.
    public func isExtended(by prompt: [Int]) -> Bool {
        prompt.count > tokens.count && prompt[..<tokens.count].elementsEqual(tokens)
    }

    /// Copies the prefix into the empty cache `target`; returns the tokens of `prompt` left to run.
    public func seed(_ target: KVCache, for prompt: [Int]) -> [Int] {
        target.copyPrefix(of: cache, length: tokens.count)
        return Array(prompt[tokens.count...])
    }
}

/// The prompt prefix of batched generation, computed once and copied into the caches of the
/// conversations whose prompts begin with it. The prefix is chosen by looking ahead: the longest
/// common prefix of the prompt being prefilled and the next one, when it is long enough and
/// leaves both a token of their own; it is kept while later prompts keep beginning with it.
final class PromptPrefixCache {
    let model: InferenceModel
    let minimumLength: Int
    private var stored: CachedPrefix?
    var tokens: [Int] { stored?.tokens ?? [] }

    init(model: InferenceModel, minimumLength: Int) {
        self.model = model
        self.minimumLength = minimumLength
    }

    /// Prefills `prompt` into the empty cache `target` and leaves the last token's logits in
    /// `logits`, computing a new shared prefix first when `prompt` and `upcoming` begin alike.
    func prefill(_ prompt: [Int], into target: KVCache, upcoming: [Int]?, logits: inout [Float]) {
        precondition(target.count == 0, "[PromptPrefixCache.prefill] the cache is not empty")
        if minimumLength > 0, stored?.isExtended(by: prompt) != true, let next = upcoming {
            let n = min(CachedPrefix.commonLength(prompt, next), prompt.count - 1, next.count - 1)
            if n >= minimumLength {
                let c = model.makeCache(capacity: n)
                model.forward(Array(prompt[..<n]), cache: c, into: &logits)
                stored = CachedPrefix(tokens: Array(prompt[..<n]), cache: c)
            }
        }
        if let stored, stored.isExtended(by: prompt) {
            model.forward(stored.seed(target, for: prompt), cache: target, into: &logits)
        } else {
            model.forward(prompt, cache: target, into: &logits)
        }
    }
}
