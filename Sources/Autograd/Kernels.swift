// Row and element kernels on raw buffers: SIMD exp, softmax of a row, RMSNorm of rows, SiLU.
// Generic versions serve the ops (Float specialised here, Double for checks); `Kernels` is
// the public Float face for the no-grad KV-cache path. Leaves out gemm (BLAS.swift).
// SIMD accumulators for reductions; lane-wise max and masks through the concrete type (`S.maxVector`):
// generic SIMD comparisons compile to per-lane code, about 100x slower.

public enum Kernels {
    /// e^x over 16 lanes: Cephes expf polynomial on [-ln2/2, ln2/2], scaled by 2^n.
    /// Relative error about 2e-7; inputs above 88.7 are clamped, inputs below -87.3 give 0.
    @inline(__always)
    public static func exp(_ input: SIMD16<Float>) -> SIMD16<Float> {
        var x = input
        x.replace(with: 88.7, where: x .> 88.7)
        x.replace(with: -87.3, where: x .< -87.3)
        // n = round(x / ln2) by the 1.5·2^23 trick (SSE2-friendly, no floor instruction).
        let magic = SIMD16<Float>(repeating: 12_582_912)
        let shifted = x * 1.442_695_04 + magic
        let n = shifted - magic
        var r = x - n * 0.693_359_375
        r = r + n * 2.121_944_4e-4
        let z = r * r
        var y = SIMD16<Float>(repeating: 1.987_569_15e-4)
        y = y * r + 1.398_199_95e-3
        y = y * r + 8.333_451_9e-3
        y = y * r + 4.166_579_6e-2
        y = y * r + 1.666_666_55e-1
        y = y * r + 5.000_000_12e-1
        y = y * z + r + 1
        let ni = unsafeBitCast(shifted, to: SIMD16<Int32>.self) &- unsafeBitCast(magic, to: SIMD16<Int32>.self)
        let scale = unsafeBitCast((ni &+ 127) &<< 23, to: SIMD16<Float>.self)
        var result = y * scale
        result.replace(with: 0, where: input .< -87.3)  // e^-inf = 0 exactly (masked scores)
        return result
    }

    /// y[i] = e^x[i] for `count` elements (may alias), both cores.
    public static func exp(_ x: UnsafePointer<Float>, _ y: UnsafeMutablePointer<Float>, count: Int) {
        kExp(x, y, count)
    }

    /// y = softmax(x) over one row of `count` (may alias). Returns log Σ e^x (log-sum-exp).
    @discardableResult
    public static func softmaxRow(_ x: UnsafePointer<Float>, _ y: UnsafeMutablePointer<Float>, count: Int) -> Float {
        kSoftmaxRow(x, y, count)
    }

    /// Softmax of each of `rows` rows of `dim`, both cores.
    public static func softmaxRows(_ x: UnsafePointer<Float>, _ y: UnsafeMutablePointer<Float>, rows: Int, dim: Int) {
        Parallel.forChunks(rows, grain: Parallel.rowGrain(rowLength: dim)) { _, r in
            for i in r { _ = kSoftmaxRow(x + i * dim, y + i * dim, dim) }
        }
    }

    /// y = x / sqrt(mean(x²) + eps) · weight for `rows` rows of `dim` (y may alias x).
    public static func rmsNormRows(
        _ x: UnsafePointer<Float>, weight: UnsafePointer<Float>, _ y: UnsafeMutablePointer<Float>,
        rows: Int, dim: Int, eps: Float
    ) {
        kRMSNormRows(x, weight, y, nil, rows, dim, eps)
    }

    /// y = x · σ(x) for `count` elements (may alias), both cores.
    public static func silu(_ x: UnsafePointer<Float>, _ y: UnsafeMutablePointer<Float>, count: Int) {
        kSilu(x, y, count)
    }

    /// out = silu(gate) · up for `count` elements, both cores.
    public static func swiglu(
        gate: UnsafePointer<Float>, up: UnsafePointer<Float>, out: UnsafeMutablePointer<Float>, count: Int
    ) {
        kSwiglu(gate, up, out, count)
    }
}

// MARK: - Generic kernels

/// Applies a 16-lane function over `count` elements in fixed chunks on all permitted threads;
/// the tail is padded, so every element goes through the same vector code.
@inline(__always)
func kMap<S: TensorScalar>(
    _ count: Int, _ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>,
    _ f: (SIMD16<S>) -> SIMD16<S>
) {
    Parallel.forChunks(count, grain: Parallel.elementGrain) { _, r in
        var i = r.lowerBound
        while i + 16 <= r.upperBound { store16(f(load16(x + i)), y + i); i += 16 }
        if i < r.upperBound { storePartial(f(loadPartial(x + i, r.upperBound - i)), y + i, r.upperBound - i) }
    }
}

@inline(__always)
func kMap2<S: TensorScalar>(
    _ count: Int, _ a: UnsafePointer<S>, _ b: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>,
    _ f: (SIMD16<S>, SIMD16<S>) -> SIMD16<S>
) {
    Parallel.forChunks(count, grain: Parallel.elementGrain) { _, r in
        var i = r.lowerBound
        while i + 16 <= r.upperBound { store16(f(load16(a + i), load16(b + i)), y + i); i += 16 }
        if i < r.upperBound {
            let n = r.upperBound - i
            storePartial(f(loadPartial(a + i, n), loadPartial(b + i, n)), y + i, n)
        }
    }
}

@inline(__always)
func kMap3<S: TensorScalar>(
    _ count: Int, _ a: UnsafePointer<S>, _ b: UnsafePointer<S>, _ c: UnsafePointer<S>,
    _ y: UnsafeMutablePointer<S>, _ f: (SIMD16<S>, SIMD16<S>, SIMD16<S>) -> SIMD16<S>
) {
    Parallel.forChunks(count, grain: Parallel.elementGrain) { _, r in
        var i = r.lowerBound
        while i + 16 <= r.upperBound { store16(f(load16(a + i), load16(b + i), load16(c + i)), y + i); i += 16 }
        if i < r.upperBound {
            let n = r.upperBound - i
            storePartial(f(loadPartial(a + i, n), loadPartial(b + i, n), loadPartial(c + i, n)), y + i, n)
        }
    }
}

func kExp<S: TensorScalar>(_ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>, _ count: Int) {
    kMap(count, x, y) { S.expVector($0) }
}

@inline(__always)
func sigmoid16<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> {
    1 / (1 + S.expVector(-x))
}

func kSilu<S: TensorScalar>(_ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>, _ count: Int) {
    kMap(count, x, y) { $0 * sigmoid16($0) }
}

/// A gated MLP activation, out = act(gate)·up, given per 16 lanes: the value act(x) and the
/// derivative act'(x). One op (`Ops.gated`) serves every such activation, forward and backward.
protocol GatedActivation {
    static func value<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S>
    static func derivative<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S>
}

/// SiLU, SwiGLU's gate: x·σ(x); d/dx = σ(x)·(1 + x·(1 − σ(x))).
enum SiLUGate: GatedActivation {
    @inline(__always) static func value<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> { x * sigmoid16(x) }
    @inline(__always) static func derivative<S: TensorScalar>(_ x: SIMD16<S>) -> SIMD16<S> {
        let s = sigmoid16(x)
        return s * (1 + x * (1 - s))
    }
}

/// out = act(gate)·up over `count` elements.
@inline(__always)
func kGated<A: GatedActivation, S: TensorScalar>(
    _: A.Type, _ gate: UnsafePointer<S>, _ up: UnsafePointer<S>, _ out: UnsafeMutablePointer<S>, _ count: Int
) {
    kMap2(count, gate, up, out) { g, u in A.value(g) * u }
}

func kSwiglu<S: TensorScalar>(
    _ gate: UnsafePointer<S>, _ up: UnsafePointer<S>, _ out: UnsafeMutablePointer<S>, _ count: Int
) {
    kGated(SiLUGate.self, gate, up, out, count)
}

/// Sum of `n` elements with a SIMD accumulator (fixed order: lanes, then lanes summed).
@inline(__always)
func kSum<S: TensorScalar>(_ x: UnsafePointer<S>, _ n: Int) -> S {
    var acc = SIMD16<S>()
    var i = 0
    while i + 16 <= n { acc += load16(x + i); i += 16 }
    if i < n { acc += loadPartial(x + i, n - i) }
    return acc.sum()
}

/// Σ a·b over `n` elements.
@inline(__always)
func kDot<S: TensorScalar>(_ a: UnsafePointer<S>, _ b: UnsafePointer<S>, _ n: Int) -> S {
    var acc = SIMD16<S>()
    var i = 0
    while i + 16 <= n { acc += load16(a + i) * load16(b + i); i += 16 }
    if i < n { acc += loadPartial(a + i, n - i) * loadPartial(b + i, n - i) }
    return acc.sum()
}

@inline(__always)
func kMax<S: TensorScalar>(_ x: UnsafePointer<S>, _ n: Int) -> S {
    var acc = SIMD16<S>(repeating: -S.infinity)
    var i = 0
    while i + 16 <= n {
        acc = S.maxVector(acc, load16(x + i))
        i += 16
    }
    if i < n {
        acc = S.maxVector(acc, loadPartial(x + i, n - i, pad: -S.infinity))
    }
    return acc.max()
}

/// y = e^(x - shift) over `n` elements; returns Σ y.
@inline(__always)
func kExpShiftSum<S: TensorScalar>(_ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>, _ n: Int, _ shift: S) -> S {
    var acc = SIMD16<S>()
    var i = 0
    while i + 16 <= n {
        let e = S.expVector(load16(x + i) - shift)
        store16(e, y + i)
        acc += e
        i += 16
    }
    if i < n {
        var e = S.expVector(loadPartial(x + i, n - i) - shift)
        for l in (n - i)..<16 { e[l] = 0 }
        storePartial(e, y + i, n - i)
        acc += e
    }
    return acc.sum()
}

@inline(__always)
func kScale<S: TensorScalar>(_ y: UnsafeMutablePointer<S>, _ n: Int, _ s: S) {
    var i = 0
    while i + 16 <= n { store16(load16(y + i) * s, y + i); i += 16 }
    while i < n { y[i] *= s; i += 1 }
}

/// log Σ e^x of a row, without writing anything.
@inline(__always)
func kLogSumExp<S: TensorScalar>(_ x: UnsafePointer<S>, _ n: Int) -> S {
    let m = kMax(x, n)
    var acc = SIMD16<S>()
    var i = 0
    while i + 16 <= n { acc += S.expVector(load16(x + i) - m); i += 16 }
    if i < n {
        var e = S.expVector(loadPartial(x + i, n - i) - m)
        for l in (n - i)..<16 { e[l] = 0 }
        acc += e
    }
    return m + S.log(acc.sum())
}

/// y = softmax(x) for one row (may alias); returns the row's log-sum-exp.
@inline(__always)
func kSoftmaxRow<S: TensorScalar>(_ x: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>, _ n: Int) -> S {
    let m = kMax(x, n)
    let s = kExpShiftSum(x, y, n, m)
    kScale(y, n, 1 / s)
    return m + S.log(s)
}

/// RMSNorm of rows; when `invRMS` is given, stores 1/sqrt(mean(x²)+eps) per row there.
func kRMSNormRows<S: TensorScalar>(
    _ x: UnsafePointer<S>, _ w: UnsafePointer<S>, _ y: UnsafeMutablePointer<S>,
    _ invRMS: UnsafeMutablePointer<S>?, _ rows: Int, _ dim: Int, _ eps: S
) {
    Parallel.forChunks(rows, grain: Parallel.rowGrain(rowLength: dim)) { _, r in
        for row in r {
            let xr = x + row * dim, yr = y + row * dim
            let inv = 1 / (kDot(xr, xr, dim) / S(dim) + eps).squareRoot()
            invRMS?[row] = inv
            var i = 0
            while i + 16 <= dim { store16(load16(xr + i) * inv * load16(w + i), yr + i); i += 16 }
            while i < dim { yr[i] = xr[i] * inv * w[i]; i += 1 }
        }
    }
}
