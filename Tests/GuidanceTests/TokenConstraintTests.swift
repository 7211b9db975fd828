// Token masks against brute force (every token's bytes simulated on the NFA, not the DFA the
// masks come from), stop and special tokens, forced tokens, advance errors, logits masking,
// concurrent use of one constraint, and the DFA size limit.
import DataSchema
import Foundation
@testable import Guidance
import ModelAssets
import XCTest

final class TokenConstraintTests: XCTestCase {
    static let eventSchema = #"""
    {"type":"object","properties":{"title":{"type":"string","maxLength":12},"day":{"enum":["mon","tue"]},
     "minutes":{"type":["integer","null"],"minimum":0,"maximum":300},"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,4}$"},"maxItems":2},
     "ok":{"type":"boolean"},"score":{"type":"number","minimum":0,"maximum":1}},
     "required":["title","day","minutes"]}
    """#

    /// NFA states after `bytes` from the start (epsilon-closed); empty when the bytes leave the grammar.
    func nfaStates(_ nfa: ByteNFA, from seed: [Int32], _ bytes: [UInt8]) -> [Int32] {
        var mark = [UInt32](repeating: 0, count: nfa.count)
        var stack: [Int32] = []
        var stamp: UInt32 = 1
        var current = nfa.closure(seed, mark: &mark, stamp: stamp, stack: &stack)
        for b in bytes {
            var next: [Int32] = []
            for s in current {
                for k in Int(nfa.edgeStart[Int(s)])..<Int(nfa.edgeStart[Int(s) + 1]) where nfa.edgeLo[k] <= b && b <= nfa.edgeHi[k] {
                    next.append(nfa.edgeTo[k])
                }
            }
            stamp += 1
            current = nfa.closure(next, mark: &mark, stamp: stamp, stack: &stack)
            if current.isEmpty { break }
        }
        return current
    }

    /// Walks a few paths and, at every state, compares the mask with brute force over all tokens.
    func checkMasksAgainstBruteForce(_ g: Grammar, _ vocabulary: TokenVocabulary, walks: Int, steps: Int, maxDFAStates: Int = 1_000_000) throws {
        let constraint = TokenConstraint(grammar: g, vocabulary: vocabulary, maxDFAStates: maxDFAStates)
        for seed in 0..<UInt64(walks) {
            var rng = SeededGenerator(seed: seed)
            var state = constraint.start()
            var prefix: [UInt8] = []
            for _ in 0..<steps {
                let mask = constraint.allowedTokens(state)
                let here = nfaStates(g.nfa, from: [g.nfa.start], prefix)
                XCTAssertFalse(here.isEmpty)
                let complete = here.contains(g.nfa.accept)
                XCTAssertEqual(state.isComplete, complete)
                for id in 0..<vocabulary.count {
                    let expected: Bool
                    if vocabulary.isStop(id) {
                        expected = complete && maxDFAStates == 1_000_000
                    } else if let bytes = vocabulary.bytes(of: id) {
                        expected = !nfaStates(g.nfa, from: here, bytes).isEmpty
                    } else {
                        expected = false
                    }
                    if maxDFAStates < 1_000_000 {
                        // Past the DFA limit tokens may be masked out, never wrongly allowed.
                        if mask.contains(id) && !vocabulary.isStop(id) { XCTAssertTrue(expected, "token \(id) after \(String(decoding: prefix, as: UTF8.self))") }
                    } else {
                        XCTAssertEqual(mask.contains(id), expected, "token \(id) \(vocabulary.bytes(of: id).map { String(decoding: $0, as: UTF8.self) } ?? "special") after \(String(decoding: prefix, as: UTF8.self))")
                    }
                    XCTAssertEqual(constraint.allows(id, in: state), mask.contains(id) && !vocabulary.isStop(id), "allows(\(id))")
                }
                let choices = mask.allowedTokens.filter { !vocabulary.isStop($0) }
                if choices.isEmpty { break }
                let token = choices[Int(rng.next() % UInt64(choices.count))]
                try state.advance(token: token)
                prefix += vocabulary.bytes(of: token)!
            }
        }
    }

    func testMasksMatchBruteForceOnSyntheticVocabulary() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 2500, seed: 11)
        try checkMasksAgainstBruteForce(try grammar(Self.eventSchema), vocabulary, walks: 4, steps: 40)
        try checkMasksAgainstBruteForce(try Grammar.regex(#"[a-f]{2,5}(-\d+)?|x.*y"#), vocabulary, walks: 3, steps: 12)
    }

    /// Long length windows: positions far from both ends share one mask (one trie walk), and
    /// every mask still equals brute force, near the ends included.
    func testStringPositionsShareMasksAndStayExact() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 1500, seed: 8)
        let text = #"{"type":"object","properties":{"a":{"type":"string","minLength":30,"maxLength":70},"b":{"type":"string","pattern":"^[a-z ]+$","maxLength":90}},"required":["a","b"]}"#
        try checkMasksAgainstBruteForce(try grammar(text), vocabulary, walks: 3, steps: 60)
        let constraint = TokenConstraint(grammar: try grammar(text), vocabulary: vocabulary)
        for seed in 0..<6 { _ = try Walker(constraint).walk(seed: UInt64(seed), maxSteps: 200, closingBias: 0.02, useForced: true) }
        let stats = constraint.statistics
        XCTAssertLessThan(stats.trieWalks * 2, stats.cachedMasks, "\(stats)")
    }

    func testMasksMatchBruteForceOnSmolLM2Vocabulary() throws {
        let tokenizer = try BPETokenizer.load(tokenizerJSON: repositoryRoot.appendingPathComponent("Tests/TokenizerTests/Fixtures/smollm2/tokenizer.json"))
        let vocabulary = try TokenVocabulary(tokenizer: tokenizer)
        XCTAssertEqual(vocabulary.count, 49152)
        XCTAssertEqual(vocabulary.stopTokens, [2])  // <|im_end|>, SmolLM2's eos
        XCTAssertEqual(vocabulary.usableCount, 49152 - 17)
        try checkMasksAgainstBruteForce(try grammar(Self.eventSchema), vocabulary, walks: 1, steps: 8)
    }

    func testDFAStateLimitOnlyMasksOut() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 1500, seed: 5)
        try checkMasksAgainstBruteForce(try grammar(Self.eventSchema), vocabulary, walks: 2, steps: 15, maxDFAStates: 40)
        let constraint = TokenConstraint(grammar: try grammar(Self.eventSchema), vocabulary: vocabulary, maxDFAStates: 40)
        for seed in 0..<4 {
            let result = try Walker(constraint).walk(seed: UInt64(seed), maxSteps: 60, closingBias: 0.3, useForced: false)
            XCTAssertTrue(try grammar(Self.eventSchema).isPrefix(bytes: result.bytes))
        }
        XCTAssertTrue(constraint.isExhausted)
    }

    func testStopAndSpecialTokens() throws {
        // ids: 0 stop, 1 special, then single bytes of "ab", and "b" again under another id.
        let vocabulary = try TokenVocabulary(tokens: [nil, nil, Array("a".utf8), Array("b".utf8), Array("ab".utf8), Array("b".utf8), []], stopTokens: [0])
        let constraint = TokenConstraint(grammar: try Grammar.regex("ab|abb"), vocabulary: vocabulary)
        var state = constraint.start()
        XCTAssertEqual(constraint.allowedTokens(state).allowedTokens, [2, 4])
        XCTAssertFalse(state.isComplete)
        XCTAssertThrowsError(try state.advance(token: 0))  // not complete yet
        XCTAssertThrowsError(try state.advance(token: 1))  // special
        XCTAssertThrowsError(try state.advance(token: 6))  // empty bytes: unusable
        try state.advance(token: 2)
        XCTAssertEqual(constraint.allowedTokens(state).allowedTokens, [3, 5])  // duplicate spellings both allowed
        try state.advance(token: 5)
        XCTAssertTrue(state.isComplete)
        XCTAssertEqual(constraint.allowedTokens(state).allowedTokens, [0, 3, 5])
        try state.advance(token: 3)
        XCTAssertEqual(constraint.allowedTokens(state).allowedTokens, [0])
        XCTAssertThrowsError(try state.advance(token: 3)) { error in
            XCTAssertTrue("\(error.localizedDescription)".contains("cannot continue the output"), "\(error)")
        }
        try state.advance(token: 0)
        XCTAssertTrue(state.isFinished)
        XCTAssertTrue(constraint.allowedTokens(state).isEmpty)
        XCTAssertFalse(state.isDead)
        XCTAssertThrowsError(try state.advance(token: 2))
    }

    func testDeadWhenTheVocabularyCannotSpellTheGrammar() throws {
        let vocabulary = try TokenVocabulary(tokens: [nil, Array("a".utf8)], stopTokens: [0])
        let constraint = TokenConstraint(grammar: try Grammar.regex("ab"), vocabulary: vocabulary)
        var state = constraint.start()
        XCTAssertFalse(state.isDead)
        try state.advance(token: 1)
        XCTAssertTrue(state.isDead)
        XCTAssertFalse(state.isComplete)
    }

    func testForcedTokens() throws {
        let base = ["{", "\"", "n", "a", "m", "e", ":", "x", "1", "}", "{\"", "name", "\":\"", "\":", "na"]
        let schemaText = #"{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"]}"#
        func forced(_ extra: [String]) throws -> [String] {
            let tokens: [[UInt8]?] = [nil] + (base + extra).map { Array($0.utf8) }
            let vocabulary = try TokenVocabulary(tokens: tokens, stopTokens: [0])
            let constraint = TokenConstraint(grammar: try grammar(schemaText), vocabulary: vocabulary)
            var state = constraint.start()
            let ids = constraint.forcedTokens(state)
            try state.advance(tokens: ids)  // each forced token is allowed in turn
            return ids.map { String(decoding: vocabulary.bytes(of: $0)!, as: UTF8.self) }
        }
        // The forced bytes are {"name":" ; the longest tokens within them, in order.
        XCTAssertEqual(try forced([]), ["{\"", "name", "\":\""])
        // A token reaching past the forced bytes exists: the last one is left to the model.
        XCTAssertEqual(try forced(["\":\"x"]), ["{\"", "name"])
        // Nothing is forced where the text may end or branch.
        let vocabulary = try TokenVocabulary(tokens: [nil] + ["a", "b", "ab", "abb"].map { Array($0.utf8) }, stopTokens: [0])
        let c = TokenConstraint(grammar: try Grammar.choice(["ab", "abb"]), vocabulary: vocabulary)
        var s = c.start()
        // Forced "ab", but "abb" continues past it: nothing forced, then after "ab" the end is possible.
        XCTAssertEqual(c.forcedTokens(s), [])
        try s.advance(token: 3)
        XCTAssertEqual(c.forcedTokens(s), [])
        // A single allowed token is forced even when bytes branch.
        let one = try TokenVocabulary(tokens: [nil, Array("xy".utf8), Array("z".utf8)], stopTokens: [0])
        let c2 = TokenConstraint(grammar: try Grammar.regex("xy(a|z)"), vocabulary: one)
        var s2 = c2.start()
        XCTAssertEqual(c2.forcedTokens(s2), [1])
        try s2.advance(token: 1)
        XCTAssertEqual(c2.forcedTokens(s2), [2])
    }

    func testLogitsMasking() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 1200, seed: 2)
        let constraint = TokenConstraint(grammar: try Grammar.choice(["true", "false"]), vocabulary: vocabulary)
        let state = constraint.start()
        var logits = (0..<1300).map { Float($0) * 0.01 }
        let original = logits
        constraint.mask(logits: &logits, state)
        let mask = constraint.allowedTokens(state)
        XCTAssertGreaterThan(mask.allowedCount, 1)
        for i in 0..<logits.count {
            if i < vocabulary.count && mask.contains(i) {
                XCTAssertEqual(logits[i], original[i])
                XCTAssertTrue(vocabulary.bytes(of: i).map { "true".utf8.starts(with: $0) || "false".utf8.starts(with: $0) } ?? false)
            } else {
                XCTAssertEqual(logits[i], -.infinity, "\(i)")
            }
        }
    }

    func testOneConstraintServesConcurrentGenerations() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 4000, seed: 9)
        let g = try grammar(Self.eventSchema)
        let serial = TokenConstraint(grammar: g, vocabulary: vocabulary)
        let expected = try (0..<8).map { try Walker(serial).walk(seed: UInt64($0), maxSteps: 200, closingBias: 0.3, useForced: $0 % 2 == 0).bytes }
        let shared = TokenConstraint(grammar: g, vocabulary: vocabulary)
        let results = Results(count: 8)
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            let r = try? Walker(shared).walk(seed: UInt64(i), maxSteps: 200, closingBias: 0.3, useForced: i % 2 == 0).bytes
            results.set(i, r)
        }
        for i in 0..<8 { XCTAssertEqual(results.get(i), expected[i], "walk \(i)") }
    }

    final class Results: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [[UInt8]?]
        init(count: Int) { values = Array(repeating: nil, count: count) }
        func set(_ i: Int, _ v: [UInt8]?) { lock.lock(); values[i] = v; lock.unlock() }
        func get(_ i: Int) -> [UInt8]? { lock.lock(); defer { lock.unlock() }; return values[i] }
    }
}

final class PatternCharacterTests: XCTestCase {
    /// The validator matches patterns per character (grapheme cluster): "e" followed by U+0301
    /// is one character "é", which "^e.$" does not match. Generation must never offer the mark.
    func testPatternStringsNeverTakeCombiningMarks() throws {
        let s = try schema(#"{"type":"string","pattern":"^e.$"}"#)
        XCTAssertFalse(s.validate(.string("e\u{301}")).isEmpty, "the premise: the validator rejects e + U+0301")
        XCTAssertTrue(s.validate(.string("ex")).isEmpty)
        let words = ["\"", "e", "\u{301}", "x", "\u{200D}", "\u{1F3FB}", "\u{212B}", "日"]
        let vocabulary = try TokenVocabulary(tokens: [nil] + words.map { Array($0.utf8) }, stopTokens: [0])
        let constraint = TokenConstraint(grammar: try Grammar.jsonSchema(s), vocabulary: vocabulary)
        var state = constraint.start()
        try state.advance(tokens: [1, 2])  // "e
        let allowed = constraint.allowedTokens(state).allowedTokens.map { words[$0 - 1] }
        XCTAssertEqual(allowed, ["e", "x"], "only printable ASCII stands for '.' in a pattern string")
        // Outside patterns any scalar may be generated.
        let free = TokenConstraint(grammar: try grammar(#"{"type":"string"}"#), vocabulary: vocabulary)
        var s2 = free.start()
        try s2.advance(tokens: [1, 2])
        XCTAssertEqual(free.allowedTokens(s2).allowedCount, words.count)
    }
}
