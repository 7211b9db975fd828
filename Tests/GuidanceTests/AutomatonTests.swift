// The byte automata, construct by construct: texts each grammar must accept (valid compact
// JSON the generator is meant to produce) and texts it must reject (invalid, or outside the
// generation subset such as whitespace), plus the UTF-8 and digit-range building blocks
// checked against brute force.
import DataSchema
@testable import Guidance
import XCTest

final class AutomatonTests: XCTestCase {
    func assertLanguage(_ schemaText: String, accepts: [String], rejects: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        let s = try schema(schemaText)
        let g = try Grammar.jsonSchema(s)
        for text in accepts {
            XCTAssertTrue(g.matches(text), "\(schemaText) should accept \(text)", file: file, line: line)
            // Everything accepted must validate (the point of the grammar).
            if let value = try? JSONValue.parse(text) {
                XCTAssertEqual(s.validate(value).map(\.description), [], "\(text) accepted but invalid", file: file, line: line)
            } else {
                XCTFail("\(text) accepted but not JSON", file: file, line: line)
            }
        }
        for text in rejects {
            XCTAssertFalse(g.matches(text), "\(schemaText) should reject \(text)", file: file, line: line)
        }
    }

    func testScalarTypes() throws {
        try assertLanguage(#"{"type":"null"}"#, accepts: ["null"], rejects: ["nul", "null ", "0", "\"null\""])
        try assertLanguage(#"{"type":"boolean"}"#, accepts: ["true", "false"], rejects: ["True", "1", "null"])
        try assertLanguage(#"{"type":["boolean","null"]}"#, accepts: ["true", "null"], rejects: ["0"])
    }

    func testIntegers() throws {
        try assertLanguage(#"{"type":"integer"}"#,
                           accepts: ["0", "7", "-7", "42", "999999999999999", "-999999999999999"],
                           rejects: ["-0", "01", "1.0", "1e2", "+1", "1000000000000000", ""])
        try assertLanguage(#"{"type":"integer","minimum":1}"#, accepts: ["1", "2", "10", "123456"], rejects: ["0", "-1"])
        try assertLanguage(#"{"type":"integer","minimum":-15,"maximum":123}"#,
                           accepts: ["-15", "-9", "-10", "0", "9", "10", "99", "100", "123"],
                           rejects: ["-16", "-20", "124", "130", "200", "1000"])
        try assertLanguage(#"{"type":"integer","exclusiveMinimum":2.5,"exclusiveMaximum":7}"#,
                           accepts: ["3", "6"], rejects: ["2", "7"])
        try assertLanguage(#"{"type":"integer","minimum":1.5,"maximum":4.2}"#, accepts: ["2", "3", "4"], rejects: ["1", "5"])
        try assertLanguage(#"{"type":"integer","multipleOf":1}"#, accepts: ["5"], rejects: ["5.5"])
        // Every integer in a window, checked against the bounds directly.
        let g = try grammar(#"{"type":"integer","minimum":-321,"maximum":1234}"#)
        for n in -1500...1500 {
            XCTAssertEqual(g.matches(String(n)), n >= -321 && n <= 1234, "\(n)")
        }
    }

    func testNumbers() throws {
        try assertLanguage(#"{"type":"number"}"#,
                           accepts: ["0", "-0.5", "3.25", "1e5", "1E-7", "2.5e+10", "-12.0"],
                           rejects: ["01", ".5", "5.", "1e", "1e999", "NaN", "- 1", "1.0000000000000001"])
        try assertLanguage(#"{"type":"number","minimum":0,"maximum":1}"#,
                           accepts: ["0", "1", "0.5", "0.12345678"], rejects: ["-0.5", "1.5", "2", "1e-3", "-1"])
        try assertLanguage(#"{"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":2}"#,
                           accepts: ["-1", "0", "1", "0.75", "-0.25", "-1.5"], rejects: ["-2", "2", "2.5", "-2.5"])
        try assertLanguage(#"{"type":"number","minimum":-10.5}"#,
                           accepts: ["-10", "-9.5", "0", "9999999", "123.5"], rejects: ["-11", "-10.75", "-10.5"])
    }

    func testStrings() throws {
        try assertLanguage(#"{"type":"string"}"#,
                           accepts: [#""""#, #""abc""#, #""a\"b""#, #""\\""#, #""\/\b\f\n\r\t""#, #""\u00e9\u00E9""#,
                                     "\"é日本😀\"", "\"\u{7F}\""],
                           rejects: ["\"a", "abc", "\"a\nb\"", "\"\t\"", #""\x""#, #""\ud800""#, #""\u12""#, "\"a\"b\""])
        // Invalid UTF-8 inside a string is rejected byte by byte.
        let g = try grammar(#"{"type":"string"}"#)
        for bad: [UInt8] in [[0x22, 0xC0, 0x80, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22]] {
            XCTAssertFalse(g.matches(bytes: bad), "\(bad)")
        }
        XCTAssertTrue(g.matches(bytes: [0x22, 0xE2, 0x82, 0xAC, 0x22]))
    }

    func testStringLengthsCountCodePoints() throws {
        try assertLanguage(#"{"type":"string","minLength":2,"maxLength":3}"#,
                           accepts: [#""ab""#, #""abc""#, "\"éü\"", "\"😀😀😀\"", #""\n\t""#, #""\u0041b""#],
                           rejects: [#""a""#, #""abcd""#, "\"é\"", "\"😀😀😀😀\"", #""""#])
        try assertLanguage(#"{"type":"string","minLength":3}"#, accepts: [#""abc""#, #""abcdefgh""#], rejects: [#""ab""#])
        try assertLanguage(#"{"type":"string","maxLength":0}"#, accepts: [#""""#], rejects: [#""a""#])
    }

    func testPatterns() throws {
        try assertLanguage(#"{"type":"string","pattern":"^[a-c]{2}\\d+$"}"#,
                           accepts: [#""ab1""#, #""cc123""#], rejects: [#""ab""#, #""xab1""#, #""ab1x""#, #""abc1""#])
        // Unanchored: the match may sit anywhere, with printable ASCII around it.
        try assertLanguage(#"{"type":"string","pattern":"ab+"}"#,
                           accepts: [#""ab""#, #""xxabbbyy""#, #""  ab ""#], rejects: [#""a""#, #""ba""#, #""""#])
        try assertLanguage(#"{"type":"string","pattern":"^(red|green)$|^blu?e$"}"#,
                           accepts: [#""red""#, #""green""#, #""ble""#, #""blue""#], rejects: [#""redgreen""#, #""blu""#])
        try assertLanguage(#"{"type":"string","pattern":"^[^@]+@[^@]+$"}"#,
                           accepts: [#""a@b""#, #""first.last@example.org""#], rejects: [#""a@b@c""#, #""@b""#, #""ab""#])
        try assertLanguage(#"{"type":"string","pattern":"^\\w{2,4}-\\s?\\S$"}"#,
                           accepts: [#""ab-x""#, #""a_9Z- !""#], rejects: [#""a-x""#, #""abcde-x""#])
        try assertLanguage(#"{"type":"string","pattern":"^a.c$"}"#, accepts: [#""abc""#, #""a c""#], rejects: ["\"aéc\"", #""ac""#])
        try assertLanguage(#"{"type":"string","pattern":"^(?:x|y)*?z{0,2}$"}"#, accepts: [#""""#, #""xyxzz""#], rejects: [#""zzz""#])
        try assertLanguage(#"{"type":"string","pattern":"^[à-ÿ]+$"}"#, accepts: ["\"àé\"", #""\u00e0""#], rejects: [#""a""#])
        // Pattern and length bounds together (an intersection, built as a product).
        try assertLanguage(#"{"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":3}"#,
                           accepts: [#""ab""#, #""xyz""#], rejects: [#""a""#, #""abcd""#, #""a1""#])
        // Escapes in a pattern string decode to the scalar the pattern sees.
        try assertLanguage(#"{"type":"string","pattern":"^a\"b\\\\c$"}"#, accepts: [#""a\"b\\c""#, #""a\u0022b\u005Cc""#], rejects: [#""a"b\c""#])
    }

    func testEnumAndConstInCanonicalForm() throws {
        try assertLanguage(#"{"enum":["c","f",1.50,null,{"a":[1,true]},"q\"x"]}"#,
                           accepts: [#""c""#, #""f""#, "1.50", "null", #"{"a":[1,true]}"#, #""q\"x""#],
                           rejects: [#""g""#, "1.5", #"{"a": [1, true]}"#, #"{ "a":[1,true]}"#])
        try assertLanguage(#"{"const":{"k":"v"}}"#, accepts: [#"{"k":"v"}"#], rejects: [#"{"k":"w"}"#])
        // Values that fail the sibling keywords are left out.
        try assertLanguage(#"{"type":"string","enum":["a",1,"bb"],"maxLength":1}"#, accepts: [#""a""#], rejects: ["1", #""bb""#])
    }

    func testObjectsInSchemaOrder() throws {
        let s = #"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"null"}},"required":["b"],"additionalProperties":false}"#
        try assertLanguage(s,
                           accepts: [#"{"b":true}"#, #"{"a":1,"b":false}"#, #"{"b":true,"c":null}"#, #"{"a":1,"b":true,"c":null}"#],
                           rejects: [#"{}"#, #"{"a":1}"#, #"{"b":true,"a":1}"#, #"{"c":null,"b":true}"#, #"{,"b":true}"#,
                                     #"{"b":true,}"#, #"{"b":true,"d":1}"#, #"{"b": true}"#, #"{"a":1,,"b":true}"#])
        // All optional: any subset in order, the empty object included.
        let g = try grammar(#"{"properties":{"x":{"const":1},"y":{"const":2},"z":{"const":3}}}"#)
        let names = ["x", "y", "z"]
        for bits in 0..<8 {
            let members = (0..<3).filter { bits & (1 << $0) != 0 }.map { "\"\(names[$0])\":\($0 + 1)" }
            XCTAssertTrue(g.matches("{" + members.joined(separator: ",") + "}"), "subset \(bits)")
        }
        XCTAssertFalse(g.matches(#"{"y":2,"x":1}"#))
        // Missing additionalProperties: only declared properties are generated.
        XCTAssertFalse(g.matches(#"{"x":1,"w":0}"#))
        // A required name that "properties" does not declare is written after the declared ones.
        try assertLanguage(#"{"type":"object","properties":{"a":{"const":1}},"required":["z"],"additionalProperties":{"type":"integer"}}"#,
                           accepts: [#"{"z":5}"#, #"{"a":1,"z":-2}"#], rejects: [#"{"a":1}"#, #"{"z":"x"}"#])
        // Keys that need escapes are written as their compact JSON strings.
        try assertLanguage(#"{"properties":{"odd \"key\"":{"type":"null"}},"required":["odd \"key\""]}"#,
                           accepts: [#"{"odd \"key\"":null}"#], rejects: [#"{"odd "key"":null}"#])
    }

    func testFreeFormObjectsHoldAtMostOneMember() throws {
        try assertLanguage(#"{"type":"object"}"#, accepts: ["{}", #"{"k":1}"#, #"{"k":{"n":[null]}}"#], rejects: [#"{"a":1,"b":2}"#, #"{"a":1,"a":2}"#])
        try assertLanguage(#"{"type":"object","additionalProperties":{"type":"string"}}"#, accepts: ["{}", #"{"x":"y"}"#], rejects: [#"{"x":1}"#])
        try assertLanguage(#"{"type":"object","additionalProperties":false}"#, accepts: ["{}"], rejects: [#"{"x":1}"#])
    }

    func testArrays() throws {
        try assertLanguage(#"{"type":"array","items":{"type":"integer"}}"#,
                           accepts: ["[]", "[1]", "[1,2,3]", "[-1,0,1,2,3,4,5,6,7,8,9]"], rejects: ["[,]", "[1,]", "[1 ,2]", "[\"a\"]", "[1]]"])
        try assertLanguage(#"{"type":"array","items":{"enum":["a"]},"minItems":2,"maxItems":3}"#,
                           accepts: [#"["a","a"]"#, #"["a","a","a"]"#], rejects: ["[]", #"["a"]"#, #"["a","a","a","a"]"#])
        try assertLanguage(#"{"type":"array","minItems":1}"#, accepts: ["[1]", #"[[],{},"x"]"#], rejects: ["[]"])
        try assertLanguage(#"{"type":"array","items":false}"#, accepts: ["[]"], rejects: ["[1]"])
        try assertLanguage(#"{"type":"array","uniqueItems":true,"maxItems":1}"#, accepts: ["[]", "[3]"], rejects: ["[3,3]"])
    }

    func testCombinatorsAndReferences() throws {
        try assertLanguage(#"{"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":5}]}"#,
                           accepts: [#""a""#, "5", "17"], rejects: [#""ab""#, "4", "null"])
        try assertLanguage(#"{"oneOf":[{"type":"string"},{"type":"null"},{"enum":[1,2]}]}"#,
                           accepts: [#""x""#, "null", "1", "2"], rejects: ["3", "true"])
        try assertLanguage(#"{"oneOf":[{"const":"a"},{"const":"b"}]}"#, accepts: [#""a""#, #""b""#], rejects: [#""c""#])
        try assertLanguage(#"{"allOf":[{"type":"integer","maximum":3},{"description":"n"}]}"#, accepts: ["3"], rejects: ["4"])
        let withRefs = ##"""
        {"$defs":{"point":{"type":"object","properties":{"x":{"$ref":"#/$defs/coordinate"},"y":{"$ref":"#/$defs/coordinate"}},"required":["x","y"]},
         "coordinate":{"type":"integer","minimum":0,"maximum":9}},
         "type":"array","items":{"$ref":"#/$defs/point"},"maxItems":2}
        """##
        try assertLanguage(withRefs, accepts: ["[]", #"[{"x":1,"y":2}]"#, #"[{"x":1,"y":2},{"x":9,"y":0}]"#],
                           rejects: [#"[{"x":10,"y":2}]"#, #"[{"x":1}]"#])
        try assertLanguage(##"{"definitions":{"a":{"type":"boolean"}},"properties":{"v":{"$ref":"#/definitions/a"}},"required":["v"]}"##,
                           accepts: [#"{"v":true}"#], rejects: [#"{"v":1}"#])
    }

    func testAnyValue() throws {
        try assertLanguage("true", accepts: ["null", "1", #""s""#, "[1,[2,[3]]]", #"{"a":{"b":{"c":1}}}"#, "[]"],
                           rejects: ["[[[[1]]]]", #"{"a":1,"b":2}"#, " 1"])
        try assertLanguage("{}", accepts: ["false"], rejects: [""])
        try assertLanguage(#"{"description":"anything","title":"x"}"#, accepts: ["0"], rejects: ["-"])
    }

    func testChoiceAndRegexGrammars() throws {
        let c = try Grammar.choice(["yes", "no", "maybe so", ""])
        for t in ["yes", "no", "maybe so", ""] { XCTAssertTrue(c.matches(t), t) }
        for t in ["ye", "yess", "\"yes\"", "maybe"] { XCTAssertFalse(c.matches(t), t) }
        XCTAssertTrue(c.isPrefix(bytes: Array("may".utf8)))

        let r = try Grammar.regex(#"^\d{3}-[A-Z]{2,3}(\.x)?$"#)
        for t in ["123-AB", "000-XYZ", "999-QQ.x"] { XCTAssertTrue(r.matches(t), t) }
        for t in ["12-AB", "123-ABCD", "123-ab", "123-AB.", "a123-AB"] { XCTAssertFalse(r.matches(t), t) }
        // Raw regexes read Unicode scalars: `.` is any scalar but newline, and no JSON quoting.
        let dot = try Grammar.regex("a.c")
        XCTAssertTrue(dot.matches("aéc"))
        XCTAssertTrue(dot.matches("a\"c"))
        XCTAssertFalse(dot.matches("a\nc"))
        let negated = try Grammar.regex("[^a-c]+")
        XCTAssertTrue(negated.matches("日本"))
        XCTAssertFalse(negated.matches("xbx"))
    }

    // MARK: building blocks

    func testUTF8RangesEncodeExactlyTheSet() {
        var rng = SeededGenerator(seed: 7)
        for _ in 0..<200 {
            var ranges: [ClosedRange<UInt32>] = []
            for _ in 0..<(1 + Int(rng.next() % 3)) {
                let a = UInt32(rng.next() % 0x11_0000)
                let length = UInt32(rng.next() % (rng.next() % 2 == 0 ? 300 : 70_000))
                ranges.append(a...min(a + length, 0x10FFFF))
            }
            let set = ScalarSet(ranges)
            let seqs = UTF8Ranges.sequences(set)
            func encodedBySequences(_ bytes: [UInt8]) -> Bool {
                seqs.contains { seq in
                    seq.count == bytes.count && zip(seq, bytes).allSatisfy { ranges, b in ranges.contains { $0.contains(b) } }
                }
            }
            // Probe scalars inside, at the edges and outside each range.
            var probes: [UInt32] = []
            for r in ranges {
                for v in [r.lowerBound, r.upperBound, r.lowerBound &- 1, r.upperBound + 1, (r.lowerBound + r.upperBound) / 2] { probes.append(v) }
                for _ in 0..<20 { probes.append(r.lowerBound + UInt32(rng.next() % UInt64(r.upperBound - r.lowerBound + 1))) }
            }
            for v in probes where v <= 0x10FFFF && !(0xD800...0xDFFF).contains(v) {
                XCTAssertEqual(encodedBySequences(UTF8Ranges.encode(v)), set.contains(v), String(v, radix: 16))
            }
        }
    }

    func testDigitRangesMatchBruteForce() {
        var rng = SeededGenerator(seed: 3)
        for _ in 0..<300 {
            let lo = rng.next() % 5000, hi = lo + rng.next() % 3000
            let seqs = DigitRanges.decimal(lo, hi)
            for n in Swift.max(0, Int(lo) - 50)...(Int(hi) + 50) {
                let text = Array(String(n).utf8)
                let hit = seqs.contains { seq in
                    seq.count == text.count && zip(seq, text).allSatisfy { r, b in r.contains { $0.contains(b) } }
                }
                XCTAssertEqual(hit, UInt64(n) >= lo && UInt64(n) <= hi, "\(n) in \(lo)...\(hi)")
            }
        }
        // Four hex digits, either case: the \u escapes of a scalar range.
        let hex = DigitRanges.fixedWidth(0x00E0, 0x0123, width: 4, base: 16)
        for v in 0xD0...0x140 {
            for text in [String(format: "%04x", v), String(format: "%04X", v)] {
                let bytes = Array(text.utf8)
                let hit = hex.contains { seq in zip(seq, bytes).allSatisfy { r, b in DigitRanges.hexBytes(r).contains { $0.contains(b) } } }
                XCTAssertEqual(hit, (0xE0...0x123).contains(v), text)
            }
        }
    }

    func testPatternCharactersStayOwnGraphemes() {
        // Marks, joiners and non-NFC scalars never enter a pattern string: the validator's
        // per-character matching would differ from per-scalar matching around them.
        for v: UInt32 in [0x0301, 0x200D, 0x1F3FB, 0x1100, 0x1161, 0x11A8, 0x1F1E6, 0x212B, 0x0958, 0x000D] {
            XCTAssertFalse(PatternReading.isIsolatedGrapheme(v), String(v, radix: 16))
        }
        for v: UInt32 in [0xE9, 0x65E5, 0x1F600, 0xAC00, 0x3B1] {
            XCTAssertTrue(PatternReading.isIsolatedGrapheme(v), String(v, radix: 16))
        }
    }
}

final class ToolCallGrammarTests: XCTestCase {
    func testACallNamesADeclaredToolWithValidArgumentsOrIsText() throws {
        let add = try JSONSchema(try JSONValue.parse(#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}"#))
        let g = try Grammar.toolCall([("add", add), ("now", nil)], allowText: true)
        for ok in ["<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":-2}}\n</tool_call>",
                   "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>", "hello <b>", "x"] {
            XCTAssertTrue(g.matches(ok), ok)
        }
        for bad in ["<tool_call>\n{\"name\":\"sub\",\"arguments\":{\"a\":1,\"b\":2}}\n</tool_call>",
                    "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1}}\n</tool_call>",
                    "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}", "<b>text", ""] {
            XCTAssertFalse(g.matches(bad), bad)
        }
        let callOnly = try Grammar.toolCall([("add", add)], allowText: false)
        XCTAssertFalse(callOnly.matches("hello"))
        XCTAssertTrue(callOnly.matches("<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":0,\"b\":0}}\n</tool_call>"))
        XCTAssertThrowsError(try Grammar.toolCall([], allowText: true))
    }
}
