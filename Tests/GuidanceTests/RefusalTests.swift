// What generation cannot enforce is refused when the grammar is built, with the keyword and
// the schema path in the error; schemas that admit no producible value say where and why.
import DataSchema
import Guidance
import XCTest

final class RefusalTests: XCTestCase {
    func refusal(_ schemaText: String, file: StaticString = #filePath, line: UInt = #line) -> GuidanceError? {
        do {
            _ = try Grammar.jsonSchema(try schema(schemaText))
            XCTFail("accepted \(schemaText)", file: file, line: line)
            return nil
        } catch let error as GuidanceError {
            return error
        } catch {
            XCTFail("\(schemaText): \(error)", file: file, line: line)
            return nil
        }
    }

    func testUnsupportedKeywordsNameKeywordAndPath() {
        let cases: [(schema: String, keyword: String, path: String)] = [
            (#"{"type":"object","properties":{"price":{"type":"number","multipleOf":0.01}}}"#, "multipleOf", "$.properties.price"),
            (#"{"type":"integer","multipleOf":5}"#, "multipleOf", "$"),
            (#"{"properties":{"a":{"not":{"type":"string"}}}}"#, "not", "$.properties.a"),
            (#"{"type":"array","items":{"type":"integer"},"uniqueItems":true}"#, "uniqueItems", "$"),
            (#"{"allOf":[{"type":"integer"},{"minimum":3}]}"#, "allOf", "$"),
            (#"{"oneOf":[{"type":"integer"},{"type":"number"}]}"#, "oneOf", "$"),
            (#"{"oneOf":[{"type":"string"},{"maxLength":3}]}"#, "oneOf", "$"),
            (#"{"type":"string","anyOf":[{"maxLength":3}]}"#, "type", "$"),
            (#"{"anyOf":[{"type":"string"}],"oneOf":[{"type":"string"}]}"#, "oneOf", "$"),
            (##"{"$defs":{"a":{"type":"string"}},"items":{"$ref":"#/$defs/a","maxLength":2}}"##, "maxLength", "$.items"),
            (##"{"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}"##, "$ref", "$.$defs.node.properties.kids.items"),
            (#"{"type":"object","properties":{"a":{"type":"string"}},"minProperties":1}"#, "minProperties", "$"),
            (#"{"type":"object","properties":{"a":{},"b":{}},"maxProperties":1}"#, "maxProperties", "$"),
            (#"{"type":"object","minProperties":2}"#, "minProperties", "$"),
        ]
        for c in cases {
            guard let error = refusal(c.schema) else { continue }
            guard case let .unsupported(path, keyword, _) = error else {
                XCTFail("\(c.schema): expected an unsupported-keyword error, got \(error)")
                continue
            }
            XCTAssertEqual(keyword, c.keyword, c.schema)
            XCTAssertEqual(path, c.path, c.schema)
            let text = error.errorDescription ?? ""
            XCTAssertTrue(text.hasPrefix(c.path + ": "), text)
            XCTAssertTrue(text.contains("\"\(c.keyword)\""), text)
        }
    }

    func testUnsupportedPatternsSayWhy() {
        let cases: [(pattern: String, fragment: String)] = [
            (#"^(a)\1$"#, "backreference"),
            (#"^(?=a)a$"#, "lookaround"),
            (#"\bword\b"#, "word boundary"),
            (#"^a*+$"#, "possessive"),
            (#"(?i)abc"#, "inline flags"),
            (#"^\p{L}+$"#, "Unicode property"),
            (#"^[[:alpha:]]$"#, "POSIX"),
            (#"^[a-z&&[^x]]$"#, "set operations"),
            (#"a^b"#, "'^' and '$'"),
            (#"^(?>a)$"#, "atomic group"),
        ]
        for c in cases {
            let text = #"{"type":"string","pattern":"# + JSONValue.string(c.pattern).compactText + "}"
            guard let error = refusal(text) else { continue }
            guard case let .invalidPattern(path, pattern, reason) = error else {
                XCTFail("\(c.pattern): expected a pattern error, got \(error)")
                continue
            }
            XCTAssertEqual(path, "$.pattern", c.pattern)
            XCTAssertEqual(pattern, c.pattern)
            XCTAssertTrue(reason.contains(c.fragment), "\(c.pattern): \(reason)")
        }
        XCTAssertThrowsError(try Grammar.regex("(a")) { XCTAssertTrue("\($0)".contains("not closed")) }
    }

    func testNoProducibleValueSaysWhere() {
        let cases: [(schema: String, path: String, fragment: String)] = [
            (#"{"type":"object","properties":{"n":{"type":"integer","minimum":5,"maximum":4}},"required":["n"]}"#, "$.properties.n", "no integer"),
            (#"{"type":"string","minLength":4,"maxLength":2}"#, "$", "minLength 4 is greater than maxLength 2"),
            (#"{"enum":["a","b"],"type":"integer"}"#, "$", "enum"),
            (#"{"type":"array","items":false,"minItems":1}"#, "$.items", "schema is false"),
            (#"{"type":"string","pattern":"^e\u0301$"}"#, "$", "matches the pattern"),
            (#"{"type":"object","required":["x"],"additionalProperties":false}"#, "$", "\"x\" is required"),
            ("false", "$", "schema is false"),
        ]
        for c in cases {
            guard let error = refusal(c.schema) else { continue }
            guard case let .noValue(path, reason) = error else {
                XCTFail("\(c.schema): expected a no-value error, got \(error)")
                continue
            }
            XCTAssertEqual(path, c.path, c.schema)
            XCTAssertTrue(reason.contains(c.fragment), "\(c.schema): \(reason)")
        }
        XCTAssertThrowsError(try Grammar.choice([]))
    }

    func testSizeLimit() {
        XCTAssertThrowsError(try Grammar.jsonSchema(try schema(#"{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":1000}"#), stateLimit: 200_000)) { error in
            guard case let .tooLarge(path, limit)? = error as? GuidanceError else { return XCTFail("\(error)") }
            XCTAssertEqual(limit, 200_000)
            XCTAssertTrue(path.hasPrefix("$"), path)
        }
    }

    func testOverlappingOneOfIsAcceptedWhenValuesExcludeEachOther() throws {
        // Same type, but enum values decide: each value fails the other branch.
        let g = try grammar(#"{"oneOf":[{"type":"string","enum":["a","b"]},{"type":"string","maxLength":0}]}"#)
        XCTAssertTrue(g.matches(#""a""#))
        XCTAssertTrue(g.matches(#""""#))
        // A value of the finite branch that the other branch also accepts: refused.
        XCTAssertNotNil(refusal(#"{"oneOf":[{"enum":["a",""]},{"type":"string","maxLength":0}]}"#))
    }
}
