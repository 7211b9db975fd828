// The generation loop: prefill the prompt into the KV cache, then one token per forward pass
// until a stop token or the token budget, handing each token to a callback as it is chosen
// (the CLI streams text from it). Speculative decoding with a draft is SpeculativeDecoder.
import Autograd
import Foundation

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
    public init(prompt: [Int], maxNewTokens: Int, stopTokens: Set<Int>, sampling: SamplingOptions = .init(), seed: UInt64 = 0) {
        self.prompt = prompt
        self.maxNewTokens = maxNewTokens
        self.stopTokens = stopTokens
        self.sampling = sampling
        self.seed = seed
    }
}

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

public enum Generator {
    /// Generates up to `maxNewTokens` tokens. `onToken` receives each token as it is chosen
    /// (a stop token is reported in the stats, not passed on); returning false stops early.
    @discardableResult
    public static func generate(_ model: InferenceModel, _ request: GenerationRequest,
                                onToken: (Int) -> Bool = { _ in true }) -> (tokens: [Int], stats: GenerationStats) {
        var stats = GenerationStats()
        stats.promptTokens = request.prompt.count
        guard !request.prompt.isEmpty, request.maxNewTokens > 0 else { return ([], stats) }
        var rng = SeededRNG(seed: request.seed)
        let cache = model.makeCache(capacity: request.prompt.count + request.maxNewTokens + 1)
        let t0 = now()
        var logits = model.forward(request.prompt, cache: cache)
        stats.targetForwardCalls += 1
        let t1 = now()
        stats.prefillSeconds = t1 - t0
        var out: [Int] = []
        while out.count < request.maxNewTokens {
            let next = Sampler.sample(logits[...], request.sampling, rng: &rng)
            if request.stopTokens.contains(next) {
                stats.stoppedAtEndOfTurn = true
                break
            }
            out.append(next)
            if !onToken(next) || out.count == request.maxNewTokens { break }
            logits = model.forward([next], cache: cache)
            stats.targetForwardCalls += 1
        }
        stats.decodeSeconds = now() - t1
        stats.generatedTokens = out.count
        return (out, stats)
    }
}
