// Speculative decoding: a draft proposes γ tokens, the target scores all of them in one batched
// forward pass over its KV cache, and rejection sampling keeps each token with probability
// min(1, p/q), drawing a rejected position from norm(max(0, p − q)), so that the output is
// distributed exactly as the target's (greedy: identical to plain greedy decoding). Both caches
// roll back past rejected tokens. Follows Leviathan et al. 2022 (alg. 1) and Chen et al. 2023 (alg. 2).
// Under a constraint (guided generation) p and q are both the masked distributions: the draft
// proposes under its own copy of the constraint state, tokens the grammar forces ride along
// unchecked (as the plain generator appends them without choosing), and the verify pass masks
// every position it checks with the state the accepted tokens reach, so the output is the
// constrained target's. The draft is a trained model (DraftEngine) or prompt lookup (NGramDraft).
import Autograd
import Foundation
import Guidance

/// GenerationStats plus α, the mean Σ_v min(p, q) over the positions the target checked (under
/// the request's sampling rule: for greedy decoding, the rate at which the argmaxes agree).
public struct SpeculativeStats: Sendable, Equatable {
    public var generation = GenerationStats()
    public var checkedPositions = 0
    public var overlapSum = 0.0
    /// Decode-phase seconds in the draft's proposals and in the target's verification passes.
    public var draftSeconds = 0.0
    public var verifySeconds = 0.0
    /// Tokens the target ran in its decode passes: the chosen and forced tokens it had not seen,
    /// each drafted token and the tokens forced after it (rejected ones included).
    public var rowsFed = 0
    public var alpha: Double { checkedPositions > 0 ? overlapSum / Double(checkedPositions) : 0 }
    /// Tokens produced per target forward pass (decode phase).
    public var tokensPerTargetCall: Double {
        let calls = generation.targetForwardCalls - 1
        return calls > 0 ? Double(generation.generatedTokens) / Double(calls) : 0
    }
}

/// Where a speculative decoder's proposals come from.
public enum Drafter: @unchecked Sendable {
    /// A trained draft model (train-draft): its own KV cache, its own distribution q.
    case model(DraftEngine)
    /// Prompt lookup: the tokens that followed the reply's last tokens where they occur earlier
    /// in the prompt or the reply. Needs no training; q is a point mass on the proposal.
    case ngram(NGramDraft)

    public var name: String {
        switch self {
        case .model: "model"
        case .ngram(let n): "ngram (n \(n.minimum)-\(n.maximum))"
        }
    }
}

public struct SpeculativeDecoder {
    public let target: InferenceModel
    public let drafter: Drafter
    /// γ: tokens the draft proposes per target pass (forced tokens between them not counted).
    public var draftTokens: Int

    public init(target: InferenceModel, drafter: Drafter, draftTokens: Int) {
        precondition(draftTokens >= 1, "[SpeculativeDecoder] γ must be at least 1, got \(draftTokens)")
        if case .model(let draft) = drafter {
            precondition(draft.vocabSize == target.config.vocabSize,
                         "[SpeculativeDecoder] draft vocabulary \(draft.vocabSize) vs target \(target.config.vocabSize); DraftModel.load checks this")
        }
        self.target = target
        self.drafter = drafter
        self.draftTokens = draftTokens
    }

    public init(target: InferenceModel, draft: DraftEngine, draftTokens: Int) {
        self.init(target: target, drafter: .model(draft), draftTokens: draftTokens)
    }

    /// Generates like `Generator.generate` (same request, same stop rules, same constraint, same
    /// token callback, same use of a given cache), with the draft's help. Greedy requests give
    /// exactly Generator's tokens (the prompt runs as Generator runs it, and a verify row has the
    /// bits of a one-row step); sampled ones the same distribution.
    @discardableResult
    public func generate(_ request: GenerationRequest, cache given: KVCache? = nil,
                         onToken: (Int) -> Bool = { _ in true }) -> (tokens: [Int], stats: SpeculativeStats) {
        guard !request.prompt.isEmpty, request.maxNewTokens > 0 else {
            var stats = SpeculativeStats()
            stats.generation.promptTokens = request.prompt.count
            return ([], stats)
        }
        let capacity = request.prompt.count + request.maxNewTokens + draftTokens + 2
        let cache = given ?? target.makeCache(capacity: capacity)
        precondition(cache.count < request.prompt.count, "[SpeculativeDecoder.generate] the cache holds \(cache.count) positions of a \(request.prompt.count)-token prompt; leave one to run")
        let t0 = monotonicSeconds()
        let prefill = request.prompt.count - cache.count > 1
        var reply = SpeculativeReply(request, drafter: drafter, draftTokens: draftTokens)
        var logits: [Float] = []
        if prefill {
            // the whole prompt in one pass, the first token from its last row: Generator's cache and choice
            target.forward(Array(request.prompt[cache.count...]), cache: cache, into: &logits)  // the last row's logits
            reply.preparePromptRow()
            let keep = logits.withUnsafeMutableBufferPointer { reply.accept($0, onToken: onToken) }
            cache.truncate(to: keep)
        }
        let t1 = monotonicSeconds()
        while !reply.isFinished {
            let (tokens, rows) = reply.prepare(cached: cache.count)
            let tVerify = monotonicSeconds()
            target.forward(tokens, cache: cache, logitsAt: rows, into: &logits)  // [rows, V]
            reply.stats.verifySeconds += monotonicSeconds() - tVerify
            let keep = logits.withUnsafeMutableBufferPointer { reply.accept($0, onToken: onToken) }
            cache.truncate(to: keep)
        }
        var stats = reply.stats  // (the prefill pass counted as the first round's)
        stats.generation.prefillSeconds = t1 - t0
        stats.generation.decodeSeconds = monotonicSeconds() - t1
        return (reply.out, stats)
    }
}

/// One reply of speculative decoding, round by round, for a driver that owns the target's cache
/// and runs its passes: `prepare` (the draft proposes) says which tokens to run after what the
/// cache holds and which of their logit rows to return; `accept` decides from those rows, hands
/// on the reply's new tokens and says how many cache positions to keep. SpeculativeDecoder drives
/// one; a server can drive many in one batched pass. Without a drafter a round is one plain
/// step (the chosen token and the tokens forced after it).
///
/// Between rounds the target cache holds a prefix of the context (prompt + reply) and at least
/// one context token is left to open the next pass: the last chosen token and those forced after it.
public struct SpeculativeReply {
    public let request: GenerationRequest
    let drafter: Drafter?
    let draftTokens: Int
    var rng: SeededRNG
    var context: [Int]
    /// The reply so far (chosen and forced tokens; never a stop token).
    public private(set) var out: [Int] = []
    /// The constraint state after every emitted token.
    var committed: GuidedReply?
    let draftCache: KVCache?
    public var stats = SpeculativeStats()
    public private(set) var isFinished = false
    /// This round: the proposal, and the pass's layout (context tokens it starts with, logit rows).
    var proposal = Proposal()
    var pending = 0
    var rows: [Int] = []

    /// A reply to `request` whose prompt the driver's cache holds all but the last token of (or
    /// less: `prepare` feeds whatever it lacks). A model drafter's cache is prefilled here.
    public init(_ request: GenerationRequest, drafter: Drafter?, draftTokens: Int) {
        precondition(!request.prompt.isEmpty && request.maxNewTokens > 0 && draftTokens >= 1,
                     "[SpeculativeReply] \(request.prompt.count) prompt tokens, \(request.maxNewTokens) new, gamma \(draftTokens)")
        self.request = request
        self.drafter = drafter
        self.draftTokens = draftTokens
        rng = SeededRNG(seed: request.seed)
        context = request.prompt
        committed = GuidedReply(request)
        stats.generation.promptTokens = request.prompt.count
        if case .model(let draft) = drafter {
            let cache = draft.makeCache(capacity: request.prompt.count + request.maxNewTokens + draftTokens + 2)
            if request.prompt.count > 1 { _ = draft.nextLogits(Array(request.prompt.dropLast()), cache: cache) }
            draftCache = cache
        } else {
            draftCache = nil
        }
    }

    /// The draft proposes up to γ tokens, each followed by the tokens the grammar forces after it.
    /// Returns the tokens to run after the `cached` context tokens the target's cache holds, and
    /// the rows of them whose logits `accept` needs: the row before each drafted token and the last.
    /// `speculate` false skips the draft this round (a plain step).
    public mutating func prepare(cached: Int, speculate: Bool = true) -> (tokens: [Int], logitRows: [Int]) {
        precondition(!isFinished && cached < context.count, "[SpeculativeReply.prepare] finished, or the cache holds \(cached) of \(context.count) context tokens")
        let tDraft = monotonicSeconds()
        let gamma = drafter == nil || !speculate ? 0 : min(draftTokens, request.maxNewTokens - out.count - 1)
        proposal = gamma > 0 ? propose(gamma: gamma) : Proposal()
        stats.generation.draftTokensProposed += proposal.drafted
        stats.draftSeconds += monotonicSeconds() - tDraft
        pending = context.count - cached
        rows = []
        for (i, forced) in proposal.forced.enumerated() where !forced { rows.append(pending - 1 + i) }
        rows.append(pending - 1 + proposal.tokens.count)
        stats.generation.targetForwardCalls += 1
        stats.rowsFed += pending + proposal.tokens.count
        return (Array(context[cached...]) + proposal.tokens, rows)
    }

    /// The first round when the driver's prefill pass ran the whole prompt: its one logit row is
    /// the prompt's last, from which the first token is chosen as the generation loop chooses it
    /// (no draft). A prompt pass may attend in blocks, whose rounding a verify row's one-row
    /// attention does not share, so feeding the last prompt token to the first pass instead gave
    /// its position other keys and values, and with q8 activations a greedy reply could change.
    public mutating func preparePromptRow() {
        precondition(out.isEmpty, "[SpeculativeReply.preparePromptRow] the reply has begun")
        _ = prepare(cached: context.count - 1, speculate: false)
    }

    /// Decides this round from the target's logits at `prepare`'s rows ([rows, V], masked in
    /// place): keeps a prefix of the proposal, then one token of the target's (the correction or
    /// the bonus) and the tokens forced after it, each handed to `onToken` (false: stop). Returns
    /// how many positions of the target's cache to keep (the pass's rejected tail dropped).
    public mutating func accept(_ logits: UnsafeMutableBufferPointer<Float>, onToken: (Int) -> Bool) -> Int {
        let V = logits.count / rows.count
        let greedy = request.sampling.isGreedy
        let base = context.count - pending  // the cache's length before the pass
        var guided = committed
        var accepted = 0  // proposal tokens kept, forced ones included
        var next = -1
        var dead = false
        var row = 0
        /// Masks logit row `row` by the constraint at `position` tokens into the reply; false when
        /// nothing can continue the text there.
        func maskRow(_ position: Int) -> Bool {
            guard let g = guided else { return true }
            guard let narrowed = g.mask(UnsafeMutableBufferPointer(rebasing: logits[(row * V)..<((row + 1) * V)]),
                                        remaining: request.maxNewTokens - position) else { return false }
            if narrowed { stats.generation.closedByLimit = true }
            return true
        }
        var i = 0
        while i < proposal.tokens.count {
            if proposal.forced[i] {  // its drafted predecessor was kept, and the grammar forces it after that
                accepted += 1
                i += 1
                continue
            }
            if !maskRow(out.count + i) {
                dead = true
                break
            }
            let r = UnsafeBufferPointer(rebasing: logits[(row * V)..<((row + 1) * V)])
            row += 1
            stats.checkedPositions += 1
            let d = proposal.tokens[i]
            let keep: Bool
            if greedy {
                let t = Sampler.argmax(r)
                keep = t == d
                if keep { stats.overlapSum += 1 } else { next = t }
            } else {
                let p = Sampler.probabilities(r, request.sampling)
                if let q = proposal.distributions[i] {
                    var overlap: Float = 0
                    for v in 0..<V { overlap += min(p[v], q[v]) }
                    stats.overlapSum += Double(overlap)
                    keep = Float.random(in: 0..<1, using: &rng) < p[d] / q[d]
                    if !keep { next = SpeculativeDecoder.drawResidual(p, minus: q, rng: &rng) }
                } else {  // a point mass on d (prompt lookup): kept with probability p(d)
                    stats.overlapSum += Double(p[d])
                    keep = Float.random(in: 0..<1, using: &rng) < p[d]
                    if !keep { next = SpeculativeDecoder.drawResidual(p, without: d, rng: &rng) }
                }
            }
            if !keep { break }
            // the same tokens are forced after it as when the draft proposed it (same state, same room)
            _ = guided?.take(d, room: request.maxNewTokens - (out.count + i) - 1)
            accepted += 1
            i += 1
        }
        let endsAtStop = accepted > 0 && request.stopTokens.contains(proposal.tokens[accepted - 1])
        if next < 0 && !dead && !endsAtStop {
            // every proposal kept: the bonus token from the last row
            row = rows.count - 1
            if maskRow(out.count + proposal.tokens.count) {
                let r = UnsafeBufferPointer(rebasing: logits[(row * V)..<((row + 1) * V)])
                next = greedy ? Sampler.argmax(r) : Sampler.draw(Sampler.probabilities(r, request.sampling), rng: &rng)
            } else {
                dead = true
            }
        }
        stats.generation.draftTokensAccepted += proposal.forced.prefix(accepted).filter { !$0 }.count
        let keep = base + pending + accepted
        // (a draft whose sliding layers dropped what that needs runs the context again from 0)
        if let draftCache { draftCache.truncate(toAtMost: context.count + accepted) }
        committed = guided
        /// Hands on one token (chosen or forced); false when the reply ends with it.
        func emit(_ token: Int) -> Bool {
            out.append(token)
            context.append(token)
            return onToken(token) && out.count < request.maxNewTokens
        }
        for k in 0..<accepted where !isFinished {
            let token = proposal.tokens[k]
            if request.stopTokens.contains(token) {
                stats.generation.stoppedAtEndOfTurn = true
                isFinished = true
            } else {
                if proposal.forced[k] { stats.generation.forcedTokens += 1 }
                if !emit(token) { isFinished = true }
            }
        }
        if !isFinished && !dead {
            // the chosen token, and the tokens the grammar forces after it
            let forced = committed?.take(next, room: request.maxNewTokens - out.count - 1) ?? []
            if request.stopTokens.contains(next) {
                stats.generation.stoppedAtEndOfTurn = true
                isFinished = true
            } else {
                stats.generation.forcedTokens += forced.count
                for t in [next] + forced where !isFinished {
                    if !emit(t) { isFinished = true }
                }
            }
        }
        if dead { isFinished = true }
        stats.generation.generatedTokens = out.count
        if isFinished, let committed { stats.generation.incomplete = !(stats.generation.stoppedAtEndOfTurn && committed.isComplete) }
        // the cache keeps context tokens only (a stop token kept from the draft is dropped)
        return min(keep, context.count)
    }

    /// What the draft proposes in one round: drafted tokens, each followed by the tokens the
    /// grammar forces after it (`forced`), and for a sampled model draft the masked distribution
    /// q each drafted token was drawn from.
    struct Proposal {
        var tokens: [Int] = []
        var forced: [Bool] = []
        var distributions: [[Float]?] = []
        var drafted = 0
    }

    /// Up to `gamma` drafted tokens after the context, under a copy of the committed constraint
    /// state, stopping early at a stop token, where the draft has nothing to propose, or one
    /// token before the limit.
    mutating func propose(gamma: Int) -> Proposal {
        var p = Proposal()
        var g = committed
        let greedy = request.sampling.isGreedy
        var feed: [Int] = draftCache.map { Array(context[$0.count...]) } ?? []  // tokens the draft model has not seen
        var text = context  // what prompt lookup searches
        drafting: while p.drafted < gamma {
            let position = out.count + p.tokens.count
            if position >= request.maxNewTokens - 1 { break }
            var allowed: TokenMask? = nil
            if let g {
                guard let a = g.allowed(remaining: request.maxNewTokens - position) else { break }
                allowed = a.mask
            }
            let token: Int
            var q: [Float]? = nil
            switch drafter! {
            case .model(let draft):
                let compact = draft.nextLogits(feed, cache: draftCache!)  // [V'] or [V]
                if greedy {
                    var best = -1
                    var bestValue = -Float.infinity
                    for k in compact.indices where compact[k] > bestValue && (allowed?.contains(draft.tokenId(k)) ?? true) {
                        best = k
                        bestValue = compact[k]
                    }
                    guard best >= 0 else { break drafting }  // nothing the draft scores is allowed
                    token = draft.tokenId(best)
                } else {
                    var full = draft.fullLogits(compact)  // [V]
                    if let allowed { full.withUnsafeMutableBufferPointer { allowed.apply(to: $0) } }
                    guard full.contains(where: { $0 > -.infinity }) else { break drafting }
                    let dist = Sampler.probabilities(full[...], request.sampling)
                    token = Sampler.draw(dist, rng: &rng)
                    q = dist
                }
            case .ngram(let lookup):
                guard let t = lookup.propose(after: text), allowed?.contains(t) ?? true else { break drafting }
                token = t
            }
            p.tokens.append(token)
            p.forced.append(false)
            p.distributions.append(q)
            p.drafted += 1
            if request.stopTokens.contains(token) { break }
            let forced = g?.take(token, room: request.maxNewTokens - position - 1) ?? []
            p.tokens += forced
            p.forced += forced.map { _ in true }
            p.distributions += forced.map { _ in nil }
            feed = [token] + forced
            text += feed
        }
        return p
    }

}

extension SpeculativeDecoder {
    /// A draw from norm(max(0, p − q)); from p when that is all zeros (p == q up to rounding:
    /// any draw from p is then exact).
    static func drawResidual(_ p: [Float], minus q: [Float], rng: inout SeededRNG) -> Int {
        var residual = [Float](repeating: 0, count: p.count)
        var total: Float = 0
        for v in p.indices {
            let r = max(0, p[v] - q[v])
            residual[v] = r
            total += r
        }
        guard total > 0 else { return Sampler.draw(p, rng: &rng) }
        for v in residual.indices { residual[v] /= total }
        return Sampler.draw(residual, rng: &rng)
    }

    /// A draw from p with token d removed (the residual of a point-mass proposal on d).
    static func drawResidual(_ p: [Float], without d: Int, rng: inout SeededRNG) -> Int {
        var q = [Float](repeating: 0, count: p.count)
        q[d] = 1
        return drawResidual(p, minus: q, rng: &rng)
    }
}
