// Token choice from logits: greedy (temperature 0), or temperature with optional top-k and
// top-p (nucleus) filtering, drawn from a seeded RNG so a seed reproduces a run. Also the
// probability vector those rules define, which speculative decoding needs to accept or reject
// a draft's tokens without changing the output distribution.
import Autograd
import Foundation

public struct SamplingOptions: Sendable, Equatable {
    public var temperature: Float
    public var topK: Int?
    public var topP: Float?
    public init(temperature: Float = 0, topK: Int? = nil, topP: Float? = nil) {
        self.temperature = temperature
        self.topK = topK
        self.topP = topP
    }
    public var isGreedy: Bool { temperature <= 0 }
}

public enum Sampler {
    /// Index of the largest logit; the first one on ties (as torch.argmax).
    public static func argmax(_ logits: UnsafeBufferPointer<Float>) -> Int {
        var best = 0
        var bestValue = -Float.infinity
        for i in logits.indices where logits[i] > bestValue {
            bestValue = logits[i]
            best = i
        }
        return best
    }

    /// Index of the largest logit; the first one on ties (as torch.argmax).
    public static func argmax(_ logits: ArraySlice<Float>) -> Int {
        var best = logits.startIndex
        var bestValue = -Float.infinity
        for i in logits.indices where logits[i] > bestValue {
            bestValue = logits[i]
            best = i
        }
        return best - logits.startIndex
    }

    /// The distribution the options sample from, over the whole vocabulary (zeros outside the
    /// top-k / top-p set). Greedy gives a one-hot vector.
    public static func probabilities(_ logits: ArraySlice<Float>, _ options: SamplingOptions) -> [Float] {
        let V = logits.count
        var p = [Float](repeating: 0, count: V)
        if options.isGreedy {
            p[argmax(logits)] = 1
            return p
        }
        let base = logits.startIndex
        var mx = -Float.infinity
        for x in logits { mx = max(mx, x) }
        var total: Double = 0
        for i in 0..<V {
            let e = Foundation.exp((logits[base + i] - mx) / options.temperature)
            p[i] = e
            total += Double(e)
        }
        for i in 0..<V { p[i] = Float(Double(p[i]) / total) }
        var keep: [Int]? = nil
        if let k = options.topK, k > 0, k < V {
            keep = Array((0..<V).sorted { p[$0] > p[$1] || (p[$0] == p[$1] && $0 < $1) }.prefix(k))
        }
        if let topP = options.topP, topP < 1 {
            let order = keep ?? (0..<V).sorted { p[$0] > p[$1] || (p[$0] == p[$1] && $0 < $1) }
            var acc: Float = 0
            var kept: [Int] = []
            for i in order {
                kept.append(i)
                acc += p[i]
                if acc >= topP { break }
            }
            keep = kept
        }
        if let keep {
            var q = [Float](repeating: 0, count: V)
            var s: Float = 0
            for i in keep { s += p[i] }
            for i in keep { q[i] = p[i] / s }
            return q
        }
        return p
    }

    /// Draws an index from a probability vector.
    public static func draw(_ p: [Float], rng: inout SeededRNG) -> Int {
        let r = Float.random(in: 0..<1, using: &rng)
        var acc: Float = 0
        var lastNonZero = 0
        for (i, x) in p.enumerated() where x > 0 {
            acc += x
            lastNonZero = i
            if r < acc { return i }
        }
        return lastNonZero
    }

    public static func sample(_ logits: ArraySlice<Float>, _ options: SamplingOptions, rng: inout SeededRNG) -> Int {
        options.isGreedy ? argmax(logits) : draw(probabilities(logits, options), rng: &rng)
    }
}
