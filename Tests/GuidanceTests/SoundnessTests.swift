// The soundness property: every output a random walk over allowed tokens completes parses
// as JSON and passes `JSONSchema.validate`, and an output cut off by the step limit is
// reported incomplete exactly when the grammar does not accept it. Run for the repository's
// schemas (examples/, the DataSchema tests) and 500 seeded random schemas, on a synthetic
// byte-level vocabulary, SmolLM2's vocabulary (its tokenizer.json fixture) and, when
// ADAPTER_BASE_MODEL is set, the vocabulary read from the model file. Completeness the
// other way: valid compact instances are accepted byte by byte.
import DataSchema
import Foundation
@testable import Guidance
import ModelAssets
import XCTest

final class SoundnessTests: XCTestCase {
    static let randomSchemaCount = 500

    /// The random corpus: schemas that compile, with counts of those refused or empty.
    static func randomCorpus() throws -> (schemas: [(name: String, schema: JSONSchema, grammar: Grammar)], refused: [String]) {
        var generator = RandomSchemas(seed: 2024)
        var out: [(String, JSONSchema, Grammar)] = []
        var refused: [String] = []
        for i in 0..<randomSchemaCount {
            let text = generator.document()
            let s = try JSONSchema(try JSONValue.parse(text), context: "random schema \(i)")
            do {
                out.append(("random schema \(i)", s, try Grammar.jsonSchema(s)))
            } catch {
                refused.append("random schema \(i): \(error.localizedDescription) — \(text)")
            }
        }
        return (out, refused)
    }

    func runWalks(_ schemas: [(name: String, schema: JSONSchema, grammar: Grammar)], vocabulary: TokenVocabulary, walks: Int, maxSteps: Int) throws -> (complete: Int, total: Int) {
        var complete = 0, total = 0
        for (k, item) in schemas.enumerated() {
            let constraint = TokenConstraint(grammar: item.grammar, vocabulary: vocabulary)
            let walker = Walker(constraint)
            for w in 0..<walks {
                // Mixes: uniform choices and closing-biased ones; with and without forced tokens.
                let bias = [0.0, 0.5, 0.2, 0.8][w % 4]
                let result = try walker.walk(seed: UInt64(k * 1000 + w), maxSteps: maxSteps, closingBias: bias, useForced: w % 2 == 1)
                checkWalk(result, grammar: item.grammar, schema: item.schema, label: "\(item.name) walk \(w)")
                total += 1
                if result.stopped { complete += 1 }
            }
        }
        return (complete, total)
    }

    func testRepositorySchemasAreSoundOnSyntheticVocabulary() throws {
        let schemas = try repositorySchemas()
        XCTAssertGreaterThanOrEqual(schemas.count, 6, "expected the examples' and DataSchema tests' schemas")
        let compiled = try schemas.map { ($0.name, $0.schema, try Grammar.jsonSchema($0.schema)) }
        let vocabulary = TokenVocabulary.synthetic(size: 5000, seed: 1)
        let (complete, total) = try runWalks(compiled, vocabulary: vocabulary, walks: 24, maxSteps: 400)
        print("repository schemas, synthetic vocabulary: \(schemas.count) schemas, \(total) walks, \(complete) stopped complete")
        XCTAssertGreaterThan(complete, total / 2)
    }

    func testRandomSchemasAreSoundOnSyntheticVocabulary() throws {
        let (schemas, refused) = try Self.randomCorpus()
        // The generator stays inside the subset; a few may still admit no value (contradictory bounds).
        XCTAssertGreaterThanOrEqual(schemas.count, Self.randomSchemaCount * 9 / 10, refused.prefix(5).joined(separator: "\n"))
        for r in refused { XCTAssertTrue(r.contains("cannot produce any value"), r) }
        let vocabulary = TokenVocabulary.synthetic(size: 3000, seed: 4)
        let (complete, total) = try runWalks(schemas, vocabulary: vocabulary, walks: 4, maxSteps: 300)
        print("random schemas, synthetic vocabulary: \(schemas.count) compiled (\(refused.count) admit no value), \(total) walks, \(complete) stopped complete")
        XCTAssertGreaterThan(complete, total / 2)
    }

    func testSchemasAreSoundOnSmolLM2Vocabulary() throws {
        let tokenizer = try BPETokenizer.load(tokenizerJSON: repositoryRoot.appendingPathComponent("Tests/TokenizerTests/Fixtures/smollm2/tokenizer.json"))
        let vocabulary = try TokenVocabulary(tokenizer: tokenizer)
        let repository = try repositorySchemas().map { ($0.name, $0.schema, try Grammar.jsonSchema($0.schema)) }
        var (complete, total) = try runWalks(repository, vocabulary: vocabulary, walks: 8, maxSteps: 400)
        let random = try Self.randomCorpus().schemas.prefix(100)
        let more = try runWalks(Array(random), vocabulary: vocabulary, walks: 2, maxSteps: 300)
        complete += more.complete
        total += more.total
        print("SmolLM2 vocabulary (tokenizer.json fixture): \(repository.count) repository + \(random.count) random schemas, \(total) walks, \(complete) stopped complete")
        XCTAssertGreaterThan(complete, total / 3)
    }

    func testSchemasAreSoundOnModelFileVocabulary() throws {
        guard let tokenizer = realTokenizer(for: "SoundnessTests.testSchemasAreSoundOnModelFileVocabulary") else {
            throw XCTSkip("ADAPTER_BASE_MODEL is not set or unreadable; set it to SmolLM2-135M-Instruct.Q4_1.gguf to walk its 49,152-token vocabulary")
        }
        let vocabulary = try TokenVocabulary(tokenizer: tokenizer)
        XCTAssertEqual(vocabulary.count, 49152)
        XCTAssertEqual(vocabulary.stopTokens, [2])
        let repository = try repositorySchemas().map { ($0.name, $0.schema, try Grammar.jsonSchema($0.schema)) }
        var (complete, total) = try runWalks(repository, vocabulary: vocabulary, walks: 8, maxSteps: 400)
        let random = try Self.randomCorpus().schemas
        let more = try runWalks(random, vocabulary: vocabulary, walks: 2, maxSteps: 300)
        complete += more.complete
        total += more.total
        print("SmolLM2 vocabulary (model file): \(repository.count) repository + \(random.count) random schemas, \(total) walks, \(complete) stopped complete")
        XCTAssertGreaterThan(complete, total / 3)
    }

    /// Valid instances in compact form are accepted byte by byte (every prefix viable, the whole accepted).
    func testValidCompactInstancesAreAccepted() throws {
        let cases: [(schema: String, instances: [String])] = [
            (#"{"type":"object","properties":{"title":{"type":"string"},"day":{"type":"string"},"start":{"type":"string"},"minutes":{"type":["integer","null"]},"attendees":{"type":"array","items":{"type":"string"}},"location":{"type":["string","null"]}},"required":["title","day","start","minutes","attendees","location"]}"#,
             [#"{"title":"Interview","day":"friday","start":"13:00","minutes":30,"attendees":["Mokia","Voum"],"location":"Old Town Noodle House"}"#,
              #"{"title":"","day":"d","start":"s","minutes":null,"attendees":[],"location":null}"#]),
            (#"{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}"#,
             [#"{"city":"Oslo","unit":"c"}"#, #"{"city":"S\u00e3o Paulo","unit":"f"}"#]),
            (#"{"type":"object","properties":{"amount":{"type":"number"},"from":{"type":"string"},"to":{"type":"string"}},"required":["amount","from","to"]}"#,
             [#"{"amount":12.5,"from":"CHF","to":"USD"}"#, #"{"amount":-0.001e-5,"from":"","to":"\n"}"#]),
            (#"{"type":"object","properties":{"minutes":{"type":"integer","minimum":1}},"required":["minutes"],"additionalProperties":false}"#,
             [#"{"minutes":1}"#, #"{"minutes":90}"#]),
            (#"{"type":"array","items":{"anyOf":[{"type":"string","pattern":"^[a-z]+\\d?$"},{"type":"integer","maximum":-1}]},"maxItems":3}"#,
             ["[]", #"["ab1"]"#, #"[-5,"z",-1]"#]),
            (#"{"oneOf":[{"type":"object","properties":{"v":{"type":"boolean"}},"required":["v"]},{"type":"array","items":{"type":"null"}}]}"#,
             [#"{"v":false}"#, "[null,null]"]),
        ]
        for c in cases {
            let s = try schema(c.schema)
            let g = try Grammar.jsonSchema(s)
            for text in c.instances {
                XCTAssertEqual(s.validate(try JSONValue.parse(text)).map(\.description), [], "test data: \(text)")
                let bytes = Array(text.utf8)
                for i in 0...bytes.count { XCTAssertTrue(g.isPrefix(bytes: Array(bytes[..<i])), "\(text) prefix \(i)") }
                XCTAssertTrue(g.matches(text), text)
            }
        }
        // And through the token path: tokenized by SmolLM2, every token is allowed in turn and the stop token at the end.
        let tokenizer = try BPETokenizer.load(tokenizerJSON: repositoryRoot.appendingPathComponent("Tests/TokenizerTests/Fixtures/smollm2/tokenizer.json"))
        let vocabulary = try TokenVocabulary(tokenizer: tokenizer)
        let s = try schema(cases[0].schema)
        let constraint = TokenConstraint(grammar: try Grammar.jsonSchema(s), vocabulary: vocabulary)
        var state = constraint.start()
        for token in tokenizer.encode(cases[0].instances[0]) {
            XCTAssertTrue(constraint.allowedTokens(state).contains(token), "token \(token)")
            try state.advance(token: token)
        }
        XCTAssertTrue(state.isComplete)
        try state.advance(token: 2)
    }

    func testRandomCorpusCoversTheConstructs() throws {
        var generator = RandomSchemas(seed: 2024)
        let texts = (0..<Self.randomSchemaCount).map { _ in generator.document() }.joined()
        for keyword in ["\"pattern\"", "\"minLength\"", "\"maxItems\"", "\"enum\"", "\"const\"", "\"anyOf\"", "\"oneOf\"", "\"$ref\"", "\"exclusiveMaximum\"", "\"additionalProperties\":false", "[\"string\",\"null\"]"] {
            XCTAssertTrue(texts.contains(keyword), keyword)
        }
    }
}
