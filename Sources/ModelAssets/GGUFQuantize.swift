// Quantizing Float rows into ggml's blocks (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), laid out as the structs in GGUFQuantBlocks.swift state, rows
// spread over threads. Importance matrices and the other ggml types (the other IQ*, TQ*, ...) are
// left out. The choice of scales
// follows the design of ggml-quants.c's reference quantizers (K-quants: a search over sub-block
// steps with a least-squares refit, then 6- or 8-bit sub-block scales); the code is our own.
import Foundation

public enum Quantize {
    /// The types `run` writes: exactly the ones `Dequantize` reads back.
    public static let types: [GGMLType] = [.f32, .f16, .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K]

    /// Bytes that `rows` rows of `k` values take as `type`; throws if `type` cannot hold such rows.
    public static func byteCount(_ type: GGMLType, rows: Int, k: Int, tensor: String) throws -> Int {
        try check(type, rows: rows, k: k, tensor: tensor)
        let (blockSize, typeSize) = type.blockGeometry
        return rows * (k / blockSize) * typeSize
    }

    /// Throws `cannotQuantize` naming `tensor` unless rows of `k` values can be stored as `type`.
    public static func check(_ type: GGMLType, rows: Int, k: Int, tensor: String) throws {
        guard types.contains(type) else {
            throw ModelAssetsError.cannotQuantize(
                tensor: tensor, type: type.name, reason: "this package writes only \(types.map(\.name).joined(separator: ", "))")
        }
        guard rows >= 0, k >= 1 else {
            throw ModelAssetsError.cannotQuantize(tensor: tensor, type: type.name, reason: "\(rows) rows of \(k) values is not a tensor shape")
        }
        let blockSize = type.blockGeometry.blockSize
        guard k % blockSize == 0 else {
            throw ModelAssetsError.cannotQuantize(
                tensor: tensor, type: type.name,
                reason: "its rows of \(k) values are not a whole number of \(type.name)'s \(blockSize)-value blocks; pick a type whose block size divides \(k) (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: 32; F32, F16, BF16: any)")
        }
    }

    /// Quantizes `rows` rows of `k` values (row-major, `values.count == rows * k`) into `out`
    /// (`byteCount` bytes), block after block as ggml lays them out. Rows are split into `threads`
    /// contiguous ranges; the bytes do not depend on `threads`. Block types refuse non-finite
    /// values and values too large for their fp16 scales, naming the row and column.
    public static func run(_ type: GGMLType, rows: Int, k: Int, values: UnsafeBufferPointer<Float>,
                           into out: UnsafeMutableRawBufferPointer, tensor: String,
                           threads: Int = ProcessInfo.processInfo.activeProcessorCount) throws {
        let bytes = try byteCount(type, rows: rows, k: k, tensor: tensor)
        precondition(values.count == rows * k && out.count >= bytes,
                     "[Quantize] \(tensor): \(values.count) values and \(out.count) bytes for \(rows)x\(k) as \(type)")
        guard rows > 0, let src = values.baseAddress, let dst = out.baseAddress else { return }
        let rowBytes = bytes / rows
        let chunks = max(1, min(threads, rows))
        let failures = ResultSlots<Void>(count: chunks)
        let buffers = WorkerBuffers(source: src, destination: dst)  // each worker touches its own rows only
        let work: @Sendable (Int) -> Void = { c in
            let start = rows * c / chunks, end = rows * (c + 1) / chunks
            failures.set(c, Result {
                for r in start..<end {
                    try quantizeRow(type, buffers.source + r * k, buffers.destination + r * rowBytes, k: k, row: r, tensor: tensor)
                }
            })
        }
        if chunks == 1 { work(0) } else { DispatchQueue.concurrentPerform(iterations: chunks, execute: work) }
        for c in 0..<chunks { try failures.get(c) }  // the first failing range's error, whatever the timing
    }

    /// `run` on an array, returning the encoded bytes.
    public static func run(_ type: GGMLType, rows: Int, k: Int, values: [Float], tensor: String,
                           threads: Int = ProcessInfo.processInfo.activeProcessorCount) throws -> [UInt8] {
        let count = try byteCount(type, rows: rows, k: k, tensor: tensor)
        guard values.count == rows * k else {
            throw ModelAssetsError.cannotQuantize(tensor: tensor, type: type.name, reason: "\(values.count) values do not make \(rows) rows of \(k)")
        }
        var out = [UInt8](repeating: 0, count: count)
        try values.withUnsafeBufferPointer { v in
            try out.withUnsafeMutableBytes { try run(type, rows: rows, k: k, values: v, into: $0, tensor: tensor, threads: threads) }
        }
        return out
    }

    // MARK: rows

    private static func quantizeRow(_ type: GGMLType, _ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer,
                                    k: Int, row: Int, tensor: String) throws {
        switch type {
        case .f32:
            for i in 0..<k { p.storeBytes(of: x[i].bitPattern.littleEndian, toByteOffset: 4 * i, as: UInt32.self) }
            return
        case .f16:
            for i in 0..<k { p.storeBytes(of: HalfFloat.f16(from: x[i]).littleEndian, toByteOffset: 2 * i, as: UInt16.self) }
            return
        case .bf16:
            for i in 0..<k { p.storeBytes(of: HalfFloat.bf16(from: x[i]).littleEndian, toByteOffset: 2 * i, as: UInt16.self) }
            return
        default:
            break
        }
        let (blockSize, typeSize) = type.blockGeometry
        for b in 0..<(k / blockSize) {
            let xb = x + b * blockSize
            var sumAbs: Float = 0  // NaN or infinity anywhere makes it non-finite
            for i in 0..<blockSize { sumAbs += abs(xb[i]) }
            guard sumAbs.isFinite else {
                let column = (0..<blockSize).first { !xb[$0].isFinite || abs(xb[$0]) > Float.greatestFiniteMagnitude / Float(blockSize) } ?? 0
                throw ModelAssetsError.cannotQuantize(
                    tensor: tensor, type: type.name,
                    reason: "row \(row), column \(b * blockSize + column) holds \(xb[column]); block types need finite values")
            }
            let pb = p + b * typeSize
            let ok: Bool
            switch type {
            case .q8_0: ok = q8_0(xb, pb)
            case .q4_0: ok = q4_0(xb, pb)
            case .q4_1: ok = q4_1(xb, pb)
            case .q5_0: ok = q5_0(xb, pb)
            case .q5_1: ok = q5_1(xb, pb)
            case .iq4_NL: ok = iq4_NL(xb, pb)
            case .q2_K: ok = q2_K(xb, pb)
            case .q3_K: ok = q3_K(xb, pb)
            case .q4_K: ok = kAsymmetric(xb, pb, bits: 4)
            case .q5_K: ok = kAsymmetric(xb, pb, bits: 5)
            case .q6_K: ok = q6_K(xb, pb)
            default: preconditionFailure("[Quantize] \(type) passed check but has no block quantizer")
            }
            guard ok else {
                let largest = (0..<blockSize).map { abs(xb[$0]) }.max() ?? 0
                throw ModelAssetsError.cannotQuantize(
                    tensor: tensor, type: type.name,
                    reason: "row \(row), columns \(b * blockSize)..<\((b + 1) * blockSize) reach \(largest), beyond what \(type.name)'s fp16 scales can represent; store this tensor as F32 or BF16")
            }
        }
    }

    // MARK: blocks of 32

    @inline(__always)
    private static func store16(_ p: UnsafeMutableRawPointer, _ offset: Int, _ v: UInt16) {
        p.storeBytes(of: v.littleEndian, toByteOffset: offset, as: UInt16.self)
    }

    /// Rounds half-way cases to even; every code below is rounded this way.
    @inline(__always)
    private static func nearest(_ v: Float, _ lo: Float, _ hi: Float) -> Float {
        min(max(v.rounded(.toNearestOrEven), lo), hi)
    }

    /// The value of largest magnitude, with its sign (the first one on ties).
    @inline(__always)
    private static func signedMax(_ x: UnsafePointer<Float>, _ n: Int) -> Float {
        var best: Float = 0
        for i in 0..<n where abs(x[i]) > abs(best) { best = x[i] }
        return best
    }

    /// d = max|x| / 127 in fp16, q = x / d rounded: every value within d/2 of its code.
    private static func q8_0(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        var amax: Float = 0
        for i in 0..<32 { amax = max(amax, abs(x[i])) }
        let d16 = HalfFloat.f16(from: amax / 127)
        let d = HalfFloat.float(fromF16: d16)
        guard d.isFinite else { return false }
        store16(p, BlockLayout.q8_0.d, d16)
        let qs = (p + BlockLayout.q8_0.qs).assumingMemoryBound(to: Int8.self)
        for i in 0..<32 { qs[i] = d == 0 ? 0 : Int8(nearest(x[i] / d, -127, 127)) }
        return true
    }

    /// ggml's convention: the value of largest magnitude maps to code -8 exactly (d = it / -8), so
    /// the other side reaches only +7: a value of equal magnitude and opposite sign is off by d.
    private static func q4_0(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        let d16 = HalfFloat.f16(from: signedMax(x, 32) / -8)
        let d = HalfFloat.float(fromF16: d16)
        guard d.isFinite else { return false }
        store16(p, BlockLayout.q4_0.d, d16)
        let qs = (p + BlockLayout.q4_0.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            let lo = d == 0 ? 8 : UInt8(nearest(x[j] / d, -8, 7) + 8)
            let hi = d == 0 ? 8 : UInt8(nearest(x[j + 16] / d, -8, 7) + 8)
            qs[j] = lo | hi << 4
        }
        return true
    }

    /// A 32-value block's minimum m and step d = (max - min) / steps, both rounded to fp16 (their
    /// bits and values); nil when either is not finite in fp16. Q4_1 and Q5_1 (15 and 31 steps).
    private static func minAndStep(_ x: UnsafePointer<Float>, steps: Float) -> (d16: UInt16, m16: UInt16, d: Float, m: Float)? {
        var lo = x[0], hi = x[0]
        for i in 1..<32 { lo = min(lo, x[i]); hi = max(hi, x[i]) }
        let d16 = HalfFloat.f16(from: (hi - lo) / steps), m16 = HalfFloat.f16(from: lo)
        let d = HalfFloat.float(fromF16: d16), m = HalfFloat.float(fromF16: m16)
        guard d.isFinite, m.isFinite else { return nil }
        return (d16, m16, d, m)
    }

    /// m = min in fp16, d = (max - min) / 15 in fp16, q = (x - m) / d rounded.
    private static func q4_1(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        guard let (d16, m16, d, m) = minAndStep(x, steps: 15) else { return false }
        store16(p, BlockLayout.q4_1.d, d16)
        store16(p, BlockLayout.q4_1.m, m16)
        let qs = (p + BlockLayout.q4_1.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            let a = d == 0 ? 0 : UInt8(nearest((x[j] - m) / d, 0, 15))
            let b = d == 0 ? 0 : UInt8(nearest((x[j + 16] - m) / d, 0, 15))
            qs[j] = a | b << 4
        }
        return true
    }

    /// Q4_0's convention with 5 bits: the value of largest magnitude maps to code -16 exactly
    /// (d = it / -16), codes -16...15 stored as q = code + 16, the fifth bits gathered into `qh`.
    private static func q5_0(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        let d16 = HalfFloat.f16(from: signedMax(x, 32) / -16)
        let d = HalfFloat.float(fromF16: d16)
        guard d.isFinite else { return false }
        store16(p, BlockLayout.q5_0.d, d16)
        var q = SIMD32<UInt8>(repeating: 16)
        if d != 0 { for i in 0..<32 { q[i] = UInt8(nearest(x[i] / d, -16, 15) + 16) } }
        packFiveBits(q, qh: p + BlockLayout.q5_0.qh, qs: p + BlockLayout.q5_0.qs)
        return true
    }

    /// Q4_1's with 5 bits: m = min in fp16, d = (max - min) / 31 in fp16, q = (x - m) / d rounded.
    private static func q5_1(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        guard let (d16, m16, d, m) = minAndStep(x, steps: 31) else { return false }
        store16(p, BlockLayout.q5_1.d, d16)
        store16(p, BlockLayout.q5_1.m, m16)
        var q = SIMD32<UInt8>(repeating: 0)
        if d != 0 { for i in 0..<32 { q[i] = UInt8(nearest((x[i] - m) / d, 0, 31)) } }
        packFiveBits(q, qh: p + BlockLayout.q5_1.qh, qs: p + BlockLayout.q5_1.qs)
        return true
    }

    /// 32 five-bit codes into Q5_0/Q5_1's halves: low nibbles as Q4_0 (byte j holds codes j and
    /// j + 16), and the fifth bit of code i as bit i of the little-endian word at `qh`.
    private static func packFiveBits(_ q: SIMD32<UInt8>, qh: UnsafeMutableRawPointer, qs: UnsafeMutableRawPointer) {
        var high: UInt32 = 0
        for i in 0..<32 { high |= UInt32(q[i] >> 4) << i }
        qh.storeBytes(of: high.littleEndian, as: UInt32.self)
        let nibbles = qs.assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 { nibbles[j] = (q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4 }
    }

    // MARK: K-quants (super-blocks of 256)

    /// Steps tried per sub-block: (nmax + δ) / range for δ = -1.0, -0.8, ..., +1.0 (δ = 0 is plain
    /// min/max rounding, so the search is never worse than it). On Gaussian rows this grid gives
    /// Q4_K a relative RMS error of 0.0689 against 0.0688 with ggml's finer 0.1 grid (0.0730 with
    /// no search) at half the cost.
    private static let asymmetricSteps: [Float] = (-5...5).map { Float($0) / 5 }

    /// Q6_K's trial steps around the largest value: -(32 + δ) / max for δ = -0.9, -0.6, ..., +0.9
    /// (as good as a 0.1 grid on Gaussian rows: 0.01658 relative RMS error; 0.0176 with no search).
    private static let symmetricSteps: [Float] = (-3...3).map { Float($0) * 0.3 }

    // Lane-wise helpers that compile to single vector instructions (the generic SIMD
    // `pointwiseMin`/`clamped`/`min()` are left as out-of-line calls, 3x slower here).
    @inline(__always) private static func lanesMin(_ a: SIMD8<Float>, _ b: SIMD8<Float>) -> SIMD8<Float> { a.replacing(with: b, where: b .< a) }
    @inline(__always) private static func lanesMax(_ a: SIMD8<Float>, _ b: SIMD8<Float>) -> SIMD8<Float> { a.replacing(with: b, where: b .> a) }
    @inline(__always) private static func smallest(_ v: SIMD8<Float>) -> Float {
        var m = v[0]
        for i in 1..<8 where v[i] < m { m = v[i] }
        return m
    }
    @inline(__always) private static func largest(_ v: SIMD8<Float>) -> Float {
        var m = v[0]
        for i in 1..<8 where v[i] > m { m = v[i] }
        return m
    }

    /// Best (scale, min) with x ≈ scale·q - min, q in 0...nmax, min ≥ 0 (the format stores mins
    /// unsigned): for each trial step, round to codes, then refit scale and offset by least
    /// squares on those codes; keep the fit with the smallest squared error. 32 values.
    private static func fitAsymmetric(_ x: UnsafePointer<Float>, nmax: Float) -> (scale: Float, min: Float) {
        let raw = UnsafeRawPointer(x)
        let v0 = raw.loadUnaligned(fromByteOffset: 0, as: SIMD8<Float>.self)
        let v1 = raw.loadUnaligned(fromByteOffset: 32, as: SIMD8<Float>.self)
        let v2 = raw.loadUnaligned(fromByteOffset: 64, as: SIMD8<Float>.self)
        let v3 = raw.loadUnaligned(fromByteOffset: 96, as: SIMD8<Float>.self)
        let lo = min(0, smallest(lanesMin(lanesMin(v0, v1), lanesMin(v2, v3))))
        let hi = largest(lanesMax(lanesMax(v0, v1), lanesMax(v2, v3)))
        guard hi > lo else { return (0, -lo) }  // every value equals lo (≤ 0)
        let sx = (v0 + v1 + v2 + v3).sum()
        let sxx = (v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3).sum()
        let n: Float = 32
        var best = (scale: (hi - lo) / nmax, min: -lo, error: Float.infinity)
        let top = SIMD8<Float>(repeating: nmax)
        let d0 = v0 - lo, d1 = v1 - lo, d2 = v2 - lo, d3 = v3 - lo  // ≥ 0, so codes need no lower clamp
        for delta in asymmetricSteps {
            let iscale = (nmax + delta) / (hi - lo)
            let l0 = lanesMin((d0 * iscale).rounded(.toNearestOrEven), top)
            let l1 = lanesMin((d1 * iscale).rounded(.toNearestOrEven), top)
            let l2 = lanesMin((d2 * iscale).rounded(.toNearestOrEven), top)
            let l3 = lanesMin((d3 * iscale).rounded(.toNearestOrEven), top)
            let sl = (l0 + l1 + l2 + l3).sum()
            let sll = (l0 * l0 + l1 * l1 + l2 * l2 + l3 * l3).sum()
            let sxl = (v0 * l0 + v1 * l1 + v2 * l2 + v3 * l3).sum()
            let det = n * sll - sl * sl
            guard det > 0 else { continue }
            var a = (n * sxl - sx * sl) / det
            var b = (sx - a * sl) / n
            if b > 0 {  // the offset -min must not be positive
                b = 0
                a = sxl / sll
            }
            guard a > 0 else { continue }
            // Σ(a·l + b - x)² from the sums, without another pass
            let error = a * a * sll + 2 * a * b * sl + n * b * b - 2 * a * sxl - 2 * b * sx + sxx
            if error < best.error { best = (a, -b, error) }
        }
        return (best.scale, best.min)
    }

    /// Q4_K (bits 4) and Q5_K (bits 5): per sub-block of 32 a (scale, min) fit, both quantized to 6
    /// bits against fp16 super-block scales d = max scale / 63 and dmin = max min / 63, then codes
    /// rounded against the stored scales.
    private static func kAsymmetric(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer, bits: Int) -> Bool {
        let nmax = Float((1 << bits) - 1)
        var scales = SIMD8<Float>(), mins = SIMD8<Float>()
        for j in 0..<8 { (scales[j], mins[j]) = fitAsymmetric(x + 32 * j, nmax: nmax) }
        let d16 = HalfFloat.f16(from: largest(scales) / 63), dmin16 = HalfFloat.f16(from: largest(mins) / 63)
        let d = HalfFloat.float(fromF16: d16), dmin = HalfFloat.float(fromF16: dmin16)
        guard d.isFinite, dmin.isFinite else { return false }
        var sc = SIMD8<UInt8>(), mn = SIMD8<UInt8>()
        for j in 0..<8 {
            sc[j] = d > 0 ? UInt8(nearest(scales[j] / d, 0, 63)) : 0
            mn[j] = dmin > 0 ? UInt8(nearest(mins[j] / dmin, 0, 63)) : 0
        }
        let layout = bits == 4
            ? (d: BlockLayout.q4_K.d, dmin: BlockLayout.q4_K.dmin, scales: BlockLayout.q4_K.scales, qs: BlockLayout.q4_K.qs, qh: -1)
            : (d: BlockLayout.q5_K.d, dmin: BlockLayout.q5_K.dmin, scales: BlockLayout.q5_K.scales, qs: BlockLayout.q5_K.qs, qh: BlockLayout.q5_K.qh)
        store16(p, layout.d, d16)
        store16(p, layout.dmin, dmin16)
        packScalesK4(sc, mn, into: (p + layout.scales).assumingMemoryBound(to: UInt8.self))
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { q in
            for s in 0..<8 {
                // the dequantizer's own products, so each code is the nearest level it will compute
                let step = d * Float(sc[s]), offset = dmin * Float(mn[s])
                for l in 0..<32 {
                    q[32 * s + l] = step == 0 ? 0 : UInt8(nearest((x[32 * s + l] + offset) / step, 0, nmax))
                }
            }
            let qs = (p + layout.qs).assumingMemoryBound(to: UInt8.self)
            for g in 0..<4 {  // group g: sub-block 2g in the low nibbles of qs[32g...], 2g+1 in the high
                for l in 0..<32 { qs[32 * g + l] = (q[64 * g + l] & 0x0F) | (q[64 * g + 32 + l] & 0x0F) << 4 }
            }
            if layout.qh >= 0 {  // Q5_K: bit s of qh[l] is the fifth bit of value l of sub-block s
                let qh = (p + layout.qh).assumingMemoryBound(to: UInt8.self)
                for l in 0..<32 {
                    var h: UInt8 = 0
                    for s in 0..<8 { h |= (q[32 * s + l] >> 4) << s }
                    qh[l] = h
                }
            }
        }
        return true
    }

    /// The inverse of `Dequantize.scaleMin`: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales)
    /// and 4-7 (mins); sub-blocks 4-7 split into a low nibble in bytes 8-11 and two high bits on top
    /// of bytes 0-3 (scales) and 4-7 (mins).
    static func packScalesK4(_ sc: SIMD8<UInt8>, _ m: SIMD8<UInt8>, into q: UnsafeMutablePointer<UInt8>) {
        for j in 0..<4 {
            q[j] = sc[j] & 63
            q[j + 4] = m[j] & 63
        }
        for j in 4..<8 {
            q[j + 4] = (sc[j] & 0x0F) | (m[j] & 0x0F) << 4
            q[j - 4] |= (sc[j] >> 4) << 6
            q[j] |= (m[j] >> 4) << 6
        }
    }

    /// Best signed scale with x ≈ scale·c, c in -half...half-1 (Q6_K: 32, Q3_K: 4), for 16
    /// values: the value of largest magnitude maps near code -half (the side with one more level);
    /// trial steps around that, each refit by least squares (scale = Σxc / Σc²), keeping the
    /// largest (Σxc)² / Σc².
    private static func fitSymmetric16(_ x: UnsafePointer<Float>, half: Float) -> Float {
        let extreme = signedMax(x, 16)
        guard extreme != 0 else { return 0 }
        let raw = UnsafeRawPointer(x)
        let v0 = raw.loadUnaligned(fromByteOffset: 0, as: SIMD8<Float>.self)
        let v1 = raw.loadUnaligned(fromByteOffset: 32, as: SIMD8<Float>.self)
        let low = SIMD8<Float>(repeating: -half), high = SIMD8<Float>(repeating: half - 1)
        var bestScale: Float = extreme / -half, bestGain: Float = -1
        for delta in symmetricSteps {
            let iscale = -(half + delta) / extreme
            let c0 = lanesMax(lanesMin((v0 * iscale).rounded(.toNearestOrEven), high), low)
            let c1 = lanesMax(lanesMin((v1 * iscale).rounded(.toNearestOrEven), high), low)
            let sxc = (v0 * c0 + v1 * c1).sum(), scc = (c0 * c0 + c1 * c1).sum()
            guard scc > 0 else { continue }
            let gain = sxc * sxc / scc
            if gain > bestGain {
                bestGain = gain
                bestScale = sxc / scc
            }
        }
        return bestScale
    }

    /// Q6_K: 16 signed sub-block scales as int8 against one fp16 d (the largest maps to -128),
    /// 6-bit codes q = c + 32 rounded against the stored scales.
    private static func q6_K(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        var scales = SIMD16<Float>()
        for j in 0..<16 { scales[j] = fitSymmetric16(x + 16 * j, half: 32) }
        var extreme: Float = 0
        for j in 0..<16 where abs(scales[j]) > abs(extreme) { extreme = scales[j] }
        let d16 = HalfFloat.f16(from: extreme / -128)
        let d = HalfFloat.float(fromF16: d16)
        guard d.isFinite else { return false }
        let sc = (p + BlockLayout.q6_K.scales).assumingMemoryBound(to: Int8.self)
        for j in 0..<16 { sc[j] = d == 0 ? 0 : Int8(nearest(scales[j] / d, -128, 127)) }
        store16(p, BlockLayout.q6_K.d, d16)
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { q in
            for j in 0..<16 {
                let step = d * Float(sc[j])
                for i in (16 * j)..<(16 * j + 16) { q[i] = step == 0 ? 32 : UInt8(nearest(x[i] / step, -32, 31) + 32) }
            }
            let ql0 = (p + BlockLayout.q6_K.ql).assumingMemoryBound(to: UInt8.self)
            let qh0 = (p + BlockLayout.q6_K.qh).assumingMemoryBound(to: UInt8.self)
            for half in 0..<2 {  // the layout `Dequantize.q6_K` reads
                let ql = ql0 + 64 * half, qh = qh0 + 32 * half, y = 128 * half
                for l in 0..<32 {
                    let q1 = q[y + l], q2 = q[y + l + 32], q3 = q[y + l + 64], q4 = q[y + l + 96]
                    ql[l] = (q1 & 0x0F) | (q3 & 0x0F) << 4
                    ql[l + 32] = (q2 & 0x0F) | (q4 & 0x0F) << 4
                    qh[l] = (q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6
                }
            }
        }
        return true
    }
}

extension Quantize {
    /// The index of IQ4_NL's level nearest to v (in units of d).
    @inline(__always)
    static func nearestIQ4(_ v: Float) -> UInt8 {
        var best = 0, error = Float.infinity
        for (i, level) in Dequantize.iq4nlValues.enumerated() {
            let e = abs(v - Float(level))
            if e < error { (best, error) = (i, e) }
        }
        return UInt8(best)
    }

    /// IQ4_NL: d puts the value of largest magnitude on the table's -127 end, each value takes the
    /// nearest level; then d refit by least squares on those levels (Σx·k / Σk²), kept when its
    /// levels (chosen again) give a smaller squared error.
    static func iq4_NL(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        let levels = Dequantize.iq4nlValues.map { Float($0) }
        func trial(_ d16: UInt16) -> (codes: SIMD32<UInt8>, error: Float, sxk: Float, skk: Float) {
            let d = HalfFloat.float(fromF16: d16)
            var codes = SIMD32<UInt8>(repeating: 8), error: Float = 0, sxk: Float = 0, skk: Float = 0
            for i in 0..<32 {
                if d != 0 { codes[i] = nearestIQ4(x[i] / d) }
                let k = levels[Int(codes[i])], e = d * k - x[i]
                error += e * e
                sxk += x[i] * k
                skk += k * k
            }
            return (codes, error, sxk, skk)
        }
        var d16 = HalfFloat.f16(from: signedMax(x, 32) / -127)
        guard HalfFloat.float(fromF16: d16).isFinite else { return false }
        var best = trial(d16)
        if best.skk > 0 {
            let refit = HalfFloat.f16(from: best.sxk / best.skk)
            if HalfFloat.float(fromF16: refit).isFinite {
                let t = trial(refit)
                if t.error < best.error { (d16, best) = (refit, t) }
            }
        }
        store16(p, BlockLayout.iq4_NL.d, d16)
        let qs = (p + BlockLayout.iq4_NL.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 { qs[j] = best.codes[j] | best.codes[j + 16] << 4 }
        return true
    }

    /// `fitAsymmetric`'s search (trial steps, least-squares refit, min ≥ 0) for `n` values in
    /// plain loops: Q2_K's 16-value sub-blocks with codes 0...3.
    static func fitAsymmetricScalar(_ x: UnsafePointer<Float>, _ n: Int, nmax: Float) -> (scale: Float, min: Float) {
        var lo: Float = 0, hi = x[0], sx: Float = 0, sxx: Float = 0
        for i in 0..<n {
            lo = Swift.min(lo, x[i]); hi = Swift.max(hi, x[i])
            sx += x[i]; sxx += x[i] * x[i]
        }
        guard hi > lo else { return (0, -lo) }
        let count = Float(n)
        var best = (scale: (hi - lo) / nmax, min: -lo, error: Float.infinity)
        for delta in asymmetricSteps {
            let iscale = (nmax + delta) / (hi - lo)
            var sl: Float = 0, sll: Float = 0, sxl: Float = 0
            for i in 0..<n {
                let l = Swift.min(((x[i] - lo) * iscale).rounded(.toNearestOrEven), nmax)
                sl += l; sll += l * l; sxl += x[i] * l
            }
            let det = count * sll - sl * sl
            guard det > 0 else { continue }
            var a = (count * sxl - sx * sl) / det
            var b = (sx - a * sl) / count
            if b > 0 {
                b = 0
                a = sxl / sll
            }
            guard a > 0 else { continue }
            let error = a * a * sll + 2 * a * b * sl + count * b * b - 2 * a * sxl - 2 * b * sx + sxx
            if error < best.error { best = (a, -b, error) }
        }
        return (best.scale, best.min)
    }

    /// Q2_K: per 16 values a (scale, min) fit with codes 0...3, both stored as 4 bits against fp16
    /// d = max scale / 15 and dmin = max min / 15, then codes rounded against the stored pair.
    static func q2_K(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        var scales = SIMD16<Float>(), mins = SIMD16<Float>()
        for j in 0..<16 { (scales[j], mins[j]) = fitAsymmetricScalar(x + 16 * j, 16, nmax: 3) }
        let d16 = HalfFloat.f16(from: scales.max() / 15), dmin16 = HalfFloat.f16(from: mins.max() / 15)
        let d = HalfFloat.float(fromF16: d16), dmin = HalfFloat.float(fromF16: dmin16)
        guard d.isFinite, dmin.isFinite else { return false }
        store16(p, BlockLayout.q2_K.d, d16)
        store16(p, BlockLayout.q2_K.dmin, dmin16)
        let packed = (p + BlockLayout.q2_K.scales).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q2_K.qs).assumingMemoryBound(to: UInt8.self)
        for i in 0..<64 { qs[i] = 0 }
        for j in 0..<16 {
            let sc = d > 0 ? UInt8(nearest(scales[j] / d, 0, 15)) : 0
            let mn = dmin > 0 ? UInt8(nearest(mins[j] / dmin, 0, 15)) : 0
            packed[j] = sc | mn << 4
            // the dequantizer's own products, so each code is the nearest level it will compute
            let step = d * Float(sc), offset = dmin * Float(mn)
            for i in (16 * j)..<(16 * j + 16) {
                let c = step == 0 ? 0 : UInt8(nearest((x[i] + offset) / step, 0, 3))
                qs[32 * (i / 128) + i % 32] |= c << (2 * ((i % 128) / 32))
            }
        }
        return true
    }

    /// Q3_K: 16 signed sub-block scales (codes -4...3 each, the largest magnitude near -4) stored
    /// as 6-bit values against one fp16 d (the largest scale maps to -32), then codes rounded
    /// against the stored scales: c + 4 in 0...7, its low 2 bits in `qs`, its third in `hmask`.
    static func q3_K(_ x: UnsafePointer<Float>, _ p: UnsafeMutableRawPointer) -> Bool {
        var scales = SIMD16<Float>()
        for j in 0..<16 { scales[j] = fitSymmetric16(x + 16 * j, half: 4) }
        var extreme: Float = 0
        for j in 0..<16 where abs(scales[j]) > abs(extreme) { extreme = scales[j] }
        let d16 = HalfFloat.f16(from: extreme / -32)
        let d = HalfFloat.float(fromF16: d16)
        guard d.isFinite else { return false }
        var sc = SIMD16<Int8>()
        for j in 0..<16 { sc[j] = d == 0 ? 0 : Int8(nearest(scales[j] / d, -32, 31)) }
        store16(p, BlockLayout.q3_K.d, d16)
        let packed = (p + BlockLayout.q3_K.scales).assumingMemoryBound(to: UInt8.self)
        for i in 0..<12 { packed[i] = 0 }
        for i in 0..<16 {  // the inverse of `Dequantize.q3Scale`
            let u = UInt8(Int(sc[i]) + 32)
            packed[i % 8] |= (u & 0x0F) << (i < 8 ? 0 : 4)
            packed[8 + i % 4] |= (u >> 4) << (2 * (i / 4))
        }
        let hmask = (p + BlockLayout.q3_K.hmask).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q3_K.qs).assumingMemoryBound(to: UInt8.self)
        for i in 0..<32 { hmask[i] = 0 }
        for i in 0..<64 { qs[i] = 0 }
        for i in 0..<256 {
            // the dequantizer's own step, so each code is the nearest level it will compute
            let step = d * Float(sc[i / 16])
            let c = step == 0 ? 4 : UInt8(nearest(x[i] / step, -4, 3) + 4)
            let h = i / 128, j = (i % 128) / 32, l = i % 32
            qs[32 * h + l] |= (c & 3) << (2 * j)
            hmask[l] |= (c >> 2) << (i / 32)
        }
        return true
    }
}

/// Addresses shared with worker threads that read and write disjoint row ranges of them.
struct WorkerBuffers: @unchecked Sendable {
    let source: UnsafePointer<Float>
    let destination: UnsafeMutableRawPointer
}
