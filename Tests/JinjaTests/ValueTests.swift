// Values as Python prints them: str/repr of every kind, float repr at the fixed/scientific
// boundaries (checked against CPython's repr, values listed here), JSON as transformers' tojson
// writes it, truthiness and equality. References: CPython repr() and json.dumps.
import XCTest
@testable import Jinja

final class ValueTests: XCTestCase {
    func testFloatReprMatchesCPython() {
        // repr(x) in CPython 3.12 for each x.
        let cases: [(Double, String)] = [
            (1.0, "1.0"), (0.1, "0.1"), (1e16, "1e+16"), (1e15, "1000000000000000.0"),
            (9.5e15, "9500000000000000.0"), (123456789012345678.0, "1.2345678901234568e+17"),
            (1e-4, "0.0001"), (1e-5, "1e-05"), (1.5e-7, "1.5e-07"), (-0.0, "-0.0"), (2.5e300, "2.5e+300"),
            (0.1 + 0.2, "0.30000000000000004"), (123456780000000.0, "123456780000000.0"), (-3.5, "-3.5"),
            (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"), (.infinity, "inf"),
        ]
        for (x, expected) in cases {
            XCTAssertEqual(PythonText.floatRepr(x), expected, "repr(\(x))")
        }
    }

    func testReprOfContainersAndStrings() {
        let v: JinjaValue = .list([.int(1), .float(2.5), .string("a"), .none, .bool(true),
                                   .dict(JinjaDict([("k", .string("v"))])), .list([.int(1)], isTuple: true)])
        XCTAssertEqual(PythonText.str(v), "[1, 2.5, 'a', None, True, {'k': 'v'}, (1,)]")
        XCTAssertEqual(PythonText.stringRepr("it's"), "\"it's\"")
        XCTAssertEqual(PythonText.stringRepr("a'b\"c"), "'a\\'b\"c'")
        XCTAssertEqual(PythonText.stringRepr("\n\t\u{01}\u{7f}é\u{200b}\u{2028}"), "'\\n\\t\\x01\\x7fé\\u200b\\u2028'")
        XCTAssertEqual(PythonText.str(.undefined("x")), "")
    }

    func testJSONAsTransformersToJSON() throws {
        let v: JinjaValue = .dict(JinjaDict([("b", .list([.int(1), .dict(JinjaDict([("c", .none)]))])), ("a", .string("ü<\n\u{01}")),
                                            ("e", .dict(JinjaDict())), ("f", .list([])), ("g", .float(1.0))]))
        XCTAssertEqual(try PythonText.json(v, .init()), "{\"b\": [1, {\"c\": null}], \"a\": \"ü<\\n\\u0001\", \"e\": {}, \"f\": [], \"g\": 1.0}")
        var o = PythonText.JSONOptions()
        o.indent = "  "
        o.itemSeparator = ","
        XCTAssertEqual(try PythonText.json(.dict(JinjaDict([("a", .list([.int(1), .dict(JinjaDict())]))])), o),
                       "{\n  \"a\": [\n    1,\n    {}\n  ]\n}")
        XCTAssertThrowsError(try PythonText.json(.undefined("x"), .init()))
    }

    func testTruthinessAndEquality() {
        XCTAssertFalse(JinjaValue.undefined("x").isTruthy)
        XCTAssertFalse(JinjaValue.string("").isTruthy)
        XCTAssertTrue(JinjaValue.iterator(JinjaIterator([])).isTruthy, "a generator is true even when empty")
        XCTAssertEqual(JinjaValue.int(1), .float(1.0))
        XCTAssertEqual(JinjaValue.int(1), .bool(true))
        XCTAssertNotEqual(JinjaValue.list([.int(1)]), .list([.int(1)], isTuple: true))
        XCTAssertEqual(JinjaValue.dict(JinjaDict([("a", .int(1)), ("b", .int(2))])), .dict(JinjaDict([("b", .int(2)), ("a", .int(1))])))
        XCTAssertNotEqual(JinjaValue.undefined("x"), .none)
    }
}
