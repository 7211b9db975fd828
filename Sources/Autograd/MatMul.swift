// Matrix products: matmul (2-D, and 3-D batched over a leading group dim, all four transpose
// variants) and linear (x·Wᵀ + b). Both call gemm in forward and backward; a frozen operand
// gets no gradient product at all (matmul with frozen W computes only dX).
// Leaves out broadcasting batch dims. Follows llm.c matmul_forward/matmul_backward.

/// Generic implementations of every op; the public Float functions forward here.
enum Ops {}

/// Allocates `n` elements and lets `body` initialise all of them.
@inline(__always)
func makeArray<S>(_ n: Int, _ body: (UnsafeMutablePointer<S>) -> Void) -> [S] {
    [S](unsafeUninitializedCapacity: n) { buf, initialized in
        if n > 0 { body(buf.baseAddress!) }
        initialized = n
    }
}

extension Ops {
    /// C = op(A)·op(B); [M,K]x[K,N] -> [M,N], or [G,M,K]x[G,K,N] -> [G,M,N].
    /// dop(A) = dC·op(B)ᵀ, dop(B) = op(A)ᵀ·dC (transposed back to the stored layout).
    static func matmul<S>(_ a: TensorOf<S>, _ b: TensorOf<S>, transposeA: Bool = false, transposeB: Bool = false) -> TensorOf<S> {
        let rank = a.shape.count
        precondition(
            rank == b.shape.count && (rank == 2 || rank == 3),
            "[matmul] needs two 2-D or two 3-D tensors: \(a.shape) vs \(b.shape)")
        let groups = rank == 3 ? a.shape[0] : 1
        precondition(rank == 2 || b.shape[0] == groups, "[matmul] batch dimensions differ: \(a.shape) vs \(b.shape)")
        let aRows = a.shape[rank - 2], aCols = a.shape[rank - 1]
        let bRows = b.shape[rank - 2], bCols = b.shape[rank - 1]
        let (m, k) = transposeA ? (aCols, aRows) : (aRows, aCols)
        let (k2, n) = transposeB ? (bCols, bRows) : (bRows, bCols)
        precondition(k == k2, "[matmul] inner dimensions differ: \(a.shape) vs \(b.shape)")
        let aStride = aRows * aCols, bStride = bRows * bCols, cStride = m * n
        let outShape = rank == 3 ? [groups, m, n] : [m, n]  // [G,M,N] or [M,N]
        let out: [S] = makeArray(groups * cStride) { c in
            if k == 0 { c.initialize(repeating: 0, count: groups * cStride); return }
            a.data.withUnsafeBufferPointer { ap in
                b.data.withUnsafeBufferPointer { bp in
                    for g in 0..<groups {
                        S.gemm(
                            transA: transposeA, transB: transposeB, m: m, n: n, k: k, alpha: 1,
                            a: ap.baseAddress! + g * aStride, lda: aCols, b: bp.baseAddress! + g * bStride, ldb: bCols,
                            beta: 0, c: c + g * cStride, ldc: n)
                    }
                }
            }
        }
        guard recording(a, b) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [a, b]) { dc in
            let dcp = dc.baseAddress!
            if a.requiresGrad {
                b.data.withUnsafeBufferPointer { bp in
                    a.withGrad { da in
                        for g in 0..<groups {
                            let bg = bp.baseAddress! + g * bStride, dcg = dcp + g * cStride, dag = da + g * aStride
                            if !transposeA {  // dA[M,K] = dC[M,N]·op(B)ᵀ
                                S.gemm(transA: false, transB: !transposeB, m: m, n: k, k: n, alpha: 1,
                                       a: dcg, lda: n, b: bg, ldb: bCols, beta: 1, c: dag, ldc: aCols)
                            } else {  // dA[K,M] = op(B)·dCᵀ
                                S.gemm(transA: transposeB, transB: true, m: k, n: m, k: n, alpha: 1,
                                       a: bg, lda: bCols, b: dcg, ldb: n, beta: 1, c: dag, ldc: aCols)
                            }
                        }
                    }
                }
            }
            if b.requiresGrad {
                a.data.withUnsafeBufferPointer { ap in
                    b.withGrad { db in
                        for g in 0..<groups {
                            let ag = ap.baseAddress! + g * aStride, dcg = dcp + g * cStride, dbg = db + g * bStride
                            if !transposeB {  // dB[K,N] = op(A)ᵀ·dC
                                S.gemm(transA: !transposeA, transB: false, m: k, n: n, k: m, alpha: 1,
                                       a: ag, lda: aCols, b: dcg, ldb: n, beta: 1, c: dbg, ldc: bCols)
                            } else {  // dB[N,K] = dCᵀ·op(A)
                                S.gemm(transA: true, transB: transposeA, m: n, n: k, k: m, alpha: 1,
                                       a: dcg, lda: n, b: ag, ldb: aCols, beta: 1, c: dbg, ldc: bCols)
                            }
                        }
                    }
                }
            }
        }
    }

    /// y = x·Wᵀ + b; x [..., in], weight [out, in], bias [out] -> [..., out].
    /// dx = dy·W, dW = dyᵀ·x (only if W requires grad), db = Σ_rows dy.
    static func linear<S>(_ x: TensorOf<S>, weight: TensorOf<S>, bias: TensorOf<S>? = nil) -> TensorOf<S> {
        precondition(weight.shape.count == 2, "[linear] weight must be [out, in], got \(weight.shape)")
        let outF = weight.shape[0], inF = weight.shape[1]
        precondition(
            x.shape.count >= 1 && x.shape.last == inF,
            "[linear] input features differ: x \(x.shape) vs weight \(weight.shape)")
        if let bias { precondition(bias.shape == [outF], "[linear] bias must be [\(outF)]: bias \(bias.shape) vs weight \(weight.shape)") }
        let rows = inF == 0 ? x.shape.dropLast().reduce(1, *) : x.count / inF
        let outShape = Array(x.shape.dropLast()) + [outF]  // [..., out]
        let out: [S] = makeArray(rows * outF) { y in
            if let bias {
                bias.data.withUnsafeBufferPointer { bp in
                    for r in 0..<rows { (y + r * outF).update(from: bp.baseAddress!, count: outF) }
                }
            } else if inF == 0 {
                y.initialize(repeating: 0, count: rows * outF)
            }
            if inF == 0 { return }
            x.data.withUnsafeBufferPointer { xp in
                weight.data.withUnsafeBufferPointer { wp in
                    S.gemm(transA: false, transB: true, m: rows, n: outF, k: inF, alpha: 1,
                           a: xp.baseAddress!, lda: inF, b: wp.baseAddress!, ldb: inF,
                           beta: bias == nil ? 0 : 1, c: y, ldc: outF)
                }
            }
        }
        var inputs = [x, weight]
        if let bias { inputs.append(bias) }
        guard recording(x, weight, bias) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: inputs) { dy in
            let dyp = dy.baseAddress!
            if x.requiresGrad {
                weight.data.withUnsafeBufferPointer { wp in
                    x.withGrad { dx in  // dx[N,in] += dy[N,out]·W[out,in]
                        S.gemm(transA: false, transB: false, m: rows, n: inF, k: outF, alpha: 1,
                               a: dyp, lda: outF, b: wp.baseAddress!, ldb: inF, beta: 1, c: dx, ldc: inF)
                    }
                }
            }
            if weight.requiresGrad {
                x.data.withUnsafeBufferPointer { xp in
                    weight.withGrad { dw in  // dW[out,in] += dyᵀ·x
                        S.gemm(transA: true, transB: false, m: outF, n: inF, k: rows, alpha: 1,
                               a: dyp, lda: outF, b: xp.baseAddress!, ldb: inF, beta: 1, c: dw, ldc: inF)
                    }
                }
            }
            if let bias, bias.requiresGrad {
                bias.withGrad { db in
                    for r in 0..<rows { for j in 0..<outF { db[j] += dyp[r * outF + j] } }
                }
            }
        }
    }
}

/// Matrix product [M,K]x[K,N] -> [M,N]; 3-D batched [G,M,K]x[G,K,N] -> [G,M,N].
public func matmul(_ a: Tensor, _ b: Tensor, transposeA: Bool = false, transposeB: Bool = false) -> Tensor {
    Ops.matmul(a, b, transposeA: transposeA, transposeB: transposeB)
}

/// x [N,in], weight [out,in], bias [out] -> x·Wᵀ + b [N,out].
public func linear(_ x: Tensor, weight: Tensor, bias: Tensor? = nil) -> Tensor {
    Ops.linear(x, weight: weight, bias: bias)
}
