// LoRALinear: a frozen linear layer plus a trainable low-rank update, y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ
// with s = alpha/r. B starts at zero so step 0 equals the base layer; fused() merges the update.
// A composite of matmul ops: no hand-written backward. Leaves out DoRA and rsLoRA.
// Follows PEFT's LoraLayer (init, scaling, dropout on the LoRA path) and mlx-examples' LoRALinear.
import Foundation

extension Ops {
    /// base = x·Wᵀ + b [N,out]; down = s·(xd·Aᵀ) [N,r]; y = base + down·Bᵀ [N,out].
    /// `loraInput` is x after dropout (or x itself). The scale is applied on the narrow [N,r] side.
    static func loraLinear<S>(
        _ x: TensorOf<S>, weight: TensorOf<S>, bias: TensorOf<S>?, a: TensorOf<S>, b: TensorOf<S>,
        scale s: S, loraInput: TensorOf<S>
    ) -> TensorOf<S> {
        precondition(a.shape.count == 2 && a.shape[1] == weight.shape[1], "[LoRALinear] A must be [r, in]: A \(a.shape) vs weight \(weight.shape)")
        precondition(b.shape == [weight.shape[0], a.shape[0]], "[LoRALinear] B must be [out, r]: B \(b.shape) vs A \(a.shape), weight \(weight.shape)")
        let base = linear(x, weight: weight, bias: bias)  // [N,out]
        let down = scale(linear(loraInput, weight: a), s)  // [N,r]
        return binary(base, linear(down, weight: b), .add, "LoRALinear")  // [N,out]
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
        let outF = weight.shape[0], inF = weight.shape[1]
        let bound = 1 / Float(max(inF, 1)).squareRoot()
        self.weight = weight
        self.bias = bias
        self.a = Tensor(shape: [rank, inF], data: rng.uniformArray(count: rank * inF, -bound, bound), requiresGrad: true)
        self.b = Tensor.zeros([outF, rank], requiresGrad: true)
        self.scale = alpha / Float(rank)
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
