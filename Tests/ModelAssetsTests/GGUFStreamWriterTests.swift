// The streaming GGUF writer: the same bytes as the in-memory GGUFWriter for the same content
// (any piece sizes, any alignment), the file appearing only when complete, and refusals of
// tensors given too many or too few bytes (the temporary file removed, an older file kept).
import Foundation
import XCTest
@testable import ModelAssets

final class GGUFStreamWriterTests: XCTestCase {
    private var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("gguf-stream-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    private let metadata: [(String, GGUFValue)] = [
        ("general.architecture", .string("llama")),
        ("general.name", .string("stream")),
        ("tokens", .array(elementType: .string, values: [.string("a"), .string("Ġb")])),
    ]

    /// (name, shape, type, bytes): odd sizes so padding is exercised.
    private func content() throws -> [(String, [Int], GGMLType, [UInt8])] {
        let q = (0..<(3 * 64)).map { Float($0 % 17) / 7 - 1 }
        return [
            ("norm", [5], .f32, try Quantize.run(.f32, rows: 1, k: 5, values: [1, 2, 3, 4, 5], tensor: "norm")),
            ("q8", [3, 64], .q8_0, try Quantize.run(.q8_0, rows: 3, k: 64, values: q, tensor: "q8")),
            ("half", [3, 3], .f16, try Quantize.run(.f16, rows: 3, k: 3, values: (0..<9).map(Float.init), tensor: "half")),
            ("k", [1, 256], .q6_K, try Quantize.run(.q6_K, rows: 1, k: 256, values: (0..<256).map { sin(Float($0)) }, tensor: "k")),
        ]
    }

    func testStreamedFileEqualsInMemoryWriterForAnyPieceSizeAndAlignment() throws {
        for alignment in [32, 64, 8] {
            var memory = GGUFWriter(alignment: alignment)
            for (k, v) in metadata { try memory.set(k, v) }
            for (name, shape, type, bytes) in try content() { try memory.addTensor(name, shape: shape, type: type, encoded: bytes) }
            let expected = memory.serialized()
            for piece in [1, 7, 1000] {
                let path = dir.appendingPathComponent("s-\(alignment)-\(piece).gguf").path
                let stream = try GGUFStreamWriter(
                    path: path, metadata: metadata,
                    tensors: try content().map { GGUFStreamWriter.Tensor(name: $0.0, shape: $0.1, type: $0.2) }, alignment: alignment)
                XCTAssertEqual(stream.fileSize, expected.count)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path), "the file must not appear before finish()")
                for (name, _, _, bytes) in try content() {
                    XCTAssertEqual(stream.nextTensor?.name, name)
                    var at = 0
                    while at < bytes.count {
                        try stream.write(Array(bytes[at..<min(bytes.count, at + piece)]))
                        at += piece
                    }
                }
                XCTAssertNil(stream.nextTensor)
                XCTAssertEqual(try stream.finish(), expected.count)
                XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), expected, "alignment \(alignment), pieces of \(piece)")
                XCTAssertEqual(try GGUFFile(path: path).dequantize("half").data, (0..<9).map(Float.init))
            }
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".") }, [], "no temporary file left")
    }

    private func stream(_ path: String) throws -> GGUFStreamWriter {
        try GGUFStreamWriter(path: path, metadata: metadata,
                             tensors: try content().map { GGUFStreamWriter.Tensor(name: $0.0, shape: $0.1, type: $0.2) })
    }

    func testTooManyBytesForATensorAreRefusedAndNothingIsCreated() throws {
        let path = dir.appendingPathComponent("over.gguf").path
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        let s = try stream(path)
        XCTAssertThrowsError(try s.write([UInt8](repeating: 0, count: 21))) { error in
            guard case let ModelAssetsError.incompleteWrite(_, tensor, written, expected) = error else { return XCTFail("\(error)") }
            XCTAssertEqual([tensor, String(written), String(expected)], ["norm", "21", "20"])
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), Data("old".utf8), "an older file stays as it was")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["over.gguf"])
    }

    func testFinishingBeforeEveryTensorIsCompleteIsRefused() throws {
        let path = dir.appendingPathComponent("short.gguf").path
        let s = try stream(path)
        let all = try content()
        try s.write(all[0].3)
        try s.write(Array(all[1].3.prefix(10)))
        XCTAssertThrowsError(try s.finish()) { error in
            guard case let ModelAssetsError.incompleteWrite(_, tensor, written, expected) = error else { return XCTFail("\(error)") }
            XCTAssertEqual([tensor, String(written), String(expected)], ["q8", "10", "204"])
            XCTAssertTrue(error.localizedDescription.contains("not created"), error.localizedDescription)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [])
    }

    func testBytesAfterTheLastTensorAreRefused() throws {
        let s = try stream(dir.appendingPathComponent("extra.gguf").path)
        for t in try content() { try s.write(t.3) }
        XCTAssertThrowsError(try s.write([0]))
    }

    func testDroppedStreamLeavesNoTemporaryFile() throws {
        do {
            let s = try stream(dir.appendingPathComponent("dropped.gguf").path)
            try s.write(try content()[0].3)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [])
    }

    func testHeaderChecksAsTheInMemoryWriterDoes() {
        let path = dir.appendingPathComponent("bad.gguf").path
        XCTAssertThrowsError(try GGUFStreamWriter(path: path, metadata: metadata + [metadata[0]], tensors: []))
        XCTAssertThrowsError(try GGUFStreamWriter(path: path, metadata: [], tensors: [.init(name: "a", shape: [32], type: .f32), .init(name: "a", shape: [32], type: .f32)]))
        XCTAssertThrowsError(try GGUFStreamWriter(path: path, metadata: [], tensors: [.init(name: "k", shape: [2, 96], type: .q4_K)])) { error in
            guard case ModelAssetsError.cannotQuantize("k", "Q4_K", _) = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try GGUFStreamWriter(path: dir.appendingPathComponent("no/such/folder.gguf").path, metadata: [], tensors: [])) { error in
            guard case ModelAssetsError.io = error else { return XCTFail("\(error)") }
        }
    }
}
