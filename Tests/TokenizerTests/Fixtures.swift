// Loading the committed fixtures (made by scripts/fixtures/make_tokenizer_fixtures.py) and the
// SmolLM2 tokenizer once for all tests. No network, no model file.
import Foundation
import XCTest
@testable import ModelAssets

enum Fixtures {
    static var folder: URL {
        Bundle.module.url(forResource: "Fixtures", withExtension: nil)!
    }

    static func url(_ name: String) -> URL { folder.appendingPathComponent(name) }

    static func json(_ name: String) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(contentsOf: url(name)))
    }

    /// SmolLM2-135M-Instruct's tokenizer, loaded once (about 0.1 s).
    static let smolLM2Result = Result { try BPETokenizer.load(tokenizerJSON: url("smollm2/tokenizer.json")) }

    static func smolLM2() throws -> BPETokenizer { try smolLM2Result.get() }

    struct GoldenEntry {
        var name: String
        var text: String
        var ids: [Int]
        var tokens: [String]
        var decoded: String
    }

    static func smolLM2Golden() throws -> [GoldenEntry] {
        let root = try XCTUnwrap(json("smollm2_golden.json") as? [String: Any])
        let entries = try XCTUnwrap(root["entries"] as? [[String: Any]])
        return try entries.map { e in
            GoldenEntry(name: try XCTUnwrap(e["name"] as? String), text: try XCTUnwrap(e["text"] as? String),
                        ids: try XCTUnwrap(e["ids"] as? [Int]), tokens: try XCTUnwrap(e["tokens"] as? [String]),
                        decoded: try XCTUnwrap(e["decoded"] as? String))
        }
    }
}

/// Exact comparison: Swift's `==` on String is canonical equivalence, which would hide normalization bugs.
func sameScalars(_ a: String, _ b: String) -> Bool {
    a.unicodeScalars.elementsEqual(b.unicodeScalars)
}
