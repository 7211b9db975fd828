// The ops preference training adds (DPO, IPO, ORPO): the output head's log-probability of each
// row's target (hidden [M, D], head W [V, D] frozen -> [M], the [M, V] logits never whole: a
// panel of vocabulary rows at a time with an online log-sum-exp, as the fused cross-entropy),
// sums of rows into sequences ([R] -> [G]), and the pair losses over sequence log-probabilities.
// Each row's gradient is linear in its upstream gradient, so forward keeps d logp / dh per row
// (W[target] − softmax·W) and backward scales it. Follows TRL's DPOTrainer (sigmoid, robust, ipo)
// and ORPOTrainer (odds ratio, log1mexp) for the formulas.
//
// Dimensions: M rows, D hidden, V vocabulary, P panel rows, R rows summed, G sequences, N pairs.
import Foundation

/// A pair loss over sequence log-probabilities (sums over each reply's target tokens).
public enum PreferenceLossKind: Sendable, Equatable, Codable {
    /// DPO: −log σ(β·Δ), Δ = (π_c − ρ_c) − (π_r − ρ_r). With label smoothing ε > 0, TRL's robust
    /// DPO: (−(1−ε)·log σ(βΔ) + ε·log σ(−βΔ)) / (1 − 2ε), ε in [0, 0.5).
    case sigmoid(beta: Double, labelSmoothing: Double)
    /// IPO: (Δ̄ − 1/(2β))², Δ̄ the log-ratio difference averaged per reply token (TRL's ipo).
    case ipo(beta: Double)
    /// ORPO: NLL of the chosen sequences − λ·mean log σ(log odds), log odds = (ā_c − ā_r) −
    /// (log(1 − e^ā_c) − log(1 − e^ā_r)), ā a reply's mean token log-probability (TRL's ORPOTrainer).
    case orpo(lambda: Double)
}

/// The scalar functions of the pair losses, in Double (shared with the metrics).
public enum PreferenceMath {
    /// log σ(x), stable for large |x|.
    public static func logSigmoid(_ x: Double) -> Double { min(x, 0) - Foundation.log1p(Foundation.exp(-abs(x))) }
    public static func sigmoid(_ x: Double) -> Double {
        x >= 0 ? 1 / (1 + Foundation.exp(-x)) : Foundation.exp(x) / (1 + Foundation.exp(x))
    }
    /// log(1 − e^x) for x < 0, as TRL's log1mexp (branch at −ln 2).
    public static func log1mexp(_ x: Double) -> Double {
        x < -0.6931471805599453 ? Foundation.log1p(-Foundation.exp(x)) : Foundation.log(-Foundation.expm1(x))
    }
}

extension Ops {
    /// log softmax(h·Wᵀ)[target] per row: hidden [M, D], a frozen W of `vocabulary` rows whose
    /// panels `unpack` writes ([rows, D] into the buffer) -> [M].
    static func tokenLogProbs<S>(hidden: TensorOf<S>, vocabulary v: Int, targets: [Int],
                                 unpack: (Range<Int>, UnsafeMutablePointer<S>) -> Void) -> TensorOf<S> {
        precondition(hidden.shape.count == 2, "[tokenLogProbs] hidden must be [M, D], got \(hidden.shape)")
        let m = hidden.shape[0], d = hidden.shape[1]
        precondition(targets.count == m, "[tokenLogProbs] targets count \(targets.count) vs hidden \(hidden.shape)")
        for (r, t) in targets.enumerated() { precondition(t >= 0 && t < v, "[tokenLogProbs] target \(t) at row \(r) out of range for vocabulary \(v)") }
        let needDH = recording(hidden)
        let p = headPanelRows(vocabulary: v, hidden: d)
        var rowMax = [S](repeating: -.infinity, count: m), rowSum = [S](repeating: 0, count: m)
        var zTarget = [S](repeating: 0, count: m)
        var acc = [S](repeating: 0, count: needDH ? m * d : 0)  // Σ e^(z − max)·W_v per row
        var targetRows = [S](repeating: 0, count: needDH ? m * d : 0)  // W[target] per row
        let panel = UnsafeMutablePointer<S>.allocate(capacity: p * d)
        let z = UnsafeMutablePointer<S>.allocate(capacity: max(1, m * p))
        defer { panel.deallocate(); z.deallocate() }
        let grain = Parallel.rowGrain(rowLength: p)
        hidden.data.withUnsafeBufferPointer { hp in
        rowMax.withUnsafeMutableBufferPointer { mx in
        rowSum.withUnsafeMutableBufferPointer { sm in
        zTarget.withUnsafeMutableBufferPointer { zt in
        acc.withUnsafeMutableBufferPointer { ac in
        targetRows.withUnsafeMutableBufferPointer { tr in
            guard m > 0 else { return }
            let h = hp.baseAddress!
            var v0 = 0
            while v0 < v {
                let rows = min(p, v - v0)
                unpack(v0..<(v0 + rows), panel)
                S.gemm(transA: false, transB: true, m: m, n: rows, k: d, alpha: 1, a: h, lda: d, b: panel, ldb: d, beta: 0, c: z, ldc: rows)
                Parallel.forChunks(m, grain: grain) { _, range in
                    for i in range {
                        let zr = z + i * rows
                        let t = targets[i] - v0
                        if t >= 0 && t < rows {
                            zt[i] = zr[t]
                            if needDH { (tr.baseAddress! + i * d).update(from: panel + t * d, count: d) }
                        }
                        let newMax = max(mx[i], kMax(zr, rows))
                        let rescale = S.exp(mx[i] - newMax)  // 0 for the first panel
                        var sum16 = SIMD16<S>()
                        var j = 0
                        while j + 16 <= rows {
                            let e = S.expVector(load16(zr + j) - newMax)
                            if needDH { store16(e, zr + j) }
                            sum16 += e
                            j += 16
                        }
                        var total = sum16.sum()
                        while j < rows {
                            let e = S.exp(zr[j] - newMax)
                            if needDH { zr[j] = e }
                            total += e
                            j += 1
                        }
                        if needDH && rescale != 1 { let a = ac.baseAddress! + i * d; for c in 0..<d { a[c] *= rescale } }
                        sm[i] = sm[i] * rescale + total
                        mx[i] = newMax
                    }
                }
                if needDH {  // acc[M, D] += e[M, P] · W_panel[P, D]
                    S.gemm(transA: false, transB: false, m: m, n: d, k: rows, alpha: 1, a: z, lda: rows, b: panel, ldb: d,
                           beta: 1, c: ac.baseAddress!, ldc: d)
                }
                v0 += rows
            }
            guard needDH else { return }
            // d logp / dh = W[target] − acc/sum, in place in acc
            Parallel.forChunks(m, grain: Parallel.rowGrain(rowLength: d)) { _, range in
                for i in range {
                    let a = ac.baseAddress! + i * d, t = tr.baseAddress! + i * d
                    let s = 1 / sm[i]
                    for c in 0..<d { a[c] = t[c] - a[c] * s }
                }
            }
        }}}}}}
        let out = (0..<m).map { zTarget[$0] - rowMax[$0] - S.log(rowSum[$0]) }
        guard needDH else { return TensorOf(result: [m], data: out, inputs: [], backward: nil) }
        let dHidden = acc
        return TensorOf(result: [m], data: out, inputs: [hidden]) { g in
            hidden.withGrad { dx in
                for i in 0..<m where g[i] != 0 {
                    let gi = g[i]
                    for c in 0..<d { dx[i * d + c] += gi * dHidden[i * d + c] }
                }
            }
        }
    }

    /// out[g] = Σ x[r] over the rows with segments[r] == g (rows with −1 left out). x [R] -> [count].
    static func segmentSums<S>(_ x: TensorOf<S>, segments: [Int], count: Int) -> TensorOf<S> {
        precondition(x.shape == [segments.count], "[segmentSums] x \(x.shape) vs \(segments.count) segment ids")
        precondition(segments.allSatisfy { $0 >= -1 && $0 < count }, "[segmentSums] a segment id is outside -1..<\(count)")
        var out = [S](repeating: 0, count: count)
        for (r, s) in segments.enumerated() where s >= 0 { out[s] += x.data[r] }
        return TensorOf(result: [count], data: out, inputs: [x]) { g in
            x.withGrad { dx in for (r, s) in segments.enumerated() where s >= 0 { dx[r] += g[s] } }
        }
    }

    static func logSigmoid(_ x: Double) -> Double { PreferenceMath.logSigmoid(x) }
    static func sigmoid(_ x: Double) -> Double { PreferenceMath.sigmoid(x) }
    static func log1mexp(_ x: Double) -> Double { PreferenceMath.log1mexp(x) }

    /// The pair loss summed over this batch's N pairs and divided by `pairDivisor` (the pairs of
    /// the whole batch this is a part of). `policy` [2N]: chosen and rejected sequence log-probs
    /// per pair (c0, r0, c1, r1, ...); `reference` [2N] the same under the reference (DPO, IPO);
    /// `lengths` [2N] reply target tokens; ORPO: `nll` [N] the chosen sequences' log-probs over
    /// all their positions, whose negated sum is divided by `nllDivisor` (tokens of the whole batch).
    /// `chosenWeight` (RPO: α over the whole batch's chosen reply tokens) adds −chosenWeight times
    /// each chosen sequence's log-prob: the chosen replies' cross-entropy as a token mean.
    /// Computed in Double whatever S is.
    static func preferenceLoss<S>(policy: TensorOf<S>, reference: [Double]?, lengths: [Int], nll: TensorOf<S>?,
                                  nllDivisor: Double, pairDivisor: Double, kind: PreferenceLossKind,
                                  chosenWeight: Double = 0) -> TensorOf<S> {
        let n = policy.count / 2
        precondition(policy.shape == [2 * n] && lengths.count == 2 * n, "[preferenceLoss] policy \(policy.shape), lengths \(lengths.count): need [2N] each")
        var gPolicy = [Double](repeating: 0, count: 2 * n)
        var gNLL = [Double](repeating: 0, count: n)
        var total = 0.0
        for k in 0..<n {
            let pc = Double(policy.data[2 * k]), pr = Double(policy.data[2 * k + 1])
            switch kind {
            case let .sigmoid(beta, eps):
                guard let ref = reference else { preconditionFailure("[preferenceLoss] DPO needs reference log-probs") }
                let u = beta * ((pc - ref[2 * k]) - (pr - ref[2 * k + 1]))
                total += (-(1 - eps) * logSigmoid(u) + eps * logSigmoid(-u)) / (1 - 2 * eps)
                let du = (-(1 - eps) * sigmoid(-u) - eps * sigmoid(u)) / (1 - 2 * eps)
                gPolicy[2 * k] = beta * du
                gPolicy[2 * k + 1] = -beta * du
            case let .ipo(beta):
                guard let ref = reference else { preconditionFailure("[preferenceLoss] IPO needs reference log-probs") }
                let nc = Double(max(1, lengths[2 * k])), nr = Double(max(1, lengths[2 * k + 1]))
                let diff = (pc - ref[2 * k]) / nc - (pr - ref[2 * k + 1]) / nr - 1 / (2 * beta)
                total += diff * diff
                gPolicy[2 * k] = 2 * diff / nc
                gPolicy[2 * k + 1] = -2 * diff / nr
            case let .orpo(lambda):
                let nc = Double(lengths[2 * k]), nr = Double(lengths[2 * k + 1])
                let ac = pc / nc, ar = pr / nr
                let odds = (ac - ar) - (log1mexp(ac) - log1mexp(ar))
                total -= lambda * logSigmoid(odds)
                // d odds / d ā = 1 / (1 − e^ā) for the chosen, −1 / (1 − e^ā) for the rejected
                let s = -lambda * sigmoid(-odds)
                gPolicy[2 * k] = s / (-Foundation.expm1(ac)) / nc
                gPolicy[2 * k + 1] = -s / (-Foundation.expm1(ar)) / nr
            }
        }
        total /= pairDivisor
        for i in gPolicy.indices { gPolicy[i] /= pairDivisor }
        if chosenWeight != 0 {
            for k in 0..<n {
                total -= chosenWeight * Double(policy.data[2 * k])
                gPolicy[2 * k] -= chosenWeight
            }
        }
        var inputs = [policy]
        if case .orpo = kind {
            guard let nll else { preconditionFailure("[preferenceLoss] ORPO needs the chosen sequences' log-probs") }
            precondition(nll.shape == [n], "[preferenceLoss] nll \(nll.shape) vs \(n) pairs")
            for k in 0..<n {
                total -= Double(nll.data[k]) / nllDivisor
                gNLL[k] = -1 / nllDivisor
            }
            inputs.append(nll)
        }
        return TensorOf(result: [], data: [S(total)], inputs: inputs) { g in
            let scale = Double(g[0])
            policy.withGrad { dp in for i in 0..<(2 * n) { dp[i] += S(gPolicy[i] * scale) } }
            if let nll, nll.requiresGrad { nll.withGrad { dn in for k in 0..<n { dn[k] += S(gNLL[k] * scale) } } }
        }
    }
}

/// log p(target) of each row under the output head h·Wᵀ, W [V, D] a constant tensor: [M, D] -> [M].
public func linearLogProbs(hidden: Tensor, weight: Tensor, targets: [Int]) -> Tensor {
    precondition(!weight.requiresGrad, "[linearLogProbs] the head must be frozen (it has no gradient here)")
    let d = weight.shape[1]
    return weight.data.withUnsafeBufferPointer { w in
        Ops.tokenLogProbs(hidden: hidden, vocabulary: weight.shape[0], targets: targets) { rows, out in
            out.update(from: w.baseAddress! + rows.lowerBound * d, count: rows.count * d)
        }
    }
}

/// log p(target) of each row under a frozen head kept as stored: [M, D] -> [M].
public func linearLogProbs(hidden: Tensor, frozen w: FrozenLinearWeight, targets: [Int]) -> Tensor {
    Ops.tokenLogProbs(hidden: hidden, vocabulary: w.rows, targets: targets) { rows, out in w.unpackRows(rows, into: out) }
}

/// Sums of rows of x [R] into `count` groups (segment −1: left out).
public func segmentSums(_ x: Tensor, segments: [Int], count: Int) -> Tensor { Ops.segmentSums(x, segments: segments, count: count) }

/// The pair loss (see `Ops.preferenceLoss`).
public func preferenceLoss(policy: Tensor, reference: [Double]?, lengths: [Int], nll: Tensor?, nllDivisor: Double,
                           pairDivisor: Double, kind: PreferenceLossKind, chosenWeight: Double = 0) -> Tensor {
    Ops.preferenceLoss(policy: policy, reference: reference, lengths: lengths, nll: nll, nllDivisor: nllDivisor,
                       pairDivisor: pairDivisor, kind: kind, chosenWeight: chosenWeight)
}
