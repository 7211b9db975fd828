// Losses over logits [N,V]: masked cross-entropy and the distillation divergences (forward KL,
// reverse KL, total variation) between a student and a constant teacher. Masked rows cost
// nothing; only per-row log-sum-exps are saved, probabilities are recomputed in backward.
// Leaves out label smoothing. Follows torch cross_entropy (mean) and the DistiLLM divergences.

/// Which divergence the draft model minimises against its teacher.
public enum Divergence: String, Sendable, CaseIterable {
    /// KL(teacher ‖ student) = Σ p·(log p − log q)
    case forward
    /// KL(student ‖ teacher) = Σ q·(log q − log p)
    case reverse
    /// total variation = ½·Σ |q − p|
    case tvd
}

/// Row indices kept by `mask` (all rows when nil).
func keptRows(_ n: Int, _ mask: [Bool]?, op: String) -> [Int] {
    guard let mask else { return Array(0..<n) }
    precondition(mask.count == n, "[\(op)] mask count \(mask.count) vs rows \(n)")
    return (0..<n).filter { mask[$0] }
}

extension Ops {
    /// mean over kept rows of (log Σ e^x − x[target]); dx = (softmax(x) − onehot)·g/kept.
    /// No kept rows: loss 0, gradient 0.
    static func crossEntropy<S>(logits: TensorOf<S>, targets: [Int], mask: [Bool]? = nil) -> TensorOf<S> {
        precondition(logits.shape.count == 2, "[crossEntropy] logits must be [N,V], got \(logits.shape)")
        let n = logits.shape[0], v = logits.shape[1]
        precondition(targets.count == n, "[crossEntropy] targets count \(targets.count) vs logits \(logits.shape)")
        let kept = keptRows(n, mask, op: "crossEntropy")
        for r in kept { precondition(targets[r] >= 0 && targets[r] < v, "[crossEntropy] target \(targets[r]) at row \(r) out of range for logits \(logits.shape)") }
        var lse = [S](repeating: 0, count: kept.count)
        logits.data.withUnsafeBufferPointer { xp in
            lse.withUnsafeMutableBufferPointer { lp in
                let lp = lp.baseAddress!
                Parallel.forChunks(kept.count, grain: Parallel.rowGrain(rowLength: v)) { _, r in
                    for k in r { lp[k] = kLogSumExp(xp.baseAddress! + kept[k] * v, v) }
                }
            }
        }
        var total: S = 0
        for (k, r) in kept.enumerated() { total += lse[k] - logits.data[r * v + targets[r]] }
        let factor: S = kept.isEmpty ? 0 : 1 / S(kept.count)
        let out = [total * factor]
        guard recording(logits) else { return TensorOf(result: [], data: out, inputs: [], backward: nil) }
        return TensorOf(result: [], data: out, inputs: [logits]) { g in
            let scale = g[0] * factor
            logits.data.withUnsafeBufferPointer { xp in
                logits.withGrad { dx in
                    Parallel.forChunks(kept.count, grain: Parallel.rowGrain(rowLength: v)) { _, r in
                        for k in r {
                            let row = kept[k], xr = xp.baseAddress! + row * v, dr = dx + row * v
                            let shift = lse[k]
                            var j = 0
                            while j + 16 <= v { store16(load16(dr + j) + S.expVector(load16(xr + j) - shift) * scale, dr + j); j += 16 }
                            if j < v {
                                let m = v - j
                                storePartial(loadPartial(dr + j, m) + S.expVector(loadPartial(xr + j, m) - shift) * scale, dr + j, m)
                            }
                            dr[targets[row]] -= scale
                        }
                    }
                }
            }
        }
    }

    /// Mean over kept rows of D(student, teacher), with q = softmax(student), p = softmax(teacher).
    /// d/ds: forward q − p; reverse q·(log q − log p − KL); tvd q·(½·sign(q−p) − ½·Σ sign(q−p)·q).
    /// The teacher is a constant: it never receives a gradient.
    static func divergence<S>(student: TensorOf<S>, teacher: TensorOf<S>, kind: Divergence, mask: [Bool]? = nil) -> TensorOf<S> {
        precondition(student.shape.count == 2 && student.shape == teacher.shape, "[divergence] logits must be equal [N,V]: student \(student.shape) vs teacher \(teacher.shape)")
        let n = student.shape[0], v = student.shape[1]
        let kept = keptRows(n, mask, op: "divergence")
        let grain = max(1, Parallel.rowGrain(rowLength: v) / 4)
        // Per kept row: log-sum-exp of student and teacher, and the row's divergence.
        var lseS = [S](repeating: 0, count: kept.count), lseT = lseS, rowLoss = lseS
        student.data.withUnsafeBufferPointer { sp in
            teacher.data.withUnsafeBufferPointer { tp in
                lseS.withUnsafeMutableBufferPointer { ls in
                    lseT.withUnsafeMutableBufferPointer { lt in
                        rowLoss.withUnsafeMutableBufferPointer { rl in
                            let ls = ls.baseAddress!, lt = lt.baseAddress!, rl = rl.baseAddress!
                            Parallel.forChunks(kept.count, grain: grain) { _, r in
                                var q = [S](repeating: 0, count: v), p = q
                                q.withUnsafeMutableBufferPointer { qb in
                                    p.withUnsafeMutableBufferPointer { pb in
                                        let qb = qb.baseAddress!, pb = pb.baseAddress!
                                        for k in r {
                                            let s = sp.baseAddress! + kept[k] * v, t = tp.baseAddress! + kept[k] * v
                                            ls[k] = kSoftmaxRow(s, qb, v)
                                            lt[k] = kSoftmaxRow(t, pb, v)
                                            rl[k] = divergenceRow(kind, qb, pb, s, t, ls[k], lt[k], v)
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        var total: S = 0
        for x in rowLoss { total += x }
        let factor: S = kept.isEmpty ? 0 : 1 / S(kept.count)
        let out = [total * factor]
        guard recording(student) else { return TensorOf(result: [], data: out, inputs: [], backward: nil) }
        return TensorOf(result: [], data: out, inputs: [student]) { g in
            let scale = g[0] * factor
            student.data.withUnsafeBufferPointer { sp in
                teacher.data.withUnsafeBufferPointer { tp in
                    student.withGrad { ds in
                        Parallel.forChunks(kept.count, grain: grain) { _, r in
                            var q = [S](repeating: 0, count: v), p = q
                            q.withUnsafeMutableBufferPointer { qb in
                                p.withUnsafeMutableBufferPointer { pb in
                                    let qb = qb.baseAddress!, pb = pb.baseAddress!
                                    for k in r {
                                        let row = kept[k]
                                        let s = sp.baseAddress! + row * v, t = tp.baseAddress! + row * v, d = ds + row * v
                                        softmaxRow(s, qb, v)
                                        softmaxRow(t, pb, v)
                                        switch kind {
                                        case .forward:
                                            for j in 0..<v { d[j] += scale * (qb[j] - pb[j]) }
                                        case .reverse:
                                            let kl = rowLoss[k]
                                            for j in 0..<v {
                                                let lq = s[j] - lseS[k], lp = t[j] - lseT[k]
                                                d[j] += scale * qb[j] * (lq - lp - kl)
                                            }
                                        case .tvd:
                                            var signDot: S = 0
                                            for j in 0..<v { signDot += sign(qb[j] - pb[j]) * qb[j] }
                                            for j in 0..<v { d[j] += scale * qb[j] * (sign(qb[j] - pb[j]) - signDot) / 2 }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

@inline(__always)
func sign<S: TensorScalar>(_ x: S) -> S { x > 0 ? 1 : (x < 0 ? -1 : 0) }

@inline(__always)
func softmaxRow<S: TensorScalar>(_ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>, _ n: Int) { _ = kSoftmaxRow(x, y, n) }

/// One row's divergence from the probabilities q (student), p (teacher) and the logits.
@inline(__always)
func divergenceRow<S: TensorScalar>(
    _ kind: Divergence, _ q: UnsafePointer<S>, _ p: UnsafePointer<S>, _ s: UnsafePointer<S>, _ t: UnsafePointer<S>,
    _ lseS: S, _ lseT: S, _ v: Int
) -> S {
    var acc = SIMD16<S>()
    var j = 0
    let shift = lseT - lseS  // log p − log q = (t − s) − shift
    while j + 16 <= v {
        let qv = load16(q + j), pv = load16(p + j), diff = load16(t + j) - load16(s + j) - shift
        switch kind {
        case .forward: acc += pv * diff
        case .reverse: acc -= qv * diff
        case .tvd:
            var a = qv - pv
            a.replace(with: -a, where: a .< 0)
            acc += a
        }
        j += 16
    }
    var total = acc.sum()
    while j < v {
        let diff = t[j] - s[j] - shift
        switch kind {
        case .forward: total += p[j] * diff
        case .reverse: total -= q[j] * diff
        case .tvd: total += abs(q[j] - p[j])
        }
        j += 1
    }
    return kind == .tvd ? total / 2 : total
}

/// Mean cross-entropy over kept rows of logits [N,V]; no kept rows gives 0 with zero gradient.
public func crossEntropy(logits: Tensor, targets: [Int], mask: [Bool]? = nil) -> Tensor {
    Ops.crossEntropy(logits: logits, targets: targets, mask: mask)
}

/// Mean divergence over kept rows between student and teacher logits [N,V] (teacher constant).
public func divergence(student: Tensor, teacher: Tensor, kind: Divergence, mask: [Bool]? = nil) -> Tensor {
    Ops.divergence(student: student, teacher: teacher, kind: kind, mask: mask)
}
