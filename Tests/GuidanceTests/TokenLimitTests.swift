// Closing within the token limit: a state's distance to completion is the shortest completion
// (checked by breadth-first search over single-byte tokens), and walks that keep to the
// limit-aware masks end complete and schema-valid at every limit from the shortest possible
// up, for the repository's schemas and the random corpus, while the plain masks under the same
// limits leave replies cut off.
import DataSchema
import Foundation
@testable import Guidance
import XCTest

final class TokenLimitTests: XCTestCase {
    /// The shortest completion of `state` in bytes, by breadth-first search over the DFA with
    /// the vocabulary's single-byte tokens; nil past `cap`.
    func shortestCompletion(_ constraint: TokenConstraint, from state: ConstraintState, cap: Int = 400) throws -> Int? {
        let vocabulary = constraint.vocabulary
        let singles = (0..<vocabulary.count).filter { vocabulary.bytes(of: $0)?.count == 1 }
        var frontier = [state]
        var seen: Set<Int32> = [state.dfaState]
        for level in 0...cap {
            if frontier.contains(where: { $0.isComplete }) { return level }
            var next: [ConstraintState] = []
            for s in frontier {
                for t in singles where constraint.allows(t, in: s) {
                    var n = s
                    try n.advance(token: t)
                    if seen.insert(n.dfaState).inserted { next.append(n) }
                }
            }
            frontier = next
        }
        return nil
    }

    func testDistanceIsTheShortestCompletion() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 1200, seed: 3)
        let cases: [(Grammar, Int)] = [
            (try Grammar.regex("ab|abb"), 2),
            (try Grammar.regex("x[0-9]{3,5}(-y)?"), 4),
            (try grammar(#"{"type":"object","properties":{"a":{"type":"string","minLength":3}},"required":["a"]}"#), #"{"a":"xxx"}"#.utf8.count),
            (try grammar(#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["b"]}"#), #"{"b":true}"#.utf8.count),
        ]
        for (g, expected) in cases {
            let c = TokenConstraint(grammar: g, vocabulary: vocabulary)
            XCTAssertEqual(c.start().distanceToCompletion, expected, g.summary)
            let tokens = c.start().tokensToCompletion
            XCTAssertLessThanOrEqual(tokens, expected, "no more tokens than bytes: \(g.summary)")
            XCTAssertGreaterThanOrEqual(tokens, (expected + vocabulary.maxTokenLength - 1) / vocabulary.maxTokenLength, g.summary)
            XCTAssertEqual(try shortestCompletion(c, from: c.start()), expected, g.summary)
        }
        // Along random walks through the repository's schemas, every state's distance equals the search's.
        for (k, item) in try repositorySchemas().prefix(6).enumerated() {
            let c = TokenConstraint(grammar: try Grammar.jsonSchema(item.schema), vocabulary: vocabulary)
            var rng = SeededGenerator(seed: UInt64(k))
            var state = c.start()
            for _ in 0..<25 {
                XCTAssertEqual(try shortestCompletion(c, from: state), state.distanceToCompletion, item.name)
                let choices = c.allowedTokens(state).allowedTokens.filter { !vocabulary.isStop($0) }
                if choices.isEmpty { break }
                try state.advance(token: choices[Int(rng.next() % UInt64(choices.count))])
            }
        }
    }

    /// Walks that never choose a closing token on purpose and stop only now and then: under the
    /// limit-aware masks each one ends complete and valid within `limit` tokens.
    func checkLimits(_ schemas: [(name: String, schema: JSONSchema, grammar: Grammar)], vocabulary: TokenVocabulary, extra: [Int], walks: Int) throws -> (budgeted: Int, plainCutOff: Int) {
        var budgeted = 0, plainCutOff = 0
        for (k, item) in schemas.enumerated() {
            let constraint = TokenConstraint(grammar: item.grammar, vocabulary: vocabulary)
            let walker = Walker(constraint)
            let shortest = constraint.start().tokensToCompletion
            XCTAssertLessThanOrEqual(shortest, constraint.start().distanceToCompletion, item.name)
            for e in extra {
                let limit = shortest + 1 + e  // the stop token needs one step of the limit too
                for w in 0..<walks {
                    let seed = UInt64(k * 10_000 + e * 100 + w)
                    let result = try walker.walk(seed: seed, maxSteps: limit, closingBias: 0, stopChance: 0.05, useForced: w % 2 == 1, budgeted: true)
                    checkWalk(result, grammar: item.grammar, schema: item.schema, label: "\(item.name) limit \(limit) walk \(w)")
                    XCTAssertTrue(result.stopped && result.complete, "\(item.name): limit \(limit) (shortest completion \(shortest) tokens), walk \(w) was cut off: \(String(decoding: result.bytes, as: UTF8.self))")
                    XCTAssertLessThanOrEqual(result.tokens.count, limit - 1)
                    budgeted += 1
                    let plain = try walker.walk(seed: seed, maxSteps: limit, closingBias: 0, stopChance: 0.05, useForced: w % 2 == 1)
                    if !plain.stopped { plainCutOff += 1 }
                }
            }
        }
        return (budgeted, plainCutOff)
    }

    func testRepositorySchemasCloseWithinTheLimit() throws {
        let schemas = try repositorySchemas().map { ($0.name, $0.schema, try Grammar.jsonSchema($0.schema)) }
        let vocabulary = TokenVocabulary.synthetic(size: 5000, seed: 1)
        let (budgeted, plainCutOff) = try checkLimits(schemas, vocabulary: vocabulary, extra: [0, 1, 4, 20, 80], walks: 4)
        print("repository schemas: \(budgeted) limit-aware walks all complete; the plain masks left \(plainCutOff) of the same walks cut off")
        XCTAssertGreaterThan(plainCutOff, budgeted / 4, "the limits should be tight enough that plain masks get cut off")
    }

    func testRandomSchemasCloseWithinTheLimit() throws {
        let (schemas, _) = try SoundnessTests.randomCorpus()
        let vocabulary = TokenVocabulary.synthetic(size: 3000, seed: 4)
        let (budgeted, plainCutOff) = try checkLimits(Array(schemas.prefix(150)), vocabulary: vocabulary, extra: [0, 3, 30], walks: 2)
        print("random schemas: \(budgeted) limit-aware walks all complete; the plain masks left \(plainCutOff) cut off")
        XCTAssertGreaterThan(plainCutOff, budgeted / 4)
    }

    func testNoLimitNarrowingFarFromTheLimit() throws {
        let vocabulary = TokenVocabulary.synthetic(size: 2000, seed: 6)
        let c = TokenConstraint(grammar: try grammar(TokenConstraintTests.eventSchema), vocabulary: vocabulary)
        let start = c.start()
        var s = start
        let (far, narrowedFar) = c.allowedTokens(s, remaining: 10_000)
        XCTAssertFalse(narrowedFar)
        XCTAssertEqual(far.words, c.allowedTokens(s).words)
        // Too near to complete at all: the plain mask (the reply will be reported incomplete).
        let (tooNear, narrowedTooNear) = c.allowedTokens(s, remaining: s.tokensToCompletion)
        XCTAssertFalse(narrowedTooNear)
        XCTAssertEqual(tooNear.words, c.allowedTokens(s).words)
        // Inside the title string with exactly enough left: a strict subset (no more letters, the
        // string must close), every token of which brings completion one token nearer at least.
        try s.advance(tokens: c.forcedTokens(s))  // {"title":"
        XCTAssertTrue(c.forcedTokens(s).isEmpty, "the title's first character is the model's choice")
        XCTAssertNotEqual(s.distanceToCompletion, start.distanceToCompletion)
        let (tight, narrowed) = c.allowedTokens(s, remaining: s.tokensToCompletion + 1)
        XCTAssertTrue(narrowed)
        XCTAssertLessThan(tight.allowedCount, c.allowedTokens(s).allowedCount)
        for t in tight.allowedTokens {
            var n = s
            try n.advance(token: t)
            XCTAssertLessThanOrEqual(n.tokensToCompletion, s.tokensToCompletion - 1)
        }
    }
}
