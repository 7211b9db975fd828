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

    /// Index of the largest logit (counted from the slice's start); the first one on ties.
    public static func argmax(_ logits: ArraySlice<Float>) -> Int {
        logits.withUnsafeBufferPointer { argmax($0) }
    }

    /// The distribution the options sample from, over the whole vocabulary (zeros outside the
    /// top-k / top-p set). Greedy gives a one-hot vector.
    public static func probabilities(_ logits: ArraySlice<Float>, _ options: SamplingOptions) -> [Float] {
        logits.withUnsafeBufferPointer { probabilities($0, options) }
    }

    /// The same from a buffer of logits (no copy of the row).
    public static func probabilities(_ logits: UnsafeBufferPointer<Float>, _ options: SamplingOptions) -> [Float] {
        let V = logits.count
        var p = [Float](repeating: 0, count: V)
        if options.isGreedy {
            p[argmax(logits)] = 1
            return p
        }
        // e^((l - max) / T) through the SIMD exp (about 2e-7 relative, as training's softmax):
        // 49,152 scalar exps were most of a sampled token's 0.6 ms
        let T = options.temperature
        var total: Double = 0
        p.withUnsafeMutableBufferPointer { pp in
            var m16 = SIMD16<Float>(repeating: -.infinity)
            var i0 = 0
            while i0 + 16 <= V {
                // compare and select: `pointwiseMax` compiled to a lane-by-lane loop through
                // the stack here, 80% of this function's time (`perf annotate`)
                let v = UnsafeRawPointer(logits.baseAddress! + i0).loadUnaligned(as: SIMD16<Float>.self)
                m16.replace(with: v, where: v .> m16)
                i0 += 16
            }
            var mx = m16.max()
            for i in i0..<V { mx = max(mx, logits[i]) }
            for i in 0..<V { pp[i] = (logits[i] - mx) / T }
            var i = 0
            while i + 16 <= V {
                let e = Kernels.exp(UnsafeRawPointer(pp.baseAddress! + i).loadUnaligned(as: SIMD16<Float>.self))
                UnsafeMutableRawPointer(pp.baseAddress! + i).storeBytes(of: e, as: SIMD16<Float>.self)
                i += 16
            }
            if i < V {  // the tail through the same polynomial, padded
                var t = SIMD16<Float>(repeating: -.infinity)
                for j in i..<V { t[j - i] = pp[j] }
                let e = Kernels.exp(t)
                for j in i..<V { pp[j] = e[j - i] }
            }
            // the sum in 8 double lanes, then one reciprocal: a serial sum and 49,152
            // divisions were a third of a sampled token's time
            var t8 = SIMD8<Double>()
            var j = 0
            while j + 8 <= V {
                t8 += SIMD8<Double>(UnsafeRawPointer(pp.baseAddress! + j).loadUnaligned(as: SIMD8<Float>.self))
                j += 8
            }
            total = t8.sum()
            for i in j..<V { total += Double(pp[i]) }
            let inverse = 1 / total
            for i in 0..<V { pp[i] = Float(Double(pp[i]) * inverse) }
        }
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
        logits.withUnsafeBufferPointer { sample($0, options, rng: &rng) }
    }

    /// The same from a buffer of logits (no copy of the row).
    public static func sample(_ logits: UnsafeBufferPointer<Float>, _ options: SamplingOptions, rng: inout SeededRNG) -> Int {
        options.isGreedy ? argmax(logits) : draw(probabilities(logits, options), rng: &rng)
    }
}
