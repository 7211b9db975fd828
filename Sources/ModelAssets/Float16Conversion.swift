// Bit-level conversions between Float and the 16-bit formats model files store: IEEE half
// (F16) and bfloat16 (BF16). Other 16-bit formats (fp8, ...) are left out. BF16 rounding
// follows ggml's `ggml_compute_fp32_to_bf16` (round to nearest even, NaN kept quiet).

enum HalfFloat {
    @inline(__always)
    static func float(fromF16 bits: UInt16) -> Float { Float(Float16(bitPattern: bits)) }

    /// Round to nearest even; values past the half range become infinity, as in numpy.
    @inline(__always)
    static func f16(from value: Float) -> UInt16 { Float16(value).bitPattern }

    @inline(__always)
    static func float(fromBF16 bits: UInt16) -> Float { Float(bitPattern: UInt32(bits) << 16) }

    @inline(__always)
    static func bf16(from value: Float) -> UInt16 {
        let bits = value.bitPattern
        if bits & 0x7fff_ffff > 0x7f80_0000 {  // NaN: keep the sign, force a quiet payload
            return UInt16(truncatingIfNeeded: (bits >> 16) | 64)
        }
        let rounded = UInt64(bits) + UInt64(0x7fff + ((bits >> 16) & 1))
        return UInt16(truncatingIfNeeded: rounded >> 16)
    }
}
