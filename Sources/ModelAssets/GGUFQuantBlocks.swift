// ggml's quantized block layouts, written down as structs (their byte sizes and field offsets
// are tested), and their dequantization to Float. Quantizing to them is in GGUFQuantize.swift.
// Follows ggml-quants.c `dequantize_row_*` and gguf-py quants.py, value for value.

typealias Bytes4 = (UInt8, UInt8, UInt8, UInt8)
typealias Bytes12 = (Bytes4, Bytes4, Bytes4)
typealias Bytes16 = (Bytes4, Bytes4, Bytes4, Bytes4)
typealias Bytes32 = (Bytes16, Bytes16)
typealias Bytes64 = (Bytes32, Bytes32)
typealias Bytes128 = (Bytes64, Bytes64)

/// Q8_0, 32 values in 34 bytes: `x[i] = d * qs[i]`.
struct BlockQ8_0 {
    var d: UInt16  // fp16 scale
    var qs: Bytes32  // int8 quants
}

/// Q4_0, 32 values in 18 bytes: `x[i] = d * (q[i] - 8)`; byte j holds q[j] (low nibble) and q[j+16] (high).
struct BlockQ4_0 {
    var d: UInt16  // fp16 scale
    var qs: Bytes16  // two 4-bit quants per byte
}

/// Q4_1, 32 values in 20 bytes: `x[i] = d * q[i] + m`; nibbles as in Q4_0.
struct BlockQ4_1 {
    var d: UInt16  // fp16 scale
    var m: UInt16  // fp16 minimum
    var qs: Bytes16
}

/// Q5_0, 32 values in 22 bytes: `x[i] = d * (q[i] - 16)` with 5-bit q: the low 4 bits as Q4_0's
/// nibbles, the fifth bit of value i is bit i of the little-endian word `qh`.
struct BlockQ5_0 {
    var d: UInt16  // fp16 scale
    var qh: Bytes4  // fifth bits, value i at bit i
    var qs: Bytes16  // low 4 bits, nibbles as in Q4_0
}

/// Q5_1, 32 values in 24 bytes: `x[i] = d * q[i] + m` with 5-bit q laid out as in Q5_0.
struct BlockQ5_1 {
    var d: UInt16  // fp16 scale
    var m: UInt16  // fp16 minimum
    var qh: Bytes4  // fifth bits, value i at bit i
    var qs: Bytes16  // low 4 bits, nibbles as in Q4_0
}

/// Q2_K, 256 values in 84 bytes: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of
/// `scales`) and 4-bit min (high nibble); `x = d * sc * q - dmin * m` with 2-bit q, value
/// 128h + 32j + l in bits 2j, 2j+1 of qs[32h + l].
struct BlockQ2_K {
    var scales: Bytes16  // scale | min << 4 per sub-block
    var qs: Bytes64  // 2-bit quants, four values per byte
    var d: UInt16  // fp16 super-block scale for the scales
    var dmin: UInt16  // fp16 super-block scale for the mins
}

/// Q3_K, 256 values in 110 bytes: 16 sub-blocks of 16 with signed 6-bit scales;
/// `x = d * (sc[i/16] - 32) * q` with q in -4...3: 2 bits from `qs`, and q - 4 unless the value's
/// bit in `hmask` is set (layout in `dequantizeQ3_K`, scales packed as in `q3Scale`).
struct BlockQ3_K {
    var hmask: Bytes32  // high bits: bit i/32 of hmask[i % 32] for value i
    var qs: Bytes64  // low 2 bits, four values per byte
    var scales: Bytes12  // 16 six-bit scales
    var d: UInt16  // fp16 super-block scale
}

/// IQ4_NL, 32 values in 18 bytes: `x[i] = d * kvalues[q[i]]` with 4-bit q laid out as Q4_0's
/// nibbles and `kvalues` a fixed non-linear table (`iq4nlValues`).
struct BlockIQ4_NL {
    var d: UInt16  // fp16 scale
    var qs: Bytes16  // indexes into the table, two per byte
}

/// Q4_K, 256 values in 144 bytes: 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min
/// packed in `scales`; `x = d * sc[s] * q - dmin * m[s]`. The 32-byte group g of `qs` holds
/// sub-block 2g in its low nibbles and sub-block 2g+1 in its high nibbles.
struct BlockQ4_K {
    var d: UInt16  // fp16 super-block scale for the scales
    var dmin: UInt16  // fp16 super-block scale for the mins
    var scales: Bytes12  // 8 scales and 8 mins, 6 bits each (see `scaleMin`)
    var qs: Bytes128  // 4-bit quants
}

/// Q5_K, 256 values in 176 bytes: Q4_K plus a fifth bit per value; bit s of `qh[l]` is the high
/// bit of value l of sub-block s.
struct BlockQ5_K {
    var d: UInt16
    var dmin: UInt16
    var scales: Bytes12
    var qh: Bytes32  // high bits
    var qs: Bytes128  // low 4 bits, nibbles as in Q4_K
}

/// Q6_K, 256 values in 210 bytes: 16 sub-blocks of 16 with int8 scales; `x = d * sc[i/16] * (q - 32)`
/// with q = 4 bits from `ql` and 2 bits from `qh` (layout in `dequantizeQ6_K`).
struct BlockQ6_K {
    var ql: Bytes128  // low 4 bits
    var qh: Bytes64  // high 2 bits
    var scales: Bytes16  // int8 sub-block scales
    var d: UInt16  // fp16 super-block scale
}

/// Field offsets taken from the structs above, so the structs are the single statement of layout.
enum BlockLayout {
    static let q8_0 = (d: MemoryLayout<BlockQ8_0>.offset(of: \.d)!, qs: MemoryLayout<BlockQ8_0>.offset(of: \.qs)!)
    static let q4_0 = (d: MemoryLayout<BlockQ4_0>.offset(of: \.d)!, qs: MemoryLayout<BlockQ4_0>.offset(of: \.qs)!)
    static let q4_1 = (
        d: MemoryLayout<BlockQ4_1>.offset(of: \.d)!, m: MemoryLayout<BlockQ4_1>.offset(of: \.m)!,
        qs: MemoryLayout<BlockQ4_1>.offset(of: \.qs)!)
    static let q5_0 = (
        d: MemoryLayout<BlockQ5_0>.offset(of: \.d)!, qh: MemoryLayout<BlockQ5_0>.offset(of: \.qh)!,
        qs: MemoryLayout<BlockQ5_0>.offset(of: \.qs)!)
    static let q5_1 = (
        d: MemoryLayout<BlockQ5_1>.offset(of: \.d)!, m: MemoryLayout<BlockQ5_1>.offset(of: \.m)!,
        qh: MemoryLayout<BlockQ5_1>.offset(of: \.qh)!, qs: MemoryLayout<BlockQ5_1>.offset(of: \.qs)!)
    static let q2_K = (
        scales: MemoryLayout<BlockQ2_K>.offset(of: \.scales)!, qs: MemoryLayout<BlockQ2_K>.offset(of: \.qs)!,
        d: MemoryLayout<BlockQ2_K>.offset(of: \.d)!, dmin: MemoryLayout<BlockQ2_K>.offset(of: \.dmin)!)
    static let q3_K = (
        hmask: MemoryLayout<BlockQ3_K>.offset(of: \.hmask)!, qs: MemoryLayout<BlockQ3_K>.offset(of: \.qs)!,
        scales: MemoryLayout<BlockQ3_K>.offset(of: \.scales)!, d: MemoryLayout<BlockQ3_K>.offset(of: \.d)!)
    static let iq4_NL = (d: MemoryLayout<BlockIQ4_NL>.offset(of: \.d)!, qs: MemoryLayout<BlockIQ4_NL>.offset(of: \.qs)!)
    static let q4_K = (
        d: MemoryLayout<BlockQ4_K>.offset(of: \.d)!, dmin: MemoryLayout<BlockQ4_K>.offset(of: \.dmin)!,
        scales: MemoryLayout<BlockQ4_K>.offset(of: \.scales)!, qs: MemoryLayout<BlockQ4_K>.offset(of: \.qs)!)
    static let q5_K = (
        d: MemoryLayout<BlockQ5_K>.offset(of: \.d)!, dmin: MemoryLayout<BlockQ5_K>.offset(of: \.dmin)!,
        scales: MemoryLayout<BlockQ5_K>.offset(of: \.scales)!, qh: MemoryLayout<BlockQ5_K>.offset(of: \.qh)!,
        qs: MemoryLayout<BlockQ5_K>.offset(of: \.qs)!)
    static let q6_K = (
        ql: MemoryLayout<BlockQ6_K>.offset(of: \.ql)!, qh: MemoryLayout<BlockQ6_K>.offset(of: \.qh)!,
        scales: MemoryLayout<BlockQ6_K>.offset(of: \.scales)!, d: MemoryLayout<BlockQ6_K>.offset(of: \.d)!)
}

enum Dequantize {
    /// Converts `count` values of `type` stored in `raw` into `out`. The caller has checked that
    /// the type is dequantizable, `count` is a whole number of blocks and `raw` holds them all.
    static func run(_ type: GGMLType, raw: UnsafeRawBufferPointer, count: Int, into out: UnsafeMutablePointer<Float>) {
        let (blockSize, typeSize) = type.blockGeometry
        precondition(count % blockSize == 0 && raw.count >= count / blockSize * typeSize,
                     "[Dequantize] \(type) needs \(count / blockSize * typeSize) bytes for \(count) values, has \(raw.count)")
        let blocks = count / blockSize
        guard let base = raw.baseAddress else { return }
        switch type {
        case .f32:
            for i in 0..<count { out[i] = Float(bitPattern: UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 4 * i, as: UInt32.self))) }
        case .f16:
            for i in 0..<count { out[i] = HalfFloat.float(fromF16: u16(base, 2 * i)) }
        case .bf16:
            for i in 0..<count { out[i] = HalfFloat.float(fromBF16: u16(base, 2 * i)) }
        case .q8_0:
            for b in 0..<blocks { q8_0(base + b * typeSize, out + b * blockSize) }
        case .q4_0:
            for b in 0..<blocks { q4_0(base + b * typeSize, out + b * blockSize) }
        case .q4_1:
            for b in 0..<blocks { q4_1(base + b * typeSize, out + b * blockSize) }
        case .q5_0:
            for b in 0..<blocks { q5_0(base + b * typeSize, out + b * blockSize) }
        case .q5_1:
            for b in 0..<blocks { q5_1(base + b * typeSize, out + b * blockSize) }
        case .iq4_NL:
            for b in 0..<blocks { iq4_NL(base + b * typeSize, out + b * blockSize) }
        case .q2_K:
            for b in 0..<blocks { q2_K(base + b * typeSize, out + b * blockSize) }
        case .q3_K:
            for b in 0..<blocks { q3_K(base + b * typeSize, out + b * blockSize) }
        case .q4_K:
            for b in 0..<blocks { q4_K(base + b * typeSize, out + b * blockSize) }
        case .q5_K:
            for b in 0..<blocks { q5_K(base + b * typeSize, out + b * blockSize) }
        case .q6_K:
            for b in 0..<blocks { q6_K(base + b * typeSize, out + b * blockSize) }
        default:
            preconditionFailure("[Dequantize] \(type) is not dequantizable; the reader should have refused it")
        }
    }

    @inline(__always)
    private static func u16(_ p: UnsafeRawPointer, _ offset: Int) -> UInt16 {
        UInt16(littleEndian: p.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
    }

    @inline(__always)
    private static func half(_ p: UnsafeRawPointer, _ offset: Int) -> Float {
        HalfFloat.float(fromF16: u16(p, offset))
    }

    private static func q8_0(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q8_0.d)
        let qs = (p + BlockLayout.q8_0.qs).assumingMemoryBound(to: Int8.self)
        for i in 0..<32 { y[i] = d * Float(qs[i]) }
    }

    private static func q4_0(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q4_0.d)
        let qs = (p + BlockLayout.q4_0.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            y[j] = d * Float(Int(qs[j] & 0x0F) - 8)
            y[j + 16] = d * Float(Int(qs[j] >> 4) - 8)
        }
    }

    private static func q4_1(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q4_1.d)
        let m = half(p, BlockLayout.q4_1.m)
        let qs = (p + BlockLayout.q4_1.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            y[j] = d * Float(qs[j] & 0x0F) + m
            y[j + 16] = d * Float(qs[j] >> 4) + m
        }
    }

    /// The 32 fifth bits of a Q5_0/Q5_1 block: bit i belongs to value i.
    @inline(__always)
    private static func fifthBits(_ p: UnsafeRawPointer, _ offset: Int) -> UInt32 {
        UInt32(littleEndian: p.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    private static func q5_0(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q5_0.d)
        let qh = fifthBits(p, BlockLayout.q5_0.qh)
        let qs = (p + BlockLayout.q5_0.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            let lo = Int(qs[j] & 0x0F) | Int((qh >> j) & 1) << 4
            let hi = Int(qs[j] >> 4) | Int((qh >> (j + 16)) & 1) << 4
            y[j] = d * Float(lo - 16)
            y[j + 16] = d * Float(hi - 16)
        }
    }

    private static func q5_1(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q5_1.d)
        let m = half(p, BlockLayout.q5_1.m)
        let qh = fifthBits(p, BlockLayout.q5_1.qh)
        let qs = (p + BlockLayout.q5_1.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            let lo = qs[j] & 0x0F | UInt8((qh >> j) & 1) << 4
            let hi = qs[j] >> 4 | UInt8((qh >> (j + 16)) & 1) << 4
            y[j] = d * Float(lo) + m
            y[j + 16] = d * Float(hi) + m
        }
    }

    /// IQ4_NL's 16 levels (ggml's `kvalues_iq4nl`), denser near zero as weights are.
    static let iq4nlValues: [Int8] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]

    private static func iq4_NL(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.iq4_NL.d)
        let qs = (p + BlockLayout.iq4_NL.qs).assumingMemoryBound(to: UInt8.self)
        for j in 0..<16 {
            y[j] = d * Float(iq4nlValues[Int(qs[j] & 0x0F)])
            y[j + 16] = d * Float(iq4nlValues[Int(qs[j] >> 4)])
        }
    }

    private static func q2_K(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q2_K.d)
        let dmin = half(p, BlockLayout.q2_K.dmin)
        let scales = (p + BlockLayout.q2_K.scales).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q2_K.qs).assumingMemoryBound(to: UInt8.self)
        for i in 0..<256 {
            let h = i / 128, j = (i % 128) / 32, l = i % 32
            let q = (qs[32 * h + l] >> (2 * j)) & 3
            let s = scales[i / 16]
            let dl = d * Float(s & 0x0F), ml = dmin * Float(s >> 4)
            y[i] = dl * Float(q) - ml
        }
    }

    /// The signed scale of Q3_K sub-block i (0..<16) from its 12 packed bytes: the low 4 bits are
    /// the low (i < 8) or high (i >= 8) nibble of byte i % 8, the top 2 bits are bits 2(i/4),
    /// 2(i/4)+1 of byte 8 + i % 4; stored with an offset of 32.
    @inline(__always)
    static func q3Scale(_ i: Int, _ q: UnsafePointer<UInt8>) -> Int {
        let low = i < 8 ? q[i] & 0x0F : q[i - 8] >> 4
        let high = (q[8 + i % 4] >> (2 * (i / 4))) & 3
        return Int(low | high << 4) - 32
    }

    /// Value i = 128h + 32j + l takes bits 2j, 2j+1 of qs[32h + l] and bit 4h + j (= i / 32) of
    /// hmask[l]; sub-block i / 16.
    private static func q3_K(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q3_K.d)
        let hmask = (p + BlockLayout.q3_K.hmask).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q3_K.qs).assumingMemoryBound(to: UInt8.self)
        let scales = (p + BlockLayout.q3_K.scales).assumingMemoryBound(to: UInt8.self)
        for i in 0..<256 {
            let h = i / 128, j = (i % 128) / 32, l = i % 32
            let low = Int((qs[32 * h + l] >> (2 * j)) & 3)
            let q = (hmask[l] >> (i / 32)) & 1 != 0 ? low : low - 4
            let dl = d * Float(q3Scale(i / 16, scales))
            y[i] = dl * Float(q)
        }
    }

    /// The 6-bit scale and min of sub-block j (0..<8) from the 12 packed bytes (`get_scale_min_k4`).
    @inline(__always)
    static func scaleMin(_ j: Int, _ q: UnsafePointer<UInt8>) -> (scale: UInt8, min: UInt8) {
        if j < 4 { return (q[j] & 63, q[j + 4] & 63) }
        return ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }

    private static func q4_K(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q4_K.d)
        let dmin = half(p, BlockLayout.q4_K.dmin)
        let scales = (p + BlockLayout.q4_K.scales).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q4_K.qs).assumingMemoryBound(to: UInt8.self)
        for g in 0..<4 {  // 64 values per group: sub-blocks 2g (low nibbles) and 2g+1 (high)
            let (sc1, m1) = scaleMin(2 * g, scales)
            let (sc2, m2) = scaleMin(2 * g + 1, scales)
            let d1 = d * Float(sc1), min1 = dmin * Float(m1)
            let d2 = d * Float(sc2), min2 = dmin * Float(m2)
            let q = qs + 32 * g
            let out = y + 64 * g
            for l in 0..<32 {
                out[l] = d1 * Float(q[l] & 0x0F) - min1
                out[l + 32] = d2 * Float(q[l] >> 4) - min2
            }
        }
    }

    private static func q5_K(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q5_K.d)
        let dmin = half(p, BlockLayout.q5_K.dmin)
        let scales = (p + BlockLayout.q5_K.scales).assumingMemoryBound(to: UInt8.self)
        let qh = (p + BlockLayout.q5_K.qh).assumingMemoryBound(to: UInt8.self)
        let qs = (p + BlockLayout.q5_K.qs).assumingMemoryBound(to: UInt8.self)
        for g in 0..<4 {
            let (sc1, m1) = scaleMin(2 * g, scales)
            let (sc2, m2) = scaleMin(2 * g + 1, scales)
            let d1 = d * Float(sc1), min1 = dmin * Float(m1)
            let d2 = d * Float(sc2), min2 = dmin * Float(m2)
            let q = qs + 32 * g
            let out = y + 64 * g
            let bit1 = UInt8(1) << (2 * g), bit2 = UInt8(2) << (2 * g)
            for l in 0..<32 {
                let h1: UInt8 = qh[l] & bit1 != 0 ? 16 : 0
                let h2: UInt8 = qh[l] & bit2 != 0 ? 16 : 0
                out[l] = d1 * Float((q[l] & 0x0F) + h1) - min1
                out[l + 32] = d2 * Float((q[l] >> 4) + h2) - min2
            }
        }
    }

    /// Each half (128 values) uses 64 bytes of `ql`, 32 of `qh` and 8 scales: value l, l+32, l+64,
    /// l+96 take the low/low/high/high nibble of ql[l], ql[l+32], ql[l], ql[l+32] and bits
    /// 0-1/2-3/4-5/6-7 of qh[l].
    private static func q6_K(_ p: UnsafeRawPointer, _ y: UnsafeMutablePointer<Float>) {
        let d = half(p, BlockLayout.q6_K.d)
        let ql0 = (p + BlockLayout.q6_K.ql).assumingMemoryBound(to: UInt8.self)
        let qh0 = (p + BlockLayout.q6_K.qh).assumingMemoryBound(to: UInt8.self)
        let sc0 = (p + BlockLayout.q6_K.scales).assumingMemoryBound(to: Int8.self)
        for half in 0..<2 {
            let ql = ql0 + 64 * half, qh = qh0 + 32 * half, sc = sc0 + 8 * half
            let out = y + 128 * half
            for l in 0..<32 {
                let s = l / 16
                let q1 = Int((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32
                let q2 = Int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32
                let q3 = Int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32
                let q4 = Int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32
                out[l] = d * Float(sc[s]) * Float(q1)
                out[l + 32] = d * Float(sc[s + 2]) * Float(q2)
                out[l + 64] = d * Float(sc[s + 4]) * Float(q3)
                out[l + 96] = d * Float(sc[s + 6]) * Float(q4)
            }
        }
    }
}
