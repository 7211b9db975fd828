// The JSON Schema subset: each keyword's pass and fail cases, JSON paths in messages, $ref
// resolution through $defs and definitions, and refusal of malformed or unsupported schemas.
import DataSchema
import XCTest

final class JSONSchemaTests: XCTestCase {
    func schema(_ text: String) throws -> JSONSchema { try JSONSchema(try JSONValue.parse(text)) }

    func violations(_ schemaText: String, _ instance: String) throws -> [String] {
        try schema(schemaText).validate(try JSONValue.parse(instance)).map(\.description)
    }

    let event = #"""
    {"type":"object","properties":{"title":{"type":"string","minLength":1},
     "attendees":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/person"}},
     "priority":{"type":"integer","minimum":1,"maximum":5}},
     "required":["title","attendees"],"additionalProperties":false,
     "$defs":{"person":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","pattern":"^[^@]+@[^@]+$"}},"required":["name"]}}}
    """#

    func testConformingInstance() throws {
        XCTAssertEqual(try violations(event, #"{"title":"Sync","attendees":[{"name":"A","email":"a@x.org"}],"priority":2}"#), [])
    }

    func testPathsInMessages() throws {
        XCTAssertEqual(try violations(event, #"{"title":"Sync","attendees":[{"name":"A"},{"name":"B","email":7}]}"#),
                       ["$.attendees[1].email: expected string, got number"])
        XCTAssertEqual(try violations(event, #"{"attendees":[],"priority":2.5,"extra":1}"#), [
            "$: missing required property \"title\"",
            "$.attendees: 0 items, fewer than minItems 1",
            "$.priority: expected integer, got number 2.5",
            "$: unexpected property \"extra\" (additionalProperties is false)",
        ])
        XCTAssertEqual(try violations(event, #"{"title":"","attendees":[{"name":"A","email":"nope"}],"priority":9}"#), [
            "$.title: string of length 0 is shorter than minLength 1",
            "$.attendees[0].email: \"nope\" does not match the pattern \"^[^@]+@[^@]+$\"",
            "$.priority: 9 is greater than the maximum 5",
        ])
    }

    func testTypeArraysEnumConstAndCombinators() throws {
        XCTAssertEqual(try violations(#"{"type":["string","null"]}"#, "null"), [])
        XCTAssertEqual(try violations(#"{"type":["string","null"]}"#, "3"), ["$: expected string or null, got number"])
        XCTAssertEqual(try violations(#"{"type":"number"}"#, "3"), [])
        XCTAssertEqual(try violations(#"{"type":"integer"}"#, "3.0"), [])
        XCTAssertEqual(try violations(#"{"enum":["a",1]}"#, "1.0"), [])
        XCTAssertEqual(try violations(#"{"enum":["a","b"]}"#, #""c""#), [#"$: "c" is not one of the allowed values "a", "b""#])
        XCTAssertEqual(try violations(#"{"const":{"x":1}}"#, #"{"x":2}"#), [#"$: expected {"x":1}, got {"x":2}"#])
        XCTAssertEqual(try violations(#"{"anyOf":[{"type":"string"},{"type":"integer"}]}"#, "2"), [])
        XCTAssertEqual(try violations(#"{"oneOf":[{"type":"number"},{"type":"integer"}]}"#, "2").count, 1)
        XCTAssertEqual(try violations(#"{"items":{"type":"string"},"maxItems":1}"#, #"["a",2]"#),
                       ["$: 2 items, more than maxItems 1", "$[1]: expected string, got number"])
        XCTAssertEqual(try violations(#"{"additionalProperties":{"type":"boolean"}}"#, #"{"ok":true,"odd key":1}"#),
                       [#"$["odd key"]: expected boolean, got number"#])
        XCTAssertEqual(try violations("false", "1"), ["$: no value is allowed here (schema is false)"])
    }

    func testDefinitionsAndRecursiveRefs() throws {
        let tree = ##"{"definitions":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/definitions/node"}},"v":{"type":"integer"}}}},"$ref":"#/definitions/node"}"##
        XCTAssertEqual(try violations(tree, #"{"v":1,"children":[{"v":2,"children":[{"v":"x"}]}]}"#),
                       ["$.children[0].children[0].v: expected integer, got string"])
    }

    func testMalformedSchemasAreRefused() {
        for (text, fragment) in [
            (#"{"type":"str"}"#, "unknown type \"str\""),
            (##"{"$ref":"#/$defs/missing"}"##, "does not resolve"),
            (#"{"$ref":"other.json#/x"}"#, "only local references"),
            (#"{"properties":{"a":{"if":{}}}}"#, "$.properties.a.if: the keyword \"if\" is not supported"),
            (##"{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}"##, "loops back"),
            (#"{"minItems":-1}"#, "non-negative integer"),
            (#"{"required":"a"}"#, "array of property names"),
            ("3", "must be an object or a boolean"),
        ] {
            do {
                _ = try JSONSchema(try JSONValue.parse(text), context: "test")
                XCTFail("accepted \(text)")
            } catch {
                XCTAssertTrue((error.errorDescription ?? "").contains(fragment), "\(text): \(error.errorDescription ?? "")")
            }
        }
    }
}
