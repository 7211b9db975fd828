// CRC-32C against the published check values, TFRecord framing (round trip, damage found and
// located), and event files written and read back. TensorBoard's own reader is run on real
// event files by scripts/check_tensorboard.py in the test command.
import Foundation
@testable import RunLog
import XCTest

final class EventFileTests: XCTestCase {
    func tempDir(_ name: String = #function) -> String {
        let d = NSTemporaryDirectory() + "runlog-\(name.filter(\.isLetter))-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    /// RFC 3720 appendix B.4 (iSCSI CRC32C examples) and the usual "123456789" check value.
    func testCRC32CKnownVectors() {
        XCTAssertEqual(CRC32C.checksum([UInt8](repeating: 0, count: 32)), 0x8A91_36AA)
        XCTAssertEqual(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)), 0x62A8_AB43)
        XCTAssertEqual(CRC32C.checksum((0..<32).map { UInt8($0) }), 0x46DD_794E)
        XCTAssertEqual(CRC32C.checksum((0..<32).reversed().map { UInt8($0) }), 0x113F_DB5C)
        XCTAssertEqual(CRC32C.checksum(Array("123456789".utf8)), 0xE306_9283)
        XCTAssertEqual(CRC32C.checksum([UInt8]()), 0)
        // continuing over two pieces equals the whole
        let bytes = Array("The quick brown fox jumps over the lazy dog".utf8)
        XCTAssertEqual(CRC32C.checksum(bytes[10...], continuing: CRC32C.checksum(bytes[..<10])), CRC32C.checksum(bytes))
        // the mask: rotate right by 15, add 0xA282EAD8 (wrapping)
        XCTAssertEqual(CRC32C.masked(0), 0xA282_EAD8)
        XCTAssertEqual(CRC32C.masked(0x0000_8000), 0xA282_EAD9)
        XCTAssertEqual(CRC32C.masked(0xFFFF_FFFF), 0xA282_EAD7)
    }

    func testTFRecordFramingRoundTripAndDamage() throws {
        let payloads = [Data(), Data("a".utf8), Data((0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) })]
        let file = payloads.map(TFRecord.frame).reduce(Data(), +)
        XCTAssertEqual(file.count, payloads.reduce(0) { $0 + $1.count + 16 })
        // the layout: little-endian length, masked CRC of those 8 bytes, data, masked CRC of the data
        let second = [UInt8](TFRecord.frame(Data("a".utf8)))
        XCTAssertEqual(Array(second[0..<8]), [1, 0, 0, 0, 0, 0, 0, 0])
        XCTAssertEqual(TFRecord.readUInt32(second, 8), CRC32C.masked(CRC32C.checksum(second[0..<8])))
        XCTAssertEqual(second[12], UInt8(ascii: "a"))
        XCTAssertEqual(TFRecord.readUInt32(second, 13), CRC32C.masked(CRC32C.checksum([UInt8(ascii: "a")])))
        XCTAssertEqual(try TFRecord.records(in: file, path: "f"), payloads)

        var flipped = file
        flipped[16 + 17 + 12 + 5] ^= 0x40  // a byte of the third record's data
        XCTAssertThrowsError(try TFRecord.records(in: flipped, path: "f")) { e in
            XCTAssert("\(e.localizedDescription)".contains("record 3") && e.localizedDescription.contains("data's CRC"), e.localizedDescription)
        }
        XCTAssertThrowsError(try TFRecord.records(in: file.dropLast(3), path: "f")) { e in
            XCTAssert(e.localizedDescription.contains("record 3"), e.localizedDescription)
        }
        var badLength = file
        badLength[0] = 9  // the first record's length no longer matches its CRC
        XCTAssertThrowsError(try TFRecord.records(in: badLength, path: "f")) { e in
            XCTAssert(e.localizedDescription.contains("length's CRC"), e.localizedDescription)
        }
    }

    func testEventFileWrittenAndReadBack() throws {
        let dir = tempDir()
        let w = try EventFileWriter(folder: dir + "/run", wallTime: 1_700_000_000.25)
        try w.start(step: 1, wallTime: 1_700_000_000.5)
        try w.write(scalars: [("train/loss", 1.25), ("train/learning_rate", 1e-3)], step: 1, wallTime: 1_700_000_001,
                    descriptions: ["train/loss": "the loss"])
        try w.write(scalars: [("train/loss", 0.5)], step: 2, wallTime: 1_700_000_002, descriptions: ["train/loss": "the loss"])
        w.close()
        XCTAssert(URL(fileURLWithPath: w.path).lastPathComponent.hasPrefix("events.out.tfevents.1700000000."))
        XCTAssertEqual(EventFileContents.files(in: dir + "/run"), [w.path])
        let c = try EventFileContents(path: w.path)
        XCTAssertEqual(c.fileVersion, "brain.Event:2")
        XCTAssertEqual(c.starts, [1])
        XCTAssertEqual(c.scalars, [ScalarEvent(tag: "train/loss", step: 1, wallTime: 1_700_000_001, value: 1.25),
                                   ScalarEvent(tag: "train/learning_rate", step: 1, wallTime: 1_700_000_001, value: Float(1e-3)),
                                   ScalarEvent(tag: "train/loss", step: 2, wallTime: 1_700_000_002, value: 0.5)])
        // a tag's description goes with its first value only
        let records = try TFRecord.records(in: FileManager.default.contents(atPath: w.path)!, path: w.path)
        let described = try records.map { try Tensorboard_Event(serializedBytes: $0) }
            .flatMap { $0.summary.value }.filter { !$0.metadata.summaryDescription.isEmpty }
        XCTAssertEqual(described.map(\.tag), ["train/loss"])
        // a second writer in the same second gets a new name
        let again = try EventFileWriter(folder: dir + "/run", wallTime: 1_700_000_000.25)
        XCTAssertNotEqual(again.path, w.path)
    }
}
