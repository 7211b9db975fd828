// Rotary position embedding, Hugging Face Llama "rotate half" layout: in each head, element i
// pairs with i + hd/2 and turns by angle pos·base^(−2i/hd). Angles are computed in Double.
// Leaves out RoPE scaling variants (linear, NTK, YaRN) and llama.cpp's interleaved layout.
import Foundation

extension Ops {
    /// x [N, H·hd], positions [N]. With c = cos θ, s = sin θ: y1 = x1·c − x2·s, y2 = x2·c + x1·s;
    /// backward is the inverse rotation: dx1 = g1·c + g2·s, dx2 = g2·c − g1·s.
    static func rope<S>(_ x: TensorOf<S>, heads: Int, positions: [Int], base: Float) -> TensorOf<S> {
        precondition(x.shape.count == 2, "[rope] x must be [N, heads*hd], got \(x.shape)")
        let n = x.shape[0], width = x.shape[1]
        precondition(heads > 0 && width % heads == 0, "[rope] width \(width) of \(x.shape) is not a multiple of heads \(heads)")
        let hd = width / heads
        precondition(hd % 2 == 0, "[rope] head dim \(hd) must be even (x \(x.shape), heads \(heads))")
        precondition(positions.count == n, "[rope] positions count \(positions.count) vs rows of \(x.shape)")
        let half = hd / 2
        var cosT = [S](repeating: 0, count: n * half), sinT = [S](repeating: 0, count: n * half)
        for (row, p) in positions.enumerated() {
            for i in 0..<half {
                let invFreq = 1 / Foundation.pow(Double(base), Double(2 * i) / Double(hd))
                let theta = Double(p) * invFreq
                cosT[row * half + i] = S(Foundation.cos(theta))
                sinT[row * half + i] = S(Foundation.sin(theta))
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

/// Rotary embedding of x [N, heads·hd] at `positions` (one per row), HF rotate-half layout.
public func rope(_ x: Tensor, heads: Int, positions: [Int], base: Float) -> Tensor {
    Ops.rope(x, heads: heads, positions: positions, base: base)
}
