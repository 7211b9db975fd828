// bk_gemm (prompts' float32 products on AVX-512) against its definition: every output is the one
// fused multiply-add chain over k in order, so each level's result must equal that chain
// computed here with Float's own fma, bit for bit, for awkward shapes (row counts around the
// 16- and 64-row blocks, weight rows around the 6-row tiles, k around the 256-value blocks),
// strided activations, weights given as rows and as columns, strided outputs, and the packing
// split into shares as threads split it.
import CBlockKernels
import XCTest

final class GemmTests: XCTestCase {
    /// c[r·ldc + j] = fma chain of x row r (at r·ldx) and W's row j (element (j, i) at
    /// j·ldw + i·wstep): the definition bk_gemm states.
    static func chain(_ x: [Float], ldx: Int, m: Int, k: Int, _ w: [Float], ldw: Int, wstep: Int, n: Int) -> [Float] {
        var c = [Float](repeating: 0, count: m * n)
        for r in 0..<m {
            for j in 0..<n {
                var acc: Float = 0
                for i in 0..<k { acc.addProduct(x[r * ldx + i], w[j * ldw + i * wstep]) }  // fused: acc + x·w rounded once
                c[r * n + j] = acc
            }
        }
        return c
    }

    static func values(_ count: Int, seed: UInt64) -> [Float] {
        var g = BlockKernelTests.SplitMix64(state: seed)
        return (0..<count).map { _ in Float(Int64(bitPattern: g.next() >> 11) % 2001 - 1000) / 997 }
    }

    func testEveryLevelEqualsTheChainBitForBit() {
        let shapes: [(m: Int, n: Int, k: Int)] = [
            (1, 1, 1), (3, 7, 5), (15, 6, 255), (16, 13, 256), (17, 5, 257), (63, 12, 300), (64, 1, 512),
            (65, 19, 100), (130, 7, 513), (200, 25, 64),
        ]
        for (m, n, k) in shapes {
            let ldx = k + 2, ldc = n + 2
            let x = Self.values(m * ldx, seed: UInt64(m * 1000 + k))
            // W as rows (element (j, i) at j·(k + 3) + i) and as the columns of a [k, n + 1] matrix
            // (at j + i·(n + 1): attention's P·V multiplies V so)
            for (ldw, wstep) in [(k + 3, 1), (1, n + 1)] {
                let w = Self.values(ldw == 1 ? k * wstep : n * ldw, seed: UInt64(n * 7 + k + wstep))
                let want = Self.chain(x, ldx: ldx, m: m, k: k, w, ldw: ldw, wstep: wstep, n: n)
                for level in BlockKernelTests.levels {
                    for parts in [1, 3] {
                        var packed = [Float](repeating: .nan, count: bk_gemm_packed_floats(m, k))
                        for part in 0..<parts { XCTAssertEqual(bk_gemm_pack_at(level, x, ldx, m, k, part, parts, &packed), Int32(BK_OK)) }
                        var scratch = [Float](repeating: .nan, count: bk_gemm_scratch_floats(m, n))
                        var c = [Float](repeating: .nan, count: m * ldc)
                        XCTAssertEqual(bk_gemm_at(level, packed, m, k, w, ldw, wstep, n, &c, ldc, &scratch), Int32(BK_OK))
                        var differ = 0, padding = 0
                        for r in 0..<m {
                            for j in 0..<n where c[r * ldc + j].bitPattern != want[r * n + j].bitPattern { differ += 1 }
                            for j in n..<ldc where !c[r * ldc + j].isNaN { padding += 1 }
                        }
                        let what = "\(m)x\(n)x\(k), weights \(wstep == 1 ? "as rows" : "as columns"), at \(BlockKernelTests.levelName(level)), packed in \(parts) shares"
                        XCTAssertEqual(differ, 0, "\(what): \(differ) outputs differ from the chain")
                        XCTAssertEqual(padding, 0, "\(what): wrote \(padding) values past n in rows of ldc")
                    }
                }
            }
        }
    }

    func testARowsBitsDoNotDependOnTheOtherRows() {
        let m = 70, n = 9, k = 300
        let x = Self.values(m * k, seed: 5), w = Self.values(n * k, seed: 6)
        let level = bk_best_level()
        func product(_ rows: Int, _ x: [Float]) -> [Float] {
            var packed = [Float](repeating: 0, count: bk_gemm_packed_floats(rows, k))
            _ = bk_gemm_pack_at(level, x, k, rows, k, 0, 1, &packed)
            var scratch = [Float](repeating: 0, count: bk_gemm_scratch_floats(rows, n))
            var c = [Float](repeating: 0, count: rows * n)
            _ = bk_gemm_at(level, packed, rows, k, w, k, 1, n, &c, n, &scratch)
            return c
        }
        let all = product(m, x)
        for r in [0, 15, 16, 63, 64, 69] {
            let one = product(1, Array(x[(r * k)..<((r + 1) * k)]))
            XCTAssertEqual(one.map(\.bitPattern), all[(r * n)..<((r + 1) * n)].map(\.bitPattern), "row \(r) alone differs from row \(r) of \(m)")
        }
    }

    func testRefusesALevelAboveTheBest() {
        let best = bk_best_level()
        guard best + 1 < Int32(BK_LEVEL_COUNT) else {
            print("GemmTests: every level runs here; no level to refuse")
            return
        }
        var packed = [Float](repeating: 0, count: 16)
        XCTAssertEqual(bk_gemm_pack_at(best + 1, [1], 1, 1, 1, 0, 1, &packed), Int32(BK_ERROR_LEVEL))
    }
}
