// Rotary position embedding, Hugging Face Llama "rotate half" layout: in each head, element i
// pairs with i + hd/2 and turns by angle pos·base^(−2i/hd)/factor_i (factor_i = 1 without
// scaling; linear, Llama 3 and LongRoPE scaling give per-frequency divisors). Partial rotary
// (Phi-4-mini) rotates the first rd of each head's hd dimensions (pairs i, i + rd/2, exponent over
// rd, as transformers' apply_rotary_pos_emb) and passes the rest through; LongRoPE's attention
// factor scales cos and sin. Angles are computed in Double.
// Leaves out NTK/YaRN scaling and llama.cpp's interleaved layout.
import Foundation

extension Ops {
    /// x [N, H·hd], positions [N]. With c = cos θ, s = sin θ: y1 = x1·c − x2·s, y2 = x2·c + x1·s;
    /// backward is the inverse rotation: dx1 = g1·c + g2·s, dx2 = g2·c − g1·s.
    /// With `rotaryDim` rd < hd only the first rd dimensions of each head turn (the rest are copied,
    /// their gradient passed through); `attentionFactor` multiplies c and s.
    static func rope<S>(_ x: TensorOf<S>, heads: Int, positions: [Int], base: Float, factors: [Double]? = nil,
                        rotaryDim: Int? = nil, attentionFactor: Double = 1) -> TensorOf<S> {
        precondition(x.shape.count == 2, "[rope] x must be [N, heads*hd], got \(x.shape)")
        let n = x.shape[0], width = x.shape[1]
        precondition(heads > 0 && width % heads == 0, "[rope] width \(width) of \(x.shape) is not a multiple of heads \(heads)")
        let hd = width / heads
        precondition(hd % 2 == 0, "[rope] head dim \(hd) must be even (x \(x.shape), heads \(heads))")
        precondition(positions.count == n, "[rope] positions count \(positions.count) vs rows of \(x.shape)")
        let rd = rotaryDim ?? hd
        precondition(rd > 0 && rd <= hd && rd % 2 == 0, "[rope] rotary dims \(rd) must be even and at most head dim \(hd)")
        let half = rd / 2
        var cosT = [S](repeating: 0, count: n * half), sinT = [S](repeating: 0, count: n * half)
        RopeTable.shared.withAngles(base: base, headDim: rd, positions: (positions.max() ?? 0) + 1, factors: factors) { ct, st in
            for (row, p) in positions.enumerated() {
                precondition(p >= 0, "[rope] negative position \(p) at row \(row)")
                for i in 0..<half {
                    // as transformers: cos and sin in float32, then times the attention factor
                    cosT[row * half + i] = attentionFactor == 1 ? S(ct[p * half + i]) : S(Float(ct[p * half + i]) * Float(attentionFactor))
                    sinT[row * half + i] = attentionFactor == 1 ? S(st[p * half + i]) : S(Float(st[p * half + i]) * Float(attentionFactor))
                }
            }
        }
        // Rotates rows of src into dst by (c, ±s); inverse = true flips the sign of s.
        func rotate(_ src: UnsafePointer<S>, _ dst: UnsafeMutablePointer<S>, inverse: Bool, accumulate: Bool) {
            cosT.withUnsafeBufferPointer { cp in
                sinT.withUnsafeBufferPointer { sp in
                    Parallel.forChunks(n, grain: Parallel.rowGrain(rowLength: width)) { _, r in
                        for row in r {
                            let c = cp.baseAddress! + row * half, s = sp.baseAddress! + row * half
                            for h in 0..<heads {
                                let base = row * width + h * hd
                                for j in rd..<hd {  // the dimensions that do not turn
                                    if accumulate { dst[base + j] += src[base + j] } else { dst[base + j] = src[base + j] }
                                }
                                for i in 0..<half {
                                    let x1 = src[base + i], x2 = src[base + i + half]
                                    let sn = inverse ? -s[i] : s[i]
                                    let y1 = x1 * c[i] - x2 * sn, y2 = x2 * c[i] + x1 * sn
                                    if accumulate { dst[base + i] += y1; dst[base + i + half] += y2 } else { dst[base + i] = y1; dst[base + i + half] = y2 }
                                }
                            }
                        }
                    }
                }
            }
        }
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { rotate($0.baseAddress!, y, inverse: false, accumulate: false) }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            x.withGrad { dx in rotate(g.baseAddress!, dx, inverse: true, accumulate: true) }
        }
    }
}

/// Rotary embedding of x [N, heads·hd] at `positions` (one per row), HF rotate-half layout;
/// `factors` [rd/2] divide the frequencies (RoPE scaling), nil for none; `rotaryDim` rd (nil: the
/// whole head) is how many leading dimensions of each head turn; `attentionFactor` scales cos and sin.
public func rope(_ x: Tensor, heads: Int, positions: [Int], base: Float, factors: [Double]? = nil,
                 rotaryDim: Int? = nil, attentionFactor: Double = 1) -> Tensor {
    Ops.rope(x, heads: heads, positions: positions, base: base, factors: factors, rotaryDim: rotaryDim, attentionFactor: attentionFactor)
}

/// cos and sin of every angle pos·base^(−2i/hd) rope has needed so far, in Double, computed once
/// per (base, head dim) and grown to the largest position seen: every layer's q and k, every
/// step, rotate by the same angles, and a table lookup costs nothing next to pow, cos and sin.
public final class RopeTable: @unchecked Sendable {
    /// The one table training's rope op and the KV-cache pass both read.
    public static let shared = RopeTable()
    private struct Key: Hashable { let base: Float, headDim: Int, factors: [Double]? }
    private var tables: [Key: (cos: [Double], sin: [Double])] = [:]  // [P, hd/2] each
    private let lock = NSLock()

    /// Calls `body(cos, sin)` with tables [P, hd/2] (row p = position p) for P ≥ `positions`;
    /// `factors` [hd/2] divide the frequencies (RoPE scaling).
    public func withAngles<R>(base: Float, headDim hd: Int, positions: Int, factors: [Double]? = nil, _ body: ([Double], [Double]) -> R) -> R {
        let key = Key(base: base, headDim: hd, factors: factors), half = hd / 2
        precondition(factors == nil || factors!.count == half, "[rope] \(factors!.count) frequency factors for head dim \(hd)")
        lock.lock()
        let held = (tables[key]?.cos.count ?? 0) / max(half, 1)
        if held < positions {
            let count = max(positions, 2 * held, 256)  // 256: a short run holds 128 KB (hd 64), not 0.5 MB
            var c = [Double](repeating: 0, count: count * half), s = c
            for i in 0..<half {
                let invFreq = 1 / Foundation.pow(Double(base), Double(2 * i) / Double(hd)) / (factors?[i] ?? 1)
                for p in 0..<count {
                    let theta = Double(p) * invFreq
                    c[p * half + i] = Foundation.cos(theta)
                    s[p * half + i] = Foundation.sin(theta)
                }
            }
            tables[key] = (c, s)
        }
        let t = tables[key]!
        lock.unlock()
        return body(t.cos, t.sin)
    }
}
