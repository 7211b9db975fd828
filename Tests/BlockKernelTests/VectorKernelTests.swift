// CBlockKernels' float-vector kernels (bk_dot, bk_axpy, bk_attend, bk_attend_rows, bk_lowrank_up,
// bk_softmax, bk_swiglu) at every
// feature level this CPU runs, against float64 loops: lengths around the 16-lane width, one
// cached position, masked (-inf) and huge scores for the softmax's exp, keys/values at a stride
// as in a KV cache, and an adapter's up-projection split by rows and by outputs.
import CBlockKernels
import Foundation
import XCTest

final class VectorKernelTests: XCTestCase {
    typealias RNG = BlockKernelTests.SplitMix64

    func testDotAndAxpyMatchFloat64AtEveryLevel() {
        var rng = RNG(state: 11)
        for level in BlockKernelTests.levels {
            for n in [0, 1, 15, 16, 17, 33, 64, 100, 576] {
                let a = (0..<n).map { _ in rng.float() }, b = (0..<n).map { _ in rng.float() }
                let dot = a.withUnsafeBufferPointer { ap in b.withUnsafeBufferPointer { bk_dot_at(level, ap.baseAddress, $0.baseAddress, n) } }
                var expected = 0.0, magnitude = 0.0
                for i in 0..<n {
                    expected += Double(a[i]) * Double(b[i])
                    magnitude += abs(Double(a[i]) * Double(b[i]))
                }
                XCTAssertEqual(Double(dot), expected, accuracy: 1e-6 * max(magnitude, 1e-30),
                               "dot n \(n) at \(BlockKernelTests.levelName(level))")
                var y = b
                let alpha: Float = -0.375
                a.withUnsafeBufferPointer { ap in y.withUnsafeMutableBufferPointer { bk_axpy_at(level, alpha, ap.baseAddress, $0.baseAddress, n) } }
                for i in 0..<n {
                    XCTAssertEqual(Double(y[i]), Double(b[i]) + Double(alpha) * Double(a[i]), accuracy: 1e-6,
                                   "axpy n \(n) at \(i), \(BlockKernelTests.levelName(level))")
                }
            }
        }
    }

    /// y += u·Bᵀ with Bᵀ [r, out] as float32 and as float16: within float rounding of a float64
    /// loop, and bit for bit the same whether the rows go together or one at a time and whether
    /// the outputs go in one range or in pieces (as the server's rows and threads split them).
    func testLowRankUpMatchesFloat64AndIgnoresTheSplit() {
        var rng = RNG(state: 29)
        for level in BlockKernelTests.levels {
            for (m, r, out) in [(1, 1, 1), (3, 32, 576), (2, 8, 100), (5, 16, 67), (1, 64, 1536), (4, 16, 200), (6, 8, 97)] {
                let u = (0..<(m * r)).map { _ in rng.float() }
                let bt = (0..<(r * out)).map { _ in rng.float() }
                let y0 = (0..<(m * out)).map { _ in rng.float() }
                for half in [false, true] {
                    let weights: [Float] = half ? bt.map { Float(Float16($0)) } : bt
                    func run(rows: Range<Int>, _ o0: Int, _ o1: Int, into y: inout [Float]) {
                        u.withUnsafeBufferPointer { up in
                            y.withUnsafeMutableBufferPointer { yp in
                                let ur = up.baseAddress! + rows.lowerBound * r, yr = yp.baseAddress! + rows.lowerBound * out
                                if half {
                                    bt.map { Float16($0) }.withUnsafeBytes { bk_lowrank_up_at(level, ur, rows.count, r, $0.baseAddress, 1, out, o0, o1, yr, out) }
                                } else {
                                    bt.withUnsafeBytes { bk_lowrank_up_at(level, ur, rows.count, r, $0.baseAddress, 0, out, o0, o1, yr, out) }
                                }
                            }
                        }
                    }
                    var together = y0
                    run(rows: 0..<m, 0, out, into: &together)
                    var pieces = y0
                    let cuts = [0, min(out, 17), min(out, 80), out]
                    for row in 0..<m {
                        for c in 0..<3 where cuts[c] < cuts[c + 1] { run(rows: row..<(row + 1), cuts[c], cuts[c + 1], into: &pieces) }
                    }
                    let name = "m \(m) r \(r) out \(out)\(half ? " f16" : "") at \(BlockKernelTests.levelName(level))"
                    XCTAssertEqual(together.map(\.bitPattern), pieces.map(\.bitPattern), "split changed bits, \(name)")
                    var worst = 0.0
                    for row in 0..<m {
                        for o in 0..<out {
                            var sum = 0.0, magnitude = abs(Double(y0[row * out + o]))
                            for j in 0..<r {
                                sum += Double(u[row * r + j]) * Double(weights[j * out + o])
                                magnitude += abs(Double(u[row * r + j]) * Double(weights[j * out + o]))
                            }
                            worst = max(worst, abs(Double(together[row * out + o]) - Double(y0[row * out + o]) - sum) / magnitude)
                        }
                    }
                    XCTAssertLessThan(worst, 1e-6, name)
                }
            }
        }
    }

    /// Softmax-weighted values in float64, the reference for bk_attend.
    static func reference(q: [Float], keys: [Float], values: [Float], stride: Int, len: Int, hd: Int, scale: Float) -> [Double] {
        var s = (0..<len).map { j in (0..<hd).reduce(0.0) { $0 + Double(q[$1]) * Double(keys[j * stride + $1]) } * Double(scale) }
        let mx = s.max()!
        s = s.map { Foundation.exp($0 - mx) }
        let total = s.reduce(0, +)
        return (0..<hd).map { d in (0..<len).reduce(0.0) { $0 + s[$1] / total * Double(values[$1 * stride + d]) } }
    }

    func attend(level: Int32, q: [Float], keys: [Float], values: [Float], stride: Int, len: Int, hd: Int, scale: Float) -> [Float] {
        keys.withUnsafeBytes { kp in values.withUnsafeBytes { vp in attend(level: level, q: q, keys: kp, values: vp, half: false, stride: stride, len: len, hd: hd, scale: scale) } }
    }

    /// bk_attend over keys and values as raw rows: float32, or IEEE half bits when `half`.
    func attend(level: Int32, q: [Float], keys: UnsafeRawBufferPointer, values: UnsafeRawBufferPointer, half: Bool,
                stride: Int, len: Int, hd: Int, scale: Float) -> [Float] {
        var out = [Float](repeating: .nan, count: hd)
        var scores = [Float](repeating: .nan, count: len)
        q.withUnsafeBufferPointer { qp in
            scores.withUnsafeMutableBufferPointer { sp in
                out.withUnsafeMutableBufferPointer { op in
                    bk_attend_at(level, qp.baseAddress, keys.baseAddress, values.baseAddress, half ? 1 : 0, stride, len, hd, scale,
                                 sp.baseAddress, op.baseAddress)
                }
            }
        }
        return out
    }

    /// A float16 KV cache: attention over half keys and values gives, bit for bit, what it gives
    /// over float32 rows holding the same (rounded) values, at every level, tails included; and
    /// bk_to_half rounds as Swift's Float16 does (to nearest, ties to even, overflow to infinity).
    func testHalfCacheAttendIsFloatAttendOfTheRoundedValues() {
        var rng = RNG(state: 21)
        for level in BlockKernelTests.levels {
            for (len, hd, stride) in [(1, 64, 64), (3, 8, 24), (17, 64, 128), (100, 80, 160), (33, 72, 72)] {
                let q = (0..<hd).map { _ in rng.float() * 3 }
                let keys = (0..<(len * stride)).map { _ in rng.float() * 3 }, values = (0..<(len * stride)).map { _ in rng.float() }
                let hk = keys.map { Float16($0) }, hv = values.map { Float16($0) }
                let rk = hk.map { Float($0) }, rv = hv.map { Float($0) }
                let scale = 1 / Float(hd).squareRoot()
                let fromHalf = hk.withUnsafeBytes { kp in hv.withUnsafeBytes { vp in
                    attend(level: level, q: q, keys: kp, values: vp, half: true, stride: stride, len: len, hd: hd, scale: scale) } }
                let fromRounded = attend(level: level, q: q, keys: rk, values: rv, stride: stride, len: len, hd: hd, scale: scale)
                XCTAssertEqual(fromHalf.map(\.bitPattern), fromRounded.map(\.bitPattern),
                               "len \(len) hd \(hd) at \(BlockKernelTests.levelName(level))")
                // and the rounding is what moves the result: not the same as the float32 rows
                if len > 1 {
                    XCTAssertNotEqual(fromHalf, attend(level: level, q: q, keys: keys, values: values, stride: stride, len: len, hd: hd, scale: scale))
                }
            }
            var x = (0..<1000).map { _ in rng.float() * 100 }
            x += [0, -0, 65504, 65519.99, 65520, 1e6, -1e6, 6e-8, 3e-8, 2.9802322e-8, 1e-10, 1.00048828125, 1.000732421875, .infinity, -.infinity]
            var got = [UInt16](repeating: 0, count: x.count)
            x.withUnsafeBufferPointer { xp in got.withUnsafeMutableBufferPointer { bk_to_half_at(level, xp.baseAddress, $0.baseAddress, x.count) } }
            XCTAssertEqual(got, x.map { Float16($0).bitPattern }, "bk_to_half at \(BlockKernelTests.levelName(level))")
        }
    }

    func testAttendMatchesFloat64AtEveryLevel() {
        var rng = RNG(state: 12)
        for level in BlockKernelTests.levels {
            for (len, hd, stride) in [(1, 64, 64), (2, 8, 24), (15, 64, 192), (16, 32, 32), (17, 64, 128), (100, 80, 160), (300, 64, 64)] {
                let q = (0..<hd).map { _ in rng.float() * 3 }
                let keys = (0..<(len * stride)).map { _ in rng.float() * 3 }
                let values = (0..<(len * stride)).map { _ in rng.float() }
                let scale = 1 / Float(hd).squareRoot()
                let got = attend(level: level, q: q, keys: keys, values: values, stride: stride, len: len, hd: hd, scale: scale)
                let want = Self.reference(q: q, keys: keys, values: values, stride: stride, len: len, hd: hd, scale: scale)
                for d in 0..<hd {
                    XCTAssertEqual(Double(got[d]), want[d], accuracy: 2e-6, "len \(len) hd \(hd) at \(d), \(BlockKernelTests.levelName(level))")
                }
            }
        }
    }

    /// bk_attend_rows (a verify pass's rows and a KV head's query heads over one cache, sharing
    /// each key and value read) gives every query the bits bk_attend gives it alone: rows of
    /// different lengths (a verify pass's rows see 1, 2, ... more positions), float32 and float16
    /// rows, head dims with 64-, 16- and scalar tails, one row and many, at every level.
    func testAttendRowsIsAttendOfEachQueryBitForBit() {
        var rng = RNG(state: 31)
        for level in BlockKernelTests.levels {
            for (rows, heads, hd, first) in [(1, 3, 64, 40), (4, 3, 64, 200), (5, 1, 72, 1), (2, 4, 80, 17), (7, 2, 128, 33), (3, 5, 16, 3)] {
                let stride = heads * hd + 8  // a cache row holds every kv head's values; this head's at offset 0
                let len = (0..<rows).map { first + $0 }
                let positions = len.max()!
                let keys = (0..<(positions * stride)).map { _ in rng.float() * 3 }, values = (0..<(positions * stride)).map { _ in rng.float() }
                let ldq = heads * hd + 5, ldo = heads * hd + 3
                let q = (0..<(rows * ldq)).map { _ in rng.float() * 3 }
                let scale = 1 / Float(hd).squareRoot()
                for half in [false, true] {
                    let hk = keys.map { Float16($0) }, hv = values.map { Float16($0) }
                    var together = [Float](repeating: .nan, count: rows * ldo)
                    var scores = [Float](repeating: .nan, count: rows * heads * positions)
                    func run(_ kp: UnsafeRawBufferPointer, _ vp: UnsafeRawBufferPointer) {
                        q.withUnsafeBufferPointer { qp in len.withUnsafeBufferPointer { lp in
                            scores.withUnsafeMutableBufferPointer { sp in together.withUnsafeMutableBufferPointer { op in
                                bk_attend_rows_at(level, qp.baseAddress, ldq, rows, heads, lp.baseAddress, kp.baseAddress, vp.baseAddress,
                                                  half ? 1 : 0, stride, hd, scale, sp.baseAddress, op.baseAddress, ldo)
                            } }
                        } }
                    }
                    if half { hk.withUnsafeBytes { kp in hv.withUnsafeBytes { vp in run(kp, vp) } } }
                    else { keys.withUnsafeBytes { kp in values.withUnsafeBytes { vp in run(kp, vp) } } }
                    for r in 0..<rows {
                        for g in 0..<heads {
                            let query = Array(q[(r * ldq + g * hd)..<(r * ldq + (g + 1) * hd)])
                            let alone = half
                                ? hk.withUnsafeBytes { kp in hv.withUnsafeBytes { vp in
                                    attend(level: level, q: query, keys: kp, values: vp, half: true, stride: stride, len: len[r], hd: hd, scale: scale) } }
                                : attend(level: level, q: query, keys: keys, values: values, stride: stride, len: len[r], hd: hd, scale: scale)
                            XCTAssertEqual(Array(together[(r * ldo + g * hd)..<(r * ldo + (g + 1) * hd)]).map(\.bitPattern), alone.map(\.bitPattern),
                                           "rows \(rows) heads \(heads) hd \(hd)\(half ? " f16" : ""): row \(r) head \(g) at \(BlockKernelTests.levelName(level))")
                        }
                    }
                }
            }
        }
    }

    /// One position takes all the weight when the others' scores are far below it (their
    /// exponentials underflow to exactly 0), and a single position gives its value row exactly.
    func testAttendUnderflowAndSinglePosition() {
        for level in BlockKernelTests.levels {
            let hd = 16
            let q = [Float](repeating: 1, count: hd)
            var keys = [Float](repeating: -10, count: 3 * hd)
            for d in 0..<hd { keys[hd + d] = 10 }  // position 1: score 160 vs -160 elsewhere
            let values = (0..<(3 * hd)).map { Float($0) }
            let got = attend(level: level, q: q, keys: keys, values: values, stride: hd, len: 3, hd: hd, scale: 1)
            XCTAssertEqual(got, Array(values[hd..<(2 * hd)]), "\(BlockKernelTests.levelName(level))")
            let one = attend(level: level, q: q, keys: keys, values: values, stride: hd, len: 1, hd: hd, scale: 1)
            XCTAssertEqual(one, Array(values[0..<hd]), "\(BlockKernelTests.levelName(level))")
        }
    }

    /// softmax(scale·x) against float64 at lengths around the 16-lane width, scales of 1 and of
    /// 1/sqrt(64), scores far apart (the small ones' exponentials underflow to exactly 0, the
    /// largest takes all the weight) and one value (exactly 1).
    func testSoftmaxMatchesFloat64AtEveryLevel() {
        var rng = RNG(state: 41)
        for level in BlockKernelTests.levels {
            for n in [1, 2, 15, 16, 17, 31, 33, 64, 100, 257] {
                for scale: Float in [1, 0.125] {
                    let x = (0..<n).map { _ in 12 * rng.float() }
                    var y = x
                    y.withUnsafeMutableBufferPointer { bk_softmax_at(level, $0.baseAddress, n, scale) }
                    let s = x.map { Double($0) * Double(scale) }, mx = s.max()!
                    let e = s.map { Foundation.exp($0 - mx) }, total = e.reduce(0, +)
                    for i in 0..<n {
                        XCTAssertEqual(Double(y[i]), e[i] / total, accuracy: 2e-6 * max(e[i] / total, 1e-3),
                                       "n \(n) scale \(scale) at \(i), \(BlockKernelTests.levelName(level))")
                    }
                }
            }
            var far: [Float] = [-200, 0, 300, -1, 17, 299 - 120]
            far.withUnsafeMutableBufferPointer { bk_softmax_at(level, $0.baseAddress, 6, 1) }
            XCTAssertEqual(far, [0, 0, 1, 0, 0, 0], "\(BlockKernelTests.levelName(level))")
            var one: [Float] = [-3.5]
            one.withUnsafeMutableBufferPointer { bk_softmax_at(level, $0.baseAddress, 1, 0.5) }
            XCTAssertEqual(one, [1])
        }
    }

    /// SwiGLU against float64 (large gates of either sign included: e^-g clamped or 0), in place
    /// over the gate, and each value's bits independent of n and of its position in the call.
    func testSwigluMatchesFloat64AndEachValueAlone() {
        var rng = RNG(state: 43)
        for level in BlockKernelTests.levels {
            for n in [0, 1, 15, 16, 17, 40, 100] {
                var gate = (0..<n).map { _ in 8 * rng.float() }, up = (0..<n).map { _ in rng.float() }
                if n > 3 { gate[0] = 95; gate[1] = -95; gate[2] = 0 }
                var out = [Float](repeating: .nan, count: n)
                gate.withUnsafeBufferPointer { g in up.withUnsafeBufferPointer { u in out.withUnsafeMutableBufferPointer {
                    bk_swiglu_at(level, g.baseAddress, u.baseAddress, $0.baseAddress, n)
                } } }
                for i in 0..<n {
                    let g = Double(gate[i]), want = g / (1 + Foundation.exp(-g)) * Double(up[i])
                    XCTAssertEqual(Double(out[i]), want, accuracy: 1e-6 * max(abs(want), 1e-6),
                                   "n \(n) at \(i), \(BlockKernelTests.levelName(level))")
                    var alone = [Float](repeating: 0, count: 1)
                    gate.withUnsafeBufferPointer { g in up.withUnsafeBufferPointer { u in alone.withUnsafeMutableBufferPointer {
                        bk_swiglu_at(level, g.baseAddress! + i, u.baseAddress! + i, $0.baseAddress, 1)
                    } } }
                    XCTAssertEqual(alone[0].bitPattern, out[i].bitPattern, "n \(n) value \(i) alone, \(BlockKernelTests.levelName(level))")
                }
                var inPlace = gate
                inPlace.withUnsafeMutableBufferPointer { g in up.withUnsafeBufferPointer { bk_swiglu_at(level, g.baseAddress, $0.baseAddress, g.baseAddress, n) } }
                XCTAssertEqual(inPlace.map(\.bitPattern), out.map(\.bitPattern), "in place, n \(n)")
            }
        }
    }
}
