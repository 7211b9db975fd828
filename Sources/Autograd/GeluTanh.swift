// The GELU-tanh gated MLP activation (Gemma's `gelu_pytorch_tanh` gate): out = gelu(g)·u with
// PyTorch's tanh approximation gelu(x) = 0.5·x·(1 + tanh(z)), z = √(2/π)·(x + 0.044715·x³),
// computed as x·σ(2z) (1 + tanh z = 2σ(2z): no cancellation near 0, the same SIMD sigmoid as SiLU).
// Forward kernel shared with the KV-cache path (`Kernels.geluTanhGated`); forward and gradient are
// Ops.gated's (Elementwise.swift) with the value and derivative below, finite-difference checked in
// GradientCheckTests. Leaves out the erf GELU.

/// √(2/π) and the cubic coefficient of PyTorch's approximation.
@usableFromInline let geluTanhC: Double = 0.797_884_560_802_865_4
@usableFromInline let geluTanhA: Double = 0.044_715

/// PyTorch's tanh GELU as a gated activation. With s = σ(2z):
/// d gelu/dx = s + x·s·(1 − s)·2·√(2/π)·(1 + 3·0.044715·x²).
enum GeluTanhGate: GatedActivation {
    @inline(__always) static func sig<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> {
        let c = S(geluTanhC), a = S(geluTanhA)
        return sigmoid16(2 * c * (x + a * x * x * x))
    }
    @inline(__always) static func value<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> { x * sig(x) }
    @inline(__always) static func derivative<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> {
        let c = S(geluTanhC), a = S(geluTanhA), s = sig(x)
        return s + x * s * (1 - s) * (2 * c) * (1 + 3 * a * x * x)
    }
}

extension Kernels {
    /// out = gelu_tanh(gate) · up for `count` elements, both cores.
    public static func geluTanhGated(
        gate: UnsafePointer<Float>, up: UnsafePointer<Float>, out: UnsafeMutablePointer<Float>, count: Int
    ) {
        kGated(GeluTanhGate.self, gate, up, out, count)
    }
}

extension Ops {
    /// gelu_tanh(gate) · up, gate and up of one shape (`Ops.gated`).
    static func geluTanhGated<S>(gate: TensorOf<S>, up: TensorOf<S>) -> TensorOf<S> {
        gated(GeluTanhGate.self, gate: gate, up: up, "geluTanhGated")
    }
}

/// gelu_tanh(gate) · up (Gemma's gated MLP).
public func geluTanhGated(gate: Tensor, up: Tensor) -> Tensor { Ops.geluTanhGated(gate: gate, up: up) }
