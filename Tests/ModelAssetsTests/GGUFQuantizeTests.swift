// The quantizer against the reference: Fixtures/quant_ours.gguf is our quantizer's output for a
// seeded input (rebuilt here byte for byte) and Fixtures/quant_ours_gguf_py.gguf is gguf-py's
// dequantization of it (scripts/fixtures/make_quant_fixtures.py). Then round-trip error bounds
// derived from each block's stored scales, thread-independence, refusals, and a throughput line.
import Foundation
import XCTest
@testable import ModelAssets

final class GGUFQuantizeTests: XCTestCase {
    // MARK: the committed fixture

    static let fixtureRows = 4
    static let fixtureColumns = 256

    /// Seeded rows that exercise the scale choices: small weights, a wide row with outliers, an
    /// all-positive row (K-quant mins clamp at 0), and zero / constant sub-blocks.
    static func fixtureInput(for type: GGMLType) -> [Float] {
        let k = fixtureColumns
        var x = [Float](repeating: 0, count: fixtureRows * k)
        x.withUnsafeMutableBufferPointer { b in
            let p = b.baseAddress!
            SeededNormal.fillRow(seed: 2024, tensor: type.name, row: 0, std: 0.02, count: k, into: p)
            SeededNormal.fillRow(seed: 2024, tensor: type.name, row: 1, std: 1, count: k, into: p + k)
            SeededNormal.fillRow(seed: 2024, tensor: type.name, row: 2, std: 0.3, count: k, into: p + 2 * k)
            SeededNormal.fillRow(seed: 2024, tensor: type.name, row: 3, std: 0.1, count: k, into: p + 3 * k)
        }
        x[k + 37] = 8
        x[k + 200] = -5
        for i in (2 * k)..<(3 * k) { x[i] = abs(x[i]) + 0.5 }
        for i in (3 * k)..<(3 * k + 64) { x[i] = 0 }
        for i in (3 * k + 64)..<(3 * k + 96) { x[i] = 0.25 }
        return x
    }

    /// The fixture file as our code writes it today.
    static func fixtureFile() throws -> Data {
        var writer = GGUFWriter()
        try writer.set("general.description", .string("GGUFQuantizeTests.fixtureInput (seed 2024) quantized by ModelAssets.Quantize"))
        for type in Quantize.types {
            let encoded = try Quantize.run(type, rows: fixtureRows, k: fixtureColumns, values: fixtureInput(for: type), tensor: type.name)
            try writer.addTensor(type.name, shape: [fixtureRows, fixtureColumns], type: type, encoded: encoded)
        }
        return writer.serialized()
    }

    private func fixtureURL(_ name: String) throws -> URL {
        try XCTUnwrap(Bundle.module.url(forResource: name, withExtension: "gguf", subdirectory: "Fixtures"))
    }

    /// QUANT_FIXTURE_OUT=path writes the fixture instead of checking it (then run make_quant_fixtures.py).
    func testCommittedFixtureIsOurQuantizersOutput() throws {
        let fresh = try Self.fixtureFile()
        if let out = ProcessInfo.processInfo.environment["QUANT_FIXTURE_OUT"], !out.isEmpty {
            try fresh.write(to: URL(fileURLWithPath: out))
            throw XCTSkip("QUANT_FIXTURE_OUT is set: wrote \(fresh.count) bytes to \(out) instead of comparing")
        }
        let committed = try Data(contentsOf: fixtureURL("quant_ours"))
        XCTAssertEqual(committed.count, fresh.count)
        XCTAssertTrue(committed == fresh, "Fixtures/quant_ours.gguf differs from today's quantizer output; if the change is intended, regenerate it (see scripts/fixtures/make_quant_fixtures.py)")
    }

    func testDequantizationEqualsGGUFPyExactly() throws {
        let ours = try GGUFFile(path: fixtureURL("quant_ours").path)
        let reference = try GGUFFile(path: fixtureURL("quant_ours_gguf_py").path)
        XCTAssertEqual(Set(ours.tensors.map(\.type)), Set(Quantize.types))
        XCTAssertEqual(Set(reference.tensors.map(\.name)), Set(ours.tensors.map(\.name)))
        for info in ours.tensors {
            let got = try ours.dequantize(info.name)
            let want = try reference.dequantize(info.name)
            XCTAssertEqual(got.shape, want.shape, info.name)
            let mismatches = zip(got.data, want.data).enumerated().filter { $0.element.0.bitPattern != $0.element.1.bitPattern }
            XCTAssertEqual(mismatches.count, 0, "\(info.name): first mismatch \(mismatches.first.map { "\($0.offset): \($0.element.0) vs gguf-py \($0.element.1)" } ?? "")")
        }
    }

    // MARK: round-trip bounds from the stored scales

    private func roundTrip(_ type: GGMLType, _ x: [Float], k: Int) throws -> (bytes: [UInt8], y: [Float]) {
        let bytes = try Quantize.run(type, rows: x.count / k, k: k, values: x, tensor: "t")
        var y = [Float](repeating: .nan, count: x.count)
        bytes.withUnsafeBytes { raw in y.withUnsafeMutableBufferPointer { Dequantize.run(type, raw: raw, count: x.count, into: $0.baseAddress!) } }
        return (bytes, y)
    }

    private func half(_ b: [UInt8], _ offset: Int) -> Float { HalfFloat.float(fromF16: UInt16(b[offset]) | UInt16(b[offset + 1]) << 8) }

    /// For every (sub-)block, the values its stored scales can represent, indexed by value.
    private func representable(_ type: GGMLType, _ block: [UInt8]) -> [[Float]] {
        switch type {
        case .q8_0:
            let d = half(block, BlockLayout.q8_0.d)
            return Array(repeating: (-127...127).map { d * Float($0) }, count: 32)
        case .q4_0:
            let d = half(block, BlockLayout.q4_0.d)
            return Array(repeating: (0...15).map { d * Float($0 - 8) }, count: 32)
        case .q4_1:
            let d = half(block, BlockLayout.q4_1.d), m = half(block, BlockLayout.q4_1.m)
            return Array(repeating: (0...15).map { d * Float($0) + m }, count: 32)
        case .q5_0:
            let d = half(block, BlockLayout.q5_0.d)
            return Array(repeating: (0...31).map { d * Float($0 - 16) }, count: 32)
        case .q5_1:
            let d = half(block, BlockLayout.q5_1.d), m = half(block, BlockLayout.q5_1.m)
            return Array(repeating: (0...31).map { d * Float($0) + m }, count: 32)
        case .q4_K, .q5_K:
            let layout = type == .q4_K ? (BlockLayout.q4_K.d, BlockLayout.q4_K.dmin, BlockLayout.q4_K.scales)
                                       : (BlockLayout.q5_K.d, BlockLayout.q5_K.dmin, BlockLayout.q5_K.scales)
            let d = half(block, layout.0), dmin = half(block, layout.1)
            let nmax = type == .q4_K ? 15 : 31
            return (0..<256).map { i in
                let (sc, m) = Array(block[layout.2..<(layout.2 + 12)]).withUnsafeBufferPointer { Dequantize.scaleMin(i / 32, $0.baseAddress!) }
                return (0...nmax).map { d * Float(sc) * Float($0) - dmin * Float(m) }
            }
        case .iq4_NL:
            let d = half(block, BlockLayout.iq4_NL.d)
            return Array(repeating: Dequantize.iq4nlValues.map { d * Float($0) }, count: 32)
        case .q2_K:
            let d = half(block, BlockLayout.q2_K.d), dmin = half(block, BlockLayout.q2_K.dmin)
            return (0..<256).map { i in
                let s = block[BlockLayout.q2_K.scales + i / 16]
                return (0...3).map { d * Float(s & 15) * Float($0) - dmin * Float(s >> 4) }
            }
        case .q3_K:
            let d = half(block, BlockLayout.q3_K.d)
            return (0..<256).map { i in
                let sc = Array(block[BlockLayout.q3_K.scales..<(BlockLayout.q3_K.scales + 12)]).withUnsafeBufferPointer { Dequantize.q3Scale(i / 16, $0.baseAddress!) }
                return (-4...3).map { d * Float(sc) * Float($0) }
            }
        case .q6_K:
            let d = half(block, BlockLayout.q6_K.d)
            return (0..<256).map { i in
                let sc = Int8(bitPattern: block[BlockLayout.q6_K.scales + i / 16])
                return (-32...31).map { d * Float(sc) * Float($0) }
            }
        default:
            return []
        }
    }

    /// A seeded matrix with rows of very different scales, as real weight matrices have.
    private func testMatrix(rows: Int, k: Int) -> [Float] {
        var x = [Float](repeating: 0, count: rows * k)
        x.withUnsafeMutableBufferPointer { b in
            for r in 0..<rows {
                SeededNormal.fillRow(seed: 7, tensor: "bounds", row: r, std: Float(pow(2.0, Double(r % 9) - 6)), count: k, into: b.baseAddress! + r * k)
            }
        }
        return x
    }

    /// Every value is stored as the representable value nearest to it (within float rounding of
    /// the division that picked it): the encoder rounds to nearest against the scales it stored.
    func testEveryValueIsItsBlocksNearestRepresentableValue() throws {
        let k = 512, x = testMatrix(rows: 18, k: k)
        for type in [GGMLType.q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K] {
            let (bytes, y) = try roundTrip(type, x, k: k)
            let (blockSize, typeSize) = type.blockGeometry
            var worst: Float = 0
            var failures: [String] = []
            for b in 0..<(x.count / blockSize) {
                let levels = representable(type, Array(bytes[(b * typeSize)..<((b + 1) * typeSize)]))
                for i in 0..<blockSize {
                    let v = x[b * blockSize + i], got = y[b * blockSize + i]
                    let nearest = levels[i].map { abs($0 - v) }.min()!
                    let spacing = levels[i].count > 1 ? abs(levels[i][1] - levels[i][0]) : 0
                    let excess = abs(got - v) - nearest
                    worst = max(worst, spacing > 0 ? excess / spacing : excess)
                    if !levels[i].contains(got) {
                        failures.append("block \(b) value \(i): \(got) is not a representable level")
                    } else if excess > 1e-4 * spacing + 1e-12 {
                        failures.append("block \(b) value \(i): \(v) stored as \(got), but a level lies \(nearest) away")
                    }
                }
            }
            XCTAssertEqual(failures.count, 0, "\(type): \(failures.count) values, first \(failures.first ?? "")")
            print("GGUFQuantizeTests: \(type) worst excess over the nearest level: \(worst) steps")
        }
    }

    /// Q8_0's scale is max|x| / 127, so every value is within half a step (d/2) of its code.
    func testQ8_0MaxErrorIsHalfItsScale() throws {
        let k = 256, x = testMatrix(rows: 9, k: k)
        let (bytes, y) = try roundTrip(.q8_0, x, k: k)
        for b in 0..<(x.count / 32) {
            let d = half(bytes, 34 * b)
            let maxError = (0..<32).map { abs(x[32 * b + $0] - y[32 * b + $0]) }.max()!
            XCTAssertLessThanOrEqual(maxError, d / 2 * (1 + 1e-5), "block \(b)")
        }
    }

    /// The scale choices, on Gaussian rows of mixed scales: relative RMS error ‖x - x̂‖ / ‖x‖ under
    /// bounds from the code counts (uniform rounding gives step/√12 ≈ range/(levels·3.46), with a
    /// block's range about 4.5 std for 32 Gaussian values and 3.7 std for 16), and the K-quants'
    /// search beating the plain min/max rounding of the 32-value types with the same bits.
    func testRelativeRMSErrorBounds() throws {
        let k = 4096, x = testMatrix(rows: 18, k: k)
        // (type, bound): Q8_0 4.5/255/3.46 = 0.0051; Q4_0 4.5/15/3.46 = 0.087 (its -8 anchor wastes
        // part of a level); Q4_1 0.087; Q5_0 4.5/31/3.46 = 0.042 (plus
        // Q4_0's anchor); Q5_1 and Q5_K 4.5/31/3.46 = 0.042; Q3_K 3.7/7/3.46 = 0.153 (8 codes per
        // 16 values, plus its 6-bit scales); Q2_K 3.7/3/3.46 = 0.36 for min/max rounding, its
        // searched (scale, min) pairs well below; IQ4_NL as Q4_1 (16 levels, denser near zero); Q6_K 3.7/63/3.46 = 0.017; Q4_K as
        // Q4_1. F16 and BF16: their largest rounding error, 2^-11 and 2^-8 relative.
        let bounds: [(GGMLType, Double)] = [(.q8_0, 0.0055), (.q4_0, 0.11), (.q4_1, 0.09), (.q5_0, 0.055), (.q5_1, 0.045), (.q3_K, 0.17), (.q2_K, 0.3), (.iq4_NL, 0.09), (.q4_K, 0.09), (.q5_K, 0.045), (.q6_K, 0.02),
                                            (.f16, 0.00049), (.bf16, 0.0039), (.f32, 0)]
        var measured: [GGMLType: Double] = [:]
        for (type, bound) in bounds {
            let (_, y) = try roundTrip(type, x, k: k)
            var num = 0.0, den = 0.0
            for r in 0..<18 {  // per row, so small rows count as much as big ones
                var e = 0.0, s = 0.0
                for i in (r * k)..<((r + 1) * k) {
                    e += Double(x[i] - y[i]) * Double(x[i] - y[i])
                    s += Double(x[i]) * Double(x[i])
                }
                num += e / s
                den += 1
            }
            let rel = (num / den).squareRoot()
            measured[type] = rel
            print("GGUFQuantizeTests: \(type) relative RMS error \(String(format: "%.5f", rel)) (bound \(bound))")
            XCTAssertLessThanOrEqual(rel, bound, "\(type)")
        }
        XCTAssertLessThan(measured[.q4_K]!, measured[.q4_1]!, "Q4_K's searched scales should beat Q4_1's min/max rounding")
        XCTAssertLessThan(measured[.q4_1]!, measured[.q4_0]!)
        XCTAssertLessThan(measured[.q5_0]!, measured[.q4_0]! / 1.8, "a fifth bit should about halve Q4_0's step")
        XCTAssertLessThan(measured[.q5_1]!, measured[.q4_1]! / 1.8, "and Q4_1's")
        XCTAssertLessThan(measured[.q6_K]!, measured[.q5_K]!)
        XCTAssertLessThan(measured[.q4_K]!, measured[.q3_K]!)
        XCTAssertLessThan(measured[.q3_K]!, measured[.q2_K]!)
        XCTAssertLessThan(measured[.iq4_NL]!, measured[.q4_0]!, "IQ4_NL's levels fit Gaussian weights better than Q4_0's")
    }

    func testF32F16BF16StoreTheConversion() throws {
        let x = testMatrix(rows: 3, k: 64)
        XCTAssertEqual(try roundTrip(.f32, x, k: 64).y, x)
        XCTAssertEqual(try roundTrip(.f16, x, k: 64).y, x.map { Float(Float16($0)) })
        XCTAssertEqual(try roundTrip(.bf16, x, k: 64).y, x.map { HalfFloat.float(fromBF16: HalfFloat.bf16(from: $0)) })
    }

    /// Zeros stay zeros; a constant comes back within fp16's precision of its scale (2^-11 relative).
    func testZeroAndConstantBlocks() throws {
        for type in Quantize.types {
            let (_, zeros) = try roundTrip(type, [Float](repeating: 0, count: 256), k: 256)
            XCTAssertEqual(zeros, [Float](repeating: 0, count: 256), "\(type)")
            let (_, constant) = try roundTrip(type, [Float](repeating: -0.75, count: 256), k: 256)
            XCTAssertLessThanOrEqual(constant.map { abs($0 + 0.75) }.max()!, 0.75 / 2048, "\(type)")
        }
    }

    func testBytesDoNotDependOnThreadCount() throws {
        let x = testMatrix(rows: 13, k: 512)
        for type in Quantize.types {
            let one = try Quantize.run(type, rows: 13, k: 512, values: x, tensor: "t", threads: 1)
            for threads in [2, 5, 64] {
                XCTAssertEqual(try Quantize.run(type, rows: 13, k: 512, values: x, tensor: "t", threads: threads), one, "\(type) threads \(threads)")
            }
        }
    }

    // MARK: refusals

    private func refusal(_ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) -> (tensor: String, type: String, reason: String)? {
        do {
            try body()
            XCTFail("no error", file: file, line: line)
        } catch let ModelAssetsError.cannotQuantize(tensor, type, reason) {
            return (tensor, type, reason)
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
        return nil
    }

    func testRowLengthNotAMultipleOfTheBlockIsRefusedByName() {
        let r = refusal { _ = try Quantize.run(.q4_K, rows: 2, k: 896, values: [Float](repeating: 0, count: 1792), tensor: "blk.0.attn_q.weight") }
        XCTAssertEqual(r?.tensor, "blk.0.attn_q.weight")
        XCTAssertEqual(r?.type, "Q4_K")
        XCTAssertTrue(r?.reason.contains("896") == true && r?.reason.contains("256") == true, r?.reason ?? "")
        let message = ModelAssetsError.cannotQuantize(tensor: "w", type: "Q8_0", reason: "x").localizedDescription
        XCTAssertTrue(message.contains("'w'") && message.contains("Q8_0"), message)
        XCTAssertNotNil(refusal { _ = try Quantize.run(.q8_0, rows: 1, k: 48, values: [Float](repeating: 0, count: 48), tensor: "w") })
        XCTAssertNoThrow(try Quantize.run(.f16, rows: 1, k: 7, values: [Float](repeating: 1, count: 7), tensor: "w"))
    }

    func testUnsupportedTypeAndWrongCountAreRefused() {
        XCTAssertTrue(refusal { _ = try Quantize.run(.iq2_XXS, rows: 1, k: 256, values: [Float](repeating: 0, count: 256), tensor: "w") }?
            .reason.contains("Q4_K") == true)
        XCTAssertNotNil(refusal { _ = try Quantize.run(.q8_0, rows: 2, k: 32, values: [Float](repeating: 0, count: 32), tensor: "w") })
    }

    func testNonFiniteAndOversizedValuesAreRefusedWithTheirPosition() {
        for type in [GGMLType.q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K] {
            var x = [Float](repeating: 0.1, count: 3 * 256)
            x[2 * 256 + 77] = .nan
            let r = refusal { _ = try Quantize.run(type, rows: 3, k: 256, values: x, tensor: "embd", threads: 3) }
            XCTAssertTrue(r?.reason.contains("row 2, column 77") == true, "\(type): \(r?.reason ?? "")")
            x[2 * 256 + 77] = 0
            x[256 + 3] = -.infinity
            XCTAssertTrue(refusal { _ = try Quantize.run(type, rows: 3, k: 256, values: x, tensor: "embd") }?.reason.contains("row 1, column 3") == true, "\(type)")
            x[256 + 3] = 1e30  // finite, but its scale overflows fp16
            XCTAssertTrue(refusal { _ = try Quantize.run(type, rows: 3, k: 256, values: x, tensor: "embd") }?.reason.contains("fp16") == true, "\(type)")
        }
        XCTAssertNoThrow(try Quantize.run(.f32, rows: 1, k: 2, values: [.nan, .infinity], tensor: "raw"))
    }

    // MARK: speed

    func testQuantizeThroughputReport() throws {
        let k = 4096, rows = 512
        var x = [Float](repeating: 0, count: rows * k)
        x.withUnsafeMutableBufferPointer { b in
            for r in 0..<rows { SeededNormal.fillRow(seed: 1, tensor: "speed", row: r, std: 0.02, count: k, into: b.baseAddress! + r * k) }
        }
        var line: [String] = []
        for type in Quantize.types {
            let start = Date()
            _ = try Quantize.run(type, rows: rows, k: k, values: x, tensor: "speed")
            line.append("\(type) \(String(format: "%.0f", Double(x.count) / Date().timeIntervalSince(start) / 1e6))")
        }
        print("GGUFQuantizeTests: million values/s on \(ProcessInfo.processInfo.activeProcessorCount) threads: \(line.joined(separator: ", "))")
    }
}
