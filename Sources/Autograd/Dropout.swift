// Inverted dropout: keep each element with probability 1 − p and scale kept ones by 1/(1 − p),
// drawing one value per element from the caller's SeededRNG in row-major order (deterministic).
// Leaves out the eval-mode switch: callers simply do not call it outside training.
// Follows torch.nn.functional.dropout.

extension Ops {
    /// y = x·m, m ∈ {0, 1/(1−p)}; dx = g·m. p = 0 returns x itself and draws nothing.
    static func dropout<S>(_ x: TensorOf<S>, p: Float, rng: inout SeededRNG) -> TensorOf<S> {
        precondition(p >= 0 && p < 1, "[dropout] p must be in [0, 1), got \(p) for \(x.shape)")
        if p == 0 { return x }
        let keep = S(1 / (1 - Double(p)))
        var mask = [S](repeating: 0, count: x.count)
        for i in 0..<x.count where rng.nextFloat() >= p { mask[i] = keep }
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in
                mask.withUnsafeBufferPointer { kMap2(x.count, xp.baseAddress!, $0.baseAddress!, y) { $0 * $1 } }
            }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            mask.withUnsafeBufferPointer { mp in
                x.withGrad { dx in kMap3(x.count, dx, g.baseAddress!, mp.baseAddress!, dx) { $0 + $1 * $2 } }
            }
        }
    }
}

/// Inverted dropout with keep probability 1 − p, drawn from `rng`.
public func dropout(_ x: Tensor, p: Float, rng: inout SeededRNG) -> Tensor { Ops.dropout(x, p: p, rng: &rng) }
