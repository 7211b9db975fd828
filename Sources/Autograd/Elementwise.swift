// Element-wise ops: add, sub, mul with numpy broadcasting (gradients summed back to each input's
// shape), scale, silu and swiglu. Same-shape cases run the threaded SIMD kernels; broadcasting
// runs a strided loop. Leaves out division and comparisons. Follows numpy broadcasting rules.

enum BinaryKind { case add, sub, mul }

/// numpy broadcast of two shapes; nil when incompatible.
func broadcastShape(_ a: [Int], _ b: [Int]) -> [Int]? {
    let r = max(a.count, b.count)
    var out = [Int](repeating: 1, count: r)
    for i in 0..<r {
        let da = i < r - a.count ? 1 : a[i - (r - a.count)]
        let db = i < r - b.count ? 1 : b[i - (r - b.count)]
        if da == db || db == 1 { out[i] = da } else if da == 1 { out[i] = db } else { return nil }
    }
    return out
}

/// Strides of `shape` read as `out` (0 along broadcast dims), aligned to out's rank.
func broadcastStrides(_ shape: [Int], _ out: [Int]) -> [Int] {
    let r = out.count, off = r - shape.count
    var strides = [Int](repeating: 0, count: r)
    var s = 1
    for i in stride(from: shape.count - 1, through: 0, by: -1) {
        strides[i + off] = shape[i] == 1 && out[i + off] != 1 ? 0 : s
        s *= shape[i]
    }
    return strides
}

/// Calls body(outIndex, aIndex, bIndex) over every element of `out` in row-major order.
@inline(__always)
func forEachBroadcast(_ out: [Int], _ sa: [Int], _ sb: [Int], _ body: (Int, Int, Int) -> Void) {
    let total = out.reduce(1, *)
    if total == 0 { return }
    let r = out.count
    if r == 0 { body(0, 0, 0); return }
    let inner = out[r - 1], ia = sa[r - 1], ib = sb[r - 1]
    var index = [Int](repeating: 0, count: r)
    var o = 0, aBase = 0, bBase = 0
    while o < total {
        for j in 0..<inner { body(o + j, aBase + j * ia, bBase + j * ib) }
        o += inner
        var d = r - 2
        while d >= 0 {
            index[d] += 1
            aBase += sa[d]; bBase += sb[d]
            if index[d] < out[d] { break }
            aBase -= sa[d] * out[d]; bBase -= sb[d] * out[d]
            index[d] = 0
            d -= 1
        }
    }
}

extension Ops {
    /// y = a ∘ b with broadcasting. add: da = g, db = g; sub: db = -g; mul: da = g·b, db = g·a;
    /// each summed over the dims it was broadcast along.
    static func binary<S>(_ a: TensorOf<S>, _ b: TensorOf<S>, _ kind: BinaryKind, _ name: String) -> TensorOf<S> {
        guard let outShape = broadcastShape(a.shape, b.shape) else {
            preconditionFailure("[\(name)] shapes do not broadcast: \(a.shape) vs \(b.shape)")
        }
        let n = shapeCount(outShape)
        let same = a.shape == outShape && b.shape == outShape
        let sa = broadcastStrides(a.shape, outShape), sb = broadcastStrides(b.shape, outShape)
        let out: [S] = makeArray(n) { y in
            a.data.withUnsafeBufferPointer { ap in
                b.data.withUnsafeBufferPointer { bp in
                    let ap = ap.baseAddress!, bp = bp.baseAddress!
                    if same {
                        switch kind {
                        case .add: kMap2(n, ap, bp, y) { $0 + $1 }
                        case .sub: kMap2(n, ap, bp, y) { $0 - $1 }
                        case .mul: kMap2(n, ap, bp, y) { $0 * $1 }
                        }
                    } else {
                        forEachBroadcast(outShape, sa, sb) { o, i, j in
                            switch kind {
                            case .add: y[o] = ap[i] + bp[j]
                            case .sub: y[o] = ap[i] - bp[j]
                            case .mul: y[o] = ap[i] * bp[j]
                            }
                        }
                    }
                }
            }
        }
        guard recording(a, b) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [a, b]) { g in
            let gp = g.baseAddress!
            // Gradient of `t` given its partner `other` (for mul) and the sign (for sub).
            func accumulate(_ t: TensorOf<S>, _ other: TensorOf<S>, _ st: [Int], _ so: [Int], negate: Bool) {
                guard t.requiresGrad else { return }
                other.data.withUnsafeBufferPointer { op in
                    let op = op.baseAddress!
                    t.withGrad { dt in
                        if same {
                            switch kind {
                            case .add: kMap2(n, dt, gp, dt) { $0 + $1 }
                            case .sub: if negate { kMap2(n, dt, gp, dt) { $0 - $1 } } else { kMap2(n, dt, gp, dt) { $0 + $1 } }
                            case .mul: kMap3(n, dt, gp, op, dt) { $0 + $1 * $2 }
                            }
                        } else {
                            forEachBroadcast(outShape, st, so) { o, i, j in
                                switch kind {
                                case .add: dt[i] += gp[o]
                                case .sub: dt[i] += negate ? -gp[o] : gp[o]
                                case .mul: dt[i] += gp[o] * op[j]
                                }
                            }
                        }
                    }
                }
            }
            accumulate(a, b, sa, sb, negate: false)
            accumulate(b, a, sb, sa, negate: true)
        }
    }

    /// y = s·x; dx = s·g.
    static func scale<S>(_ x: TensorOf<S>, _ s: S) -> TensorOf<S> {
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in kMap(x.count, xp.baseAddress!, y) { $0 * s } }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            x.withGrad { dx in kMap2(x.count, dx, g.baseAddress!, dx) { $0 + $1 * s } }
        }
    }

    /// y = x·σ(x); dy/dx = σ(x)·(1 + x·(1 − σ(x))).
    static func silu<S>(_ x: TensorOf<S>) -> TensorOf<S> {
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { kSilu($0.baseAddress!, y, x.count) }
        }
        guard recording(x) else { return TensorOf(result: x.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: x.shape, data: out, inputs: [x]) { g in
            x.data.withUnsafeBufferPointer { xp in
                x.withGrad { dx in
                    kMap3(x.count, xp.baseAddress!, g.baseAddress!, dx, dx) { v, gv, d in
                        let s = sigmoid16(v)
                        return d + gv * s * (1 + v * (1 - s))
                    }
                }
            }
        }
    }

    /// y = silu(gate)·up; d gate = g·up·σ(gate)·(1 + gate·(1 − σ(gate))), d up = g·silu(gate).
    static func swiglu<S>(gate: TensorOf<S>, up: TensorOf<S>) -> TensorOf<S> { gated(SiLUGate.self, gate: gate, up: up, "swiglu") }

    /// y = act(gate)·up for a gated activation A; d gate = g·up·act'(gate), d up = g·act(gate).
    static func gated<A: GatedActivation, S>(_ a: A.Type, gate: TensorOf<S>, up: TensorOf<S>, _ name: String) -> TensorOf<S> {
        precondition(gate.shape == up.shape, "[\(name)] shapes differ: \(gate.shape) vs \(up.shape)")
        let n = gate.count
        let out: [S] = makeArray(n) { y in
            gate.data.withUnsafeBufferPointer { gp in
                up.data.withUnsafeBufferPointer { up in kGated(A.self, gp.baseAddress!, up.baseAddress!, y, n) }
            }
        }
        guard recording(gate, up) else { return TensorOf(result: gate.shape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: gate.shape, data: out, inputs: [gate, up]) { g in
            gate.data.withUnsafeBufferPointer { gp in
                up.data.withUnsafeBufferPointer { upp in
                    let gp = gp.baseAddress!, upp = upp.baseAddress!, gg = g.baseAddress!
                    if gate.requiresGrad {
                        gate.withGrad { dg in
                            Parallel.forChunks(n, grain: Parallel.elementGrain) { _, r in
                                var i = r.lowerBound
                                while i < r.upperBound {
                                    let m = min(16, r.upperBound - i)
                                    let v = m == 16 ? load16(gp + i) : loadPartial(gp + i, m)
                                    let u = m == 16 ? load16(upp + i) : loadPartial(upp + i, m)
                                    let gv = m == 16 ? load16(gg + i) : loadPartial(gg + i, m)
                                    let d = m == 16 ? load16(dg + i) : loadPartial(dg + i, m)
                                    let res = d + gv * u * A.derivative(v)
                                    if m == 16 { store16(res, dg + i) } else { storePartial(res, dg + i, m) }
                                    i += 16
                                }
                            }
                        }
                    }
                    if up.requiresGrad {
                        up.withGrad { du in
                            kMap3(n, gp, gg, du, du) { v, gv, d in d + gv * A.value(v) }
                        }
                    }
                }
            }
        }
    }
}

/// a + b with numpy broadcasting; gradients summed back to each input's shape.
public func add(_ a: Tensor, _ b: Tensor) -> Tensor { Ops.binary(a, b, .add, "add") }
/// a − b with numpy broadcasting.
public func sub(_ a: Tensor, _ b: Tensor) -> Tensor { Ops.binary(a, b, .sub, "sub") }
/// a · b (element-wise) with numpy broadcasting.
public func mul(_ a: Tensor, _ b: Tensor) -> Tensor { Ops.binary(a, b, .mul, "mul") }
public func + (a: Tensor, b: Tensor) -> Tensor { add(a, b) }
public func - (a: Tensor, b: Tensor) -> Tensor { sub(a, b) }
public func * (a: Tensor, b: Tensor) -> Tensor { mul(a, b) }
/// s · x.
public func scale(_ x: Tensor, _ s: Float) -> Tensor { Ops.scale(x, s) }
/// x · σ(x).
public func silu(_ x: Tensor) -> Tensor { Ops.silu(x) }
/// silu(gate) · up.
public func swiglu(gate: Tensor, up: Tensor) -> Tensor { Ops.swiglu(gate: gate, up: up) }
