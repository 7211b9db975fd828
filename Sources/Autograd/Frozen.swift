// Frozen weights the ops multiply by without a tensor of them: a base weight kept as its file
// stores it (GGUF blocks) is unpacked a panel at a time by its owner, so no float32 copy of it
// ever exists, and it never has a gradient. The ops: linear (and the LoRA op's base product),
// embedding lookup, and the output head fused with cross-entropy, a panel of vocabulary rows at
// a time with an online log-sum-exp. Float only. Follows Liger-Kernel's fused linear
// cross-entropy and QLoRA's frozen quantized base.
//
// Dimensions: N rows, D hidden (in), O out, V vocabulary, P panel rows, M loss rows.
import Foundation

/// A frozen weight matrix [rows = out, columns = in] held by someone else (ModelDefinition's
/// FrozenMatrix). The methods run on every core; their bits do not depend on the thread count.
public protocol FrozenLinearWeight: Sendable {
    var rows: Int { get }
    var columns: Int { get }
    /// y[i·ldy + o] = Σ_c x[i·columns + c]·W[o, c] for i < m, o < rows.
    func multiply(_ x: UnsafePointer<Float>, m: Int, into y: UnsafeMutablePointer<Float>, ldy: Int)
    /// dx[i·ldx + c] += Σ_o dy[i·ldDy + o]·W[o, c] for i < m, c < columns.
    func multiplyAccumulate(_ dy: UnsafePointer<Float>, m: Int, ldDy: Int, into dx: UnsafeMutablePointer<Float>, ldx: Int)
    /// Rows `r` as float32 ([r.count, columns]) into `out`, on every core.
    func unpackRows(_ r: Range<Int>, into out: UnsafeMutablePointer<Float>)
}

/// What a linear op multiplies its input by: a weight tensor (which may train) or a frozen matrix.
enum LinearBase<S: TensorScalar> {
    case tensor(TensorOf<S>)
    case frozen(FrozenLinearWeight)

    var dimensions: (out: Int, in: Int) {
        switch self {
        case .tensor(let w):
            precondition(w.shape.count == 2, "[linear] weight must be [out, in], got \(w.shape)")
            return (w.shape[0], w.shape[1])
        case .frozen(let w): return (w.rows, w.columns)
        }
    }

    var tensor: TensorOf<S>? {
        if case .tensor(let w) = self { return w }
        return nil
    }

    /// y[N, out] = x·Wᵀ, or y += x·Wᵀ with `accumulate`.
    func forward(_ x: UnsafePointer<S>, rows: Int, into y: UnsafeMutablePointer<S>, accumulate: Bool) {
        let (outF, inF) = dimensions
        switch self {
        case .tensor(let w):
            w.data.withUnsafeBufferPointer { wp in
                S.gemm(transA: false, transB: true, m: rows, n: outF, k: inF, alpha: 1, a: x, lda: inF,
                       b: wp.baseAddress!, ldb: inF, beta: accumulate ? 1 : 0, c: y, ldc: outF)
            }
        case .frozen(let w):
            precondition(S.self == Float.self, "[linear] a frozen weight multiplies Float tensors only")
            let xf = UnsafeRawPointer(x).assumingMemoryBound(to: Float.self)
            let yf = UnsafeMutableRawPointer(y).assumingMemoryBound(to: Float.self)
            guard accumulate else { return w.multiply(xf, m: rows, into: yf, ldy: outF) }
            let tmp = UnsafeMutablePointer<Float>.allocate(capacity: rows * outF)
            defer { tmp.deallocate() }
            w.multiply(xf, m: rows, into: tmp, ldy: outF)
            for i in 0..<(rows * outF) { yf[i] += tmp[i] }
        }
    }

    /// dx[N, in] += dy·W.
    func backward(_ dy: UnsafePointer<S>, rows: Int, into dx: UnsafeMutablePointer<S>) {
        let (outF, inF) = dimensions
        switch self {
        case .tensor(let w):
            w.data.withUnsafeBufferPointer { wp in
                S.gemm(transA: false, transB: false, m: rows, n: inF, k: outF, alpha: 1, a: dy, lda: outF,
                       b: wp.baseAddress!, ldb: inF, beta: 1, c: dx, ldc: inF)
            }
        case .frozen(let w):
            w.multiplyAccumulate(UnsafeRawPointer(dy).assumingMemoryBound(to: Float.self), m: rows, ldDy: outF,
                                 into: UnsafeMutableRawPointer(dx).assumingMemoryBound(to: Float.self), ldx: inF)
        }
    }
}

extension Ops {
    /// y = x·Wᵀ (+ b) with W frozen: x [N, in] -> [N, out]; dx += dy·W.
    static func frozenLinear(_ x: Tensor, weight w: FrozenLinearWeight, bias: Tensor?) -> Tensor {
        let base = LinearBase<Float>.frozen(w)
        precondition(x.shape.last == w.columns, "[frozenLinear] input \(x.shape) vs weight [\(w.rows), \(w.columns)]")
        let rows = w.columns == 0 ? 0 : x.count / w.columns
        let outShape = Array(x.shape.dropLast()) + [w.rows]  // [N, out]
        let out: [Float] = makeArray(rows * w.rows) { y in
            x.data.withUnsafeBufferPointer { base.forward($0.baseAddress!, rows: rows, into: y, accumulate: false) }
            if let bias {
                bias.data.withUnsafeBufferPointer { bp in
                    for i in 0..<rows { for j in 0..<w.rows { y[i * w.rows + j] += bp[j] } }
                }
            }
        }
        guard recording(x, bias) else { return Tensor(result: outShape, data: out, inputs: [], backward: nil) }
        return Tensor(result: outShape, data: out, inputs: bias.map { [x, $0] } ?? [x]) { dy in
            if x.requiresGrad { x.withGrad { dx in base.backward(dy.baseAddress!, rows: rows, into: dx) } }
            if let bias, bias.requiresGrad {
                bias.withGrad { db in for i in 0..<rows { for j in 0..<w.rows { db[j] += dy[i * w.rows + j] } } }
            }
        }
    }

    /// Rows of a frozen table: [V, D], ids [N] -> [N, D], a constant (the table has no gradient).
    static func frozenEmbedding(_ table: FrozenLinearWeight, ids: [Int]) -> Tensor {
        let d = table.columns
        for id in ids { precondition(id >= 0 && id < table.rows, "[embedding] id \(id) out of range for table [\(table.rows), \(d)]") }
        let out: [Float] = makeArray(ids.count * d) { y in
            for (n, id) in ids.enumerated() { table.unpackRows(id..<(id + 1), into: y + n * d) }
        }
        return Tensor(result: [ids.count, d], data: out, inputs: [], backward: nil)
    }

    /// Vocabulary rows per panel of the frozen head: about 4 MiB of float32.
    static func headPanelRows(vocabulary v: Int, hidden d: Int) -> Int { max(16, min(v, (1 << 20) / max(d, 1) / 16 * 16)) }

    /// Mean next-token cross-entropy of h·Wᵀ with W frozen, hidden [M, D], W [V, D]. The [M, V]
    /// logits never exist and every panel of P vocabulary rows is unpacked and multiplied once:
    /// each panel's logits fold into a running max and sum of exponentials per row (an online
    /// log-sum-exp), and, with a gradient, into a running Σ e^(z − max)·W_v per row, rescaled
    /// whenever the row's max grows (online softmax). At the end dh = (acc/sum − W[target])/M.
    /// No logit is computed twice (as in `linearCrossEntropy` over a weight tensor).
    static func frozenLinearCrossEntropy(hidden: Tensor, weight w: FrozenLinearWeight, targets: [Int]) -> Tensor {
        precondition(hidden.shape.count == 2 && hidden.shape[1] == w.columns,
                     "[linearCrossEntropy] hidden must be [M,D] with D = \(w.columns): hidden \(hidden.shape)")
        let m = hidden.shape[0], d = w.columns, v = w.rows
        precondition(targets.count == m, "[linearCrossEntropy] targets count \(targets.count) vs hidden \(hidden.shape)")
        for (r, t) in targets.enumerated() { precondition(t >= 0 && t < v, "[linearCrossEntropy] target \(t) at row \(r) out of range for vocabulary \(v)") }
        let needDH = recording(hidden)
        let factor: Float = m == 0 ? 0 : 1 / Float(m)
        let p = headPanelRows(vocabulary: v, hidden: d)
        var rowMax = [Float](repeating: -.infinity, count: m), rowSum = [Float](repeating: 0, count: m)
        var zTarget = [Float](repeating: 0, count: m)
        var acc = [Float](repeating: 0, count: needDH ? m * d : 0)  // Σ e^(z − max)·W_v per row
        var targetRows = [Float](repeating: 0, count: needDH ? m * d : 0)  // W[target] per row
        let panel = UnsafeMutablePointer<Float>.allocate(capacity: p * d)
        let z = UnsafeMutablePointer<Float>.allocate(capacity: max(1, m * p))
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
                w.unpackRows(v0..<(v0 + rows), into: panel)
                BLAS.sgemm(transA: false, transB: true, m: m, n: rows, k: d, alpha: 1, a: h, lda: d, b: panel, ldb: d, beta: 0, c: z, ldc: rows)
                Parallel.forChunks(m, grain: grain) { _, range in
                    for i in range {
                        let zr = z + i * rows
                        let t = targets[i] - v0
                        if t >= 0 && t < rows {
                            zt[i] = zr[t]
                            if needDH { (tr.baseAddress! + i * d).update(from: panel + t * d, count: d) }
                        }
                        let newMax = max(mx[i], kMax(zr, rows))
                        let rescale = Foundation.exp(mx[i] - newMax)  // 0 for the first panel
                        var total = SIMD16<Float>()
                        var j = 0
                        if needDH {  // keep e = exp(z − max) for acc += e·W_panel
                            while j + 16 <= rows { let e = Float.expVector(load16(zr + j) - newMax); store16(e, zr + j); total += e; j += 16 }
                            while j < rows { zr[j] = Foundation.exp(zr[j] - newMax); total[0] += zr[j]; j += 1 }
                            if rescale != 1 { let a = ac.baseAddress! + i * d; for c in 0..<d { a[c] *= rescale } }
                        } else {
                            while j + 16 <= rows { total += Float.expVector(load16(zr + j) - newMax); j += 16 }
                            while j < rows { total[0] += Foundation.exp(zr[j] - newMax); j += 1 }
                        }
                        sm[i] = sm[i] * rescale + total.sum()
                        mx[i] = newMax
                    }
                }
                if needDH {  // acc[M, D] += e[M, P] · W_panel[P, D]
                    BLAS.sgemm(transA: false, transB: false, m: m, n: d, k: rows, alpha: 1, a: z, lda: rows, b: panel, ldb: d,
                               beta: 1, c: ac.baseAddress!, ldc: d)
                }
                v0 += rows
            }
            guard needDH else { return }
            // dh = (acc/sum − W[target])/M, in place in acc
            Parallel.forChunks(m, grain: Parallel.rowGrain(rowLength: d)) { _, range in
                for i in range {
                    let a = ac.baseAddress! + i * d, t = tr.baseAddress! + i * d
                    let s = factor / sm[i]
                    for c in 0..<d { a[c] = a[c] * s - t[c] * factor }
                }
            }
        }}}}}}
        var loss: Float = 0
        for i in 0..<m { loss += (rowMax[i] + Foundation.log(rowSum[i]) - zTarget[i]) * factor }
        guard needDH else { return Tensor(result: [], data: [loss], inputs: [], backward: nil) }
        let dHidden = acc
        return Tensor(result: [], data: [loss], inputs: [hidden]) { g in
            let scale = g[0]
            hidden.withGrad { dx in for i in 0..<(m * d) { dx[i] += scale * dHidden[i] } }
        }
    }
}

/// y = x·Wᵀ (+ b) with a frozen W: [N, in] -> [N, out].
public func linear(_ x: Tensor, frozen w: FrozenLinearWeight, bias: Tensor? = nil) -> Tensor {
    Ops.frozenLinear(x, weight: w, bias: bias)
}

/// y = x·Wᵀ (+ b) + scale·(xd·Aᵀ)·Bᵀ with a frozen W, xd = `loraInput` (x after dropout, or x).
public func loraLinear(_ x: Tensor, frozen w: FrozenLinearWeight, bias: Tensor?, a: Tensor, b: Tensor, scale: Float,
                       loraInput: Tensor? = nil) -> Tensor {
    Ops.loraLinear(x, base: .frozen(w), bias: bias, a: a, b: b, scale: scale, loraInput: loraInput ?? x)
}

/// Rows `ids` of a frozen table [V, D] -> [N, D] (a constant).
public func embedding(_ table: FrozenLinearWeight, ids: [Int]) -> Tensor { Ops.frozenEmbedding(table, ids: ids) }

/// Mean cross-entropy of hidden·Wᵀ against targets with a frozen head W [V, D].
public func linearCrossEntropy(hidden: Tensor, frozen w: FrozenLinearWeight, targets: [Int]) -> Tensor {
    Ops.frozenLinearCrossEntropy(hidden: hidden, weight: w, targets: targets)
}
