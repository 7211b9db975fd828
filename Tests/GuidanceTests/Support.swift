// Helpers shared by the Guidance tests: schema parsing, the repository's example schemas,
// SmolLM2's vocabulary when ADAPTER_BASE_MODEL points at it, and seeded random walks that
// choose among allowed tokens.
import DataSchema
import Foundation
import Guidance
import ModelAssets
import XCTest

func schema(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> JSONSchema {
    try JSONSchema(try JSONValue.parse(text), context: "test schema")
}

func grammar(_ text: String) throws -> Grammar { try Grammar.jsonSchema(try schema(text)) }

/// The repository root (three levels above this file).
let repositoryRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Every distinct response_format schema and tool parameter schema in examples/*/*.jsonl, plus
/// the schemas the DataSchema tests use, each with where it came from.
func repositorySchemas() throws -> [(name: String, schema: JSONSchema)] {
    var out: [(String, JSONSchema)] = []
    var seen = Set<String>()
    func add(_ name: String, _ s: JSONSchema) {
        if seen.insert(s.root.compactText).inserted { out.append((name, s)) }
    }
    let examples = repositoryRoot.appendingPathComponent("examples")
    let folders = (try? FileManager.default.contentsOfDirectory(atPath: examples.path))?.sorted() ?? []
    for folder in folders {
        let dir = examples.appendingPathComponent(folder)
        for file in ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted() where file.hasSuffix(".jsonl") {
            let path = dir.appendingPathComponent(file).path
            for mode in [DataMode.train, .prompt] {
                guard let data = try? DataReader.read(path: path, options: ReadOptions(mode: mode, skipInvalid: true)) else { continue }
                for sample in data.samples {
                    for m in sample.messages {
                        if let f = m.responseFormat { add("examples/\(folder)/\(file) response_format \(f.name)", f.schema) }
                        for t in m.tools { if let p = t.parameters { add("examples/\(folder)/\(file) tool \(t.name)", p) } }
                    }
                }
            }
        }
    }
    // Schemas from Tests/DataSchemaTests (JSONSchemaTests' event, Fakes' weather tool, ReaderTests' event).
    let fromTests = [
        ("JSONSchemaTests event", #"""
        {"type":"object","properties":{"title":{"type":"string","minLength":1},
         "attendees":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/person"}},
         "priority":{"type":"integer","minimum":1,"maximum":5}},
         "required":["title","attendees"],"additionalProperties":false,
         "$defs":{"person":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","pattern":"^[^@]+@[^@]+$"}},"required":["name"]}}}
        """#),
        ("Fakes weatherTools", #"{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}"#),
        ("ReaderTests event", #"{"type":"object","properties":{"title":{"type":"string"},"attendees":{"type":"array","items":{"type":"object","properties":{"email":{"type":"string"}}}}},"required":["title"]}"#),
        ("TransformTests answer", #"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#),
    ]
    for (name, text) in fromTests { add(name, try schema(text)) }
    return out
}

/// SmolLM2's tokenizer from ADAPTER_BASE_MODEL, or nil with the reason printed.
func realTokenizer(for test: String) -> BPETokenizer? {
    guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], !path.isEmpty else {
        print("\(test): skipped with the real vocabulary: ADAPTER_BASE_MODEL is not set (scripts/fetch-model.sh prints the path of SmolLM2-135M-Instruct.Q4_1.gguf)")
        return nil
    }
    guard FileManager.default.fileExists(atPath: path) else {
        print("\(test): skipped with the real vocabulary: ADAPTER_BASE_MODEL names \(path), which does not exist")
        return nil
    }
    do {
        return try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: path)))
    } catch {
        print("\(test): skipped with the real vocabulary: \(error)")
        return nil
    }
}

/// The k-th (0-based) set bit of a mask.
func selectBit(_ words: [UInt64], _ k: Int) -> Int {
    var k = k
    for (w, word) in words.enumerated() {
        let c = word.nonzeroBitCount
        if k < c {
            var bits = word
            for _ in 0..<k { bits &= bits - 1 }
            return w << 6 + bits.trailingZeroBitCount
        }
        k -= c
    }
    fatalError("selectBit past the end")
}

struct WalkResult {
    var bytes: [UInt8] = []
    var tokens: [Int] = []
    /// A stop token was chosen.
    var stopped = false
    /// The state's isComplete when the walk ended.
    var complete = false
    var forced = 0
    var dead = false
}

/// Random walks over allowed tokens. `closingBias` is the chance that a step picks among the
/// allowed tokens holding `"`, `]` or `}` (when any is allowed) instead of among all allowed
/// tokens, so walks through long strings reach their end; both are choices the mask allows.
struct Walker {
    let constraint: TokenConstraint
    let closing: [UInt64]

    init(_ constraint: TokenConstraint) {
        self.constraint = constraint
        let v = constraint.vocabulary
        var closing = [UInt64](repeating: 0, count: (v.count + 63) / 64)
        for id in 0..<v.count {
            if let b = v.bytes(of: id), b.contains(where: { $0 == 0x22 || $0 == 0x5D || $0 == 0x7D }) {
                closing[id >> 6] |= 1 << UInt64(id & 63)
            }
        }
        self.closing = closing
    }

    /// `budgeted`: choose among `allowedTokens(_:remaining:)` with `maxSteps` as the token limit
    /// (what the generators do), instead of the plain mask.
    func walk(seed: UInt64, maxSteps: Int, closingBias: Double, stopChance: Double = 0.5, useForced: Bool, budgeted: Bool = false) throws -> WalkResult {
        var rng = SeededGenerator(seed: seed)
        var state = constraint.start()
        var out = WalkResult()
        let vocabulary = constraint.vocabulary
        while out.tokens.count < maxSteps {
            if useForced {
                let forced = constraint.forcedTokens(state)
                if !forced.isEmpty {
                    for t in forced {
                        guard out.tokens.count < maxSteps else { break }
                        try state.advance(token: t)
                        out.tokens.append(t)
                        out.bytes += vocabulary.bytes(of: t)!
                        out.forced += 1
                    }
                    continue
                }
            }
            let mask = budgeted ? constraint.allowedTokens(state, remaining: maxSteps - out.tokens.count).mask : constraint.allowedTokens(state)
            if mask.isEmpty { out.dead = true; break }
            let stop = vocabulary.stopTokens.first { mask.contains($0) }
            if let stop, Double(rng.next() % 1_000_000) / 1_000_000 < stopChance {
                try state.advance(token: stop)
                out.stopped = true
                break
            }
            var words = mask.words
            if let stop { words[stop >> 6] &= ~(1 << UInt64(stop & 63)) }
            if Double(rng.next() % 1_000_000) / 1_000_000 < closingBias {
                let narrowed = zip(words, closing).map { $0 & $1 }
                if narrowed.contains(where: { $0 != 0 }) { words = narrowed }
            }
            let total = words.reduce(0) { $0 + $1.nonzeroBitCount }
            if total == 0 {
                // Only the stop token is allowed.
                try state.advance(token: stop!)
                out.stopped = true
                break
            }
            let token = selectBit(words, Int(rng.next() % UInt64(total)))
            try state.advance(token: token)
            out.tokens.append(token)
            out.bytes += vocabulary.bytes(of: token)!
        }
        out.complete = state.isComplete
        return out
    }
}

/// Checks one walk's output against the schema: complete outputs parse and validate; the
/// completeness flag agrees with the grammar's own full-match test.
func checkWalk(_ result: WalkResult, grammar: Grammar, schema: JSONSchema, label: String) {
    let matches = grammar.matches(bytes: result.bytes)
    XCTAssertEqual(result.complete, matches, "\(label): isComplete \(result.complete) but the grammar's full match says \(matches) for \(String(decoding: result.bytes, as: UTF8.self))")
    XCTAssertTrue(grammar.isPrefix(bytes: result.bytes), "\(label): the output left the grammar")
    XCTAssertFalse(result.dead, "\(label): no token allowed after \(String(decoding: result.bytes, as: UTF8.self))")
    guard result.complete else { return }
    guard let text = String(validating: result.bytes, as: UTF8.self) else {
        XCTFail("\(label): complete output is not valid UTF-8: \(result.bytes)")
        return
    }
    do {
        let value = try JSONValue.parse(text)
        let violations = schema.validate(value)
        XCTAssertEqual(violations.map(\.description), [], "\(label): \(text)")
    } catch {
        XCTFail("\(label): complete output does not parse: \(error) — \(text)")
    }
}
