// The output head and cross-entropy as one op: hidden [M,D], head weight [V,D], targets [M] ->
// mean over rows of (log Σ e^z − z[target]) with z = h·Wᵀ, computed in chunks of rows so the
// [M,V] logits never exist in full (at M = 8192 rows they would take 1.6 GB, and as much
// again for their gradient). The loss is the last node of the tape, so its gradient is the
// scalar g times the gradient at g = 1: forward computes that (dH = (softmax(z) − onehot)·W/M,
// and dW = (softmax(z) − onehot)ᵀ·H/M when the head trains) while each chunk's logits are at
// hand, and backward only scales it. No logit is computed twice.
// Leaves out label smoothing and z-loss. Follows Liger-Kernel's fused linear cross-entropy.

extension Ops {
    /// Rows of logits per chunk: a quarter of the rows (so 2 or 4 threads share small batches
    /// evenly), at most 64 ([64, V] floats per thread at a time). Fixed by M alone.
    static func headChunkRows(_ m: Int) -> Int { min(64, max(8, (m + 3) / 4)) }

    /// Mean next-token cross-entropy of h·Wᵀ over all M rows. hidden [M,D], weight [V,D].
    /// dh = g·(softmax(z) − onehot)·W/M, dW = g·(softmax(z) − onehot)ᵀ·h/M. M = 0 gives loss 0.
    static func linearCrossEntropy<S>(hidden: TensorOf<S>, weight: TensorOf<S>, targets: [Int]) -> TensorOf<S> {
        precondition(hidden.shape.count == 2 && weight.shape.count == 2 && hidden.shape[1] == weight.shape[1],
                     "[linearCrossEntropy] hidden must be [M,D] and weight [V,D]: hidden \(hidden.shape), weight \(weight.shape)")
        let m = hidden.shape[0], d = hidden.shape[1], v = weight.shape[0]
        precondition(targets.count == m, "[linearCrossEntropy] targets count \(targets.count) vs hidden \(hidden.shape)")
        for (r, t) in targets.enumerated() { precondition(t >= 0 && t < v, "[linearCrossEntropy] target \(t) at row \(r) out of range for vocabulary \(v)") }
        let record = recording(hidden, weight)
        let factor: S = m == 0 ? 0 : 1 / S(m)
        var rowLoss = [S](repeating: 0, count: m)
        let needDH = record && hidden.requiresGrad, needDW = record && weight.requiresGrad
        var dHidden = [S](repeating: 0, count: needDH ? m * d : 0)  // at g = 1
        var dWeight = [S](repeating: 0, count: needDW ? v * d : 0)
        let chunk = headChunkRows(m), chunks = (m + chunk - 1) / chunk
        hidden.data.withUnsafeBufferPointer { hp in
        weight.data.withUnsafeBufferPointer { wp in
        rowLoss.withUnsafeMutableBufferPointer { lp in
        dHidden.withUnsafeMutableBufferPointer { dhp in
        dWeight.withUnsafeMutableBufferPointer { dwp in
            let hp = hp.baseAddress!, wp = wp.baseAddress!, lp = lp.baseAddress!
            // (an empty array's buffer may still have a base address: decide by the flags)
            let dhp = needDH ? dhp.baseAddress : nil
            let dwp = needDW ? dwp.baseAddress : nil
            /// One chunk of rows in its own logits buffer [rows, V]; `own` runs its gemms on the
            /// calling thread (chunks in parallel), else each gemm uses the threads itself.
            func run(_ c: Int, _ z: UnsafeMutablePointer<S>, own: Bool) {
                let r0 = c * chunk, rows = min(chunk, m - r0)
                let gemm = own ? S.gemmOnThisThread : S.gemm
                gemm(false, true, rows, v, d, 1, hp + r0 * d, d, wp, d, 0, z, v)  // z [rows, V]
                for i in 0..<rows {
                    let zr = z + i * v, target = targets[r0 + i]
                    guard record else { lp[r0 + i] = kLogSumExp(zr, v) - zr[target]; continue }
                    // One exp per logit: e = exp(z − max) in place, lse = max + log Σe, then e·(1/Σe)/M.
                    let zt = zr[target], mx = kMax(zr, v)
                    var acc = SIMD16<S>()
                    var j = 0
                    while j + 16 <= v { let e = S.expVector(load16(zr + j) - mx); store16(e, zr + j); acc += e; j += 16 }
                    if j < v {
                        var e = S.expVector(loadPartial(zr + j, v - j) - mx)
                        storePartial(e, zr + j, v - j)
                        for l in (v - j)..<16 { e[l] = 0 }
                        acc += e
                    }
                    let sum = acc.sum()
                    lp[r0 + i] = mx + S.log(sum) - zt
                    let k = factor / sum
                    j = 0
                    while j + 16 <= v { store16(load16(zr + j) * k, zr + j); j += 16 }
                    while j < v { zr[j] *= k; j += 1 }
                    zr[target] -= factor
                }
                guard record else { return }
                if let dhp {  // dH[rows, D] = dZ·W
                    gemm(false, false, rows, d, v, 1, z, v, wp, d, 0, dhp + r0 * d, d)
                }
                if let dwp {  // dW[V, D] += dZᵀ·H (chunks run in order on one thread when W trains)
                    gemm(true, false, v, d, rows, 1, z, v, hp + r0 * d, d, 1, dwp, d)
                }
            }
            if dwp != nil {
                var z = [S](repeating: 0, count: min(chunk, m) * v)
                z.withUnsafeMutableBufferPointer { zp in for c in 0..<chunks { run(c, zp.baseAddress!, own: false) } }
            } else {
                Parallel.forChunks(chunks, grain: 1) { _, range in
                    var z = [S](repeating: 0, count: min(chunk, m) * v)
                    z.withUnsafeMutableBufferPointer { zp in for c in range { run(c, zp.baseAddress!, own: true) } }
                }
            }
        }}}}}
        var total: S = 0
        for l in rowLoss { total += l }
        let out = [total * factor]
        guard record else { return TensorOf(result: [], data: out, inputs: [], backward: nil) }
        return TensorOf(result: [], data: out, inputs: [hidden, weight]) { g in
            let scale = g[0]
            for (tensor, grad) in [(hidden, dHidden), (weight, dWeight)] where tensor.requiresGrad {
                grad.withUnsafeBufferPointer { gp in
                    tensor.withGrad { t in kMap2(tensor.count, t, gp.baseAddress!, t) { $0 + $1 * scale } }
                }
            }
        }
    }
}

/// Mean cross-entropy of the output head h·Wᵀ against `targets`, without materialising the
/// logits: hidden [M,D], weight [V,D], targets [M] -> scalar.
public func linearCrossEntropy(hidden: Tensor, weight: Tensor, targets: [Int]) -> Tensor {
    Ops.linearCrossEntropy(hidden: hidden, weight: weight, targets: targets)
}
