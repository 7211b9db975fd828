// Causal self-attention with grouped-query heads and segment (packing) masks, flash-style:
// (segment id `sharedSegment` marks a prefix that every later token of its row sees, so one
// copy of a prompt prefix common to several samples serves all of them)
// query rows go in blocks of `blockRows`, each block multiplies only the keys some row of it can
// see: ascending runs of keys up to its last row (the shared prefix and the block's own segments;
// other samples packed in between cost nothing), so future blocks cost nothing either.
// Memory choice: forward saves one log-sum-exp per (batch, head, row) instead of the [T,T]
// probabilities, and backward recomputes them block by block (one extra QKᵀ product).
// A sliding window (Gemma 3's local layers) masks the keys `window` or more positions back.
// Leaves out ALiBi. Follows FlashAttention-2 (Dao, 2023), Algorithm 2.
import Foundation

/// The segment id of tokens every later token of the same row may attend to, whatever its own
/// segment: a prompt prefix shared by the samples packed after it.
public let sharedSegment: Int32 = -1

extension Ops {
    /// Query rows per block (keys per block = the visible prefix of the batch row).
    static let attentionBlockRows = 128

    /// q [B·T, H·hd], k, v [B·T, K·hd] -> [B·T, H·hd]. Query head h reads kv head h/(H/K).
    /// Row i sees row j iff same batch row, j ≤ i, and segmentIds (if any) agree or j's is
    /// `sharedSegment`. `scale` is s (nil: 1/√hd). With `window`, row i also needs
    /// positions[i] − positions[j] < window (positions: the rows' RoPE positions, nil: 0..<T per row).
    /// With P = softmax(s·QKᵀ), O = PV:  dV = Pᵀ dO, dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O)),
    /// dQ = s·dS K, dK = s·dSᵀ Q.
    static func causalAttention<S>(
        q: TensorOf<S>, k: TensorOf<S>, v: TensorOf<S>, batch: Int, heads: Int, kvHeads: Int, segmentIds: [Int32]? = nil,
        scale givenScale: Float? = nil, window: Int? = nil, positions: [Int]? = nil, blockRows: Int = attentionBlockRows
    ) -> TensorOf<S> {
        precondition(q.shape.count == 2 && k.shape.count == 2 && v.shape.count == 2, "[causalAttention] q, k, v must be 2-D: q \(q.shape), k \(k.shape), v \(v.shape)")
        precondition(heads > 0 && kvHeads > 0 && heads % kvHeads == 0, "[causalAttention] heads \(heads) must be a positive multiple of kvHeads \(kvHeads)")
        let rows = q.shape[0]
        precondition(batch > 0 && rows % batch == 0, "[causalAttention] rows \(rows) of q \(q.shape) not divisible by batch \(batch)")
        precondition(q.shape[1] % heads == 0, "[causalAttention] q width of \(q.shape) not divisible by heads \(heads)")
        let hd = q.shape[1] / heads
        precondition(k.shape == [rows, kvHeads * hd] && v.shape == k.shape, "[causalAttention] k, v must be [\(rows), \(kvHeads * hd)]: q \(q.shape) vs k \(k.shape), v \(v.shape)")
        if let segmentIds { precondition(segmentIds.count == rows, "[causalAttention] segmentIds count \(segmentIds.count) vs q \(q.shape)") }
        if let positions { precondition(positions.count == rows, "[causalAttention] positions count \(positions.count) vs q \(q.shape)") }
        if let window { precondition(window > 0, "[causalAttention] window \(window) must be positive") }
        let t = rows / batch, group = heads / kvHeads
        let qw = heads * hd, kw = kvHeads * hd
        let scale = givenScale.map { S(Double($0)) } ?? S(1 / Double(hd).squareRoot())
        let blocks = (t + blockRows - 1) / blockRows

        // Keys each query block (b, blk) multiplies: ascending runs of the keys up to its last row
        // that some row of the block can see (all of them without segment ids). A block's score
        // columns are its runs side by side (run r starts at column r.column; keyColumns in all),
        // so the keys row i can see by position (≤ i) are a prefix of the columns, and a key
        // masked for every row of the block costs nothing.
        var keyRuns = [[(keys: Range<Int>, column: Int)]](repeating: [], count: batch * blocks)
        var keyColumns = [Int](repeating: 0, count: batch * blocks)
        for b in 0..<batch {
            for blk in 0..<blocks {
                let end = min(t, (blk + 1) * blockRows)
                var runs: [Range<Int>] = []
                if let segmentIds {
                    var own: [Int32] = [sharedSegment]
                    for i in (blk * blockRows)..<end where !own.contains(segmentIds[b * t + i]) { own.append(segmentIds[b * t + i]) }
                    var runStart = -1
                    for j in 0..<end {
                        let seen = own.contains(segmentIds[b * t + j])
                        if seen && runStart < 0 { runStart = j }
                        if !seen && runStart >= 0 { runs.append(runStart..<j); runStart = -1 }
                    }
                    if runStart >= 0 { runs.append(runStart..<end) }
                } else {
                    runs = [0..<end]
                }
                var column = 0
                for r in runs { keyRuns[b * blocks + blk].append((r, column)); column += r.count }
                keyColumns[b * blocks + blk] = column
            }
        }
        /// Offset in k and v of the first key of `keys` in batch row b, kv head kvh.
        @inline(__always)
        func kvOffset(_ b: Int, _ kvh: Int, _ keys: Range<Int>) -> Int { (b * t + keys.lowerBound) * kw + kvh * hd }
        /// Score columns row i may use: the keys ≤ i of the block's runs.
        @inline(__always)
        func visibleColumns(_ runs: [(keys: Range<Int>, column: Int)], _ i: Int) -> Int {
            var n = 0
            for r in runs { n += min(r.keys.count, max(0, i + 1 - r.keys.lowerBound)) }
            return n
        }

        /// Fills scores [bq, nk] of block (b, h, blk) with probabilities; row i sees the keys ≤ i
        /// of `runs` (nk columns in all) that are in its segment or the shared one.
        /// With `recompute` it rebuilds them from the stored log-sum-exp, otherwise it stores it.
        /// Runs on the calling thread (callers parallelise over heads and query blocks).
        func probabilities(
            _ qp: UnsafePointer<S>, _ kp: UnsafePointer<S>, _ p: UnsafeMutablePointer<S>,
            _ b: Int, _ h: Int, _ i0: Int, _ bq: Int, _ runs: [(keys: Range<Int>, column: Int)], _ nk: Int,
            _ lse: UnsafeMutablePointer<S>, recompute: Bool
        ) {
            let kvh = h / group
            for (r, c0) in runs {
                S.gemmOnThisThread(transA: false, transB: true, m: bq, n: r.count, k: hd, alpha: scale,
                                   a: qp + (b * t + i0) * qw + h * hd, lda: qw, b: kp + kvOffset(b, kvh, r), ldb: kw,
                                   beta: 0, c: p + c0, ldc: nk)  // [bq, run]
            }
            for row in 0..<bq {
                let i = i0 + row, visible = visibleColumns(runs, i)
                let pr = p + row * nk
                if let segmentIds {
                    let own = segmentIds[b * t + i]
                    var col = 0
                    for (r, _) in runs where r.lowerBound <= i {
                        for j in r.lowerBound..<min(r.upperBound, i + 1) {
                            let sj = segmentIds[b * t + j]
                            if sj != own && sj != sharedSegment { pr[col] = -S.infinity }
                            col += 1
                        }
                    }
                }
                if let window {  // keys `window` or more positions back are out of the window
                    let pi = positions?[b * t + i] ?? i
                    var col = 0
                    for (r, _) in runs where r.lowerBound <= i {
                        for j in r.lowerBound..<min(r.upperBound, i + 1) {
                            if pi - (positions?[b * t + j] ?? j) >= window { pr[col] = -S.infinity }
                            col += 1
                        }
                    }
                }
                let li = lse + (b * heads + h) * t + i
                if recompute {
                    let shift = li.pointee
                    kMap(visible, pr, pr) { S.expVector($0 - shift) }
                } else {
                    li.pointee = kSoftmaxRow(pr, pr, visible)
                }
                for j in visible..<nk { pr[j] = 0 }
            }
        }

        // Forward work goes to threads by (batch row, head, query block): each task writes its own
        // output rows and log-sum-exps, so the bits do not depend on the thread count. Larger
        // blocks (more visible keys) come first so the last tasks to start are the short ones.
        let scratchCount = min(blockRows, t) * t
        var lse = [S](repeating: 0, count: batch * heads * t)
        let out: [S] = makeArray(rows * qw) { o in
            q.data.withUnsafeBufferPointer { qp in
                k.data.withUnsafeBufferPointer { kp in
                    v.data.withUnsafeBufferPointer { vp in
                        lse.withUnsafeMutableBufferPointer { lp in
                            let qp = qp.baseAddress!, kp = kp.baseAddress!, vp = vp.baseAddress!, lp = lp.baseAddress!
                            Parallel.forChunks(batch * heads * blocks, grain: 1) { _, range in
                                let p = UnsafeMutablePointer<S>.allocate(capacity: scratchCount)
                                defer { p.deallocate() }
                                for task in range {
                                    let blk = blocks - 1 - task % blocks, bh = task / blocks
                                    let b = bh / heads, h = bh % heads, kvh = h / group
                                    let i0 = blk * blockRows, bq = min(blockRows, t - i0)
                                    let runs = keyRuns[b * blocks + blk], nk = keyColumns[b * blocks + blk]
                                    probabilities(qp, kp, p, b, h, i0, bq, runs, nk, lp, recompute: false)
                                    for (r, c0) in runs {  // O[bq, hd] = Σ over runs of P[:, run] · V[run]
                                        S.gemmOnThisThread(transA: false, transB: false, m: bq, n: hd, k: r.count, alpha: 1,
                                                           a: p + c0, lda: nk, b: vp + kvOffset(b, kvh, r), ldb: kw,
                                                           beta: c0 == 0 ? 0 : 1, c: o + (b * t + i0) * qw + h * hd, ldc: qw)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        let outShape = [rows, qw]  // [B·T, H·hd]
        guard recording(q, k, v) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [q, k, v]) { dOut in
            let needQK = q.requiresGrad || k.requiresGrad
            // Fresh accumulators, added to the inputs' grads at the end (q, k, v may alias).
            // Backward work goes to threads by (batch row, head, part): the query blocks of a head
            // are split into `parts` sets of about equal work (fixed by the shapes), so that 9 heads
            // keep 2 cores busy to the end. dQ rows belong to one block; dK/dV are shared by the
            // `group` heads of a kv head and by the parts, so each (head, part) accumulates its own
            // [B·T, hd] partial (laid out like q) and the partials are summed in a fixed order after.
            let parts = blocks >= 2 ? 2 : 1
            var blockPart = [Int](repeating: 0, count: batch * blocks)
            for b in 0..<batch where parts > 1 {
                var load = [Int](repeating: 0, count: parts)
                for blk in (0..<blocks).reversed() {  // largest first, each to the lighter part
                    let bq = min(blockRows, t - blk * blockRows), nk = keyColumns[b * blocks + blk]
                    let p = load.indices.min { load[$0] < load[$1] }!
                    blockPart[b * blocks + blk] = p
                    load[p] += bq * nk
                }
            }
            var dq = [S](repeating: 0, count: needQK ? q.count : 0)
            var dk = [S](repeating: 0, count: needQK ? parts * q.count : 0)  // per-(part, head) partials [parts, B·T, H·hd]
            var dv = [S](repeating: 0, count: v.requiresGrad ? parts * q.count : 0)
            q.data.withUnsafeBufferPointer { qp in
            k.data.withUnsafeBufferPointer { kp in
            v.data.withUnsafeBufferPointer { vp in
            out.withUnsafeBufferPointer { op in
            lse.withUnsafeMutableBufferPointer { lp in
            dq.withUnsafeMutableBufferPointer { dqp in
            dk.withUnsafeMutableBufferPointer { dkp in
            dv.withUnsafeMutableBufferPointer { dvp in
                let qp = qp.baseAddress!, kp = kp.baseAddress!, vp = vp.baseAddress!, op = op.baseAddress!
                let lp = lp.baseAddress!, go = dOut.baseAddress!
                let dqp = needQK ? dqp.baseAddress : nil, dkp = needQK ? dkp.baseAddress : nil
                let dvp = v.requiresGrad ? dvp.baseAddress : nil
                Parallel.forChunks(batch * heads * parts, grain: 1) { _, range in
                    let p = UnsafeMutablePointer<S>.allocate(capacity: scratchCount)
                    let ds = UnsafeMutablePointer<S>.allocate(capacity: scratchCount)
                    defer { p.deallocate(); ds.deallocate() }
                    for task in range {
                        let part = task % parts, b = task / parts / heads, h = task / parts % heads, kvh = h / group
                        for blk in 0..<blocks where blockPart[b * blocks + blk] == part {
                            let i0 = blk * blockRows, bq = min(blockRows, t - i0)
                            let runs = keyRuns[b * blocks + blk], nk = keyColumns[b * blocks + blk]
                            let qOff = (b * t + i0) * qw + h * hd
                            // a run's rows in this (part, head)'s dK/dV partial (laid out like q)
                            func partial(_ r: Range<Int>) -> Int { part * rows * qw + (b * t + r.lowerBound) * qw + h * hd }
                            probabilities(qp, kp, p, b, h, i0, bq, runs, nk, lp, recompute: true)
                            if let dvp {  // dV[run, hd] += P[:, run]ᵀ dO
                                for (r, c0) in runs {
                                    S.gemmOnThisThread(transA: true, transB: false, m: r.count, n: hd, k: bq, alpha: 1,
                                                       a: p + c0, lda: nk, b: go + qOff, ldb: qw, beta: 1, c: dvp + partial(r), ldc: qw)
                                }
                            }
                            guard needQK, let dqp, let dkp else { continue }
                            for (r, c0) in runs {  // dP[:, run] = dO V[run]ᵀ
                                S.gemmOnThisThread(transA: false, transB: true, m: bq, n: r.count, k: hd, alpha: 1,
                                                   a: go + qOff, lda: qw, b: vp + kvOffset(b, kvh, r), ldb: kw, beta: 0, c: ds + c0, ldc: nk)
                            }
                            for row in 0..<bq {
                                let i = i0 + row, visible = visibleColumns(runs, i)
                                let dot = kDot(go + qOff + row * qw, op + qOff + row * qw, hd)
                                let dr = ds + row * nk, pr = p + row * nk
                                kMap2(visible, pr, dr, dr) { $0 * ($1 - dot) }  // dS = P ⊙ (dP − D)
                                for j in visible..<nk { dr[j] = 0 }
                            }
                            // dQ[bq, hd] += s·dS[:, run] K[run];  dK[run, hd] += s·dS[:, run]ᵀ Q
                            for (r, c0) in runs {
                                S.gemmOnThisThread(transA: false, transB: false, m: bq, n: hd, k: r.count, alpha: scale,
                                                   a: ds + c0, lda: nk, b: kp + kvOffset(b, kvh, r), ldb: kw, beta: 1, c: dqp + qOff, ldc: qw)
                                S.gemmOnThisThread(transA: true, transB: false, m: r.count, n: hd, k: bq, alpha: scale,
                                                   a: ds + c0, lda: nk, b: qp + qOff, ldb: qw, beta: 1, c: dkp + partial(r), ldc: qw)
                            }
                        }
                    }
                }
            }}}}}}}}
            if q.requiresGrad {
                dq.withUnsafeBufferPointer { dp in q.withGrad { g in kMap2(q.count, g, dp.baseAddress!, g) { $0 + $1 } } }
            }
            // kv head c of row r gets the partials of heads c·group ..< (c+1)·group, part by part, in that order.
            for (tensor, d) in [(k, dk), (v, dv)] where tensor.requiresGrad {
                d.withUnsafeBufferPointer { dp in
                    tensor.withGrad { g in
                        let dp = dp.baseAddress!
                        Parallel.forChunks(rows, grain: Parallel.rowGrain(rowLength: kw)) { _, r in
                            for row in r {
                                for c in 0..<kvHeads {
                                    let gr = g + row * kw + c * hd
                                    for part in 0..<parts {
                                    for h in (c * group)..<((c + 1) * group) {
                                        let pr = dp + part * rows * qw + row * qw + h * hd
                                        var j = 0
                                        while j + 16 <= hd { store16(load16(gr + j) + load16(pr + j), gr + j); j += 16 }
                                        while j < hd { gr[j] += pr[j]; j += 1 }
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

/// Causal grouped-query attention over packed rows; see `Ops.causalAttention`.
/// q [B·T, H·hd], k, v [B·T, K·hd] -> [B·T, H·hd]; scores scaled by `scale` (nil: 1/√hd;
/// Granite's attention multiplier replaces it); with `window`, keys `window` or more positions
/// back are masked (`positions`: each row's position, nil: 0..<T per batch row).
public func causalAttention(
    q: Tensor, k: Tensor, v: Tensor, batch: Int, heads: Int, kvHeads: Int, segmentIds: [Int32]? = nil, scale: Float? = nil,
    window: Int? = nil, positions: [Int]? = nil
) -> Tensor {
    Ops.causalAttention(q: q, k: k, v: v, batch: batch, heads: heads, kvHeads: kvHeads, segmentIds: segmentIds, scale: scale,
                        window: window, positions: positions)
}
