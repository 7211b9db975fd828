// The element types a tensor can hold: Float for training, Double for gradient checks.
// Each conformance supplies the few primitives whose fast form differs by type (gemm, a
// SIMD exp); everything else is generic and specialised for Float inside this module.
// Leaves out Float16/BFloat16 (the loaders dequantise to Float). Exp follows Cephes expf.
import Foundation

public protocol TensorScalar: BinaryFloatingPoint, SIMDScalar, Sendable, Codable {
    static func gemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Self,
        a: UnsafePointer<Self>, lda: Int, b: UnsafePointer<Self>, ldb: Int,
        beta: Self, c: UnsafeMutablePointer<Self>, ldc: Int)
    /// `gemm` as one library call on the calling thread (for callers that parallelise themselves).
    static func gemmOnThisThread(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Self,
        a: UnsafePointer<Self>, lda: Int, b: UnsafePointer<Self>, ldb: Int,
        beta: Self, c: UnsafeMutablePointer<Self>, ldc: Int)
    /// e^x lane-wise; Float uses a polynomial, Double the libm function (full precision).
    static func expVector(_ x: SIMD16<Self>) -> SIMD16<Self>
    /// Lane-wise max. Concrete per type: generic SIMD comparisons compile to per-lane code
    /// (about 100x slower than the vector compare the concrete type gets).
    static func maxVector(_ a: SIMD16<Self>, _ b: SIMD16<Self>) -> SIMD16<Self>
    static func exp(_ x: Self) -> Self
    static func log(_ x: Self) -> Self
}

extension Float: TensorScalar {
    @inline(__always)
    public static func gemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Float,
        a: UnsafePointer<Float>, lda: Int, b: UnsafePointer<Float>, ldb: Int,
        beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        BLAS.sgemm(
            transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda,
            b: b, ldb: ldb, beta: beta, c: c, ldc: ldc)
    }
    @inline(__always)
    public static func gemmOnThisThread(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Float,
        a: UnsafePointer<Float>, lda: Int, b: UnsafePointer<Float>, ldb: Int,
        beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        _ = BLAS.singleThreaded
        BLAS.librarySgemm(
            transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda,
            b: b, ldb: ldb, beta: beta, c: c, ldc: ldc)
    }
    @inline(__always)
    public static func expVector(_ x: SIMD16<Float>) -> SIMD16<Float> { Kernels.exp(x) }
    @inline(__always)
    public static func maxVector(_ a: SIMD16<Float>, _ b: SIMD16<Float>) -> SIMD16<Float> { a.replacing(with: b, where: b .> a) }
    @inline(__always)
    public static func exp(_ x: Float) -> Float { Foundation.exp(x) }
    @inline(__always)
    public static func log(_ x: Float) -> Float { Foundation.log(x) }
}

extension Double: TensorScalar {
    @inline(__always)
    public static func gemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Double,
        a: UnsafePointer<Double>, lda: Int, b: UnsafePointer<Double>, ldb: Int,
        beta: Double, c: UnsafeMutablePointer<Double>, ldc: Int
    ) {
        BLAS.dgemm(
            transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda,
            b: b, ldb: ldb, beta: beta, c: c, ldc: ldc)
    }
    @inline(__always)
    public static func gemmOnThisThread(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Double,
        a: UnsafePointer<Double>, lda: Int, b: UnsafePointer<Double>, ldb: Int,
        beta: Double, c: UnsafeMutablePointer<Double>, ldc: Int
    ) {
        _ = BLAS.singleThreaded
        BLAS.libraryDgemm(
            transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda,
            b: b, ldb: ldb, beta: beta, c: c, ldc: ldc)
    }
    public static func expVector(_ x: SIMD16<Double>) -> SIMD16<Double> {
        var r = x
        for i in 0..<16 { r[i] = Foundation.exp(x[i]) }
        return r
    }
    @inline(__always)
    public static func maxVector(_ a: SIMD16<Double>, _ b: SIMD16<Double>) -> SIMD16<Double> { a.replacing(with: b, where: b .> a) }
    @inline(__always)
    public static func exp(_ x: Double) -> Double { Foundation.exp(x) }
    @inline(__always)
    public static func log(_ x: Double) -> Double { Foundation.log(x) }
}

// MARK: - SIMD load/store helpers (unaligned, with zero-padded tails)

@inline(__always)
func load16<S: TensorScalar>(_ p: UnsafePointer<S>) -> SIMD16<S> {
    UnsafeRawPointer(p).loadUnaligned(as: SIMD16<S>.self)
}

@inline(__always)
func store16<S: TensorScalar>(_ v: SIMD16<S>, _ p: UnsafeMutablePointer<S>) {
    UnsafeMutableRawPointer(p).storeBytes(of: v, as: SIMD16<S>.self)
}

/// Loads `n < 16` elements, padding with `pad`.
@inline(__always)
func loadPartial<S: TensorScalar>(_ p: UnsafePointer<S>, _ n: Int, pad: S = 0) -> SIMD16<S> {
    var v = SIMD16<S>(repeating: pad)
    for i in 0..<n { v[i] = p[i] }
    return v
}

@inline(__always)
func storePartial<S: TensorScalar>(_ v: SIMD16<S>, _ p: UnsafeMutablePointer<S>, _ n: Int) {
    for i in 0..<n { p[i] = v[i] }
}
