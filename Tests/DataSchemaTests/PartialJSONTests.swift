// JSONValue.partial: the value a JSON text spells out so far, as a streamed guided reply shows it.
import DataSchema
import XCTest

final class PartialJSONTests: XCTestCase {
    func v(_ text: String) throws -> JSONValue { try JSONValue.parse(text, context: "test") }

    func testCutTextsCloseWhatIsOpen() throws {
        let cases: [(String, String?)] = [
            ("", nil), ("  ", nil), ("{", "{}"), (#"{"ti"#, "{}"), (#"{"title""#, "{}"), (#"{"title": "#, "{}"),
            (#"{"title": "Lun"#, #"{"title":"Lun"}"#), (#"{"title": "Lunch", "day": tr"#, #"{"title":"Lunch"}"#),
            (#"{"title": "Lunch", "n": 12."#, #"{"title":"Lunch","n":12}"#), (#"{"n": -"#, "{}"), (#"{"n": 1e"#, #"{"n":1}"#),
            ("[1, 2, [3, ", "[1,2,[3]]"), ("[", "[]"), (#"["a\"#, #"["a"]"#), (#"["a\u00"#, #"["a"]"#), (#"["a\u00e9"#, #"["aé"]"#),
            (#"{"a": {"b": [true, nul"#, #"{"a":{"b":[true]}}"#), (#"{"a": null}"#, #"{"a":null}"#), ("tru", nil), ("-", nil),
        ]
        for (text, want) in cases {
            XCTAssertEqual(JSONValue.partial(text), try want.map { try v($0) }, "partial of \(text)")
        }
    }

    func testStringsGrowCharacterByCharacter() throws {
        let whole = #"["añ€😀👩‍👩‍👧"]"#
        let chars = Array(whole)
        for cut in 2..<(chars.count - 1) {
            guard let value = JSONValue.partial(String(chars[..<cut])), case .array(let items) = value, case .string(let s)? = items.first else {
                return XCTFail("no partial value for \(String(chars[..<cut]))")
            }
            XCTAssertEqual(s, String(chars[2..<cut]))
        }
    }

    func testEveryPrefixOfValidTextsHasAValueAndTheWholeTextIsItsValue() throws {
        let texts = [
            #"{"title":"Lunch with Ana","day":"Tuesday","start":"12:30","attendees":["Ana","Bo"],"n":-1.5e3,"ok":false,"x":null}"#,
            #"[{"a":[1,2,{"b":"c\"d\\e\n"}]},[],{},"\u00e9\ud83d\ude00",0.25]"#,
            #"  { "spaced" : [ 1 , 2 ] , "k" : "v" }  "#,
        ]
        for text in texts {
            let chars = Array(text)
            let firstValue = chars.firstIndex { !$0.isWhitespace }!
            for cut in (firstValue + 1)...chars.count {
                XCTAssertNotNil(JSONValue.partial(String(chars[..<cut])), "prefix \(String(chars[..<cut]))")
            }
            XCTAssertEqual(JSONValue.partial(text), try v(text))
        }
        XCTAssertNil(JSONValue.partial(#"{"a":1} x"#), "trailing text is not a value's beginning")
        XCTAssertNil(JSONValue.partial(#"{"a" 1"#))
        XCTAssertNil(JSONValue.partial(#"[1 2"#))
    }
}
