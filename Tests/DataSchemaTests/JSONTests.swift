// The JSON parser and compact writer: key order and number literals kept, strict grammar with
// columns in errors, escapes and surrogates, depth bound.
@testable import DataSchema
import XCTest

final class JSONTests: XCTestCase {
    func testKeepsKeyOrderAndNumberLiterals() throws {
        let value = try JSONValue.parse(#"{ "b": 1.50, "a": [true, null, -0, 2e3], "c": "x\ny\u00e9\ud83d\ude00" }"#)
        XCTAssertEqual(value.compactText, "{\"b\":1.50,\"a\":[true,null,-0,2e3],\"c\":\"x\\nyé😀\"}")
        XCTAssertEqual(value["a"]?.arrayValue?.count, 4)
    }

    func testEqualityIsByValue() throws {
        XCTAssertEqual(try JSONValue.parse(#"{"a":1,"b":[1.0]}"#), try JSONValue.parse(#"{"b":[1],"a":1.00}"#))
        XCTAssertNotEqual(try JSONValue.parse("1"), try JSONValue.parse("\"1\""))
    }

    func testEscapesControlCharactersWhenWriting() {
        XCTAssertEqual(JSONValue.string("a\"b\\c\u{01}\t").compactText, #""a\"b\\c\u0001\t""#)
    }

    func testErrorsNameTheColumn() {
        func message(_ text: String) -> String {
            do { _ = try JSONValue.parse(text); return "parsed" } catch { return error.errorDescription ?? "" }
        }
        XCTAssertTrue(message(#"{"a": 1,}"#).contains("column 9"), message(#"{"a": 1,}"#))
        XCTAssertTrue(message(#"{"a": 01}"#).contains("leading zeros"))
        XCTAssertTrue(message(#"{"a": 1, "a": 2}"#).contains("duplicate key \"a\""))
        XCTAssertTrue(message(#"["\ud800"]"#).contains("unpaired UTF-16 surrogate"))
        XCTAssertTrue(message("{'a': 1}").contains("double quotes"))
        XCTAssertTrue(message("[1] [2]").contains("after the JSON value"))
        XCTAssertTrue(message("\"é").contains("not closed"))
        XCTAssertTrue(message("[tru]").contains("where a value was expected"))
        XCTAssertTrue(message(String(repeating: "[", count: 600) + String(repeating: "]", count: 600)).contains("nesting deeper"))
    }

    func testIntegerDetection() throws {
        XCTAssertTrue(JSONNumber(validatedLiteral: "3.0").isInteger)
        XCTAssertTrue(JSONNumber(validatedLiteral: "3e2").isInteger)
        XCTAssertFalse(JSONNumber(validatedLiteral: "3.5").isInteger)
    }

    func testUTF8Validation() {
        let good = Array("aé😀".utf8)
        XCTAssertNil(good.withUnsafeBufferPointer { firstInvalidUTF8Offset($0) })
        for (bytes, offset) in [([0x61, 0xFF], 1), ([0xC0, 0x80], 0), ([0xED, 0xA0, 0x80], 0), ([0x61, 0xE2, 0x82], 1)] as [([UInt8], Int)] {
            XCTAssertEqual(bytes.withUnsafeBufferPointer { firstInvalidUTF8Offset($0) }, offset, "\(bytes)")
        }
    }
}
