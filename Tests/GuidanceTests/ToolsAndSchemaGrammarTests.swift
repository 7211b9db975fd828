// The grammars a session with tools needs, on the schemas Apple's Foundation Models framework
// sends (GenerationSchema's JSON: `title`, `x-order`, `additionalProperties: false`, nested
// `@Generable` types under `$defs`, as captured from the framework's requests): a tool's
// parameters that use `$defs`/`$ref`, a call of one of the tools OR a response_format value as
// one automaton, and properties generated in `x-order`'s order, not the JSON's key order.
import DataSchema
import Guidance
import XCTest

final class ToolsAndSchemaGrammarTests: XCTestCase {
    /// A tool's arguments with a nested @Generable type: its schema under `$defs`, referred to
    /// with `#\/$defs\/...` (JSONEncoder escapes slashes), keys in no particular order.
    static let routeArguments = #"""
    {"x-order":["from","to","stops"],"title":"Arguments","type":"object","additionalProperties":false,
     "required":["from","to"],
     "$defs":{"Place":{"title":"Place","type":"object","additionalProperties":false,"x-order":["city","country"],
                       "required":["city","country"],
                       "properties":{"country":{"type":"string","enum":["NO","FR"]},"city":{"type":"string","maxLength":12}}}},
     "properties":{"to":{"$ref":"#\/$defs\/Place"},"stops":{"type":"array","maxItems":2,"items":{"$ref":"#\/$defs\/Place"}},
                   "from":{"$ref":"#\/$defs\/Place"}}}
    """#

    /// `[Pet]` as the framework sends it in response_format (macOS 26.3 capture).
    static let pets = #"""
    {"$defs":{"Pet":{"additionalProperties":false,"properties":{
        "age":{"description":"Age of the pet. Measured in Earth solar years.","minimum":0,"type":"integer"},
        "name":{"description":"The name of the pet, as referred to by other people.","type":"string"},
        "species":{"description":"The species of the pet","type":"string"}},
      "required":["name","species","age"],"title":"Pet","type":"object","x-order":["name","species","age"]}},
     "items":{"$ref":"#/$defs/Pet"},"type":"array"}
    """#

    /// The framework's WeatherTool.Arguments (an optional @Generable enum, not in `required`).
    static let weather = #"""
    {"additionalProperties":false,"properties":{"location":{"description":"The city and state, e.g. Chicago, IL","type":"string"},
     "unit":{"enum":["celsius","fahrenheit"],"type":"string"}},"required":["location"],"title":"Arguments","type":"object",
     "x-order":["location","unit"]}
    """#

    func call(_ name: String, _ arguments: String) -> String { "<tool_call>\n{\"name\":\"\(name)\",\"arguments\":\(arguments)}\n</tool_call>" }

    func testToolParametersWithDefsResolveInTheirOwnDocument() throws {
        let route = try schema(Self.routeArguments)
        let g = try Grammar.toolCall([("route", route), ("weather", try schema(Self.weather))], allowText: false)
        let ok = #"{"from":{"city":"Oslo","country":"NO"},"to":{"city":"Paris","country":"FR"},"stops":[{"city":"Lyon","country":"FR"}]}"#
        XCTAssertTrue(g.matches(call("route", ok)))
        XCTAssertEqual(route.validate(try JSONValue.parse(ok)), [])
        XCTAssertTrue(g.matches(call("route", #"{"from":{"city":"A","country":"NO"},"to":{"city":"B","country":"NO"}}"#)))
        XCTAssertTrue(g.matches(call("weather", #"{"location":"Chicago, IL","unit":"celsius"}"#)))
        XCTAssertTrue(g.matches(call("weather", #"{"location":"Chicago, IL"}"#)))
        for bad in [#"{"from":{"city":"A","country":"SE"},"to":{"city":"B","country":"NO"}}"#,        // not in the enum
                    #"{"from":{"city":"A"},"to":{"city":"B","country":"NO"}}"#,                       // Place.country required
                    #"{"from":{"country":"NO","city":"A"},"to":{"city":"B","country":"NO"}}"#,        // x-order: city first
                    #"{"to":{"city":"B","country":"NO"},"from":{"city":"A","country":"NO"}}"#] {      // x-order: from first
            XCTAssertFalse(g.matches(call("route", bad)), bad)
        }
        XCTAssertFalse(g.matches(call("weather", #"{"unit":"celsius","location":"Chicago, IL"}"#)))
    }

    func testACallOrTheSchemasValueIsOneGrammar() throws {
        let pets = try schema(Self.pets)
        let g = try Grammar.toolCall([("weather", try schema(Self.weather))], otherwise: .value(pets))
        let value = #"[{"name":"Rex","species":"dog","age":3},{"name":"Tom","species":"cat","age":0}]"#
        XCTAssertEqual(pets.validate(try JSONValue.parse(value)), [])
        XCTAssertTrue(g.matches(value))
        XCTAssertTrue(g.matches("[]"))
        XCTAssertTrue(g.matches(call("weather", #"{"location":"Oslo"}"#)))
        for bad in [#"[{"species":"dog","name":"Rex","age":3}]"#,   // x-order
                    #"[{"name":"Rex","species":"dog","age":-1}]"#,  // minimum 0
                    "Sure, here are some pets", "<b>", call("weather", #"{"location":1}"#), call("route", #"{}"#)] {
            XCTAssertFalse(g.matches(bad), bad)
        }
        // the same alternative through the library, which keys it apart from the plain tool grammar
        let library = ConstraintLibrary(vocabulary: .synthetic(size: 2048))
        let both = try library.toolCall([("weather", try schema(Self.weather))], otherwise: .value(pets))
        let textOr = try library.toolCall([("weather", try schema(Self.weather))], allowText: true)
        XCTAssertFalse(both === textOr)
        XCTAssertTrue(both === (try library.toolCall([("weather", try schema(Self.weather))], otherwise: .value(pets))))
    }

    func testXOrderSetsTheOrderPropertiesAreWrittenIn() throws {
        let g = try grammar(#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["a","b","c"],"x-order":["c","a"]}"#)
        XCTAssertTrue(g.matches(#"{"c":1,"a":2,"b":3}"#), "listed names first in x-order's order, the rest in the schema's")
        XCTAssertFalse(g.matches(#"{"a":2,"b":3,"c":1}"#))
        // names that are not properties are passed over; a malformed x-order is refused by name
        XCTAssertTrue(try grammar(#"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"x-order":["zz","a"]}"#).matches(#"{"a":1}"#))
        XCTAssertThrowsError(try grammar(#"{"type":"object","properties":{"a":{"type":"integer"}},"x-order":"a"}"#)) { error in
            guard case let .unsupported(path, keyword, _)? = error as? GuidanceError else { return XCTFail("\(error)") }
            XCTAssertEqual(path, "$")
            XCTAssertEqual(keyword, "x-order")
        }
    }

    func testAToolsUnsupportedSchemaIsNamedByTheTool() throws {
        let bad = try schema(#"{"type":"object","properties":{"n":{"type":"number","multipleOf":0.5}},"required":["n"]}"#)
        XCTAssertThrowsError(try Grammar.toolCall([("weather", try schema(Self.weather)), ("half", bad)], allowText: true)) { error in
            guard let e = error as? GuidanceError, case let .unsupported(path, keyword, _) = e else { return XCTFail("\(error)") }
            XCTAssertEqual(path, "tool half $.properties.n")
            XCTAssertEqual(keyword, "multipleOf")
            XCTAssertEqual(e.toolName, "half")
        }
        // the alternative's own errors keep the schema's path (no tool named)
        XCTAssertThrowsError(try Grammar.toolCall([("weather", try schema(Self.weather))], otherwise: .value(bad))) { error in
            XCTAssertNil((error as? GuidanceError)?.toolName, "\(error)")
        }
    }
}
