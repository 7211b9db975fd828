// The q8k form (bk_quantize_q8k, bk_matmul_nt_q8k: llama.cpp's q8_K for K-quant weights) at every
// level this CPU runs: the quantization's bound and sums, the product against a float64 dot of
// the reference-dequantized weights with the quantized activations, and the same bits on every
// level, for every row count and output split.
import CBlockKernels
import Foundation
import XCTest
@testable import ModelAssets

final class Q8KTests: XCTestCase {
    typealias T = BlockKernelTests
    static let rowCounts = [1, 2, 3, 7, 8, 9, 16, 17, 35, 48]
    static let types: [GGMLType] = [.q4_K, .q5_K, .q6_K]

    func quantize(level: Int32, _ x: [Float], m: Int, k: Int) -> [UInt8] {
        var xq = [UInt8](repeating: 0, count: bk_q8k_bytes(m, k))
        let rc = x.withUnsafeBufferPointer { xp in xq.withUnsafeMutableBytes { bk_quantize_q8k_at(level, xp.baseAddress, m, k, $0.baseAddress) } }
        XCTAssertEqual(rc, Int32(BK_OK))
        return xq
    }

    func matmul(level: Int32, xq: [UInt8], m: Int, k: Int, w: [UInt8], rowBytes: Int, n0: Int, n1: Int, into y: inout [Float], ldy: Int,
                type: GGMLType = .q4_K) -> Int32 {
        xq.withUnsafeBytes { xp in
            w.withUnsafeBytes { wp in
                y.withUnsafeMutableBufferPointer { yp in
                    bk_matmul_nt_q8k_at(level, type.rawValue, xp.baseAddress, m, k, wp.baseAddress, rowBytes, n0, n1, yp.baseAddress, ldy)
                }
            }
        }
    }

    /// (q, d, bsum per 32, bsum16 per 16) of row r, super-block b, read back from the documented layout.
    func parts(_ xq: [UInt8], m: Int, k: Int, r: Int, b: Int) -> (q: [Int8], d: Float, bsum: [Int16], bsum16: [Int16]) {
        let B = k / 256
        let q = (0..<256).map { Int8(bitPattern: xq[r * k + 256 * b + $0]) }
        let d = xq.withUnsafeBytes { $0.load(fromByteOffset: m * k + 4 * (b * m + r), as: Float.self) }
        // bsum [B][4][m][2]: sub-blocks 2g and 2g+1 of every row side by side
        let bsum = (0..<8).map { s in
            xq.withUnsafeBytes { $0.load(fromByteOffset: m * k + 4 * m * B + 2 * (((b * 4 + s / 2) * m + r) * 2 + s % 2), as: Int16.self) }
        }
        // bsum16 [B][8][m][2] after it
        let bsum16 = (0..<16).map { s in
            xq.withUnsafeBytes { $0.load(fromByteOffset: m * k + 4 * m * B + 16 * m * B + 2 * (((b * 8 + s / 2) * m + r) * 2 + s % 2), as: Int16.self) }
        }
        return (q, d, bsum, bsum16)
    }

    func testQuantizationStepsAndSums() {
        let m = 3, k = 512
        var x = T.activations(rows: m, k: k, seed: 3)
        for i in stride(from: 0, to: x.count, by: 11) { x[i] *= 9 }
        for i in 256..<512 { x[i] = 0 }  // row 0's second super-block: all zero
        for level in T.levels {
            let xq = quantize(level: level, x, m: m, k: k)
            for r in 0..<m {
                for b in 0..<(k / 256) {
                    let (q, d, bsum, bsum16) = parts(xq, m: m, k: k, r: r, b: b)
                    let values = x[(r * k + 256 * b)..<(r * k + 256 * b + 256)]
                    XCTAssertEqual(d, values.map { abs($0) }.max()! / 127, "row \(r) block \(b)")
                    for (i, v) in values.enumerated() {
                        XCTAssertLessThanOrEqual(abs(Double(v) - Double(d) * Double(q[i])), Double(d) * 0.5001 + 1e-30, "row \(r) value \(i)")
                    }
                    XCTAssertEqual(bsum, (0..<8).map { s in Int16(q[(32 * s)..<(32 * s + 32)].reduce(0) { $0 + Int($1) }) })
                    XCTAssertEqual(bsum16, (0..<16).map { s in Int16(q[(16 * s)..<(16 * s + 16)].reduce(0) { $0 + Int($1) }) })
                }
            }
        }
    }

    func testProductIsTheDotOfTheQuantizedActivations() {
        var worst = 0.0
        for type in Self.types {
            for k in [256, 768, 2048] {
                let n = 11, n0 = 2
                let (w, rowBytes) = T.weights(type, rows: n, k: k, seed: UInt64(k) &+ 7)
                let ref = T.reference(type, w, rowBytes: rowBytes, rows: 0..<n, k: k)
                for m in Self.rowCounts {
                    var x = T.activations(rows: m, k: k, seed: UInt64(m * 31 + k))
                    for i in stride(from: 0, to: x.count, by: 5) { x[i] *= 4 }
                    for level in T.levels {
                        let xq = quantize(level: level, x, m: m, k: k)
                        var y = [Float](repeating: .nan, count: m * n)
                        XCTAssertEqual(matmul(level: level, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: n0, n1: n, into: &y, ldy: n, type: type), Int32(BK_OK))
                        var failures = 0
                        for r in 0..<m {
                            let rowParts = (0..<(k / 256)).map { parts(xq, m: m, k: k, r: r, b: $0) }
                            for o in 0..<n {
                                if o < n0 { if !y[r * n + o].isNaN { failures += 1 }; continue }  // outside [n0, n1): untouched
                                var dot = 0.0, magnitude = 0.0
                                for i in 0..<k {
                                    let p = rowParts[i / 256]
                                    let term = Double(ref[o * k + i]) * Double(p.d) * Double(p.q[i % 256])
                                    dot += term
                                    magnitude += abs(term)
                                }
                                let error = abs(Double(y[r * n + o]) - dot)
                                if magnitude > 0 { worst = max(worst, error / magnitude) }
                                if !(error <= 1e-5 * magnitude) { failures += 1 }
                            }
                        }
                        XCTAssertEqual(failures, 0, "\(type) k=\(k) m=\(m) at \(T.levelName(level)): \(failures) outputs off")
                    }
                }
            }
        }
        print("Q8KTests: worst |q8k product - float64 dot of its quantized activations| / sum|terms| = \(worst)")
    }

    func testSameBitsOnEveryLevelForEveryRowCountAndSplit() {
        for type in Self.types {
            let k = 768, n = 13
            let (w, rowBytes) = T.weights(type, rows: n, k: k, seed: 99)
            for m in Self.rowCounts {
                let x = T.activations(rows: m, k: k, seed: UInt64(m) &+ 900)
                let xq = quantize(level: 0, x, m: m, k: k)
                var portable = [Float](repeating: .nan, count: m * n)
                _ = matmul(level: 0, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: n, into: &portable, ldy: n, type: type)
                for level in T.levels {
                    XCTAssertEqual(quantize(level: level, x, m: m, k: k), xq, "\(T.levelName(level)) quantizes differently")
                    var y = [Float](repeating: .nan, count: m * n)
                    _ = matmul(level: level, xq: xq, m: m, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: n, into: &y, ldy: n, type: type)
                    let differ = (0..<(m * n)).filter { $0 % n != 0 && y[$0].bitPattern != portable[$0].bitPattern }.count
                    XCTAssertEqual(differ, 0, "\(type) m=\(m): \(T.levelName(level)) differs from portable in \(differ) outputs")
                    for r in 0..<m {  // one row alone, the outputs in two pieces
                        let rowQ = quantize(level: level, Array(x[(r * k)..<((r + 1) * k)]), m: 1, k: k)
                        var single = [Float](repeating: .nan, count: n)
                        _ = matmul(level: level, xq: rowQ, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 1, n1: 6, into: &single, ldy: n, type: type)
                        _ = matmul(level: level, xq: rowQ, m: 1, k: k, w: w, rowBytes: rowBytes, n0: 6, n1: n, into: &single, ldy: n, type: type)
                        let rowDiffer = (1..<n).filter { single[$0].bitPattern != y[r * n + $0].bitPattern }.count
                        XCTAssertEqual(rowDiffer, 0, "\(type) m=\(m) row \(r) at \(T.levelName(level)): the one-row pass differs")
                    }
                }
            }
        }
    }

    func testRefusesOtherTypesAndPartialSuperBlocks() {
        let xq = quantize(level: 0, [Float](repeating: 0.5, count: 256), m: 1, k: 256)
        var y = [Float](repeating: 0, count: 1)
        for type in [GGMLType.q4_1, .q4_0, .q8_0, .f32] {
            XCTAssertEqual(matmul(level: 0, xq: xq, m: 1, k: 256, w: [UInt8](repeating: 0, count: 512), rowBytes: 210, n0: 0, n1: 1,
                                  into: &y, ldy: 1, type: type), Int32(BK_ERROR_TYPE), "\(type)")
        }
        var out = [UInt8](repeating: 0, count: 1024)
        let rc = [Float](repeating: 1, count: 128).withUnsafeBufferPointer { xp in out.withUnsafeMutableBytes { bk_quantize_q8k_at(0, xp.baseAddress, 1, 128, $0.baseAddress) } }
        XCTAssertEqual(rc, Int32(BK_ERROR_SHAPE))
    }
}
