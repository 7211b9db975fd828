// CBlockKernels against ModelAssets' reference dequantization, at every feature level this CPU
// runs: dequantize_rows bit for bit, matmul_nt against a float64 dot of the reference rows, the
// q8 mode within its activation-rounding bound and equal on every level, and multi-row passes
// against single-row passes bit for bit. Weights are seeded random bytes with finite fp16 scales
// (and SmolLM2's own blocks when present); shapes are awkward on purpose. Timing: bench kernels.
import CBlockKernels
import Foundation
import XCTest
@testable import ModelAssets

final class BlockKernelTests: XCTestCase {
    static let types: [GGMLType] = [.f32, .f16, .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K]
    static let rowCounts = [1, 2, 3, 4, 5, 6, 7, 8, 15, 16]  // every tile size of both levels (up to 6 and 8 rows) and splits of 15, 16
    /// Allowed |kernel - float64 reference| relative to sum_i |x_i * w_i|. Float accumulation over
    /// these k (at most 1,280 values) stays below ~1e-7; the Q4_1/K-quant min terms are exact
    /// mathematical rearrangements (d·Σqx + m·Σx) of the rounded reference weights.
    static let tolerance = 1e-6

    /// The levels to test, printing the ones this CPU cannot run.
    static let levels: [Int32] = {
        let best = bk_best_level()
        for level in (best + 1)..<Int32(BK_LEVEL_COUNT) {
            print("BlockKernelTests: level \(String(cString: bk_level_name(level))) not tested: " + (level <= bk_cpu_level()
                ? "ADAPTER_CPU_LEVEL=\(ProcessInfo.processInfo.environment["ADAPTER_CPU_LEVEL"] ?? "") runs the levels up to \(String(cString: bk_level_name(best)))"
                : "this CPU lacks its features"))
        }
        return Array(0...best)
    }()

    static func levelName(_ level: Int32) -> String { String(cString: bk_level_name(level)) }

    // MARK: seeded weights

    struct SplitMix64 {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476B_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        /// Uniform in [-1, 1).
        mutating func float() -> Float { Float(next() >> 40) / Float(1 << 23) - 1 }
        /// A finite half with exponent field 5...20 (magnitudes 2^-10 ..< 2^6), random sign and mantissa.
        mutating func half() -> UInt16 {
            let r = next()
            return UInt16(r & 0x8000) | UInt16(5 + (r >> 16) % 16) << 10 | UInt16((r >> 32) & 0x3FF)
        }
    }

    /// `rows` rows of `k` values of `type`, laid out as a GGUF tensor: random bytes, then every
    /// fp16 scale field (and every F16/BF16/F32 value) overwritten with a finite value.
    static func weights(_ type: GGMLType, rows: Int, k: Int, seed: UInt64) -> (bytes: [UInt8], rowBytes: Int) {
        let (blockSize, typeSize) = type.blockGeometry
        let rowBytes = k / blockSize * typeSize
        var rng = SplitMix64(state: seed)
        var bytes = (0..<(rows * rowBytes)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        func put16(_ v: UInt16, _ at: Int) { bytes[at] = UInt8(v & 0xFF); bytes[at + 1] = UInt8(v >> 8) }
        let halfFields: [Int] = switch type {
        case .q8_0, .q4_0, .q5_0, .iq4_NL: [0]
        case .q4_1, .q5_1, .q4_K, .q5_K: [0, 2]
        case .q2_K: [80, 82]
        case .q3_K: [108]
        case .q6_K: [208]
        default: []
        }
        for block in 0..<(rows * rowBytes / typeSize) {
            let at = block * typeSize
            switch type {
            case .f32:
                let bits = rng.float().bitPattern
                for b in 0..<4 { bytes[at + b] = UInt8((bits >> (8 * b)) & 0xFF) }
            case .f16:
                put16(rng.half(), at)
            case .bf16:  // exponent 120...135: magnitudes 2^-7 ..< 2^9
                let r = rng.next()
                put16(UInt16(r & 0x8000) | UInt16(120 + (r >> 16) % 16) << 7 | UInt16((r >> 32) & 0x7F), at)
            default:
                for f in halfFields { put16(rng.half(), at + f) }
            }
        }
        return (bytes, rowBytes)
    }

    static func activations(rows: Int, k: Int, seed: UInt64) -> [Float] {
        var rng = SplitMix64(state: seed)
        return (0..<(rows * k)).map { _ in rng.float() }
    }

    /// Rows r0..<r1 through the Swift reference (`Dequantize.run`), row by row.
    static func reference(_ type: GGMLType, _ bytes: [UInt8], rowBytes: Int, rows: Range<Int>, k: Int) -> [Float] {
        var out = [Float](repeating: .nan, count: rows.count * k)
        bytes.withUnsafeBytes { raw in
            out.withUnsafeMutableBufferPointer { o in
                for (i, r) in rows.enumerated() {
                    let row = UnsafeRawBufferPointer(rebasing: raw[(r * rowBytes)..<((r + 1) * rowBytes)])
                    Dequantize.run(type, raw: row, count: k, into: o.baseAddress! + i * k)
                }
            }
        }
        return out
    }

    /// (k values, description) per type: one block and several blocks; odd lengths for the float types.
    static func lengths(_ type: GGMLType) -> [Int] {
        switch type.blockGeometry.blockSize {
        case 1: [1, 15, 37, 576, 1000]
        case 32: [32, 736]
        default: [256, 1280]
        }
    }

    func matmul(level: Int32, _ type: GGMLType, x: [Float], m: Int, k: Int, w: [UInt8], rowBytes: Int,
                n0: Int, n1: Int, into y: inout [Float], ldy: Int) -> Int32 {
        x.withUnsafeBufferPointer { xp in
            w.withUnsafeBytes { wp in
                y.withUnsafeMutableBufferPointer { yp in
                    bk_matmul_nt_at(level, type.rawValue, xp.baseAddress, m, k, wp.baseAddress, rowBytes, n0, n1,
                                    yp.baseAddress, ldy)
                }
            }
        }
    }

    // MARK: tests

    func testDequantizeRowsEqualsReferenceBitForBit() {
        for type in Self.types {
            for k in Self.lengths(type) {
                let n = 7
                let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: UInt64(k) &* 31 &+ UInt64(type.rawValue))
                let rows = 2..<n
                let expected = Self.reference(type, w, rowBytes: rowBytes, rows: rows, k: k)
                for level in Self.levels {
                    var out = [Float](repeating: .nan, count: rows.count * k)
                    let rc = w.withUnsafeBytes { wp in
                        out.withUnsafeMutableBufferPointer {
                            bk_dequantize_rows_at(level, type.rawValue, wp.baseAddress, rowBytes, rows.lowerBound, rows.upperBound,
                                                  k, $0.baseAddress)
                        }
                    }
                    XCTAssertEqual(rc, Int32(BK_OK))
                    let mismatches = zip(out, expected).filter { $0.bitPattern != $1.bitPattern }.count
                    XCTAssertEqual(mismatches, 0, "\(type) k=\(k) at \(Self.levelName(level)): \(mismatches) values differ from Dequantize.run")
                }
            }
        }
    }

    /// Every half bit pattern (zeros, subnormals, infinities, NaNs) at every level. NaNs are
    /// compared as NaN only: the reference's conversion quiets signalling NaNs or not depending
    /// on how ModelAssets was compiled (F16C or not); the kernels always quiet them.
    func testDequantizeEveryHalfBitPattern() {
        let k = 65536
        let bytes = (0..<k).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        let expected = Self.reference(.f16, bytes, rowBytes: 2 * k, rows: 0..<1, k: k)
        for level in Self.levels {
            var out = [Float](repeating: 0, count: k)
            let rc = bytes.withUnsafeBytes { wp in
                out.withUnsafeMutableBufferPointer { bk_dequantize_rows_at(level, GGMLType.f16.rawValue, wp.baseAddress, 2 * k, 0, 1, k, $0.baseAddress) }
            }
            XCTAssertEqual(rc, Int32(BK_OK))
            let differ = (0..<k).filter { expected[$0].isNaN ? !out[$0].isNaN : out[$0].bitPattern != expected[$0].bitPattern }
            XCTAssertEqual(differ.count, 0, "at \(Self.levelName(level)), first differing pattern 0x\(String(differ.first ?? 0, radix: 16))")
        }
    }

    func testMatmulMatchesFloat64DotOfReferenceRows() {
        var worst = 0.0
        for type in Self.types {
            for k in Self.lengths(type) {
                let n = 11, n0 = 2  // n - n0 = 9: not a multiple of any tile's row count
                let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: UInt64(k) &* 7 &+ UInt64(type.rawValue))
                let ref = Self.reference(type, w, rowBytes: rowBytes, rows: 0..<n, k: k)
                for m in Self.rowCounts {
                    let x = Self.activations(rows: m, k: k, seed: UInt64(m * 1000 + k))
                    for level in Self.levels {
                        var y = [Float](repeating: .nan, count: m * n)
                        let rc = matmul(level: level, type, x: x, m: m, k: k, w: w, rowBytes: rowBytes, n0: n0, n1: n, into: &y, ldy: n)
                        XCTAssertEqual(rc, Int32(BK_OK))
                        var failures = 0
                        for r in 0..<m {
                            for o in 0..<n0 where !y[r * n + o].isNaN { failures += 1 }  // outside [n0, n1): untouched
                            for o in n0..<n {
                                var dot = 0.0, magnitude = 0.0
                                for i in 0..<k {
                                    let p = Double(x[r * k + i]) * Double(ref[o * k + i])
                                    dot += p
                                    magnitude += abs(p)
                                }
                                let error = abs(Double(y[r * n + o]) - dot)
                                if magnitude > 0 { worst = max(worst, error / magnitude) }
                                if !(error <= Self.tolerance * magnitude) { failures += 1 }
                            }
                        }
                        XCTAssertEqual(failures, 0, "\(type) k=\(k) m=\(m) at \(Self.levelName(level)): \(failures) outputs off")
                    }
                }
            }
        }
        print("BlockKernelTests: worst |kernel - float64 reference| / sum|x*w| = \(worst) (bound \(Self.tolerance))")
    }

    func testMultiRowPassEqualsSingleRowPassesBitForBit() {
        for type in Self.types {
            let k = Self.lengths(type).last!, n = 37  // 36 outputs: blocks of 16 (see product in avx512.c) and a part
            let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: 99 &+ UInt64(type.rawValue))
            for level in Self.levels {
                for m in Self.rowCounts where m > 1 {
                    let x = Self.activations(rows: m, k: k, seed: UInt64(m))
                    var together = [Float](repeating: .nan, count: m * n)
                    _ = matmul(level: level, type, x: x, m: m, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: n, into: &together, ldy: n)
                    var alone = [Float](repeating: .nan, count: m * n)
                    for r in 0..<m {
                        let row = Array(x[(r * k)..<((r + 1) * k)])
                        var y = [Float](repeating: .nan, count: n)
                        // the output range in two pieces, as two threads would split it
                        _ = matmul(level: level, type, x: row, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: 6, into: &y, ldy: n)
                        _ = matmul(level: level, type, x: row, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 6, n1: n, into: &y, ldy: n)
                        for o in 1..<n { alone[r * n + o] = y[o] }
                    }
                    let differ = (0..<(m * n)).filter { $0 % n != 0 && together[$0].bitPattern != alone[$0].bitPattern }.count
                    XCTAssertEqual(differ, 0, "\(type) m=\(m) at \(Self.levelName(level)): \(differ) outputs differ from one-row passes")
                }
            }
        }
    }

    /// m * k / 32 beyond the 4,096 floats of stack scratch: the sums come from malloc.
    func testLargeActivationSumsUseHeapScratch() {
        let type = GGMLType.q4_1, m = 16, k = 32 * 264, n = 3
        let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: 5)
        let ref = Self.reference(type, w, rowBytes: rowBytes, rows: 0..<n, k: k)
        let x = Self.activations(rows: m, k: k, seed: 6)
        for level in Self.levels {
            var y = [Float](repeating: .nan, count: m * n)
            XCTAssertEqual(matmul(level: level, type, x: x, m: m, k: k, w: w, rowBytes: rowBytes, n0: 0, n1: n, into: &y, ldy: n),
                           Int32(BK_OK))
            for r in 0..<m {
                for o in 0..<n {
                    var dot = 0.0, magnitude = 0.0
                    for i in 0..<k {
                        let p = Double(x[r * k + i]) * Double(ref[o * k + i])
                        dot += p
                        magnitude += abs(p)
                    }
                    XCTAssertLessThanOrEqual(abs(Double(y[r * n + o]) - dot), 1e-5 * magnitude, "row \(r) output \(o) at \(Self.levelName(level))")
                }
            }
        }
    }

    func testRefusesUnsupportedTypesShapesAndLevels() {
        let x = [Float](repeating: 1, count: 64), w = [UInt8](repeating: 0, count: 64)
        var y = [Float](repeating: 0, count: 4)
        let x256 = [Float](repeating: 1, count: 256), w66 = [UInt8](repeating: 0, count: 66)
        let iq2 = matmul(level: 0, .iq2_XXS, x: x256, m: 1, k: 256, w: w66, rowBytes: 66, n0: 0, n1: 1, into: &y, ldy: 1)
        XCTAssertEqual(iq2, Int32(BK_ERROR_TYPE))
        let partialBlock = matmul(level: 0, .q4_0, x: x, m: 1, k: 48, w: w, rowBytes: 18, n0: 0, n1: 1, into: &y, ldy: 1)
        XCTAssertEqual(partialBlock, Int32(BK_ERROR_SHAPE))
        let beyond = matmul(level: bk_best_level() + 1, .f32, x: x, m: 1, k: 4, w: w, rowBytes: 16, n0: 0, n1: 1, into: &y, ldy: 1)
        XCTAssertEqual(beyond, Int32(BK_ERROR_LEVEL))
        XCTAssertEqual(bk_type_supported(GGMLType.q6_K.rawValue), 1)
        XCTAssertEqual(bk_type_supported(GGMLType.iq2_XXS.rawValue), 0)
        for type in GGMLType.allCases {  // the kernels take exactly the types the reference dequantizes
            XCTAssertEqual(bk_type_supported(type.rawValue) == 1, type.isDequantizable, "\(type)")
        }
    }

    // MARK: q8 activations

    static let q8Types: [GGMLType] = [.q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q3_K, .q4_K, .q5_K, .q6_K]

    func quantizeQ8(level: Int32, _ x: [Float], m: Int, k: Int) -> [UInt8] {
        var xq = [UInt8](repeating: 0, count: bk_q8_bytes(m, k))
        let rc = x.withUnsafeBufferPointer { xp in xq.withUnsafeMutableBytes { bk_quantize_q8_at(level, xp.baseAddress, m, k, $0.baseAddress) } }
        XCTAssertEqual(rc, Int32(BK_OK))
        return xq
    }

    func matmulQ8(level: Int32, _ type: GGMLType, xq: [UInt8], m: Int, k: Int, w: [UInt8], rowBytes: Int,
                  n0: Int, n1: Int, into y: inout [Float], ldy: Int) -> Int32 {
        xq.withUnsafeBytes { xp in
            w.withUnsafeBytes { wp in
                y.withUnsafeMutableBufferPointer { yp in
                    bk_matmul_nt_q8_at(level, type.rawValue, xp.baseAddress, m, k, wp.baseAddress, rowBytes, n0, n1, yp.baseAddress, ldy)
                }
            }
        }
    }

    /// The q8 mode moves each activation by at most half its block's step d_b = max|x_b| / 127
    /// (the 1e-4 covers the float rounding of x / d_b), so |y - reference| <= sum_i |w_i| d_b / 2
    /// plus the float accumulation allowance of the float path.
    func testQ8WithinActivationRoundingOfReference() {
        var worst = 0.0, meanRelative = 0.0, count = 0
        for type in Self.q8Types {
            for k in [256, 768, 96] where k % 256 == 0 || ![.q3_K, .q4_K, .q5_K, .q6_K].contains(type) {
                let n = 11, n0 = 2
                let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: UInt64(k) &* 13 &+ UInt64(type.rawValue))
                let ref = Self.reference(type, w, rowBytes: rowBytes, rows: 0..<n, k: k)
                for m in Self.rowCounts {
                    var x = Self.activations(rows: m, k: k, seed: UInt64(m * 77 + k))
                    for i in stride(from: 0, to: x.count, by: 7) { x[i] *= 6 }  // uneven magnitudes inside blocks
                    let xq = quantizeQ8(level: bk_best_level(), x, m: m, k: k)
                    var y = [Float](repeating: .nan, count: m * n)
                    XCTAssertEqual(matmulQ8(level: bk_best_level(), type, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: n0, n1: n, into: &y, ldy: n),
                                   Int32(BK_OK))
                    var failures = 0
                    for r in 0..<m {
                        for o in n0..<n {
                            var dot = 0.0, magnitude = 0.0, bound = 0.0
                            for b in 0..<(k / 32) {
                                let step = Double((0..<32).map { abs(x[r * k + 32 * b + $0]) }.max()! / 127)
                                for i in (32 * b)..<(32 * b + 32) {
                                    let p = Double(x[r * k + i]) * Double(ref[o * k + i])
                                    dot += p
                                    magnitude += abs(p)
                                    bound += abs(Double(ref[o * k + i])) * step * 0.5001
                                }
                            }
                            let error = abs(Double(y[r * n + o]) - dot), limit = bound + 2e-6 * magnitude
                            worst = max(worst, error / limit)
                            meanRelative += error / magnitude
                            count += 1
                            if !(error <= limit) { failures += 1 }
                        }
                    }
                    XCTAssertEqual(failures, 0, "\(type) k=\(k) m=\(m): \(failures) outputs beyond the activation-rounding bound")
                }
            }
        }
        print("BlockKernelTests: q8 error used at most \(worst) of its bound; mean |error| / sum|x*w| = \(meanRelative / Double(count))")
    }

    func testQ8SameBitsOnEveryLevelAndForEveryRowCount() {
        // k = 768, 576 (SmolLM2's width) and 96: the 32-value types go in groups of four blocks,
        // and 576 and 96 end in a short group (two blocks, three blocks); the K-quants take 768 only
        for type in Self.q8Types {
            for k in [768, 576, 96] where k % 256 == 0 || [.q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL].contains(type) {
                let n = 13
                let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: 41 &+ UInt64(type.rawValue) &+ UInt64(k))
                for m in Self.rowCounts {
                    let x = Self.activations(rows: m, k: k, seed: UInt64(m) &+ 500)
                    let portableQ = quantizeQ8(level: 0, x, m: m, k: k)
                    var portable = [Float](repeating: .nan, count: m * n)
                    _ = matmulQ8(level: 0, type, xq: portableQ, m: m, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: n, into: &portable, ldy: n)
                    for level in Self.levels {
                        let xq = quantizeQ8(level: level, x, m: m, k: k)
                        XCTAssertEqual(xq, portableQ, "\(Self.levelName(level)) quantizes m=\(m) differently from portable")
                        var y = [Float](repeating: .nan, count: m * n)
                        _ = matmulQ8(level: level, type, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: n, into: &y, ldy: n)
                        let differ = (0..<(m * n)).filter { $0 % n != 0 && y[$0].bitPattern != portable[$0].bitPattern }.count
                        XCTAssertEqual(differ, 0, "\(type) k=\(k) m=\(m): \(Self.levelName(level)) differs from portable in \(differ) outputs")
                        for r in 0..<m {  // one row at a time, output range in two pieces
                            let rowQ = quantizeQ8(level: level, Array(x[(r * k)..<((r + 1) * k)]), m: 1, k: k)
                            var single = [Float](repeating: .nan, count: n)
                            _ = matmulQ8(level: level, type, xq: rowQ, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: 8, into: &single, ldy: n)
                            _ = matmulQ8(level: level, type, xq: rowQ, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 8, n1: n, into: &single, ldy: n)
                            let rowDiffer = (1..<n).filter { single[$0].bitPattern != y[r * n + $0].bitPattern }.count
                            XCTAssertEqual(rowDiffer, 0, "\(type) k=\(k) m=\(m) row \(r) at \(Self.levelName(level)): one-row pass differs")
                        }
                    }
                }
            }
        }
    }

    /// Rows longer than the portable q8 product's stack buffer (4096 values) unpack into the
    /// thread's scratch instead: the same bits as every other level, several rows at once.
    func testQ8LongRowsSameBitsOnEveryLevel() {
        let k = 4352, n = 5, m = 3
        for type in [GGMLType.q4_K, .q6_K, .q4_1] {
            let (w, rowBytes) = Self.weights(type, rows: n, k: k, seed: 77 &+ UInt64(type.rawValue))
            let x = Self.activations(rows: m, k: k, seed: 901)
            let xq = quantizeQ8(level: 0, x, m: m, k: k)
            var portable = [Float](repeating: .nan, count: m * n)
            _ = matmulQ8(level: 0, type, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 0, n1: n, into: &portable, ldy: n)
            XCTAssertFalse(portable.contains { !$0.isFinite }, "\(type): every output written")
            for level in Self.levels {
                var y = [Float](repeating: .nan, count: m * n)
                _ = matmulQ8(level: level, type, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 0, n1: n, into: &y, ldy: n)
                let differ = (0..<(m * n)).filter { y[$0].bitPattern != portable[$0].bitPattern }.count
                XCTAssertEqual(differ, 0, "\(type) k=\(k) m=\(m): \(Self.levelName(level)) differs from portable in \(differ) outputs")
            }
        }
    }

    func testQ8RefusesFloatTypesAndPartialBlocks() {
        let xq = quantizeQ8(level: 0, [Float](repeating: 0.5, count: 64), m: 1, k: 64)
        let w = [UInt8](repeating: 0, count: 256)
        var y = [Float](repeating: 0, count: 1)
        for type in [GGMLType.f32, .f16, .bf16] {
            XCTAssertEqual(matmulQ8(level: 0, type, xq: xq, m: 1, k: 64, w: w, rowBytes: 128, n0: 0, n1: 1, into: &y, ldy: 1),
                           Int32(BK_ERROR_TYPE), "\(type)")
        }
        XCTAssertEqual(matmulQ8(level: 0, .q4_K, xq: xq, m: 1, k: 64, w: w, rowBytes: 36, n0: 0, n1: 1, into: &y, ldy: 1),
                       Int32(BK_ERROR_SHAPE))
        // Q2_K has no q8 product (callers fall back to float activations) at any level
        let xq256 = quantizeQ8(level: 0, [Float](repeating: 0.5, count: 256), m: 1, k: 256)
        for level in Self.levels {
            XCTAssertEqual(matmulQ8(level: level, .q2_K, xq: xq256, m: 1, k: 256, w: w, rowBytes: 84, n0: 0, n1: 1, into: &y, ldy: 1),
                           Int32(BK_ERROR_TYPE), Self.levelName(level))
        }
        var out = [UInt8](repeating: 0, count: 64)
        let rc = [Float](repeating: 1, count: 40).withUnsafeBufferPointer { xp in
            out.withUnsafeMutableBytes { bk_quantize_q8_at(0, xp.baseAddress, 1, 40, $0.baseAddress) }
        }
        XCTAssertEqual(rc, Int32(BK_ERROR_SHAPE))
    }

    // MARK: the real base model

    /// SmolLM2-135M's own blocks (ADAPTER_BASE_MODEL, set by scripts/test.sh): a Q4_1 layer
    /// matrix and the first rows of the Q8_0 embedding (the tied output head), float path at
    /// every level and q8 at the best, against the reference rows. Skipped without the file.
    func testSmolLM2TensorsAtEveryLevel() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], !path.isEmpty else {
            throw XCTSkip("ADAPTER_BASE_MODEL is not set; run scripts/test.sh (or scripts/fetch-model.sh and export it) to multiply the real SmolLM2 blocks")
        }
        guard FileManager.default.fileExists(atPath: path) else { throw XCTSkip("ADAPTER_BASE_MODEL=\(path) does not exist; run scripts/fetch-model.sh") }
        let file = try GGUFFile(path: path)
        for (name, rows) in [("blk.0.ffn_down.weight", 576), ("token_embd.weight", 300)] {
            let info = try XCTUnwrap(file.tensorInfo(named: name))
            let k = info.dimensions[0], (blockSize, typeSize) = info.type.blockGeometry, rowBytes = k / blockSize * typeSize
            let w = [UInt8](try file.rawBytes(of: name).prefix(rows * rowBytes))
            let ref = Self.reference(info.type, w, rowBytes: rowBytes, rows: 0..<rows, k: k)
            let m = 3
            let x = Self.activations(rows: m, k: k, seed: 2024)
            let xq = quantizeQ8(level: bk_best_level(), x, m: m, k: k)
            for level in Self.levels {
                var y = [Float](repeating: .nan, count: m * rows), yq = y
                XCTAssertEqual(matmul(level: level, info.type, x: x, m: m, k: k, w: w, rowBytes: rowBytes, n0: 0, n1: rows, into: &y, ldy: rows),
                               Int32(BK_OK))
                XCTAssertEqual(matmulQ8(level: level, info.type, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 0, n1: rows, into: &yq, ldy: rows),
                               Int32(BK_OK))
                var floatOff = 0, q8Off = 0
                for r in 0..<m {
                    for o in 0..<rows {
                        var dot = 0.0, magnitude = 0.0, bound = 0.0
                        for b in 0..<(k / 32) {
                            let step = Double((0..<32).map { abs(x[r * k + 32 * b + $0]) }.max()! / 127)
                            for i in (32 * b)..<(32 * b + 32) {
                                let p = Double(x[r * k + i]) * Double(ref[o * k + i])
                                dot += p
                                magnitude += abs(p)
                                bound += abs(Double(ref[o * k + i])) * step * 0.5001
                            }
                        }
                        if !(abs(Double(y[r * rows + o]) - dot) <= Self.tolerance * magnitude) { floatOff += 1 }
                        if !(abs(Double(yq[r * rows + o]) - dot) <= bound + 2e-6 * magnitude) { q8Off += 1 }
                    }
                }
                XCTAssertEqual(floatOff, 0, "\(name) (\(info.type)) at \(Self.levelName(level)): float path")
                XCTAssertEqual(q8Off, 0, "\(name) (\(info.type)) at \(Self.levelName(level)): q8 path")
            }
        }
    }

    func testLevelControl() {
        let active = bk_active_level()
        XCTAssertEqual(bk_set_level(-1), 0)
        XCTAssertEqual(bk_set_level(bk_best_level() + 1), 0)
        XCTAssertEqual(bk_active_level(), active, "a refused level leaves the active one alone")
        XCTAssertEqual(bk_level_supported(Int32(BK_LEVEL_PORTABLE)), 1)
        print("BlockKernelTests: best level here is \(Self.levelName(bk_best_level()))")
    }

    /// ADAPTER_CPU_LEVEL (scripts/test.sh runs the numerics tests once per level below the CPU's
    /// best with it): every kernel call runs the level it names, or the CPU's best when that is
    /// lower; a value that names no level fails here rather than testing the best level unnoticed.
    func testTheEnvironmentChoosesTheLevel() {
        let value = ProcessInfo.processInfo.environment["ADAPTER_CPU_LEVEL"] ?? ""
        let names = (0..<Int32(BK_LEVEL_COUNT)).map(Self.levelName)
        guard !value.isEmpty else {
            XCTAssertEqual(bk_level_request(), Int32(BK_LEVEL_UNSET))
            XCTAssertEqual(bk_best_level(), bk_cpu_level(), "no ADAPTER_CPU_LEVEL: the CPU's best")
            return
        }
        guard let level = names.firstIndex(of: value).map(Int32.init) else {
            XCTAssertEqual(bk_level_request(), Int32(BK_LEVEL_UNKNOWN))
            XCTFail("ADAPTER_CPU_LEVEL=\(value) names no level (\(names.joined(separator: ", ")))")
            return
        }
        XCTAssertEqual(bk_level_request(), level)
        XCTAssertEqual(bk_best_level(), min(level, bk_cpu_level()), "ADAPTER_CPU_LEVEL=\(value), clamped to the CPU's \(Self.levelName(bk_cpu_level()))")
        XCTAssertEqual(bk_active_level(), bk_best_level())
        XCTAssertEqual(bk_level_supported(bk_best_level() + 1), 0, "levels above the one asked for are refused as a lesser CPU's")
        print("BlockKernelTests: ADAPTER_CPU_LEVEL=\(value): running \(Self.levelName(bk_best_level())) on a CPU that runs \(Self.levelName(bk_cpu_level()))")
    }
}
