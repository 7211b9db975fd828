// Speculative decoding: the draft proposes γ tokens one by one, the target scores all of them in
// one batched forward pass over its KV cache, and rejection sampling keeps each token with
// probability min(1, p/q), drawing a rejected position from norm(max(0, p − q)), so that the output
// is distributed exactly as the target's (greedy: identical to plain greedy decoding). Both caches
// roll back past rejected tokens. Follows Leviathan et al. 2022 (alg. 1) and Chen et al. 2023 (alg. 2).
import Autograd
import Foundation

/// GenerationStats plus α, the mean Σ_v min(p, q) over the positions the target checked (under
/// the request's sampling rule: for greedy decoding, the rate at which the argmaxes agree).
public struct SpeculativeStats: Sendable, Equatable {
    public var generation = GenerationStats()
    public var checkedPositions = 0
    public var overlapSum = 0.0
    /// Decode-phase seconds in the draft's proposals and in the target's verification passes.
    public var draftSeconds = 0.0
    public var verifySeconds = 0.0
    public var alpha: Double { checkedPositions > 0 ? overlapSum / Double(checkedPositions) : 0 }
    /// Tokens produced per target forward pass (decode phase).
    public var tokensPerTargetCall: Double {
        let calls = generation.targetForwardCalls - 1
        return calls > 0 ? Double(generation.generatedTokens) / Double(calls) : 0
    }
}

public struct SpeculativeDecoder {
    public let target: InferenceModel
    public let draft: DraftEngine
    /// γ: tokens the draft proposes per target pass.
    public var draftTokens: Int

    public init(target: InferenceModel, draft: DraftEngine, draftTokens: Int) {
        precondition(draftTokens >= 1, "[SpeculativeDecoder] γ must be at least 1, got \(draftTokens)")
        precondition(draft.vocabSize == target.config.vocabSize,
                     "[SpeculativeDecoder] draft vocabulary \(draft.vocabSize) vs target \(target.config.vocabSize); DraftModel.load checks this")
        self.target = target
        self.draft = draft
        self.draftTokens = draftTokens
    }

    /// Generates like `Generator.generate` (same request, same stop rules, same token callback),
    /// with the draft's help. Greedy requests give exactly Generator's tokens (up to float
    /// rounding between a batched and a single-row pass); sampled ones the same distribution.
    @discardableResult
    public func generate(_ request: GenerationRequest, onToken: (Int) -> Bool = { _ in true }) -> (tokens: [Int], stats: SpeculativeStats) {
        var stats = SpeculativeStats()
        stats.generation.promptTokens = request.prompt.count
        guard !request.prompt.isEmpty, request.maxNewTokens > 0 else { return ([], stats) }
        var rng = SeededRNG(seed: request.seed)
        let V = target.config.vocabSize
        let greedy = request.sampling.isGreedy
        let capacity = request.prompt.count + request.maxNewTokens + draftTokens + 2
        let targetCache = target.makeCache(capacity: capacity)
        let draftCache = draft.makeCache(capacity: capacity)
        // Invariant between rounds: the target cache holds every context token but the last
        // (`pending`), which opens the next verification pass.
        var context = request.prompt
        let t0 = monotonicSeconds()
        if context.count > 1 {
            let head = Array(context.dropLast())
            _ = target.forward(head, cache: targetCache)
            _ = draft.nextLogits(head, cache: draftCache)
            stats.generation.targetForwardCalls += 1
        }
        let t1 = monotonicSeconds()
        stats.generation.prefillSeconds = t1 - t0
        var out: [Int] = []
        var done = false
        var logits: [Float] = []

        /// Emits one token; false when generation ends with it.
        func emit(_ token: Int) -> Bool {
            if request.stopTokens.contains(token) {
                stats.generation.stoppedAtEndOfTurn = true
                return false
            }
            out.append(token)
            context.append(token)
            return onToken(token) && out.count < request.maxNewTokens
        }

        while !done {
            let gamma = min(draftTokens, request.maxNewTokens - out.count - 1)
            let base = context.count  // the target cache holds base − 1 tokens
            // 1. the draft proposes γ tokens (catching up on the context it has not seen first)
            var proposals: [Int] = []
            var draftDists: [[Float]] = []  // sampling only: q_i over [V]
            let tDraft = monotonicSeconds()
            if gamma > 0 {
                var feed = Array(context[draftCache.count...])
                for i in 0..<gamma {
                    let compact = draft.nextLogits(feed, cache: draftCache)
                    let token: Int
                    if greedy {
                        token = draft.tokenId(Sampler.argmax(compact[...]))
                    } else {
                        let q = Sampler.probabilities(draft.fullLogits(compact)[...], request.sampling)
                        token = Sampler.draw(q, rng: &rng)
                        draftDists.append(q)
                    }
                    proposals.append(token)
                    feed = [token]
                    if i == gamma - 1 { break }
                }
            }
            // 2. the target scores the pending token and every proposal in one pass: row i is p_{i+1}
            let tVerify = monotonicSeconds()
            stats.draftSeconds += tVerify - tDraft
            target.forward([context[base - 1]] + proposals, cache: targetCache, allLogits: true, into: &logits)  // [γ+1, V]
            stats.verifySeconds += monotonicSeconds() - tVerify
            stats.generation.targetForwardCalls += 1
            stats.generation.draftTokensProposed += gamma
            // 3. accept a prefix, then one token from the target (the correction or the bonus)
            var accepted = 0
            var next = -1
            for i in 0..<gamma {
                let row = logits[(i * V)..<((i + 1) * V)]
                stats.checkedPositions += 1
                if greedy {
                    let t = Sampler.argmax(row)
                    if t == proposals[i] {
                        stats.overlapSum += 1
                        accepted += 1
                        continue
                    }
                    next = t
                    break
                }
                let p = Sampler.probabilities(row, request.sampling), q = draftDists[i]
                var overlap: Float = 0
                for v in 0..<V { overlap += min(p[v], q[v]) }
                stats.overlapSum += Double(overlap)
                let d = proposals[i]
                if Float.random(in: 0..<1, using: &rng) < p[d] / q[d] {
                    accepted += 1
                    continue
                }
                var residual = [Float](repeating: 0, count: V)
                var total: Float = 0
                for v in 0..<V {
                    let r = max(0, p[v] - q[v])
                    residual[v] = r
                    total += r
                }
                if total > 0 {
                    for v in 0..<V { residual[v] /= total }
                    next = Sampler.draw(residual, rng: &rng)
                } else {
                    next = Sampler.draw(p, rng: &rng)  // p == q up to rounding: any draw from p is exact
                }
                break
            }
            if next < 0 {
                let row = logits[(gamma * V)..<((gamma + 1) * V)]
                next = greedy ? Sampler.argmax(row) : Sampler.draw(Sampler.probabilities(row, request.sampling), rng: &rng)
            }
            stats.generation.draftTokensAccepted += accepted
            // 4. roll both caches back to the accepted prefix
            targetCache.truncate(to: base + accepted)
            draftCache.truncate(to: min(draftCache.count, base + accepted))
            for token in proposals.prefix(accepted) + [next] where !done {
                if !emit(token) { done = true }
            }
        }
        stats.generation.decodeSeconds = monotonicSeconds() - t1
        stats.generation.generatedTokens = out.count
        return (out, stats)
    }
}
