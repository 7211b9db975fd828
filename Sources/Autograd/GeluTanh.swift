// The GELU-tanh gated MLP activation (Gemma's `gelu_pytorch_tanh` gate): out = gelu(g)·u with
// PyTorch's tanh approximation gelu(x) = 0.5·x·(1 + tanh(z)), z = √(2/π)·(x + 0.044715·x³),
// computed as x·σ(2z) (1 + tanh z = 2σ(2z): no cancellation near 0, the same SIMD sigmoid as SiLU).
// Forward kernel shared with the KV-cache path (`Kernels.geluTanhGated`); gradient below,
// finite-difference checked in GradientCheckTests. Leaves out the erf GELU.

/// √(2/π) and the cubic coefficient of PyTorch's approximation.
@usableFromInline let geluTanhC: Double = 0.797_884_560_802_865_4
@usableFromInline let geluTanhA: Double = 0.044_715

/// gelu_tanh(g)·u over 16 lanes.
@inline(__always)
func geluTanh16<S: TensorScalar>(_ x: SIMD16<S>) -> (value: SIMD16<S>, sig: SIMD16<S>) {
    let c = S(geluTanhC), a = S(geluTanhA)
    let twoZ = 2 * c * (x + a * x * x * x)
    let s = sigmoid16(twoZ)
    return (x * s, s)
}

func kGeluTanhGated<S: TensorScalar>(
    _ gate: UnsafePointer<S>, _ up: UnsafePointer<S>, _ out: UnsafeMutablePointer<S>, _ count: Int
) {
    kMap2(count, gate, up, out) { g, u in geluTanh16(g).value * u }
}

extension Kernels {
    /// out = gelu_tanh(gate) · up for `count` elements, both cores.
    public static func geluTanhGated(
        gate: UnsafePointer<Float>, up: UnsafePointer<Float>, out: UnsafeMutablePointer<Float>, count: Int
    ) {
        kGeluTanhGated(gate, up, out, count)
    }
}

extension Ops {
    /// gelu_tanh(gate) · up, gate and up of one shape. With s = σ(2z):
    /// d gelu/dx = s + x·s·(1 − s)·2·√(2/π)·(1 + 3·0.044715·x²); dgate = g·u·gelu'(gate), dup = g·gelu(gate).
    static func geluTanhGated<S>(gate: TensorOf<S>, up: TensorOf<S>) -> TensorOf<S> {
        precondition(gate.shape == up.shape, "[geluTanhGated] shapes differ: \(gate.shape) vs \(up.shape)")
        let n = gate.count
        let out: [S] = makeArray(n) { y in
            gate.data.withUnsafeBufferPointer { gp in
                up.data.withUnsafeBufferPointer { up in kGeluTanhGated(gp.baseAddress!, up.baseAddress!, y, n) }
            }
        }
        guard recording(gate, up) else { return TensorOf(result: gate.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: gate.shape, data: out, inputs: [gate, up]) { g in
            gate.data.withUnsafeBufferPointer { gp in
                up.data.withUnsafeBufferPointer { upp in
                    let gp = gp.baseAddress!, upp = upp.baseAddress!, gg = g.baseAddress!
                    let c = S(geluTanhC), a = S(geluTanhA)
                    if gate.requiresGrad {
                        gate.withGrad { dg in
                            Parallel.forChunks(n, grain: Parallel.elementGrain) { _, r in
                                var i = r.lowerBound
                                while i < r.upperBound {
                                    let m = min(16, r.upperBound - i)
                                    let x = m == 16 ? load16(gp + i) : loadPartial(gp + i, m)
                                    let u = m == 16 ? load16(upp + i) : loadPartial(upp + i, m)
                                    let gv = m == 16 ? load16(gg + i) : loadPartial(gg + i, m)
                                    let d = m == 16 ? load16(dg + i) : loadPartial(dg + i, m)
                                    let s = geluTanh16(x).sig
                                    let derivative = s + x * s * (1 - s) * (2 * c) * (1 + 3 * a * x * x)
                                    let res = d + gv * u * derivative
                                    if m == 16 { store16(res, dg + i) } else { storePartial(res, dg + i, m) }
                                    i += 16
                                }
                            }
                        }
                    }
                    if up.requiresGrad {
                        up.withGrad { du in
                            kMap3(n, gp, gg, du, du) { x, gv, d in d + gv * geluTanh16(x).value }
                        }
                    }
                }
            }
        }
    }
}

/// gelu_tanh(gate) · up (Gemma's gated MLP).
public func geluTanhGated(gate: Tensor, up: Tensor) -> Tensor { Ops.geluTanhGated(gate: gate, up: up) }
