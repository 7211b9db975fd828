// BLAS: the only file that imports COpenBLAS. Row-major gemm on raw buffers for Float and
// Double, the plain-loop twin every BLAS-backed routine is tested against, and the scoped
// thread count. OpenBLAS itself runs on one thread (its multi-threaded sgemm gives different
// bits for 1 vs 2 threads); we split C into fixed blocks and run them on our own threads, so
// results never depend on the thread count. Leaves out other BLAS levels. Follows CBLAS.
import COpenBLAS
import Foundation

public enum BLAS {
    /// C[m,n] = alpha · op(A) · op(B) + beta · C, row-major, op = transpose when asked.
    /// A is [m,k] (or [k,m] with transA), B is [k,n] (or [n,k] with transB).
    /// Blocks of C run in parallel; the blocks depend only on m, n, k (bit-identical for any thread count).
    public static func sgemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Float,
        a: UnsafePointer<Float>, lda: Int, b: UnsafePointer<Float>, ldb: Int,
        beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        blocks(m: m, n: n, k: k) { i0, mi, j0, nj in
            librarySgemm(transA: transA, transB: transB, m: mi, n: nj, k: k, alpha: alpha,
                         a: transA ? a + i0 : a + i0 * lda, lda: lda, b: transB ? b + j0 * ldb : b + j0, ldb: ldb,
                         beta: beta, c: c + i0 * ldc + j0, ldc: ldc)
        }
    }

    /// Double twin of `sgemm`, used by the gradient checks.
    public static func dgemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Double,
        a: UnsafePointer<Double>, lda: Int, b: UnsafePointer<Double>, ldb: Int,
        beta: Double, c: UnsafeMutablePointer<Double>, ldc: Int
    ) {
        blocks(m: m, n: n, k: k) { i0, mi, j0, nj in
            libraryDgemm(transA: transA, transB: transB, m: mi, n: nj, k: k, alpha: alpha,
                         a: transA ? a + i0 : a + i0 * lda, lda: lda, b: transB ? b + j0 * ldb : b + j0, ldb: ldb,
                         beta: beta, c: c + i0 * ldc + j0, ldc: ldc)
        }
    }

    /// OpenBLAS runs single-threaded under us, on the best kernels the CPU runs (set once,
    /// before the first call; see `adapter_blas_select_core` for when OpenBLAS's own choice is
    /// replaced).
    static let singleThreaded: Void = {
        _ = adapter_blas_select_core()
        openblas_set_num_threads(1)
    }()

    /// The OpenBLAS kernels in use ("SkylakeX", "Haswell", "Zen", ...), after the fix-up above.
    public static var coreName: String {
        _ = singleThreaded
        return openblas_get_corename().map { String(cString: $0) } ?? "unknown"
    }

    /// The kernels ADAPTER_CPU_LEVEL selects when it names a level below this CPU's best
    /// ("Haswell" for avx2, "Sandybridge" for portable; see `adapter_blas_level_core`), else nil.
    public static var levelCore: String? { adapter_blas_level_core().map { String(cString: $0) } }

    /// The kernels this CPU can run at its best ("SkylakeX", "Haswell"), nil when neither.
    public static var preferredCore: String? { adapter_blas_preferred_core().map { String(cString: $0) } }

    /// Blocks C is split into (at most): each block repacks the whole of the other operand, so
    /// fewer is faster, and more lets more cores share the work. Fixed by the machine, never by
    /// `withThreads`, so a result does not depend on the thread count in use.
    nonisolated(unsafe) public static var gemmBlocks = min(4, max(2, ProcessInfo.processInfo.activeProcessorCount))

    /// Splits C into up to `gemmBlocks` row (or column) blocks of a size fixed by the shape alone.
    @inline(__always)
    static func blocks(m: Int, n: Int, k: Int, _ call: (Int, Int, Int, Int) -> Void) {
        _ = singleThreaded
        if m == 0 || n == 0 { return }
        if m * n * max(k, 1) < 1 << 20 || (m < 128 && n < 128) { call(0, m, 0, n); return }
        let parts = gemmBlocks
        if m >= 128 {
            let rows = ((m + parts - 1) / parts + 15) / 16 * 16
            Parallel.forChunks(m, grain: rows) { _, r in call(r.lowerBound, r.count, 0, n) }
        } else {
            let cols = ((n + parts - 1) / parts + 15) / 16 * 16
            Parallel.forChunks(n, grain: cols) { _, r in call(0, m, r.lowerBound, r.count) }
        }
    }

    /// One single-threaded OpenBLAS sgemm call, for callers that split the work across their own
    /// threads (each thread multiplies its own panel; bits independent of the thread count).
    public static func sgemmOneThread(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Float,
        a: UnsafePointer<Float>, lda: Int, b: UnsafePointer<Float>, ldb: Int,
        beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        _ = singleThreaded
        librarySgemm(transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb,
                     beta: beta, c: c, ldc: ldc)
    }

    /// One OpenBLAS sgemm call as is (the library's own threading, whatever it is set to).
    @inlinable
    public static func librarySgemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Float,
        a: UnsafePointer<Float>, lda: Int, b: UnsafePointer<Float>, ldb: Int,
        beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        if m == 0 || n == 0 { return }
        cblas_sgemm(
            CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
            Int32(m), Int32(n), Int32(k), alpha, a, Int32(max(lda, 1)), b, Int32(max(ldb, 1)),
            beta, c, Int32(max(ldc, 1)))
    }

    /// One OpenBLAS dgemm call as is.
    @inlinable
    public static func libraryDgemm(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: Double,
        a: UnsafePointer<Double>, lda: Int, b: UnsafePointer<Double>, ldb: Int,
        beta: Double, c: UnsafeMutablePointer<Double>, ldc: Int
    ) {
        if m == 0 || n == 0 { return }
        cblas_dgemm(
            CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
            Int32(m), Int32(n), Int32(k), alpha, a, Int32(max(lda, 1)), b, Int32(max(ldb, 1)),
            beta, c, Int32(max(ldc, 1)))
    }

    /// Plain-loop twin of `sgemm`/`dgemm` (same arguments); the reference in tests.
    public static func gemmReference<S: TensorScalar>(
        transA: Bool, transB: Bool, m: Int, n: Int, k: Int, alpha: S,
        a: UnsafePointer<S>, lda: Int, b: UnsafePointer<S>, ldb: Int,
        beta: S, c: UnsafeMutablePointer<S>, ldc: Int
    ) {
        for i in 0..<m {
            for j in 0..<n {
                var acc: S = 0
                for p in 0..<k {
                    let av = transA ? a[p * lda + i] : a[i * lda + p]
                    let bv = transB ? b[j * ldb + p] : b[p * ldb + j]
                    acc += av * bv
                }
                c[i * ldc + j] = alpha * acc + (beta == 0 ? 0 : beta * c[i * ldc + j])
            }
        }
    }

    /// Threads gemm and the kernels may use here (see `withThreads`).
    public static var threads: Int { Parallel.maxThreads }

    /// OpenBLAS's own thread count (process-wide; 1 while this module runs it). `bench engine` sets
    /// it to measure the library's multi-threaded sgemm on its own.
    public static var libraryThreads: Int {
        get { _ = singleThreaded; return Int(openblas_get_num_threads()) }
        set { _ = singleThreaded; openblas_set_num_threads(Int32(newValue)) }
    }
}

/// Runs `body` with at most `threads` threads in the kernels and gemm blocks. Results do not
/// depend on the count: chunks and gemm blocks are fixed by sizes, never by threads.
public func withThreads<R>(_ threads: Int, _ body: () throws -> R) rethrows -> R {
    precondition(threads >= 1, "[withThreads] thread count must be at least 1, got \(threads)")
    return try Parallel.$maxThreads.withValue(threads) { try body() }
}
