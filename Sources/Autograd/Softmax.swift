// Softmax and log-softmax over the last dim, one SIMD row kernel per row, rows on both cores.
// Backward uses the saved output only. Leaves out temperature and other axes.
// Follows torch.softmax / torch.log_softmax.

extension Ops {
    /// y = e^x / Σ e^x per row; dx = y·(g − Σ g·y).
    static func softmax<S>(_ x: TensorOf<S>) -> TensorOf<S> {
        precondition(!x.shape.isEmpty, "[softmax] needs at least one dim, got \(x.shape)")
        let d = x.shape.last!, rows = d == 0 ? 0 : x.count / d
        let grain = Parallel.rowGrain(rowLength: d)
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in
                Parallel.forChunks(rows, grain: grain) { _, r in
                    for i in r { _ = kSoftmaxRow(xp.baseAddress! + i * d, y + i * d, d) }
                }
            }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            out.withUnsafeBufferPointer { yp in
                x.withGrad { dx in
                    Parallel.forChunks(rows, grain: grain) { _, r in
                        for i in r {
                            let yr = yp.baseAddress! + i * d, gr = g.baseAddress! + i * d, dr = dx + i * d
                            let dot = kDot(gr, yr, d)
                            for j in 0..<d { dr[j] += yr[j] * (gr[j] - dot) }
                        }
                    }
                }
            }
        }
    }

    /// y = x − log Σ e^x per row; dx = g − e^y·Σ g.
    static func logSoftmax<S>(_ x: TensorOf<S>) -> TensorOf<S> {
        precondition(!x.shape.isEmpty, "[logSoftmax] needs at least one dim, got \(x.shape)")
        let d = x.shape.last!, rows = d == 0 ? 0 : x.count / d
        let grain = Parallel.rowGrain(rowLength: d)
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in
                Parallel.forChunks(rows, grain: grain) { _, r in
                    for i in r {
                        let xr = xp.baseAddress! + i * d, yr = y + i * d
                        let lse = kLogSumExp(xr, d)
                        for j in 0..<d { yr[j] = xr[j] - lse }
                    }
                }
            }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            out.withUnsafeBufferPointer { yp in
                x.withGrad { dx in
                    Parallel.forChunks(rows, grain: grain) { _, r in
                        for i in r {
                            let yr = yp.baseAddress! + i * d, gr = g.baseAddress! + i * d, dr = dx + i * d
                            let gs = kSum(gr, d)
                            var j = 0
                            while j + 16 <= d { store16(load16(dr + j) + load16(gr + j) - S.expVector(load16(yr + j)) * gs, dr + j); j += 16 }
                            while j < d { dr[j] += gr[j] - S.exp(yr[j]) * gs; j += 1 }
                        }
                    }
                }
            }
        }
    }
}

/// Softmax over the last dim.
public func softmax(_ x: Tensor) -> Tensor { Ops.softmax(x) }
/// Log-softmax over the last dim.
public func logSoftmax(_ x: Tensor) -> Tensor { Ops.logSoftmax(x) }
