// LoRALinear: a frozen linear layer plus a trainable low-rank update, y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ
// with s = alpha/r. B starts at zero so step 0 equals the base layer; fused() merges the update.
// One op with a hand-written backward (no [N,out] temporaries or adds). Leaves out DoRA and rsLoRA.
// Follows PEFT's LoraLayer (init, scaling, dropout on the LoRA path) and mlx-examples' LoRALinear.
import Foundation

extension Ops {
    /// y = x·Wᵀ + b + s·(xd·Aᵀ)·Bᵀ as one op; `loraInput` (xd) is x after dropout, or x itself.
    /// Forward: y = x·Wᵀ (+ b), d = s·xd·Aᵀ [N,r], y += d·Bᵀ in place (no [N,out] temporaries).
    /// Backward from dy [N,out]: dB += dyᵀ·d, g = s·dy·B [N,r], dA += gᵀ·xd,
    /// dxd += g·A, dx += dy·W, dW += dyᵀ·x (only if W trains), db += Σ_rows dy.
    static func loraLinear<S>(
        _ x: TensorOf<S>, weight: TensorOf<S>, bias: TensorOf<S>?, a: TensorOf<S>, b: TensorOf<S>,
        scale s: S, loraInput: TensorOf<S>
    ) -> TensorOf<S> {
        loraLinear(x, base: .tensor(weight), bias: bias, a: a, b: b, scale: s, loraInput: loraInput)
    }

    /// As above over either base: a weight tensor (which may train) or a frozen matrix
    /// multiplied without a tensor of it (Float only; it never has a gradient).
    static func loraLinear<S>(
        _ x: TensorOf<S>, base: LinearBase<S>, bias: TensorOf<S>?, a: TensorOf<S>, b: TensorOf<S>,
        scale s: S, loraInput: TensorOf<S>
    ) -> TensorOf<S> {
        let (outF, inF) = base.dimensions
        let weight = base.tensor
        let shapeText = weight.map { "\($0.shape)" } ?? "frozen [\(outF), \(inF)]"
        precondition(a.shape.count == 2 && a.shape[1] == inF, "[LoRALinear] A must be [r, in]: A \(a.shape) vs weight \(shapeText)")
        let r = a.shape[0]
        precondition(b.shape == [outF, r], "[LoRALinear] B must be [out, r]: B \(b.shape) vs A \(a.shape), weight \(shapeText)")
        precondition(x.shape.last == inF && loraInput.shape == x.shape, "[LoRALinear] input must be [..., \(inF)] (and loraInput alike): x \(x.shape), loraInput \(loraInput.shape)")
        if let bias { precondition(bias.shape == [outF], "[LoRALinear] bias must be [\(outF)], got \(bias.shape)") }
        let rows = inF == 0 ? 0 : x.count / inF
        let outShape = Array(x.shape.dropLast()) + [outF]  // [N, out]
        var down = [S](repeating: 0, count: rows * r)  // s·xd·Aᵀ [N, r], kept for dB
        let out: [S] = makeArray(rows * outF) { y in
            if let bias {
                bias.data.withUnsafeBufferPointer { bp in
                    for i in 0..<rows { (y + i * outF).update(from: bp.baseAddress!, count: outF) }
                }
            }
            if rows == 0 { return }
            x.data.withUnsafeBufferPointer { xp in
            loraInput.data.withUnsafeBufferPointer { lp in
            a.data.withUnsafeBufferPointer { ap in
            b.data.withUnsafeBufferPointer { bp in
            down.withUnsafeMutableBufferPointer { dp in
                base.forward(xp.baseAddress!, rows: rows, into: y, accumulate: bias != nil)  // x·Wᵀ (+ b)
                S.gemm(transA: false, transB: true, m: rows, n: r, k: inF, alpha: s,
                       a: lp.baseAddress!, lda: inF, b: ap.baseAddress!, ldb: inF, beta: 0, c: dp.baseAddress!, ldc: r)  // d
                S.gemm(transA: false, transB: true, m: rows, n: outF, k: r, alpha: 1,
                       a: dp.baseAddress!, lda: r, b: bp.baseAddress!, ldb: r, beta: 1, c: y, ldc: outF)  // += d·Bᵀ
            }}}}}
        }
        var inputs = weight.map { [x, $0, a, b, loraInput] } ?? [x, a, b, loraInput]
        if let bias { inputs.append(bias) }
        guard recording(x, weight, bias, a, b, loraInput) else {
            return TensorOf(result: outShape, data: out, inputs: [], backward: nil)
        }
        return TensorOf(result: outShape, data: out, inputs: inputs) { dy in
            guard rows > 0 else { return }
            let dyp = dy.baseAddress!
            let needG = a.requiresGrad || loraInput.requiresGrad
            var g = [S](repeating: 0, count: needG ? rows * r : 0)  // s·dy·B [N, r]
            x.data.withUnsafeBufferPointer { xp in
            loraInput.data.withUnsafeBufferPointer { lp in
            a.data.withUnsafeBufferPointer { ap in
            b.data.withUnsafeBufferPointer { bp in
            down.withUnsafeBufferPointer { dp in
            g.withUnsafeMutableBufferPointer { gp in
                if b.requiresGrad {
                    b.withGrad { db in  // dB[out, r] += dyᵀ·d
                        S.gemm(transA: true, transB: false, m: outF, n: r, k: rows, alpha: 1,
                               a: dyp, lda: outF, b: dp.baseAddress!, ldb: r, beta: 1, c: db, ldc: r)
                    }
                }
                if needG {
                    S.gemm(transA: false, transB: false, m: rows, n: r, k: outF, alpha: s,
                           a: dyp, lda: outF, b: bp.baseAddress!, ldb: r, beta: 0, c: gp.baseAddress!, ldc: r)
                }
                if a.requiresGrad {
                    a.withGrad { da in  // dA[r, in] += gᵀ·xd
                        S.gemm(transA: true, transB: false, m: r, n: inF, k: rows, alpha: 1,
                               a: gp.baseAddress!, lda: r, b: lp.baseAddress!, ldb: inF, beta: 1, c: da, ldc: inF)
                    }
                }
                if x.requiresGrad {
                    x.withGrad { dx in base.backward(dyp, rows: rows, into: dx) }  // dx[N, in] += dy·W
                }
                if loraInput.requiresGrad {
                    loraInput.withGrad { dxd in  // dxd[N, in] += g·A
                        S.gemm(transA: false, transB: false, m: rows, n: inF, k: r, alpha: 1,
                               a: gp.baseAddress!, lda: r, b: ap.baseAddress!, ldb: inF, beta: 1, c: dxd, ldc: inF)
                    }
                }
                if let weight, weight.requiresGrad {
                    weight.withGrad { dw in  // dW[out, in] += dyᵀ·x
                        S.gemm(transA: true, transB: false, m: outF, n: inF, k: rows, alpha: 1,
                               a: dyp, lda: outF, b: xp.baseAddress!, ldb: inF, beta: 1, c: dw, ldc: inF)
                    }
                }
            }}}}}}
            if let bias, bias.requiresGrad {
                bias.withGrad { db in
                    for i in 0..<rows { for j in 0..<outF { db[j] += dyp[i * outF + j] } }
                }
            }
        }
    }
}

public final class LoRALinear {
    /// [out, in], frozen.
    public let weight: Tensor
    /// [out], frozen.
    public let bias: Tensor?
    /// [r, in], trainable.
    public let a: Tensor
    /// [out, r], trainable.
    public let b: Tensor
    /// alpha / r.
    public let scale: Float
    /// Dropout probability on the LoRA path's input, used by `callAsFunction(_:rng:)`.
    public var dropout: Float = 0

    /// A = U(−1/√in, 1/√in) (PEFT's kaiming_uniform(a=√5)), B = 0.
    public init(weight: Tensor, bias: Tensor?, rank: Int, alpha: Float, rng: inout SeededRNG) {
        precondition(weight.shape.count == 2, "[LoRALinear] weight must be [out, in], got \(weight.shape)")
        precondition(rank > 0, "[LoRALinear] rank must be positive, got \(rank) for weight \(weight.shape)")
        self.weight = weight
        self.bias = bias
        (a, b) = Self.initialFactors(inFeatures: weight.shape[1], outFeatures: weight.shape[0], rank: rank, rng: &rng)
        self.scale = alpha / Float(rank)
    }

    /// Fresh trainable factors: A [r, in] = U(−1/√in, 1/√in) from `rng`, B [out, r] = 0 (the
    /// same draws whatever holds the frozen weight).
    public static func initialFactors(inFeatures inF: Int, outFeatures outF: Int, rank: Int, rng: inout SeededRNG) -> (a: Tensor, b: Tensor) {
        let bound = 1 / Float(max(inF, 1)).squareRoot()
        return (Tensor(shape: [rank, inF], data: rng.uniformArray(count: rank * inF, -bound, bound), requiresGrad: true),
                Tensor.zeros([outF, rank], requiresGrad: true))
    }

    /// Wraps given adapter matrices (e.g. loaded from a checkpoint); scale = alpha / r.
    public init(weight: Tensor, bias: Tensor?, a: Tensor, b: Tensor, alpha: Float) {
        precondition(a.shape.count == 2 && a.shape[0] > 0, "[LoRALinear] A must be [r, in], got \(a.shape)")
        self.weight = weight
        self.bias = bias
        self.a = a
        self.b = b
        self.scale = alpha / Float(a.shape[0])
    }

    /// y = x·Wᵀ + b + scale·(x·Aᵀ)·Bᵀ;  [N,in] -> [N,out]. No dropout.
    public func callAsFunction(_ x: Tensor) -> Tensor {
        Ops.loraLinear(x, weight: weight, bias: bias, a: a, b: b, scale: scale, loraInput: x)
    }

    /// As above with dropout(p: `dropout`) on the LoRA path's input.
    public func callAsFunction(_ x: Tensor, rng: inout SeededRNG) -> Tensor {
        let xd = Ops.dropout(x, p: dropout, rng: &rng)
        return Ops.loraLinear(x, weight: weight, bias: bias, a: a, b: b, scale: scale, loraInput: xd)
    }

    /// W + scale·B·A  [out, in], a new constant tensor.
    public func fused() -> Tensor {
        let outF = weight.shape[0], inF = weight.shape[1], r = a.shape[0]
        var w = weight.data
        a.data.withUnsafeBufferPointer { ap in
            b.data.withUnsafeBufferPointer { bp in
                w.withUnsafeMutableBufferPointer { wp in
                    BLAS.sgemm(transA: false, transB: false, m: outF, n: inF, k: r, alpha: scale,
                               a: bp.baseAddress!, lda: r, b: ap.baseAddress!, ldb: inF, beta: 1, c: wp.baseAddress!, ldc: inF)
                }
            }
        }
        return Tensor(shape: weight.shape, data: w)
    }
}

/// y = x·Wᵀ + b + scale·(xd·Aᵀ)·Bᵀ over a weight tensor, with A and B given (B may be a slice of
/// a fused module's B: Phi-3's q, k and v share qkv_proj's A), xd = `loraInput` (x after dropout, or x).
public func loraLinear(_ x: Tensor, weight: Tensor, bias: Tensor?, a: Tensor, b: Tensor, scale: Float, loraInput: Tensor? = nil) -> Tensor {
    Ops.loraLinear(x, weight: weight, bias: bias, a: a, b: b, scale: scale, loraInput: loraInput ?? x)
}
