// MappedFile: dropping resident pages of a read-only mapping loses nothing (a later read maps the
// file's bytes in again). A GGUF opened by path drops its metadata pages after parsing; the GGUF
// loading tests (ModelLoaderTests, RealModelTests) read such files.
import Foundation
import XCTest
@testable import ModelAssets

final class MappedFileTests: XCTestCase {
    func testDroppedPagesReadBackUnchanged() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mapped-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let bytes = (0..<(3 * 4096 + 123)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let file = try MappedFile(path: path)
        let base = try XCTUnwrap(file.base)
        XCTAssertEqual(Array(UnsafeRawBufferPointer(start: base, count: file.count)), bytes)
        for range in [0..<file.count, 100..<5000, 4096..<8192, 0..<0, 9000..<(file.count + 50)] {
            file.dropResidentPages(range)
            XCTAssertEqual(Array(UnsafeRawBufferPointer(start: base, count: file.count)), bytes, "after dropping \(range)")
        }
    }
}
