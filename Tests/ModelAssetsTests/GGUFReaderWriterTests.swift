// GGUF writer -> reader round trips (every metadata type, nested arrays, versions 2 and 3,
// alignment, F32/F16/BF16 and pre-encoded tensors) and one test per kind of hostile input,
// built byte by byte with `RawGGUF`, each expecting a typed error that names the culprit.
import Foundation
import XCTest
@testable import ModelAssets

/// Builds GGUF bytes field by field, including ones no honest writer would produce.
struct RawGGUF {
    var magic: [UInt8] = Array("GGUF".utf8)
    var version: UInt32 = 3
    var kvCount: UInt64?
    var tensorCount: UInt64?
    var kvs: [(key: String, type: UInt32, payload: [UInt8])] = []
    var tensors: [(name: String, dims: [UInt64], type: UInt32, offset: UInt64)] = []
    var alignment = 32
    var data: [UInt8] = []

    static func string(_ s: String) -> [UInt8] {
        var sink = ByteSink()
        sink.append(UInt64(s.utf8.count))
        sink.append(bytes: s.utf8)
        return sink.bytes
    }

    static func u32(_ v: UInt32) -> [UInt8] { var s = ByteSink(); s.append(v); return s.bytes }
    static func u64(_ v: UInt64) -> [UInt8] { var s = ByteSink(); s.append(v); return s.bytes }

    var bytes: [UInt8] {
        var out = ByteSink()
        out.append(bytes: magic)
        out.append(version)
        out.append(tensorCount ?? UInt64(tensors.count))
        out.append(kvCount ?? UInt64(kvs.count))
        for kv in kvs {
            out.append(bytes: Self.string(kv.key))
            out.append(kv.type)
            out.append(bytes: kv.payload)
        }
        for t in tensors {
            out.append(bytes: Self.string(t.name))
            out.append(UInt32(t.dims.count))
            for d in t.dims { out.append(d) }
            out.append(t.type)
            out.append(t.offset)
        }
        out.pad(toMultipleOf: alignment)
        out.append(bytes: data)
        return out.bytes
    }

    /// A valid file: one 4x8 F32 tensor "w" (values 0..<32) and one string key.
    static var valid: RawGGUF {
        var r = RawGGUF()
        r.kvs = [("general.architecture", 8, string("llama"))]
        r.tensors = [("w", [8, 4], 0, 0)]
        var sink = ByteSink()
        for i in 0..<32 { sink.append(Float(i)) }
        r.data = sink.bytes
        return r
    }
}

/// A small seeded generator so corruption tests are the same on every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

final class GGUFReaderWriterTests: XCTestCase {
    private func parse(_ raw: RawGGUF) throws -> GGUFFile { try GGUFFile(data: Data(raw.bytes), path: "test.gguf") }

    private func expectError(_ raw: RawGGUF, file: StaticString = #filePath, line: UInt = #line,
                             _ check: (ModelAssetsError) -> Bool) {
        XCTAssertThrowsError(try parse(raw), file: file, line: line) { error in
            guard let e = error as? ModelAssetsError else { return XCTFail("untyped error \(error)", file: file, line: line) }
            XCTAssertTrue(check(e), "unexpected error: \(e.localizedDescription)", file: file, line: line)
            XCTAssertTrue(e.localizedDescription.contains("test.gguf"), "error does not name the file", file: file, line: line)
        }
    }

    static let allTypesMetadata: [(String, GGUFValue)] = [
        ("u8", .uint8(250)), ("i8", .int8(-120)), ("u16", .uint16(65000)), ("i16", .int16(-32000)),
        ("u32", .uint32(4_000_000_000)), ("i32", .int32(-2_000_000_000)), ("u64", .uint64(UInt64.max)),
        ("i64", .int64(Int64.min)), ("f32", .float32(3.25)), ("f64", .float64(-1e-300)), ("yes", .bool(true)),
        ("no", .bool(false)), ("text", .string("héllo ✓\n")), ("empty", .string("")),
        ("ints", .array(elementType: .int32, values: [.int32(1), .int32(-2), .int32(3)])),
        ("strings", .array(elementType: .string, values: [.string("a"), .string(""), .string("ĠHello")])),
        ("no items", .array(elementType: .float64, values: [])),
        ("nested", .array(elementType: .array, values: [
            .array(elementType: .uint8, values: [.uint8(1), .uint8(2)]),
            .array(elementType: .string, values: [.string("x")]),
            .array(elementType: .array, values: [.array(elementType: .bool, values: [.bool(true)])]),
        ])),
    ]

    func testMetadataOfEveryTypeRoundTripsInVersions2And3() throws {
        for version: UInt32 in [2, 3] {
            var writer = GGUFWriter(version: version)
            for (k, v) in Self.allTypesMetadata { try writer.set(k, v) }
            let file = try GGUFFile(data: writer.serialized(), path: "meta.gguf")
            XCTAssertEqual(file.version, version)
            XCTAssertEqual(file.metadataKeys, Self.allTypesMetadata.map(\.0))
            for (k, v) in Self.allTypesMetadata { XCTAssertEqual(file.metadata[k], v, k) }
            XCTAssertEqual(file.tensors, [])
            XCTAssertEqual(try file.int("i32"), -2_000_000_000)
            XCTAssertEqual(try file.stringArray("strings"), ["a", "", "ĠHello"])
        }
    }

    func testTensorsRoundTripWithShapeOrderAndAlignment() throws {
        for alignment in [32, 64, 8] {
            var writer = GGUFWriter(alignment: alignment)
            let m = HostTensor(shape: [3, 5], data: (0..<15).map { Float($0) * 0.5 - 2 })
            let v = HostTensor(shape: [7], data: (0..<7).map { Float($0) / 3 })
            let cube = HostTensor(shape: [2, 3, 4], data: (0..<24).map { Float($0) })
            try writer.addTensor("m", m)
            try writer.addTensor("v", v, as: .f16)
            try writer.addTensor("cube", cube, as: .bf16)
            try writer.set("general.name", .string("tiny"))
            let file = try GGUFFile(data: writer.serialized(), path: "t.gguf")
            XCTAssertEqual(file.alignment, alignment)
            XCTAssertEqual(file.metadata["general.alignment"], alignment == 32 ? nil : .uint32(UInt32(alignment)))
            XCTAssertEqual(file.dataOffset % alignment, 0)
            for t in file.tensors { XCTAssertEqual(t.offset % alignment, 0) }
            // ggml lists the fastest-varying dimension first; shapes come back row-major.
            XCTAssertEqual(file.tensorInfo(named: "m")?.dimensions, [5, 3])
            XCTAssertEqual(file.tensorInfo(named: "m")?.shape, [3, 5])
            XCTAssertEqual(try file.dequantize("m"), m)
            XCTAssertEqual(try file.dequantize("v").data, v.data.map { Float(Float16($0)) })
            XCTAssertEqual(try file.dequantize("cube"), cube)  // small integers are exact in bf16
            XCTAssertEqual(try file.dequantizeAll().keys.sorted(), ["cube", "m", "v"])
        }
    }

    func testPreEncodedQuantizedTensorRoundTrips() throws {
        // One Q8_0 block: d = 1, q = i - 16.
        let block = [0x00, 0x3C] + (0..<32).map { UInt8(bitPattern: Int8($0 - 16)) }
        var writer = GGUFWriter()
        try writer.addTensor("q", shape: [1, 32], type: .q8_0, encoded: block)
        let file = try GGUFFile(data: writer.serialized(), path: "q.gguf")
        XCTAssertEqual(try file.dequantize("q").data, (0..<32).map { Float($0 - 16) })
        XCTAssertEqual(try file.rawBytes(of: "q"), Data(block))
        XCTAssertThrowsError(try writer.addTensor("bad", shape: [1, 31], type: .q8_0, encoded: block))
    }

    func testWriterRefusesDuplicatesAndMixedArrays() {
        var writer = GGUFWriter()
        XCTAssertNoThrow(try writer.set("k", .bool(true)))
        XCTAssertThrowsError(try writer.set("k", .bool(false)))
        XCTAssertThrowsError(try writer.set("mixed", .array(elementType: .int32, values: [.int32(1), .uint8(2)])))
        XCTAssertNoThrow(try writer.addTensor("t", HostTensor(shape: [1], data: [0])))
        XCTAssertThrowsError(try writer.addTensor("t", HostTensor(shape: [1], data: [0])))
        // block types are quantized on the way in; a row that is not whole blocks is refused
        XCTAssertNoThrow(try writer.addTensor("q4", HostTensor(shape: [32], data: Array(repeating: 0, count: 32)), as: .q4_0))
        XCTAssertThrowsError(try writer.addTensor("q4bad", HostTensor(shape: [31], data: Array(repeating: 0, count: 31)), as: .q4_0))
    }

    func testWrittenFileOnDiskReadsBack() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gguf-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("m.gguf").path
        var writer = GGUFWriter()
        try writer.addTensor("x", HostTensor(shape: [2, 2], data: [1, 2, 3, 4]))
        try writer.write(to: path)
        try writer.write(to: path)  // overwriting is atomic too
        XCTAssertEqual(try GGUFFile(path: path).dequantize("x").data, [1, 2, 3, 4])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["m.gguf"])
    }

    func testRawBuilderValidFileParses() throws {
        let file = try parse(RawGGUF.valid)
        XCTAssertEqual(try file.dequantize("w"), HostTensor(shape: [4, 8], data: (0..<32).map(Float.init)))
    }

    // MARK: hostile input, one test per case

    func testWrongMagic() {
        var raw = RawGGUF.valid
        raw.magic = Array("GGML".utf8)
        expectError(raw) { if case .badMagic = $0 { return true }; return false }
        XCTAssertThrowsError(try GGUFFile(data: Data(), path: "test.gguf"))
        XCTAssertThrowsError(try GGUFFile(data: Data("GGU".utf8), path: "test.gguf"))
    }

    func testUnsupportedVersions() {
        for version: UInt32 in [1, 4, 0] {
            var raw = RawGGUF.valid
            raw.version = version
            expectError(raw) { if case .unsupportedVersion(_, version, [2, 3]) = $0 { return true }; return false }
        }
        var bigEndian = RawGGUF.valid
        bigEndian.version = UInt32(3).byteSwapped
        expectError(bigEndian) { $0.localizedDescription.contains("big-endian") }
    }

    func testUnknownTensorTypeIsNamed() {
        var raw = RawGGUF.valid
        raw.tensors[0].type = 99
        expectError(raw) { if case .unknownTensorType(_, "w", 99) = $0 { return true }; return false }
        XCTAssertTrue(ModelAssetsError.unknownTensorType(path: "p", tensor: "w", typeID: 99).localizedDescription.contains("Q4_K"))
    }

    func testKnownButUnsupportedTypeIsRefusedOnDequantize() throws {
        var raw = RawGGUF.valid
        raw.tensors[0] = ("w", [256, 1], GGMLType.iq2_XXS.rawValue, 0)
        raw.data = [UInt8](repeating: 0, count: 66)
        let file = try parse(raw)
        XCTAssertThrowsError(try file.dequantize("w")) { error in
            guard case let .unsupportedTensorType(_, tensor, type, supported) = error as? ModelAssetsError else { return XCTFail("\(error)") }
            XCTAssertEqual(tensor, "w")
            XCTAssertEqual(type, "IQ2_XXS")
            XCTAssertEqual(supported, GGMLType.dequantizable.map(\.name))
            XCTAssertTrue(supported.contains("Q5_0") && supported.contains("Q6_K"), "\(supported)")
        }
    }

    func testMetadataCountLargerThanFile() {
        var raw = RawGGUF.valid
        raw.kvCount = 1 << 40
        expectError(raw) { if case .truncated = $0 { return true }; return false }
        raw.kvCount = UInt64.max
        expectError(raw) { if case .truncated = $0 { return true }; return false }
    }

    func testTensorCountLargerThanFile() {
        var raw = RawGGUF.valid
        raw.tensorCount = 1 << 50
        expectError(raw) { if case .truncated = $0 { return true }; return false }
    }

    func testStringLengthLargerThanFile() {
        var raw = RawGGUF.valid
        raw.kvs = [("general.name", 8, RawGGUF.u64(1 << 60) + Array("x".utf8))]
        expectError(raw) { if case let .truncated(_, item, _, _) = $0 { return item.contains("general.name") }; return false }
    }

    func testArrayCountLargerThanFile() {
        var raw = RawGGUF.valid
        raw.kvs = [("tokenizer.ggml.tokens", 9, RawGGUF.u32(8) + RawGGUF.u64(1 << 40))]
        expectError(raw) { if case let .truncated(_, item, _, _) = $0 { return item.contains("tokenizer.ggml.tokens") }; return false }
    }

    func testUnknownValueTypeAndBadBool() {
        var raw = RawGGUF.valid
        raw.kvs = [("k", 13, [0])]
        expectError(raw) { if case .malformed(_, "key 'k'", _) = $0 { return true }; return false }
        raw.kvs = [("flag", 7, [2])]
        expectError(raw) { if case .malformed(_, "key 'flag'", _) = $0 { return true }; return false }
    }

    func testInvalidUTF8KeyIsRefused() {
        var raw = RawGGUF.valid
        raw.kvs = [("k", 8, RawGGUF.u64(2) + [0xC3, 0x28])]
        expectError(raw) { $0.localizedDescription.contains("UTF-8") }
    }

    func testTensorDataPastEndOfFile() {
        var raw = RawGGUF.valid
        raw.data.removeLast(4)
        expectError(raw) { if case .tensorOutOfRange(_, "w", 0, 128, _) = $0 { return true }; return false }
    }

    func testTensorOffsetOutOfRange() {
        var raw = RawGGUF.valid
        raw.tensors[0].offset = 1 << 20
        expectError(raw) { if case .tensorOutOfRange(_, "w", _, _, _) = $0 { return true }; return false }
        raw.tensors[0].offset = UInt64.max - 31  // aligned, but overflows on adding the size
        expectError(raw) { _ in true }
    }

    func testMisalignedTensorOffset() {
        var raw = RawGGUF.valid
        raw.data = [0, 0, 0, 0] + raw.data
        raw.tensors[0].offset = 4
        expectError(raw) { if case .misalignedTensor(_, "w", 4, 32) = $0 { return true }; return false }
    }

    func testBadAlignmentValue() {
        for payload in [RawGGUF.u32(0), RawGGUF.u32(24)] {
            var raw = RawGGUF.valid
            raw.kvs.append(("general.alignment", 4, payload))
            expectError(raw) { if case .malformed(_, "key 'general.alignment'", _) = $0 { return true }; return false }
        }
        var wrongType = RawGGUF.valid
        wrongType.kvs.append(("general.alignment", 10, RawGGUF.u64(32)))
        expectError(wrongType) { if case .malformed(_, "key 'general.alignment'", _) = $0 { return true }; return false }
    }

    func testCustomAlignmentIsHonoured() throws {
        var raw = RawGGUF.valid
        raw.kvs.append(("general.alignment", 4, RawGGUF.u32(256)))
        raw.alignment = 256
        let file = try parse(raw)
        XCTAssertEqual(file.dataOffset, 256)
        XCTAssertEqual(try file.dequantize("w").data.last, 31)
    }

    func testDuplicateKey() {
        var raw = RawGGUF.valid
        raw.kvs.append(raw.kvs[0])
        expectError(raw) { if case .duplicateKey(_, "general.architecture") = $0 { return true }; return false }
    }

    func testDuplicateTensorName() {
        var raw = RawGGUF.valid
        raw.tensors.append(("w", [8, 4], 0, 128))
        raw.data += raw.data
        expectError(raw) { if case .duplicateTensor(_, "w") = $0 { return true }; return false }
    }

    func testOverlappingTensors() {
        var raw = RawGGUF.valid
        raw.tensors.append(("w2", [8, 2], 0, 64))
        expectError(raw) { $0.localizedDescription.contains("overlaps") }
    }

    func testBadDimensions() {
        for dims: [UInt64] in [[], [1, 1, 1, 1, 1], [0, 4], [1 << 40, 1]] {
            var raw = RawGGUF.valid
            raw.tensors[0].dims = dims
            expectError(raw) { if case .malformed(_, "tensor 'w'", _) = $0 { return true }; return false }
        }
        var notWholeBlocks = RawGGUF.valid
        notWholeBlocks.tensors[0] = ("w", [16, 1], GGMLType.q4_0.rawValue, 0)
        expectError(notWholeBlocks) { $0.localizedDescription.contains("block size") }
    }

    func testArraysNestedTooDeep() {
        var payload: [UInt8] = []
        for _ in 0..<20 { payload += RawGGUF.u32(9) + RawGGUF.u64(1) }
        payload += RawGGUF.u32(0) + RawGGUF.u64(0)
        var raw = RawGGUF.valid
        raw.kvs = [("deep", 9, payload)]
        expectError(raw) { $0.localizedDescription.contains("nested") }
    }

    /// Every truncation of a valid file fails with a typed error, and random corruptions never crash.
    func testEveryPrefixAndRandomCorruptionsFailCleanly() throws {
        var writer = GGUFWriter()
        for (k, v) in Self.allTypesMetadata { try writer.set(k, v) }
        try writer.addTensor("a", HostTensor(shape: [2, 3], data: [1, 2, 3, 4, 5, 6]))
        try writer.addTensor("b", HostTensor(shape: [4], data: [1, 2, 3, 4]), as: .f16)
        let full = [UInt8](writer.serialized())
        XCTAssertNoThrow(try GGUFFile(data: Data(full), path: "full.gguf"))
        // The last tensor ends 24 bytes before the end (8 bytes of data, then padding).
        let lastDataByte = full.count - 24
        for length in 0..<lastDataByte {
            XCTAssertThrowsError(try GGUFFile(data: Data(full[0..<length]), path: "prefix.gguf"), "prefix \(length)") { error in
                XCTAssertTrue(error is ModelAssetsError, "prefix \(length): \(error)")
            }
        }
        var rng = SplitMix64(seed: 42)
        for _ in 0..<2000 {
            var corrupt = full
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                corrupt[Int.random(in: 0..<corrupt.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            do {
                let file = try GGUFFile(data: Data(corrupt), path: "corrupt.gguf")
                for t in file.tensors { _ = try? file.dequantize(t.name) }
            } catch {
                XCTAssertTrue(error is ModelAssetsError, "\(error)")
            }
        }
    }

    func testMissingFileAndFolderAreIOErrors() {
        XCTAssertThrowsError(try GGUFFile(path: "/nonexistent/model.gguf")) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try GGUFFile(path: NSTemporaryDirectory())) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }
}
