// The hand-written pre-tokenizers against `tokenizers`' own Split/Digits output for the same regexes
// (fixture pretokenizer_splits.json, from scripts/fixtures/make_tokenizer_fixtures.py).
import Foundation
import XCTest
@testable import ModelAssets

final class PreTokenizerTests: XCTestCase {
    func testSplitsMatchReference() throws {
        let root = try XCTUnwrap(Fixtures.json("pretokenizer_splits.json") as? [String: [[String: Any]]])
        XCTAssertEqual(Set(root.keys), Set(PreTokenizer.allCases.map(\.rawValue)))
        for kind in PreTokenizer.allCases {
            let cases = try XCTUnwrap(root[kind.rawValue])
            XCTAssertGreaterThan(cases.count, 40)
            for c in cases {
                let text = try XCTUnwrap(c["text"] as? String)
                let expected = try XCTUnwrap(c["pieces"] as? [String])
                let pieces = kind.split(text)
                let same = pieces.count == expected.count && zip(pieces, expected).allSatisfy(sameScalars)
                XCTAssertTrue(same, "\(kind.rawValue): \(text.debugDescription)\n mine: \(pieces)\n  ref: \(expected)")
            }
        }
    }

    func testHandPickedCases() {
        XCTAssertEqual(PreTokenizer.llama3.split("I'M 12345"), ["I", "'M", " ", "123", "45"])
        XCTAssertEqual(PreTokenizer.qwen2.split("x 123"), ["x", " ", "1", "2", "3"])
        XCTAssertEqual(PreTokenizer.gpt2.split("a  b"), ["a", " ", " b"])
        XCTAssertEqual(PreTokenizer.smollm.split("x  12"), ["x", "  ", "1", "2"])
        XCTAssertEqual(PreTokenizer.llama3.split("a\n\n  b"), ["a", "\n\n", " ", " b"])
        XCTAssertEqual(PreTokenizer.gpt2.split(""), [])
        XCTAssertEqual(PreTokenizer.gpt4o.split("HTMLParser CamelCase DON'T I'm"), ["HTMLParser", " Camel", "Case", " DON'T", " I'm"])
        XCTAssertEqual(PreTokenizer.gpt4o.split("x 12345 !\n/y"), ["x", " ", "123", "45", " !\n/", "y"])
        XCTAssertEqual(PreTokenizer.gpt4o.split("日本語ABC"), ["日本語", "ABC"])
    }
}
