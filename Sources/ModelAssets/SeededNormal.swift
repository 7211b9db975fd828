// A cheap seeded generator of approximately normal values for random weights and test inputs:
// the value at (tensor name, row, column) depends on those and the seed only, so rows come out the
// same in any order and on any thread. Not cryptographic, and not exactly Gaussian: each value is
// the sum of four uniform 16-bit numbers (Irwin-Hall, bounded at ±3.46 std). Mixing is splitmix64's.

public enum SeededNormal {
    /// A 64-bit mixer (splitmix64's finalizer).
    @inline(__always)
    static func mix(_ z0: UInt64) -> UInt64 {
        var z = z0
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// FNV-1a of the tensor name, so that a tensor's values do not depend on which others exist.
    static func tensorKey(_ name: String) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in name.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return h
    }

    private static let golden: UInt64 = 0x9E37_79B9_7F4A_7C15
    /// Standard deviation of a sum of four uniform 16-bit integers.
    private static let sumStd = Float((Double(65536 * 65536 - 1) / 3).squareRoot())

    /// `count` values of row `row` of a seeded tensor, value i taken at column `column(i)` (a
    /// permuted layout passes its map), each approximately N(0, std²): the sum of the four 16-bit
    /// parts of one mixed 64-bit counter. Any row or column can be produced alone, on any thread.
    public static func fillRow(seed: UInt64, tensor: String, row: Int, std: Float, count: Int,
                               column: (Int) -> Int = { $0 }, into out: UnsafeMutablePointer<Float>) {
        let rowKey = mix(seed &+ mix(tensorKey(tensor) &+ UInt64(row) &* golden))
        let scale = std / sumStd
        for i in 0..<count {
            let z = mix(rowKey &+ UInt64(column(i)) &* golden)
            let sum = (z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48)
            out[i] = (Float(Int64(sum)) - 131_070) * scale
        }
    }
}
