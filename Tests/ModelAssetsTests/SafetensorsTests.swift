// Safetensors writer -> reader round trips (F32/F16/BF16, `__metadata__`), sharded checkpoints
// through model.safetensors.index.json, and one test per kind of bad header, each expecting a
// typed error naming the file and the tensor or field.
import Foundation
import XCTest
@testable import ModelAssets

final class SafetensorsTests: XCTestCase {
    private var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("st-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    /// A file from a raw JSON header and data buffer.
    private func raw(_ header: String, _ buffer: [UInt8] = [], declaredSize: UInt64? = nil) -> Data {
        var sink = ByteSink()
        sink.append(declaredSize ?? UInt64(header.utf8.count))
        sink.append(bytes: header.utf8)
        sink.append(bytes: buffer)
        return Data(sink.bytes)
    }

    private func expectError(_ data: Data, file: StaticString = #filePath, line: UInt = #line, _ check: (ModelAssetsError) -> Bool) {
        XCTAssertThrowsError(try SafetensorsFile(data: data, path: "bad.safetensors"), file: file, line: line) { error in
            guard let e = error as? ModelAssetsError else { return XCTFail("untyped error \(error)", file: file, line: line) }
            XCTAssertTrue(check(e), "unexpected error: \(e.localizedDescription)", file: file, line: line)
            XCTAssertTrue(e.localizedDescription.contains("bad.safetensors"), file: file, line: line)
        }
    }

    func testRoundTripAllDTypesAndMetadata() throws {
        var writer = SafetensorsWriter(metadata: ["base_signature": "abc123", "quote\"key": "line\nbreak", "format": "pt"])
        let a = HostTensor(shape: [2, 3], data: [1, -2, 3.5, 1e-3, 0, 7])
        let b = HostTensor(shape: [5], data: [0.1, 0.2, 0.3, 65504, -1])
        let c = HostTensor(shape: [2, 2, 2], data: (0..<8).map { Float($0) - 4 })
        let s = HostTensor(shape: [], data: [42])
        try writer.add("a", a)
        try writer.add("b.weight", b, as: .f16)
        try writer.add("c", c, as: .bf16)
        try writer.add("scalar", s)
        let data = writer.serialized()
        let headerSize = data.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        XCTAssertEqual(headerSize % 8, 0)
        let file = try SafetensorsFile(data: data, path: "rt.safetensors")
        XCTAssertEqual(file.metadata, writer.metadata)
        XCTAssertEqual(try file.tensor("a"), a)
        XCTAssertEqual(try file.tensor("b.weight").data, b.data.map { Float(Float16($0)) })
        XCTAssertEqual(try file.tensor("c"), c)
        XCTAssertEqual(try file.tensor("scalar"), s)
        XCTAssertEqual(file.tensorInfo(named: "b.weight")?.dtype, .f16)
        XCTAssertEqual(file.tensorInfo(named: "c")?.shape, [2, 2, 2])
        XCTAssertThrowsError(try file.tensor("nope")) { error in
            guard case .missingTensor(_, "nope") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testWriterRefusesDuplicatesAndUnsupportedDTypes() {
        var writer = SafetensorsWriter()
        XCTAssertNoThrow(try writer.add("x", HostTensor(shape: [1], data: [1])))
        XCTAssertThrowsError(try writer.add("x", HostTensor(shape: [1], data: [1])))
        XCTAssertThrowsError(try writer.add("__metadata__", HostTensor(shape: [1], data: [1])))
        XCTAssertThrowsError(try writer.add("y", HostTensor(shape: [1], data: [1]), as: .i64))
    }

    func testReadsFileOnDisk() throws {
        var writer = SafetensorsWriter()
        try writer.add("w", HostTensor(shape: [3], data: [1, 2, 3]))
        let path = dir.appendingPathComponent("w.safetensors").path
        try writer.write(to: path)
        XCTAssertEqual(try SafetensorsFile(path: path).tensor("w").data, [1, 2, 3])
    }

    func testHeaderSizeLargerThanFile() {
        expectError(raw("{}", declaredSize: 1 << 20)) { if case .truncated = $0 { return true }; return false }
        expectError(raw("{}", declaredSize: UInt64.max)) { if case .truncated = $0 { return true }; return false }
        expectError(Data([1, 2, 3])) { if case .truncated = $0 { return true }; return false }
    }

    func testHeaderAboveLimit() {
        expectError(raw("{}", declaredSize: 200_000_000)) { $0.localizedDescription.contains("limit") }
    }

    func testHeaderNotJSONObject() {
        expectError(raw("{not json")) { if case .malformed(_, "header", _) = $0 { return true }; return false }
        expectError(raw("[1, 2]")) { if case .malformed(_, "header", _) = $0 { return true }; return false }
        expectError(raw("{\"a\": 1}")) { if case .malformed(_, "tensor 'a'", _) = $0 { return true }; return false }
    }

    func testDTypeShapeMismatch() {
        let header = #"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#
        expectError(raw(header, [UInt8](repeating: 0, count: 20))) { if case .malformed(_, "tensor 'w'", _) = $0 { return true }; return false }
    }

    func testNegativeOrFractionalShape() {
        for shape in ["[-1,2]", "[1.5]", "[true]", "\"2\""] {
            let header = #"{"w":{"dtype":"F32","shape":"# + shape + #","data_offsets":[0,0]}}"#
            expectError(raw(header)) { if case .malformed(_, "tensor 'w'", _) = $0 { return true }; return false }
        }
    }

    func testUnknownAndUnconvertibleDTypes() throws {
        expectError(raw(#"{"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}}"#, [0])) {
            if case .unsupportedTensorType(_, "w", "F7", _) = $0 { return true }; return false
        }
        let file = try SafetensorsFile(data: raw(#"{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#, [UInt8](repeating: 0, count: 8)), path: "i.safetensors")
        XCTAssertThrowsError(try file.tensor("ids")) { error in
            guard case .unsupportedTensorType(_, "ids", "I64", ["F32", "F16", "BF16"]) = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testOffsetsOutOfRange() {
        let header = #"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#
        expectError(raw(header, [UInt8](repeating: 0, count: 8))) { if case .tensorOutOfRange(_, "w", _, _, _) = $0 { return true }; return false }
    }

    func testOffsetsWithGapOrOverlapOrReversed() {
        let gap = #"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#
        expectError(raw(gap, [UInt8](repeating: 0, count: 12))) { if case .malformed(_, "tensor 'b'", _) = $0 { return true }; return false }
        let overlap = #"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#
        expectError(raw(overlap, [UInt8](repeating: 0, count: 8))) { if case .malformed = $0 { return true }; return false }
        let reversed = #"{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}"#
        expectError(raw(reversed, [UInt8](repeating: 0, count: 4))) { if case .malformed(_, "tensor 'a'", _) = $0 { return true }; return false }
    }

    func testTrailingBytesAfterTensors() {
        let header = #"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#
        expectError(raw(header, [UInt8](repeating: 0, count: 8))) { if case .malformed(_, "data buffer", _) = $0 { return true }; return false }
    }

    func testMetadataMustBeStrings() {
        expectError(raw(#"{"__metadata__":{"step":3}}"#)) { $0.localizedDescription.contains("step") }
        expectError(raw(#"{"__metadata__":[1]}"#)) { if case .malformed(_, "__metadata__", _) = $0 { return true }; return false }
    }

    // MARK: sharded checkpoints

    private func writeShard(_ name: String, _ tensors: [(String, HostTensor)]) throws {
        var writer = SafetensorsWriter()
        for (n, t) in tensors { try writer.add(n, t) }
        try writer.write(to: dir.appendingPathComponent(name).path)
    }

    private func writeIndex(_ map: [String: String]) throws {
        let body = map.keys.sorted().map { "\(jsonString($0)): \(jsonString(map[$0]!))" }.joined(separator: ", ")
        try Data("{\"metadata\": {\"total_size\": 0}, \"weight_map\": {\(body)}}".utf8)
            .write(to: dir.appendingPathComponent("model.safetensors.index.json"))
    }

    func testShardedCheckpointLoadsEveryTensorOnce() throws {
        try writeShard("model-00001-of-00002.safetensors", [("a", HostTensor(shape: [2], data: [1, 2]))])
        try writeShard("model-00002-of-00002.safetensors", [("b", HostTensor(shape: [1], data: [3])), ("c", HostTensor(shape: [1], data: [4]))])
        try writeIndex(["a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"])
        let checkpoint = try SafetensorsCheckpoint(folder: dir.path)
        XCTAssertEqual(checkpoint.tensorNames, ["a", "b", "c"])
        XCTAssertEqual(try checkpoint.tensor("c").data, [4])
        XCTAssertEqual(try checkpoint.tensor("a").data, [1, 2])
    }

    func testShardedIndexNamingAMissingTensor() throws {
        try writeShard("s1.safetensors", [("a", HostTensor(shape: [1], data: [1]))])
        try writeIndex(["a": "s1.safetensors", "ghost": "s1.safetensors"])
        XCTAssertThrowsError(try SafetensorsCheckpoint(folder: dir.path)) { error in
            guard case .missingTensor(_, "ghost") = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testShardedIndexLeavingATensorOut() throws {
        try writeShard("s1.safetensors", [("a", HostTensor(shape: [1], data: [1])), ("extra", HostTensor(shape: [1], data: [1]))])
        try writeIndex(["a": "s1.safetensors"])
        XCTAssertThrowsError(try SafetensorsCheckpoint(folder: dir.path)) { error in
            XCTAssertTrue((error as? ModelAssetsError)?.localizedDescription.contains("extra") == true, "\(error)")
        }
    }

    func testShardedIndexWithPathOutsideFolder() throws {
        try writeIndex(["a": "../elsewhere.safetensors"])
        XCTAssertThrowsError(try SafetensorsCheckpoint(folder: dir.path)) { error in
            guard case .malformed = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testShardedIndexWithMissingShardFile() throws {
        try writeIndex(["a": "absent.safetensors"])
        XCTAssertThrowsError(try SafetensorsCheckpoint(folder: dir.path)) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }

    func testFolderWithoutWeights() {
        XCTAssertThrowsError(try SafetensorsCheckpoint(folder: dir.path)) { error in
            guard case .io = error as? ModelAssetsError else { return XCTFail("\(error)") }
        }
    }
}
