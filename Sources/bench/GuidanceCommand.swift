// `bench guidance`: constrained-decoding costs: grammar compile time per schema, and per generated token the
// time to get the token mask (cached per DFA state; a new state walks the vocabulary trie)
// and the whole constrained step (forced tokens + mask + advance), p50/p90/p99/max and mean over
// seeded random walks, the first walk's mean alone (a fresh constraint: every new state a trie
// walk), with the share of tokens that were forced. Vocabularies: a GGUF model's
// tokenizer (--model) and/or a synthetic byte-level one (--synthetic-vocabulary N).
import ArgumentParser
import DataSchema
import Dispatch
import Foundation
import Guidance
import ModelAssets

struct GuidanceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "guidance",
        abstract: "Time grammar compilation and per-token masks for guided (schema-constrained) generation.")

    @Option(help: "A GGUF model whose tokenizer gives the vocabulary (SmolLM2-135M-Instruct.Q4_1.gguf: 49,152 tokens).")
    var model: String?
    @Option(parsing: .upToNextOption, help: "Sizes of synthetic byte-level vocabularies to time (default 128000 when no --model).")
    var syntheticVocabulary: [Int] = []
    @Option(parsing: .upToNextOption, help: "JSONL data files whose response_format and tool schemas are timed (default: examples/extraction and examples/tool-calling train.jsonl, when present).")
    var data: [String] = []
    @Option(help: "Random walks per schema.") var walks = 40
    @Option(help: "Token limit per walk.") var maxSteps = 300
    @Option(help: "Seed of the walks.") var seed: UInt64 = 1
    @Option(help: "Chance that a step picks among allowed tokens holding '\"', ']' or '}' (so walks finish strings); 0 is uniform.")
    var closingBias = 0.3

    func validate() throws {
        guard walks > 0, maxSteps > 0 else { throw ValidationError("--walks and --max-steps must be positive") }
        guard (0...1).contains(closingBias) else { throw ValidationError("--closing-bias is a probability, 0...1") }
        for n in syntheticVocabulary where n < 1024 { throw ValidationError("--synthetic-vocabulary needs at least 1024 tokens, got \(n)") }
    }

    func run() throws {
        let schemas = try loadSchemas()
        var vocabularies: [(name: String, build: () throws -> TokenVocabulary)] = []
        if let model {
            vocabularies.append(("\(URL(fileURLWithPath: model).lastPathComponent)", {
                let tokenizer = try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: model)))
                return try TokenVocabulary(tokenizer: tokenizer)
            }))
        }
        let sizes = syntheticVocabulary.isEmpty && model == nil ? [128_000] : syntheticVocabulary
        for n in sizes { vocabularies.append(("synthetic \(n)", { TokenVocabulary.synthetic(size: n, seed: 1) })) }

        print("schemas: \(schemas.count); \(walks) walks per schema of at most \(maxSteps) tokens; closing bias \(closingBias); seed \(seed)")
        print("compile: median of 7 Grammar.jsonSchema calls. mask: allowedTokens at every step (cached per DFA state);")
        print("walks: the calls that computed a new mask (a walk of the vocabulary trie). step: allowedTokens + forcedTokens")
        print("+ advance, per token (forced tokens are appended together and share their step's time).")
        for (name, build) in vocabularies {
            let t0 = now()
            let vocabulary = try build()
            let buildMs = Double(now() - t0) / 1e6
            print("")
            print("vocabulary \(name): \(vocabulary.count) tokens, \(vocabulary.usableCount) usable, longest \(vocabulary.maxTokenLength) bytes, trie of \(vocabulary.trieNodeCount) nodes; built in \(format(buildMs)) ms")
            print(pad("schema", 34) + pad("compile", 10) + pad("states", 8) + pad("tokens", 8) + pad("forced", 8)
                  + pad("mask p50", 10) + pad("p90", 10) + pad("p99", 10) + pad("max", 10) + pad("mean", 10) + pad("cold mean", 10)
                  + pad("step p50", 10) + pad("p99", 10)
                  + pad("walks", 10) + pad("walk: mean", 11) + pad("max", 10) + pad("complete", 9))
            var allMask: [UInt64] = [], allStep: [UInt64] = [], allMisses: [UInt64] = [], allCold: [UInt64] = [], allForced = 0, allTokens = 0
            var compileTimes: [Double] = []
            for (label, schema) in schemas {
                var times: [UInt64] = []
                var grammar: Grammar?
                for _ in 0..<7 {
                    let c0 = now()
                    grammar = try Grammar.jsonSchema(schema)
                    times.append(now() - c0)
                }
                let compileMs = Double(times.sorted()[3]) / 1e6
                compileTimes.append(compileMs)
                let constraint = TokenConstraint(grammar: grammar!, vocabulary: vocabulary)
                let r = try walk(constraint)
                allMask += r.mask
                allCold += r.coldMask
                allStep += r.step
                allForced += r.forced
                allTokens += r.tokens
                print(pad(String(label.prefix(33)), 34) + pad(format(compileMs) + " ms", 10) + pad("\(grammar!.stateCount)", 8)
                      + pad("\(r.tokens)", 8) + pad(percent(r.forced, r.tokens), 8)
                      + pad(micro(percentile(r.mask, 0.5)), 10) + pad(micro(percentile(r.mask, 0.9)), 10) + pad(micro(percentile(r.mask, 0.99)), 10)
                      + pad(micro(r.mask.max() ?? 0), 10) + pad(micro(mean(r.mask)), 10) + pad(micro(mean(r.coldMask)), 10)
                      + pad(micro(percentile(r.step, 0.5)), 10) + pad(micro(percentile(r.step, 0.99)), 10)
                      + pad("\(r.misses.count)", 10) + pad(micro(mean(r.misses)), 11) + pad(micro(r.misses.max() ?? 0), 10)
                      + pad("\(r.complete)/\(walks)", 9))
                allMisses += r.misses
            }
            print(pad("all schemas", 34) + pad(format(compileTimes.max() ?? 0) + " max", 10) + pad("", 8)
                  + pad("\(allTokens)", 8) + pad(percent(allForced, allTokens), 8)
                  + pad(micro(percentile(allMask, 0.5)), 10) + pad(micro(percentile(allMask, 0.9)), 10) + pad(micro(percentile(allMask, 0.99)), 10)
                  + pad(micro(allMask.max() ?? 0), 10) + pad(micro(mean(allMask)), 10) + pad(micro(mean(allCold)), 10)
                  + pad(micro(percentile(allStep, 0.5)), 10) + pad(micro(percentile(allStep, 0.99)), 10)
                  + pad("\(allMisses.count)", 10) + pad(micro(mean(allMisses)), 11) + pad(micro(allMisses.max() ?? 0), 10))
            // Applying a mask to a logits row of the vocabulary's size.
            let constraint = TokenConstraint(grammar: try Grammar.jsonSchema(schemas[0].schema), vocabulary: vocabulary)
            let state = constraint.start()
            var logits = [Float](repeating: 0.5, count: vocabulary.count)
            var applyTimes: [UInt64] = []
            for _ in 0..<200 {
                let a0 = now()
                constraint.mask(logits: &logits, state)
                applyTimes.append(now() - a0)
            }
            print("mask(logits:) over \(vocabulary.count) logits: p50 \(micro(percentile(applyTimes, 0.5)))")
            // Inside a JSON string: the widest walk (almost every token is allowed).
            let strings = TokenConstraint(grammar: try Grammar.jsonSchema(JSONSchema(.object([JSONMember(key: "type", value: .string("string"))]))), vocabulary: vocabulary)
            var forcedPath = strings.start()
            if let quote = (0..<vocabulary.count).first(where: { vocabulary.bytes(of: $0) == [0x22] }) { try forcedPath.advance(token: quote) }
            let w0 = now()
            let first = strings.allowedTokens(forcedPath)
            let w1 = now()
            var again: [UInt64] = []
            for _ in 0..<20 {
                let r0 = now()
                _ = strings.recomputeMask(forcedPath)
                again.append(now() - r0)
            }
            print("inside a string (\(first.allowedCount) tokens allowed): first mask \(micro(w1 - w0)), recomputed with its DFA rows built: p50 \(micro(percentile(again, 0.5)))")
        }
    }

    struct WalkTimes {
        var mask: [UInt64] = []
        /// Mask times of the first walk (the constraint fresh).
        var coldMask: [UInt64] = []
        /// Mask calls that walked the trie (a new mask).
        var misses: [UInt64] = []
        var step: [UInt64] = []
        var forced = 0
        var tokens = 0
        var complete = 0
    }

    /// Seeded walks: forced tokens appended; otherwise a token drawn among the allowed ones
    /// (the stop token with probability 1/2 when allowed).
    func walk(_ constraint: TokenConstraint) throws -> WalkTimes {
        let vocabulary = constraint.vocabulary
        var closing = [UInt64](repeating: 0, count: (vocabulary.count + 63) / 64)
        for id in 0..<vocabulary.count {
            if let b = vocabulary.bytes(of: id), b.contains(where: { $0 == 0x22 || $0 == 0x5D || $0 == 0x7D }) {
                closing[id >> 6] |= 1 << UInt64(id & 63)
            }
        }
        var out = WalkTimes()
        var rng = SeededGenerator(seed: seed)
        for walkIndex in 0..<walks {
            var state = constraint.start()
            var count = 0
            while count < maxSteps {
                let walksBefore = constraint.statistics.trieWalks
                let s0 = now()
                let mask = constraint.allowedTokens(state)
                let m1 = now()
                let forced = constraint.forcedTokens(state)
                let f1 = now()
                out.mask.append(m1 - s0)
                if walkIndex == 0 { out.coldMask.append(m1 - s0) }
                if constraint.statistics.trieWalks > walksBefore { out.misses.append(m1 - s0) }
                if !forced.isEmpty {
                    let a0 = now()
                    try state.advance(tokens: forced)
                    let elapsed = (f1 - s0) + (now() - a0)
                    out.step.append(elapsed / UInt64(forced.count))
                    out.forced += forced.count
                    count += forced.count
                    continue
                }
                if mask.isEmpty { break }
                let stop = vocabulary.stopTokens.first { mask.contains($0) }
                if let stop, rng.next() % 2 == 0 {
                    try state.advance(token: stop)
                    out.complete += 1
                    break
                }
                var words = mask.words
                if let stop { words[stop >> 6] &= ~(1 << UInt64(stop & 63)) }
                if Double(rng.next() % 1_000_000) / 1_000_000 < closingBias {
                    let narrowed = zip(words, closing).map { $0 & $1 }
                    if narrowed.contains(where: { $0 != 0 }) { words = narrowed }
                }
                let total = words.reduce(0) { $0 + $1.nonzeroBitCount }
                if total == 0, let stop {
                    try state.advance(token: stop)
                    out.complete += 1
                    break
                }
                let token = select(words, Int(rng.next() % UInt64(total)))
                let a0 = now()
                try state.advance(token: token)
                let a1 = now()
                out.step.append((f1 - s0) + (a1 - a0))
                count += 1
            }
            out.tokens += count
        }
        return out
    }

    func loadSchemas() throws -> [(name: String, schema: JSONSchema)] {
        var files = data
        if files.isEmpty {
            files = ["examples/extraction/train.jsonl", "examples/tool-calling/train.jsonl"].filter { FileManager.default.fileExists(atPath: $0) }
        }
        var out: [(name: String, schema: JSONSchema)] = []
        var seen = Set<String>()
        for file in files {
            let set = try DataReader.read(path: file, options: ReadOptions(skipInvalid: true))
            for sample in set.samples {
                for m in sample.messages {
                    if let f = m.responseFormat, seen.insert(f.schema.root.compactText).inserted {
                        out.append(("response_format \(f.name)", f.schema))
                    }
                    for t in m.tools {
                        if let p = t.parameters, seen.insert(p.root.compactText).inserted { out.append(("tool \(t.name)", p)) }
                    }
                }
            }
        }
        // Beside the examples: $refs, a pattern, bounds and nested arrays; bounded strings.
        let builtIn = [
            ("event ($ref, pattern, bounds)", ##"{"type":"object","properties":{"title":{"type":"string","minLength":1},"attendees":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/person"}},"priority":{"type":"integer","minimum":1,"maximum":5}},"required":["title","attendees"],"additionalProperties":false,"$defs":{"person":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","pattern":"^[^@]+@[^@]+$"}},"required":["name"]}}}"##),
            ("long string (maxLength 500)", #"{"type":"object","properties":{"body":{"type":"string","minLength":20,"maxLength":500}},"required":["body"]}"#),
            ("bounded strings (maxLength 40)", #"{"type":"object","properties":{"summary":{"type":"string","maxLength":40},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3},"score":{"type":"number","minimum":0,"maximum":1}},"required":["summary","tags","score"]}"#),
        ]
        for (name, text) in builtIn { out.append((name, try JSONSchema(try JSONValue.parse(text), context: name))) }
        return out
    }
}

fileprivate func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

fileprivate func select(_ words: [UInt64], _ k: Int) -> Int {
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
    return -1
}

fileprivate func percentile(_ values: [UInt64], _ p: Double) -> UInt64 {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))]
}

fileprivate func mean(_ values: [UInt64]) -> UInt64 { values.isEmpty ? 0 : values.reduce(0, +) / UInt64(values.count) }

fileprivate func micro(_ ns: UInt64) -> String {
    let us = Double(ns) / 1000
    return us < 10 ? String(format: "%.2f µs", us) : us < 1000 ? String(format: "%.0f µs", us) : String(format: "%.2f ms", us / 1000)
}

fileprivate func format(_ x: Double) -> String { x < 10 ? String(format: "%.2f", x) : String(format: "%.0f", x) }
fileprivate func percent(_ a: Int, _ b: Int) -> String { b == 0 ? "-" : String(format: "%.0f%%", 100 * Double(a) / Double(b)) }

