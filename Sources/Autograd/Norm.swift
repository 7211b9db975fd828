// RMSNorm over the last dim, as in Llama: y = x / sqrt(mean(x²) + eps) · w. Forward saves only
// 1/rms per row; backward recomputes the rest. Leaves out LayerNorm's mean and bias.
// Follows transformers' LlamaRMSNorm (statistics in the input precision here: Float); with an
// offset, Gemma3RMSNorm's x̂·(1 + w) (the gradient of w is unchanged by it).

extension Ops {
    /// x [N,D], weight [D] -> [N,D]. With r = 1/sqrt(mean(x²)+eps) and u = g·w:
    /// dx = r·u − x·r³/D·Σ(u·x),  dw = Σ_rows g·x·r.
    static func rmsNorm<S>(_ x: TensorOf<S>, weight: TensorOf<S>, eps: S, offset: S = 0) -> TensorOf<S> {
        precondition(weight.shape.count == 1 && x.shape.last == weight.shape[0], "[rmsNorm] last dim differs: x \(x.shape) vs weight \(weight.shape)")
        let d = weight.shape[0]
        let rows = d == 0 ? 0 : x.count / d
        var inv = [S](repeating: 0, count: rows)
        // the weight the rows are multiplied by: w, or w + offset (Gemma's 1 + w)
        let effective = offset == 0 ? weight.data : weight.data.map { $0 + offset }
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in
                effective.withUnsafeBufferPointer { wp in
                    inv.withUnsafeMutableBufferPointer { ip in
                        kRMSNormRows(xp.baseAddress!, wp.baseAddress!, y, ip.baseAddress!, rows, d, eps)
                    }
                }
            }
        }
        guard recording(x, weight) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x, weight]) { g in
            let grain = Parallel.rowGrain(rowLength: d)
            let chunks = Parallel.chunkCount(rows, grain: grain)
            let needW = weight.requiresGrad
            var partialW = [S](repeating: 0, count: needW ? chunks * d : 0)
            x.data.withUnsafeBufferPointer { xp in
                effective.withUnsafeBufferPointer { wp in
                    partialW.withUnsafeMutableBufferPointer { pw in
                        let xp = xp.baseAddress!, wp = wp.baseAddress!, gp = g.baseAddress!
                        let pw = pw.baseAddress
                        let body = { (dx: UnsafeMutablePointer<S>?) in
                            Parallel.forChunks(rows, grain: grain) { c, r in
                                for row in r {
                                    let xr = xp + row * d, gr = gp + row * d, ri = inv[row]
                                    if let dx {
                                        var acc = SIMD16<S>()
                                        var i = 0
                                        while i + 16 <= d { acc += load16(gr + i) * load16(wp + i) * load16(xr + i); i += 16 }
                                        var dot = acc.sum()
                                        while i < d { dot += gr[i] * wp[i] * xr[i]; i += 1 }
                                        let k = ri * ri * ri / S(d) * dot
                                        let dr = dx + row * d
                                        for j in 0..<d { dr[j] += ri * gr[j] * wp[j] - xr[j] * k }
                                    }
                                    if needW, let pw {
                                        let p = pw + c * d
                                        for j in 0..<d { p[j] += gr[j] * xr[j] * ri }
                                    }
                                }
                            }
                        }
                        if x.requiresGrad { x.withGrad { body($0) } } else { body(nil) }
                    }
                }
            }
            if needW {
                weight.withGrad { dw in
                    for c in 0..<chunks { for j in 0..<d { dw[j] += partialW[c * d + j] } }
                }
            }
        }
    }
}

/// x [N,D], weight [D] -> x / sqrt(mean(x²)+eps) · w  [N,D].
public func rmsNorm(_ x: Tensor, weight: Tensor, eps: Float, offset: Float = 0) -> Tensor {
    Ops.rmsNorm(x, weight: weight, eps: eps, offset: offset)
}
