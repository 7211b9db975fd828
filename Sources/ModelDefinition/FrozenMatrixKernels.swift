// Multiplying by a frozen matrix whatever holds it, so both executors read one type: few input
// rows (decoding, batched steps, verify passes) stream the stored blocks through CBlockKernels'
// per-CPU-level products; a decoder's many rows (prefill) go through the same kernels a group of
// rows at a time up to the row count where that measured faster (`ManyRowsPath`); beyond, each
// core takes pieces of weight rows, dequantizes one into a reused buffer and multiplies it on its
// own (`multiplyInPieces`: CBlockKernels' bk_gemm on AVX-512, else a one-thread sgemm; no barrier
// between unpacking and multiplying); training unpacks a panel of rows at a time into a
// cache-sized buffer and multiplies it with sgemm. No float32 copy of a whole matrix ever exists.
// Outputs are in Hugging Face row order (a stored q/k matrix's llama.cpp order is undone here).
//
// Dimensions: m input rows, k = columns (in), n = rows (out), P panel rows.
import Autograd
import CBlockKernels
import Foundation
import ModelAssets
import Synchronization

/// What the block kernels multiply the weights with: float32 activations (the reference numbers),
/// or activations quantized to int8 per 32 values (per 256 for K-quant weights: llama.cpp's q8_K)
/// with integer block dot products (llama.cpp's way; each activation moves by at most half its
/// block's step, and the logits with it).
public enum ActivationPrecision: String, Sendable, CaseIterable, Codable {
    case float32
    case q8
}

/// How a KV cache stores keys and values: float32 (the reference numbers) or IEEE half (half
/// the memory and the bytes attention reads, as llama.cpp's default cache; each value rounded to
/// nearest once when stored, and widened exactly when read).
public enum KVCachePrecision: String, Sendable, CaseIterable, Codable {
    case float32, float16

    /// Bytes of one stored value.
    public var size: Int { self == .float32 ? 4 : 2 }
}

extension FrozenMatrix {
    /// Input rows up to which the block kernels stream the weights (beyond, panels + sgemm win).
    public static let streamingRows = 16

    /// How a streamed product (at most `streamingRows` input rows: decoding) splits its output
    /// rows into parallel pieces: the first piece per core together take `streamHead` of all the
    /// call's rows, and the rest goes in pieces of a share of what is left (remaining / 2·cores),
    /// at least `streamTail` rows; the pieces are claimed in that order, so a core that falls behind
    /// (another process on it, a late start) leaves small pieces for the other instead of half the call.
    ///
    /// A piece has fixed costs besides its rows (its claim on an atomic word both cores write, the
    /// kernel call, its first rows not yet prefetched): pieces of 128 rows against 2048 (Zen 5,
    /// decode tokens/s, `bench decode --prompt-tokens 16 --gen-tokens 64`): Qwen3-0.6B Q4_K q8
    /// 89-91 -> 108-109, float32 68 -> 76. But two equal pieces per call (what 2048 came to on
    /// 2 cores) left the main thread waiting for the other core ~8% of its time on a shared Zen 3
    /// (perf). These pieces, Zen 3, interleaved rounds, mean decode tokens/s: Qwen3-0.6B Q4_K
    /// float32 30.5 -> 32.2 (8 rounds), q8 48.4 -> 50.5 (5), Qwen3-1.7B Q4_K_M float32 11.1 -> 11.6
    /// (5); perf: the main thread's wait 2.0% -> 1.2% of all samples. Tails of 64 or 256 rows were
    /// no better than 128.
    static let streamHead = 0.7, streamTail = 128

    /// The pieces of a streamed product over matrices of `rows` output rows (side by side), in
    /// claim order: (matrix, its rows). Every row in exactly one piece; no piece crosses a matrix.
    static func streamPieces(_ rows: [Int], cores: Int = WorkerPool.threads) -> [(matrix: Int, rows: Range<Int>)] {
        let cores = Swift.max(1, cores), total = rows.reduce(0, +)
        var pieces: [(matrix: Int, rows: Range<Int>)] = []
        var left = total
        for (j, n) in rows.enumerated() {
            var n0 = 0
            while n0 < n {
                let share = pieces.count < cores ? Int(Double(total) * streamHead) / cores : left / (2 * cores)
                var size = Swift.min(n - n0, Swift.max(streamTail, (share + 3) / 4 * 4))
                if n - n0 - size < streamTail / 2 { size = n - n0 }  // no sliver left behind
                pieces.append((j, n0..<(n0 + size)))
                n0 += size
                left -= size
            }
        }
        return pieces
    }

    /// Rows of a panel, a multiple of 16: twice the size of the m rows of activations it meets,
    /// at least 1 MiB of float32 and at most 16 MiB. sgemm packs those activations again for every
    /// panel, so a panel of P rows costs m·k packed floats per 2·m·k·P flops: with 1 MiB panels
    /// a 256-token prefill of the 1B shape re-read its 2 MB of activations every 128 rows (8 MB
    /// every 32 rows in the down-projection), and sgemm's packing was 23% of the pass (perf; half
    /// of it the activations again). 1B shape Q4_K, pp256, float32, five interleaved rounds
    /// (median of bests): 81 -> 96 tokens/s (64 MiB panels: 96 too). Training on SmolLM2 (batch
    /// 4 x 256) within noise either way.
    func panelRows(m: Int) -> Int {
        let floats = Swift.min(1 << 22, Swift.max(1 << 18, 2 * m * columns))
        return Swift.max(16, Swift.min(rows, floats / Swift.max(columns, 1) / 16 * 16))
    }

    /// Hugging Face rows `r` as float32 ([r.count, columns], row-major) into `out`. Float32
    /// storage copies; stored rows are dequantized (bit for bit the reference dequantization).
    public func dequantizeRows(_ r: Range<Int>, into out: UnsafeMutablePointer<Float>) {
        precondition(r.lowerBound >= 0 && r.upperBound <= rows, "[FrozenMatrix] rows \(r) of \(rows)")
        switch storage {
        case .float32(let v):
            v.withUnsafeBufferPointer { (out).update(from: $0.baseAddress! + r.lowerBound * columns, count: r.count * columns) }
        case .stored(let t, let order):
            guard let order else {
                Self.unpack(t, r.lowerBound..<r.upperBound, columns, out)
                return
            }
            for (i, row) in r.enumerated() {
                let s = Int(order[row])
                Self.unpack(t, s..<(s + 1), columns, out + i * columns)
            }
        }
    }

    static func unpack(_ t: StoredTensor, _ r: Range<Int>, _ k: Int, _ out: UnsafeMutablePointer<Float>) {
        let rc = bk_dequantize_rows(t.type.rawValue, t.bytes, t.rowBytes, r.lowerBound, r.upperBound, k, out)
        if rc != 0 { t.dequantizeRows(r, into: out) }  // a type the kernels do not cover: the Swift reference
    }

    /// y[i·ldy + o] = Σ_c x[i·k + c]·W[o, c] for every input row i < m and output row o < rows
    /// (Hugging Face order). Both cores; bits independent of the thread count and of m for
    /// m ≤ `streamingRows` (each output's operations are fixed); more rows take float32 panels
    /// and sgemm (training; the decoder's `FrozenMatrix.multiply([...])` may take the blocks).
    public func multiply(_ x: UnsafePointer<Float>, m: Int, into y: UnsafeMutablePointer<Float>, ldy: Int,
                         activations: ActivationPrecision) {
        if m == 0 || rows == 0 { return }
        if case .stored(let t, _) = storage, m <= Self.streamingRows, bk_type_supported(t.type.rawValue) != 0 {
            Self.multiply([self], x, m: m, into: y, ldy: ldy, activations: activations)
            return
        }
        if case .float32(let v) = storage {
            v.withUnsafeBufferPointer { w in
                BLAS.sgemm(transA: false, transB: true, m: m, n: rows, k: columns, alpha: 1, a: x, lda: columns,
                           b: w.baseAddress!, ldb: columns, beta: 0, c: y, ldc: ldy)
            }
            return
        }
        // panels: y[:, p0..<p1] = x · panelᵀ
        forEachPanel(m: m) { r, panel in
            BLAS.sgemm(transA: false, transB: true, m: m, n: r.count, k: columns, alpha: 1, a: x, lda: columns,
                       b: panel, ldb: columns, beta: 0, c: y + r.lowerBound, ldc: ldy)
        }
    }

    /// Calls `body(rows, panel)` for consecutive panels of `panelRows()` rows, each unpacked (on
    /// every core) into one reused buffer [rows.count, columns].
    func forEachPanel(m: Int, _ body: (Range<Int>, UnsafePointer<Float>) -> Void) {
        let p = panelRows(m: m)
        let panel = UnsafeMutablePointer<Float>.allocate(capacity: p * columns)
        defer { panel.deallocate() }
        var p0 = 0
        while p0 < rows {
            let p1 = Swift.min(rows, p0 + p)
            unpackParallel(p0..<p1, into: panel)
            body(p0..<p1, panel)
            p0 = p1
        }
    }

    /// dx[i·ldx + c] += Σ_o dy[i·ldDy + o]·W[o, c]: the input gradient of `multiply`, a panel of
    /// rows at a time (training's backward through a frozen weight; no gradient for W itself).
    public func multiplyAccumulate(_ dy: UnsafePointer<Float>, m: Int, ldDy: Int, into dx: UnsafeMutablePointer<Float>, ldx: Int) {
        if m == 0 || rows == 0 { return }
        if case .float32(let v) = storage {
            v.withUnsafeBufferPointer { w in
                BLAS.sgemm(transA: false, transB: false, m: m, n: columns, k: rows, alpha: 1, a: dy, lda: ldDy,
                           b: w.baseAddress!, ldb: columns, beta: 1, c: dx, ldc: ldx)
            }
            return
        }
        forEachPanel(m: m) { r, panel in
            BLAS.sgemm(transA: false, transB: false, m: m, n: columns, k: r.count, alpha: 1, a: dy + r.lowerBound, lda: ldDy,
                       b: panel, ldb: columns, beta: 1, c: dx, ldc: ldx)
        }
    }

    /// Rows `r` unpacked on every core, 16 rows per chunk.
    func unpackParallel(_ r: Range<Int>, into out: UnsafeMutablePointer<Float>) {
        let chunk = 16, chunks = (r.count + chunk - 1) / chunk
        WorkerPool.forEach(chunks) { c in
            let a = r.lowerBound + c * chunk, b = Swift.min(r.upperBound, a + chunk)
            dequantizeRows(a..<b, into: out + (a - r.lowerBound) * columns)
        }
    }

    /// Several matrices with the same input, their outputs side by side in y (q|k|v, gate|up):
    /// y[i·ldy + offset_j + o] = Σ_c x[i·k + c]·W_j[o, c]. When every matrix is stored in a type
    /// the block kernels read, up to `streamingRows` rows stream the blocks, and more rows (a
    /// prefill, a long verify pass) go through the same kernels `groupRows` rows at a time when
    /// `manyRows` says so: each block is unpacked once per tile of rows instead of into a float32
    /// panel, and a row's bits are those of a one-row step. All chunks of all matrices run as one
    /// parallel loop (one synchronisation instead of one per matrix).
    public static func multiply(_ matrices: [FrozenMatrix], _ x: UnsafePointer<Float>, m: Int,
                                into y: UnsafeMutablePointer<Float>, ldy: Int, activations: ActivationPrecision = .float32) {
        let path = manyRows
        let blocks = matrices.allSatisfy {
            guard case .stored(let t, _) = $0.storage, bk_type_supported(t.type.rawValue) != 0 else { return false }
            return m <= streamingRows || path.usesBlocks(m: m, type: t.type, activations: activations)
        }
        guard blocks else {
            if m > streamingRows, matrices.allSatisfy(\.isStored) {
                multiplyInPieces(matrices, x, m: m, into: y, ldy: ldy)
                return
            }
            var offset = 0
            for w in matrices {
                w.multiply(x, m: m, into: y + offset, ldy: ldy, activations: activations)
                offset += w.rows
            }
            return
        }
        let k = matrices[0].columns
        let useQ8 = activations == .q8 && k % 32 == 0
        // rows per kernel call: all of them when streaming, else groups whose activations stay in L2
        let group = m <= streamingRows ? m : groupRows(k: k, activations: useQ8 ? .q8 : .float32)
        let groups = (m + group - 1) / group
        // q8: each group's rows quantized once for every matrix, a group's q8 form contiguous
        // (types without a q8 product stay float32); K-quant matrices take the q8k form
        // instead (per-256 scales, integer super-block sums: llama.cpp's q8_K)
        func isQ8K(_ w: FrozenMatrix) -> Bool { if case .stored(let t, _) = w.storage { t.type.hasQ8KProduct } else { false } }
        /// Every group's rows in one form, a group's `groupBytes` contiguous (groups on every core).
        func quantized(_ groupBytes: Int, _ name: String,
                       _ quantize: (UnsafePointer<Float>, Int, Int, UnsafeMutableRawPointer) -> Int32) -> UnsafeMutableRawPointer {
            let q = UnsafeMutableRawPointer.allocate(byteCount: groups * groupBytes, alignment: 64)
            WorkerPool.forEach(groups > 1 ? groups : 1) { g in
                let r0 = g * group
                let rc = quantize(x + r0 * k, Swift.min(group, m - r0), k, q + g * groupBytes)  // (not inside precondition: -Ounchecked skips its condition)
                precondition(rc == 0, "[FrozenMatrix] \(name) refused \(m)x\(k)")
            }
            return q
        }
        let useQ8K = useQ8 && k % 256 == 0 && matrices.contains(where: isQ8K)
        let q8GroupBytes = bk_q8_bytes(group, k), q8kGroupBytes = bk_q8k_bytes(group, k)
        let q8k = useQ8K ? quantized(q8kGroupBytes, "bk_quantize_q8k") { bk_quantize_q8k($0, $1, $2, $3) } : nil
        let q8 = useQ8 && !(useQ8K && matrices.allSatisfy(isQ8K)) ? quantized(q8GroupBytes, "bk_quantize_q8") { bk_quantize_q8($0, $1, $2, $3) } : nil
        defer { q8k?.deallocate(); q8?.deallocate() }
        // chunk c of matrix j: rows [n0, n1) written at y + offset_j (or a scratch row block when
        // the matrix's rows are in llama.cpp's order, scattered afterwards), every group in turn
        // so the chunk's blocks stay in cache. The plan holds plain pointers and numbers: a chunk
        // copying a StoredTensor out of its matrix retained and released its owner and shape,
        // atomics that both cores hit on the same objects thousands of times a token.
        var scratch: [UnsafeMutablePointer<Float>?] = []
        var targets: [(t: StoredTensor, out: UnsafeMutablePointer<Float>, ld: Int)] = []
        var offset = 0
        for w in matrices {
            guard case .stored(let t, let order) = w.storage else { preconditionFailure("[FrozenMatrix] not stored") }
            let tmp: UnsafeMutablePointer<Float>? = order == nil ? nil : .allocate(capacity: m * w.rows)
            scratch.append(tmp)
            targets.append((t, tmp ?? y + offset, tmp == nil ? ldy : w.rows))
            offset += w.rows
        }
        // streaming: `streamPieces`; in groups: each matrix in equal pieces of about
        // `groupedChunk` rows (a multiple of 4), no short tail
        var pieces: [(matrix: Int, rows: Range<Int>)] = []
        if m <= streamingRows {
            pieces = streamPieces(matrices.map(\.rows))
        } else {
            for (j, w) in matrices.enumerated() {
                let count = Swift.max(1, (w.rows + groupedChunk / 2) / groupedChunk)
                let size = ((w.rows + count - 1) / count + 3) / 4 * 4
                for n0 in stride(from: 0, to: w.rows, by: size) { pieces.append((j, n0..<Swift.min(w.rows, n0 + size))) }
            }
        }
        let plan = pieces.map { p in
            let (t, out, ld) = targets[p.matrix]
            return StreamPiece(type: t.type.rawValue, q8k: t.type.hasQ8KProduct, bytes: t.bytes, rowBytes: t.rowBytes,
                               n0: p.rows.lowerBound, n1: p.rows.upperBound, out: out, ld: ld)
        }
        defer { for p in scratch { p?.deallocate() } }
        withExtendedLifetime(matrices) {
            plan.withUnsafeBufferPointer { plan in
                WorkerPool.forEach(plan.count) { c in
                    let p = plan[c]
                    for g in 0..<groups {
                        let r0 = g * group, rows = Swift.min(group, m - r0), out = p.out + r0 * p.ld
                        var rc = Int32(-1)
                        if p.q8k, let q8k {
                            rc = bk_matmul_nt_q8k(p.type, q8k + g * q8kGroupBytes, rows, k, p.bytes, p.rowBytes, p.n0, p.n1, out, p.ld)
                        } else if let q8 {
                            rc = bk_matmul_nt_q8(p.type, q8 + g * q8GroupBytes, rows, k, p.bytes, p.rowBytes, p.n0, p.n1, out, p.ld)
                        }
                        if rc != 0 { rc = bk_matmul_nt(p.type, x + r0 * k, rows, k, p.bytes, p.rowBytes, p.n0, p.n1, out, p.ld) }
                        if rc != 0 { streamFailure(rc, p) }
                    }
                }
            }
        }
        for (j, w) in matrices.enumerated() {
            guard let tmp = scratch[j], case .stored(_, let order?) = w.storage else { continue }
            let at = matrices[..<j].reduce(0) { $0 + $1.rows }
            order.withUnsafeBufferPointer { o in
                for i in 0..<m {
                    let src = tmp + i * w.rows, dst = y + i * ldy + at
                    for r in 0..<w.rows { dst[r] = src[Int(o[r])] }
                }
            }
        }
    }

    /// y = x · Wᵀ for each matrix (side by side in y, as `multiply`) through float32 pieces:
    /// every matrix cut into pieces of `pieceRows` rows, each dequantized and multiplied with one
    /// single-threaded product (bk_gemm on AVX-512, with the activations packed once for all
    /// pieces; else sgemm) by whichever core claims it, all pieces of all matrices in one
    /// parallel loop. Against panels unpacked on every core and then one sgemm split by rows
    /// (`multiply(_:m:into:ldy:activations:)`, which training keeps): no wait between unpacking
    /// and multiplying, one wait per call instead of two per panel, and each weight row packed by
    /// sgemm once instead of once per row block. The pieces depend on m and k alone, never on the
    /// thread count.
    static func multiplyInPieces(_ matrices: [FrozenMatrix], _ x: UnsafePointer<Float>, m: Int,
                                 into y: UnsafeMutablePointer<Float>, ldy: Int) {
        // bk_gemm's packed copy of the activations is m·k floats: a long prompt goes
        // `packedRows` rows at a time, so that copy stays bounded (each row's bits are its own)
        let gemm = usesGemm
        if gemm, m > packedRows {
            for r0 in stride(from: 0, to: m, by: packedRows) {
                multiplyInPieces(matrices, x + r0 * matrices[0].columns, m: Swift.min(packedRows, m - r0), into: y + r0 * ldy, ldy: ldy)
            }
            return
        }
        let k = matrices[0].columns, size = pieceRows(m: m, k: k, rows: matrices.reduce(0) { $0 + $1.rows })
        var pieces: [(matrix: Int, rows: Range<Int>, column: Int)] = []
        var offset = 0
        for (j, w) in matrices.enumerated() {
            precondition(w.columns == k, "[FrozenMatrix] matrices of \(matrices.map(\.columns)) columns share one input")
            var n0 = 0
            while n0 < w.rows {
                let n1 = Swift.min(w.rows, n0 + size)
                pieces.append((j, n0..<n1, offset + n0))
                n0 = n1
            }
            offset += w.rows
        }
        let packed = gemm ? PieceBuffers.shared.take(bk_gemm_packed_floats(m, k)) : nil
        defer { if let packed { PieceBuffers.shared.give(packed) } }
        if let packed {
            let parts = bk_gemm_pack_parts(k)
            WorkerPool.forEach(parts) { part in bk_gemm_pack(x, k, m, k, part, parts, packed.pointer) }
        }
        WorkerPool.forEach(pieces.count) { i in
            let piece = pieces[i], n = piece.rows.count
            let scratch = packed == nil ? 0 : bk_gemm_scratch_floats(m, n)
            let panel = PieceBuffers.shared.take(n * k + scratch)
            defer { PieceBuffers.shared.give(panel) }
            matrices[piece.matrix].dequantizeRows(piece.rows, into: panel.pointer)
            if let packed {
                bk_gemm(packed.pointer, m, k, panel.pointer, k, 1, n, y + piece.column, ldy, panel.pointer + n * k)
            } else {
                BLAS.sgemmOneThread(transA: false, transB: true, m: m, n: n, k: k, alpha: 1, a: x, lda: k,
                                    b: panel.pointer, ldb: k, beta: 0, c: y + piece.column, ldc: ldy)
            }
        }
    }

    /// Whether float32 products of many rows go through CBlockKernels' bk_gemm (from AVX-512 up:
    /// the activations packed once for every piece, where OpenBLAS packed them again for each piece
    /// and each piece's weights too; Qwen3-0.6B's float32 prefill ran 16-18% faster, gemm.c) or
    /// OpenBLAS's sgemm (below: faster than an AVX2 bk_gemm). `multiplyInPieces` and a prompt's
    /// blocked attention both follow it.
    public static var usesGemm: Bool { bk_active_level() >= Int32(BK_LEVEL_AVX512) }

    /// Input rows `multiplyInPieces` packs at a time on AVX-512 (the packed copy: at most 1,024·k
    /// floats, 32 MiB for Phi-4-mini's down-projection); each piece's weights are unpacked once
    /// per such block of rows.
    static let packedRows = 1024

    /// Weight rows of a piece (`multiplyInPieces`) of a call with `rows` output rows in all: as
    /// many as the input rows (sgemm packs the piece's weights and the m rows of activations once
    /// each, so packing costs two rows per weight row whatever m is), but at least 4 pieces in the
    /// call (so that the cores finish together) and at most 16 MiB of float32; at least 64 rows,
    /// a multiple of 16.
    static func pieceRows(m: Int, k: Int, rows: Int) -> Int {
        let most = Swift.max(16, (1 << 22) / Swift.max(k, 1) / 16 * 16)
        func rounded(_ n: Int) -> Int { (Swift.max(64, n) + 15) / 16 * 16 }
        return Swift.min(most, rounded(m), rounded((rows + 3) / 4))
    }

    /// One parallel chunk of a streamed product: output rows [n0, n1) of one stored matrix.
    struct StreamPiece {
        let type: UInt32, q8k: Bool, bytes: UnsafeRawPointer, rowBytes: Int, n0: Int, n1: Int
        let out: UnsafeMutablePointer<Float>, ld: Int
    }

    @inline(never)
    static func streamFailure(_ rc: Int32, _ p: StreamPiece) -> Never {
        preconditionFailure("[FrozenMatrix] bk_matmul_nt returned \(rc) for type \(p.type), rows \(p.n0)..<\(p.n1)")
    }

    /// Output rows per parallel chunk when rows go in groups (finer than streaming's pieces: a
    /// chunk is m times the work, and the two cores should finish together).
    static let groupedChunk = 32

    /// Input rows per block-kernel call beyond `streamingRows`: about 256 KiB of activations (so
    /// they stay in L2 while a chunk's weight rows pass over them), 8 to 64, a multiple of 8.
    static func groupRows(k: Int, activations: ActivationPrecision) -> Int {
        let bytesPerRow = activations == .q8 ? k + k / 2 : 4 * k
        return Swift.max(8, Swift.min(64, (1 << 18) / Swift.max(bytesPerRow, 1) / 8 * 8))
    }

    /// How products of more than `streamingRows` input rows with stored matrices are computed
    /// (scoped like `withThreads`; benchmarks compare the two ways).
    @TaskLocal public static var manyRows: ManyRowsPath = .auto
}

/// A float buffer for the C kernels whose first float lies at a 64-byte boundary: a vector of 16
/// floats at a multiple of 16 then lies in one cache line. malloc's 16-byte alignment split every
/// such load and store in two lines (Zen 5: bk_gemm ~1% slower, the dequantization into a panel
/// ~10%, a Qwen3-0.6B float32 prefill ~2%). Taken from malloc (16-byte aligned) with 48 bytes to
/// spare rather than through posix_memalign, after which freed blocks were reused less well
/// (KVCache).
public struct AlignedFloats: @unchecked Sendable {
    public let pointer: UnsafeMutablePointer<Float>
    private let base: UnsafeMutableRawPointer

    public init(_ count: Int) {
        base = .allocate(byteCount: Swift.max(count, 1) * MemoryLayout<Float>.stride + 48, alignment: 16)
        let skip = (64 - Int(bitPattern: base) % 64) % 64
        pointer = (base + skip).bindMemory(to: Float.self, capacity: count)
    }

    public func deallocate() { base.deallocate() }
}

/// Float32 buffers for the pieces of `FrozenMatrix.multiplyInPieces`, kept for the next call: a
/// piece allocating and freeing its own spent ~5% of a Qwen3-0.6B prefill in the kernel zeroing
/// fresh pages (perf: clear_page_erms, on the thread whose heap returned them). At most `kept`
/// buffers wait here: one per core, as many as pieces run at once (each at most 16 MiB; 1-4 MiB
/// on Qwen3-0.6B's prefill), and one for the packed activations bk_gemm reads.
final class PieceBuffers: Sendable {
    static let shared = PieceBuffers()
    static let kept = Swift.min(8, Swift.max(2, ProcessInfo.processInfo.activeProcessorCount)) + 1

    struct Buffer: Sendable {
        let memory: AlignedFloats
        let capacity: Int
        var pointer: UnsafeMutablePointer<Float> { memory.pointer }
    }

    /// The free buffers.
    private let free = Mutex<[Buffer]>([])

    /// A buffer of at least `count` floats: a kept one when one is large enough, else a new one.
    func take(_ count: Int) -> Buffer {
        let reused = free.withLock { list -> Buffer? in
            guard let i = list.firstIndex(where: { $0.capacity >= count }) else { return nil }
            return list.remove(at: i)
        }
        return reused ?? Buffer(memory: AlignedFloats(count), capacity: count)
    }

    /// Returns a buffer from `take`; beyond `kept` waiting, the smallest is freed.
    func give(_ b: Buffer) {
        let dropped = free.withLock { list -> Buffer? in
            list.append(b)
            guard list.count > Self.kept, let i = list.indices.min(by: { list[$0].capacity < list[$1].capacity }) else { return nil }
            return list.remove(at: i)
        }
        dropped?.memory.deallocate()
    }
}

/// How a frozen matrix is multiplied with more than `FrozenMatrix.streamingRows` input rows.
public enum ManyRowsPath: String, Sendable, CaseIterable {
    /// Whichever measured faster for the row count and activation mode (`usesBlocks`).
    case auto
    /// The block kernels, a group of rows at a time (the bits of one-row steps).
    case blocks
    /// Pieces of rows unpacked to float32 and multiplied (`multiplyInPieces`: bk_gemm on
    /// AVX-512, sgemm below).
    case panels

    /// Input rows up to which `auto` takes the block kernels (0: never beyond `streamingRows`),
    /// by the level the kernels run at (`bk_active_level`).
    ///
    /// AVX-512 (measured with `bench decode --many-rows blocks|panels`, 2 threads, AVX-512 with
    /// VNNI, 2026-11-25, a busy machine, best of 3-5): q8 activations ran 2.5-2.7x faster through
    /// the blocks on the 1B shape (Q4_K) at 64 and 128 rows and 1.3-1.5x on SmolLM2 (Q4_1) at 64
    /// and 256. Float32 activations on Q4_K: 1.3x at 64 and 128 rows, even at 256; on Q4_1 the
    /// panels were 5-12% ahead at 32-256 rows (its per-block min term is a fourth
    /// floating-point operation per 32 values where Q4_K has three). On the Qwen2.5-0.5B shape's
    /// make-model q4_K file (145 of 169 matrices Q5_0, the rest Q4_K; 2026-11-27, busy machine,
    /// pp256, all matrices forced one way) the panels won: q8 237 tokens/s against 141 through the
    /// blocks, float32 217 against 104; so Q5_0 stays on the panels, and the other types added
    /// since (Q5_1, IQ4_NL, Q2_K, Q3_K) too (not measured).
    ///
    /// AVX2 (Zen 3, 2026-11-29, the same command, two interleaved rounds, prefill tokens/s): the
    /// float32 tiles lost to the panels at every size, Qwen3-0.6B Q4_K 32 rows 63-67 against
    /// 74-82, 64 rows 51-54 / 72-91, 128 rows 55-65 / 85-92, 256 rows 54-68 / 96-115, and
    /// Qwen3-1.7B Q4_K_M 128 rows 19-20 / 36-41; q8 through the blocks won at 64 rows (125-127
    /// / 87-91) and was level at 256 and 512. So float32 takes the panels here. After the panels
    /// became per-core pieces (`multiplyInPieces`; two interleaved rounds, the same command): q8
    /// through the blocks against the pieces, Qwen3-0.6B 128 rows 120.7-125.7 / 115.8-116.6, 256
    /// rows 133.8-134.5 / 118.7-126.2, 512 rows 113.5-120.8 / 121.6-130.7; Qwen3-1.7B 256 rows
    /// 44.2-46.7 / 44.5-46.8, 384 rows 42.0-44.3 / 44.7-47.0, 512 rows 40.9-42.8 / 45.4-47.2. So
    /// q8 takes the blocks up to 256 rows here.
    ///
    /// AVX-512 after float32 pieces moved to bk_gemm (Zen 5, 2026-11-29, the same command, two
    /// rounds, prefill tokens/s, blocks / pieces): float32 Qwen3-0.6B Q4_K 17 rows 141.0 / 173.7,
    /// 24 rows 137.6 / 244.2, 32 rows 143.2-139.6 / 337.2-308.3, 64 rows 144.9-163.4 /
    /// 337.6-347.0, 128 rows 137.5-142.3 / 370.8-410.0; Qwen3-1.7B Q4_K_M (Q4_K and Q6_K) 32 rows
    /// 47.7-51.6 / 113.1-116.2, 128 rows 47.5-51.2 / 136.3-137.2. So float32 takes the pieces
    /// beyond `streamingRows` at every level. q8 through the blocks still won (Qwen3-0.6B 64 rows
    /// 452.4 / 372.5, 256 rows 454.2 / 394.7, 512 rows 422.6 / 355.5).
    ///
    /// Portable (the same CPU at ADAPTER_CPU_LEVEL=portable, Qwen3-0.6B, 64 rows): the panels
    /// (OpenBLAS's kernels for the level) 43.6 tokens/s against 13.1 through the blocks with
    /// float32, 59.3 against 2.2 with q8: every product beyond `streamingRows` takes the panels.
    ///
    /// AVX-512 VNNI after the q8k kernels took 16 rows per vector for Q4_K and Q5_K (Zen 5,
    /// 2026-11-29, 1,024-token prompts, q8, auto (the pieces) / blocks): Qwen3-0.6B 386.1-386.4 /
    /// 560.3-567.0 tokens/s, Qwen3-1.7B Q4_K_M (Q4_K and Q6_K) 147.7 / 230.0. So the K-quants with
    /// q8 take the blocks at every row count there.
    public static func blockRowsLimit(_ type: GGMLType, _ activations: ActivationPrecision,
                                      level: Int32 = bk_active_level()) -> Int {
        if level <= Int32(BK_LEVEL_PORTABLE) { return 0 }
        switch (activations, type) {
        case (.q8, .q4_K), (.q8, .q5_K), (.q8, .q6_K):
            return level >= Int32(BK_LEVEL_AVX512_VNNI) ? .max : level >= Int32(BK_LEVEL_AVX512) ? 512 : 256
        case (.q8, .q8_0), (.q8, .q4_0), (.q8, .q4_1):
            return level >= Int32(BK_LEVEL_AVX512) ? 512 : 256
        default: return 0
        }
    }

    func usesBlocks(m: Int, type: GGMLType, activations: ActivationPrecision) -> Bool {
        switch self {
        case .auto: m <= Self.blockRowsLimit(type, activations)
        case .blocks: true
        case .panels: false
        }
    }
}

/// The training path multiplies by a stored base weight through Autograd's frozen ops.
extension FrozenMatrix: FrozenLinearWeight {
    public func unpackRows(_ r: Range<Int>, into out: UnsafeMutablePointer<Float>) { unpackParallel(r, into: out) }
    public func multiply(_ x: UnsafePointer<Float>, m: Int, into y: UnsafeMutablePointer<Float>, ldy: Int) {
        multiply(x, m: m, into: y, ldy: ldy, activations: .float32)
    }
}

extension GGMLType {
    /// The types bk_matmul_nt_q8k multiplies (the K-quants).
    var hasQ8KProduct: Bool { self == .q4_K || self == .q5_K || self == .q6_K }
}
