// ggml block layouts (struct sizes and field offsets), hand-built blocks whose values are
// computed here, and gguf-py's dequantization of seeded random blocks (Fixtures/quant_blocks.json,
// from scripts/fixtures/make_modelassets_fixtures.py).
import Foundation
import XCTest
@testable import ModelAssets

final class GGUFQuantBlockTests: XCTestCase {
    func testBlockStructSizesMatchGGML() {
        XCTAssertEqual(MemoryLayout<BlockQ8_0>.size, 34)
        XCTAssertEqual(MemoryLayout<BlockQ4_0>.size, 18)
        XCTAssertEqual(MemoryLayout<BlockQ4_1>.size, 20)
        XCTAssertEqual(MemoryLayout<BlockQ5_0>.size, 22)
        XCTAssertEqual(MemoryLayout<BlockQ5_1>.size, 24)
        XCTAssertEqual(MemoryLayout<BlockIQ4_NL>.size, 18)
        XCTAssertEqual(MemoryLayout<BlockQ2_K>.size, 84)
        XCTAssertEqual(MemoryLayout<BlockQ3_K>.size, 110)
        XCTAssertEqual(MemoryLayout<BlockQ4_K>.size, 144)
        XCTAssertEqual(MemoryLayout<BlockQ5_K>.size, 176)
        XCTAssertEqual(MemoryLayout<BlockQ6_K>.size, 210)
        XCTAssertEqual(GGMLType.q8_0.blockGeometry.typeSize, MemoryLayout<BlockQ8_0>.size)
        XCTAssertEqual(GGMLType.q4_0.blockGeometry.typeSize, MemoryLayout<BlockQ4_0>.size)
        XCTAssertEqual(GGMLType.q4_1.blockGeometry.typeSize, MemoryLayout<BlockQ4_1>.size)
        XCTAssertEqual(GGMLType.q5_0.blockGeometry.typeSize, MemoryLayout<BlockQ5_0>.size)
        XCTAssertEqual(GGMLType.q5_1.blockGeometry.typeSize, MemoryLayout<BlockQ5_1>.size)
        XCTAssertEqual(GGMLType.iq4_NL.blockGeometry.typeSize, MemoryLayout<BlockIQ4_NL>.size)
        XCTAssertEqual(GGMLType.q2_K.blockGeometry.typeSize, MemoryLayout<BlockQ2_K>.size)
        XCTAssertEqual(GGMLType.q3_K.blockGeometry.typeSize, MemoryLayout<BlockQ3_K>.size)
        XCTAssertEqual(GGMLType.q4_K.blockGeometry.typeSize, MemoryLayout<BlockQ4_K>.size)
        XCTAssertEqual(GGMLType.q5_K.blockGeometry.typeSize, MemoryLayout<BlockQ5_K>.size)
        XCTAssertEqual(GGMLType.q6_K.blockGeometry.typeSize, MemoryLayout<BlockQ6_K>.size)
    }

    func testBlockFieldOffsetsMatchGGML() {
        XCTAssertEqual(BlockLayout.q8_0.qs, 2)
        XCTAssertEqual(BlockLayout.q4_1.m, 2)
        XCTAssertEqual(BlockLayout.q4_1.qs, 4)
        XCTAssertEqual([BlockLayout.q5_0.d, BlockLayout.q5_0.qh, BlockLayout.q5_0.qs], [0, 2, 6])
        XCTAssertEqual([BlockLayout.q5_1.d, BlockLayout.q5_1.m, BlockLayout.q5_1.qh, BlockLayout.q5_1.qs], [0, 2, 4, 8])
        XCTAssertEqual([BlockLayout.iq4_NL.d, BlockLayout.iq4_NL.qs], [0, 2])
        XCTAssertEqual([BlockLayout.q2_K.scales, BlockLayout.q2_K.qs, BlockLayout.q2_K.d, BlockLayout.q2_K.dmin], [0, 16, 80, 82])
        XCTAssertEqual([BlockLayout.q3_K.hmask, BlockLayout.q3_K.qs, BlockLayout.q3_K.scales, BlockLayout.q3_K.d], [0, 32, 96, 108])
        XCTAssertEqual([BlockLayout.q4_K.d, BlockLayout.q4_K.dmin, BlockLayout.q4_K.scales, BlockLayout.q4_K.qs], [0, 2, 4, 16])
        XCTAssertEqual([BlockLayout.q5_K.scales, BlockLayout.q5_K.qh, BlockLayout.q5_K.qs], [4, 16, 48])
        XCTAssertEqual([BlockLayout.q6_K.ql, BlockLayout.q6_K.qh, BlockLayout.q6_K.scales, BlockLayout.q6_K.d], [0, 128, 192, 208])
    }

    // MARK: hand-built blocks

    private func dequantize(_ type: GGMLType, _ bytes: [UInt8], count: Int) -> [Float] {
        var out = [Float](repeating: .nan, count: count)
        bytes.withUnsafeBytes { raw in out.withUnsafeMutableBufferPointer { Dequantize.run(type, raw: raw, count: count, into: $0.baseAddress!) } }
        return out
    }

    private func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    func testF32F16BF16KnownValues() {
        let f32: [UInt8] = Array([Float(1.5), -0.25, 3e38].map(\.bitPattern).flatMap { b in (0..<4).map { UInt8((b >> (8 * $0)) & 0xFF) } })
        XCTAssertEqual(dequantize(.f32, f32, count: 3), [1.5, -0.25, 3e38])
        // 1, -2, 65504 (largest half), 2^-24 (smallest subnormal), -0
        let f16 = [0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000].flatMap { le16(UInt16($0)) }
        let halves = dequantize(.f16, f16, count: 5)
        XCTAssertEqual(Array(halves[0..<4]), [1, -2, 65504, Float(1) / Float(1 << 24)])
        XCTAssertEqual(halves[4].bitPattern, (-0.0 as Float).bitPattern)
        // 1, -3, 1/128 in bfloat16
        XCTAssertEqual(dequantize(.bf16, [0x3F80, 0xC040, 0x3C00].flatMap { le16(UInt16($0)) }, count: 3), [1, -3, 0.0078125])
    }

    func testHalfAndBFloatEncodingRoundsToNearestEven() {
        XCTAssertEqual(HalfFloat.f16(from: 1), 0x3C00)
        XCTAssertEqual(HalfFloat.f16(from: 1e6), 0x7C00)  // past the range: infinity
        XCTAssertEqual(HalfFloat.bf16(from: 1), 0x3F80)
        // 1 + 2^-8 is a tie between bf16 1 and 1 + 2^-7: rounds to even (1).
        XCTAssertEqual(HalfFloat.bf16(from: 1 + 1.0 / 256), 0x3F80)
        XCTAssertEqual(HalfFloat.bf16(from: 1 + 3.0 / 256), 0x3F82)
        XCTAssertTrue(HalfFloat.float(fromBF16: HalfFloat.bf16(from: .nan)).isNaN)
    }

    func testQ8_0HandBuilt() {
        // d = 0.5; q[i] = i - 16
        let bytes = le16(0x3800) + (0..<32).map { UInt8(bitPattern: Int8($0 - 16)) }
        XCTAssertEqual(dequantize(.q8_0, bytes, count: 32), (0..<32).map { 0.5 * Float($0 - 16) })
    }

    func testQ4_0HandBuilt() {
        // d = 2; q[j] = j & 15 (low nibbles), q[j + 16] = 15 - j (high nibbles)
        let bytes = le16(0x4000) + (0..<16).map { (j: Int) -> UInt8 in UInt8(j) | UInt8(15 - j) << 4 }
        let low: [Float] = (0..<16).map { (j: Int) -> Float in 2 * Float(j - 8) }
        let high: [Float] = (0..<16).map { (j: Int) -> Float in 2 * Float(15 - j - 8) }
        let expected = low + high
        XCTAssertEqual(dequantize(.q4_0, bytes, count: 32), expected)
    }

    func testQ4_1HandBuilt() {
        // d = 0.25, m = -1; x = 0.25 q - 1
        let bytes = le16(0x3400) + le16(0xBC00) + (0..<16).map { (j: Int) -> UInt8 in UInt8(j) | UInt8((j * 7) % 16) << 4 }
        let low: [Float] = (0..<16).map { (j: Int) -> Float in 0.25 * Float(j) - 1 }
        let high: [Float] = (0..<16).map { (j: Int) -> Float in 0.25 * Float((j * 7) % 16) - 1 }
        let expected = low + high
        XCTAssertEqual(dequantize(.q4_1, bytes, count: 32), expected)
    }

    /// The fifth bits and nibbles of a Q5_0/Q5_1 block holding 5-bit codes q[0..<32] (20 bytes):
    /// the fifth bit of q[i] as bit i of a little-endian word, then low nibbles as Q4_0.
    private func q5Bits(_ q: [Int]) -> [UInt8] {
        var qh: UInt32 = 0
        for i in 0..<32 where q[i] & 16 != 0 { qh |= 1 << i }
        let nibbles = (0..<16).map { UInt8(q[$0] & 15) | UInt8(q[$0 + 16] & 15) << 4 }
        return (0..<4).map { UInt8((qh >> (8 * $0)) & 0xFF) } + nibbles
    }

    private func q5Block(d: UInt16, _ q: [Int]) -> [UInt8] { le16(d) + q5Bits(q) }

    func testQ5_1HandBuilt() {
        // d = 0.25, m = -2; q[i] = (11 i + 5) % 32
        let q = (0..<32).map { (11 * $0 + 5) % 32 }
        let bytes = le16(0x3400) + le16(0xC000) + q5Bits(q)
        XCTAssertEqual(bytes.count, 24)
        XCTAssertEqual(dequantize(.q5_1, bytes, count: 32), q.map { 0.25 * Float($0) - 2 })
    }

    func testQ5_0HandBuilt() {
        // d = 0.5; q[i] = (7 i + 3) % 32 puts fifth bits on both halves in an irregular pattern
        let q = (0..<32).map { (7 * $0 + 3) % 32 }
        let bytes = q5Block(d: 0x3800, q)
        XCTAssertEqual(bytes.count, 22)
        XCTAssertEqual(dequantize(.q5_0, bytes, count: 32), q.map { 0.5 * Float($0 - 16) })
    }

    /// Packs 8 six-bit scales and mins the way ggml's `get_scale_min_k4` unpacks them.
    private func packScalesK4(_ sc: [UInt8], _ m: [UInt8]) -> [UInt8] {
        var q = [UInt8](repeating: 0, count: 12)
        for j in 0..<4 {
            q[j] = sc[j] & 63
            q[j + 4] = m[j] & 63
        }
        for j in 4..<8 {
            q[j + 4] = (sc[j] & 0x0F) | ((m[j] & 0x0F) << 4)
            q[j - 4] |= (sc[j] >> 4) << 6
            q[j] |= (m[j] >> 4) << 6
        }
        return q
    }

    private let kScales: [UInt8] = [1, 7, 13, 63, 32, 45, 2, 60]
    private let kMins: [UInt8] = [0, 5, 63, 17, 48, 3, 33, 9]

    func testQ4_KHandBuilt() {
        // d = 1, dmin = 0.5; value l of sub-block s has q = (3 s + l) % 16.
        let q = { (s: Int, l: Int) in UInt8((3 * s + l) % 16) }
        var qs = [UInt8](repeating: 0, count: 128)
        for g in 0..<4 { for l in 0..<32 { qs[32 * g + l] = q(2 * g, l) | q(2 * g + 1, l) << 4 } }
        let bytes = le16(0x3C00) + le16(0x3800) + packScalesK4(kScales, kMins) + qs
        XCTAssertEqual(bytes.count, 144)
        var expected: [Float] = []
        for s in 0..<8 { for l in 0..<32 { expected.append(1 * Float(kScales[s]) * Float(q(s, l)) - 0.5 * Float(kMins[s])) } }
        XCTAssertEqual(dequantize(.q4_K, bytes, count: 256), expected)
    }

    func testQ5_KHandBuilt() {
        // d = 0.5, dmin = 0.25; 5-bit q = (5 s + 3 l) % 32: low nibble as Q4_K, bit s of qh[l] the fifth bit.
        let q = { (s: Int, l: Int) in UInt8((5 * s + 3 * l) % 32) }
        var qs = [UInt8](repeating: 0, count: 128)
        var qh = [UInt8](repeating: 0, count: 32)
        for g in 0..<4 { for l in 0..<32 { qs[32 * g + l] = (q(2 * g, l) & 15) | (q(2 * g + 1, l) & 15) << 4 } }
        for s in 0..<8 { for l in 0..<32 { qh[l] |= (q(s, l) >> 4) << s } }
        let bytes = le16(0x3800) + le16(0x3400) + packScalesK4(kScales, kMins) + qh + qs
        XCTAssertEqual(bytes.count, 176)
        var expected: [Float] = []
        for s in 0..<8 { for l in 0..<32 { expected.append(0.5 * Float(kScales[s]) * Float(q(s, l)) - 0.25 * Float(kMins[s])) } }
        XCTAssertEqual(dequantize(.q5_K, bytes, count: 256), expected)
    }

    func testIQ4_NLHandBuilt() {
        // d = 2; index j & 15 in the low nibbles, (5 j + 3) & 15 in the high; ggml's kvalues_iq4nl
        let levels: [Float] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
        let bytes = le16(0x4000) + (0..<16).map { (j: Int) -> UInt8 in UInt8(j) | UInt8((5 * j + 3) & 15) << 4 }
        let expected = (0..<16).map { 2 * levels[$0] } + (0..<16).map { 2 * levels[(5 * $0 + 3) & 15] }
        XCTAssertEqual(dequantize(.iq4_NL, bytes, count: 32), expected)
    }

    func testQ2_KHandBuilt() {
        // d = 0.5, dmin = 0.25; sub-block s has scale (7 s) % 16 and min (3 s + 1) % 16; value i
        // the 2-bit code (i + i / 5) % 4 in bits 2j, 2j+1 of qs[32h + l] (i = 128h + 32j + l).
        let q = { (i: Int) in (i + i / 5) % 4 }
        let sc = { (s: Int) in (7 * s) % 16 }, mn = { (s: Int) in (3 * s + 1) % 16 }
        var qs = [UInt8](repeating: 0, count: 64)
        for i in 0..<256 { qs[32 * (i / 128) + i % 32] |= UInt8(q(i)) << (2 * ((i % 128) / 32)) }
        let bytes = (0..<16).map { UInt8(sc($0) | mn($0) << 4) } + qs + le16(0x3800) + le16(0x3400)
        XCTAssertEqual(bytes.count, 84)
        let expected = (0..<256).map { i in 0.5 * Float(sc(i / 16)) * Float(q(i)) - 0.25 * Float(mn(i / 16)) }
        XCTAssertEqual(dequantize(.q2_K, bytes, count: 256), expected)
    }

    func testQ3_KHandBuilt() {
        // d = 0.5; sub-block s has the scale s·3 - 24 (6-bit code s·3 + 8); value i the code
        // c(i) = (5 i + i / 7) % 8, q = c - 4: low 2 bits in qs, the third in hmask.
        let c = { (i: Int) in (5 * i + i / 7) % 8 }
        var hmask = [UInt8](repeating: 0, count: 32), qs = [UInt8](repeating: 0, count: 64)
        for i in 0..<256 {
            let h = i / 128, j = (i % 128) / 32, l = i % 32
            qs[32 * h + l] |= UInt8(c(i) & 3) << (2 * j)
            hmask[l] |= UInt8(c(i) >> 2) << (i / 32)
        }
        let codes = (0..<16).map { UInt8($0 * 3 + 8) }  // scale + 32
        var scales = [UInt8](repeating: 0, count: 12)
        for i in 0..<16 {  // low nibbles: bytes 0-7 for 0-7, their high nibbles for 8-15; top bits in 8-11
            scales[i % 8] |= (codes[i] & 15) << (i < 8 ? 0 : 4)
            scales[8 + i % 4] |= (codes[i] >> 4) << (2 * (i / 4))
        }
        let bytes = hmask + qs + scales + le16(0x3800)
        XCTAssertEqual(bytes.count, 110)
        let expected = (0..<256).map { i in 0.5 * Float(3 * (i / 16) - 24) * Float(c(i) - 4) }
        XCTAssertEqual(dequantize(.q3_K, bytes, count: 256), expected)
    }

    func testQ6_KHandBuilt() {
        // d = 0.5, int8 scale of sub-block k is k - 8, 6-bit q(i) = (7 i) % 64, x = d sc (q - 32).
        let q = { (i: Int) in UInt8((7 * i) % 64) }
        var ql = [UInt8](repeating: 0, count: 128)
        var qh = [UInt8](repeating: 0, count: 64)
        for h in 0..<2 {
            for l in 0..<32 {
                let b = 128 * h
                ql[64 * h + l] = (q(b + l) & 15) | (q(b + l + 64) & 15) << 4
                ql[64 * h + l + 32] = (q(b + l + 32) & 15) | (q(b + l + 96) & 15) << 4
                qh[32 * h + l] = q(b + l) >> 4 | (q(b + l + 32) >> 4) << 2 | (q(b + l + 64) >> 4) << 4 | (q(b + l + 96) >> 4) << 6
            }
        }
        let scales = (0..<16).map { UInt8(bitPattern: Int8($0 - 8)) }
        let bytes = ql + qh + scales + le16(0x3800)
        XCTAssertEqual(bytes.count, 210)
        let expected = (0..<256).map { i in 0.5 * Float(i / 16 - 8) * Float(Int(q(i)) - 32) }
        XCTAssertEqual(dequantize(.q6_K, bytes, count: 256), expected)
    }

    // MARK: reference values from gguf-py

    func testEveryTypeMatchesGGUFPyOnRandomBlocks() throws {
        let url = try XCTUnwrap(Bundle.module.url(forResource: "quant_blocks", withExtension: "json", subdirectory: "Fixtures"))
        struct Case: Decodable { var type: String; var count: Int; var hex: String; var values: [Double] }
        struct Fixture: Decodable { var cases: [Case] }
        let fixture = try JSONDecoder().decode(Fixture.self, from: Data(contentsOf: url))
        XCTAssertEqual(Set(fixture.cases.map(\.type)), Set(GGMLType.dequantizable.map(\.name)))
        for c in fixture.cases {
            let type = try XCTUnwrap(GGMLType.allCases.first { $0.name == c.type })
            var bytes: [UInt8] = []
            var index = c.hex.startIndex
            while index < c.hex.endIndex {
                let next = c.hex.index(index, offsetBy: 2)
                bytes.append(UInt8(c.hex[index..<next], radix: 16)!)
                index = next
            }
            let got = dequantize(type, bytes, count: c.count)
            for (i, (g, e)) in zip(got, c.values).enumerated() {
                XCTAssertEqual(g, Float(e), accuracy: abs(Float(e)) * 1e-6, "\(c.type) value \(i)")
            }
        }
    }
}
