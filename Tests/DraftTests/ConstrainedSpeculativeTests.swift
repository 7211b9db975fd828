// Speculative decoding under a constraint is lossless: greedy replies identical to constrained
// decoding without a draft (JSON schemas, random schemas with $defs, choice lists, regular
// expressions; every draft kind, γ and token budget), and sampled
// replies distributed as the constrained target's (chi-square against the exact distribution
// enumerated through the masks, with forced tokens). Prompt lookup proposes what followed.
import DataSchema
import Distillation
import Foundation
import Guidance
@testable import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class ConstrainedSpeculativeTests: XCTestCase {
    struct Setup {
        var base: BaseModel
        var target: InferenceModel
        var library: ConstraintLibrary
        var drafters: [(name: String, drafter: Drafter)]
        var prompt: [Int]
    }

    func setup(_ name: String = #function) throws -> Setup {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let target = InferenceModel(base: base.weights)
        let other = try DraftModel.fromFile(try TinyAssets.writeModel(in: dir, seed: 7, name: "small", layers: 1), base: base,
                                            freezeEmbeddings: false, vocabulary: nil)
        let sub = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: nil)
        let letters = Array(0..<3) + "abcdefghijklmnopqrstuvwxyz0123456789{}\":,".compactMap { base.tokenizer.tokenId(String($0)) }
        let restricted = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: Array(Set(letters)).sorted())
        let same = try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: nil)
        // the prompt holds spans a reply may copy (prompt lookup has something to find)
        let prompt = base.tokenizer.encode("<|im_start|>user\nthe event: {\"title\":\"abc\",\"day\":\"tue\"} abcabc<|im_end|>\n<|im_start|>assistant\n")
        return Setup(base: base, target: target, library: try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds),
                     drafters: [("other model", .model(DraftEngine(try other.definition()))), ("first block", .model(DraftEngine(try sub.definition()))),
                                ("restricted head", .model(DraftEngine(try restricted.definition()))),
                                ("target itself", .model(DraftEngine(try same.definition()))),
                                ("ngram 1-3", .ngram(NGramDraft(minimum: 1, maximum: 3))), ("ngram default", .ngram(NGramDraft()))],
                     prompt: prompt)
    }

    func constraints(_ s: Setup) throws -> [(String, TokenConstraint)] {
        var out: [(String, TokenConstraint)] = []
        for text in GuidedGenerationSchemas.all {
            out.append((text, try s.library.jsonSchema(try JSONSchema(try JSONValue.parse(text)))))
        }
        var random = RandomSchemas(seed: 77)
        for _ in 0..<6 {
            let text = random.document()
            out.append((text, try s.library.jsonSchema(try JSONSchema(try JSONValue.parse(text)))))
        }
        out.append(("choice", try s.library.choice(["abc", "abd", "bcd", "tuesday", "the event"])))
        out.append(("regex", try s.library.regex("[a-f]{2,9}( [0-9]+)?")))
        return out
    }

    func testConstrainedGreedyRepliesAreIdenticalWithAndWithoutTheDraft() throws {
        let s = try setup()
        try InferenceModel.$promptAttention.withValue(.rows) {  // one-row arithmetic in every pass, however many forced rows
            for (name, constraint) in try constraints(s) {
                for budget in [3, 9, 160] {
                    do {  // the constraint's own stop tokens (it allows them where the text is whole)
                        let stops = s.base.stopTokenIds
                        let request = GenerationRequest(prompt: s.prompt, maxNewTokens: budget, stopTokens: stops, constraint: constraint)
                        let (reference, plain) = Generator.generate(s.target, request)
                        for (draftName, drafter) in s.drafters {
                            for gamma in [1, 4] {
                                let (tokens, spec) = SpeculativeDecoder(target: s.target, drafter: drafter, draftTokens: gamma).generate(request)
                                let what = "\(draftName), gamma \(gamma), budget \(budget), constraint \(name)"
                                XCTAssertEqual(tokens, reference, what)
                                XCTAssertEqual(spec.generation.stoppedAtEndOfTurn, plain.stoppedAtEndOfTurn, what)
                                XCTAssertEqual(spec.generation.incomplete, plain.incomplete, what)
                                XCTAssertEqual(spec.generation.closedByLimit, plain.closedByLimit, what)
                                XCTAssertEqual(spec.generation.forcedTokens, plain.forcedTokens, what)
                                if draftName == "target itself" {
                                    XCTAssertEqual(spec.generation.draftTokensAccepted, spec.generation.draftTokensProposed, what)
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A reply without a drafter, driven round by round as a server drives its rows (the chosen
    /// token and the tokens forced after it fed in one pass), is the generation loop's reply.
    func testRoundsWithoutADraftAreTheGenerationLoop() throws {
        let s = try setup()
        try InferenceModel.$promptAttention.withValue(.rows) {
            for (name, constraint) in try constraints(s) + [("none", nil)] as [(String, TokenConstraint?)] {
                for budget in [3, 160] {
                    let request = GenerationRequest(prompt: s.prompt, maxNewTokens: budget, stopTokens: s.base.stopTokenIds,
                                                    sampling: SamplingOptions(temperature: 0.9), seed: 5, constraint: constraint)
                    let (reference, plain) = Generator.generate(s.target, request)
                    let cache = s.target.makeCache()
                    _ = s.target.forward(Array(s.prompt.dropLast()), cache: cache)
                    var reply = SpeculativeReply(request, drafter: nil, draftTokens: 1)
                    var logits: [Float] = []
                    while !reply.isFinished {
                        let (tokens, rows) = reply.prepare(cached: cache.count)
                        XCTAssertEqual(rows, [tokens.count - 1], "one choice a round")
                        s.target.forward(tokens, cache: cache, logitsAt: rows, into: &logits)
                        cache.truncate(to: logits.withUnsafeMutableBufferPointer { reply.accept($0, onToken: { _ in true }) })
                    }
                    XCTAssertEqual(reply.out, reference, "\(name), budget \(budget)")
                    XCTAssertEqual(reply.stats.generation.incomplete, plain.incomplete, "\(name), budget \(budget)")
                    XCTAssertEqual(reply.stats.generation.forcedTokens, plain.forcedTokens, "\(name), budget \(budget)")
                }
            }
        }
    }

    /// The target as its own draft under a schema: every proposal kept, forced tokens ride along,
    /// so passes are fewer than the plain generator's choices.
    func testForcedTokensRideAlongWithoutDrafting() throws {
        let s = try setup()
        let constraint = try s.library.jsonSchema(try JSONSchema(try JSONValue.parse(GuidedGenerationSchemas.all[0])))
        let request = GenerationRequest(prompt: s.prompt, maxNewTokens: 160, stopTokens: s.base.stopTokenIds, constraint: constraint)
        let (reference, plain) = Generator.generate(s.target, request)
        let (tokens, spec) = SpeculativeDecoder(target: s.target, drafter: s.drafters[3].drafter, draftTokens: 4).generate(request)
        XCTAssertEqual(tokens, reference)
        XCTAssertGreaterThan(plain.forcedTokens, 0)
        XCTAssertEqual(spec.generation.forcedTokens, plain.forcedTokens)
        XCTAssertEqual(spec.generation.draftTokensAccepted, spec.generation.draftTokensProposed, "the target proposes what it chooses")
        // the plain generator chooses once per pass; a pass here checks 4 choices and adds a fifth
        let choices = plain.targetForwardCalls  // the first from the prefill's logits
        XCTAssertLessThanOrEqual(spec.generation.targetForwardCalls - 1, (choices + 4) / 5 + 1)
    }

    // MARK: the sampled distribution

    /// The constrained target's exact distribution over whole replies (ending at a stop token or
    /// the budget), enumerated through the same masks, limits and forced tokens as Generator.
    func exactReplies(_ s: Setup, _ constraint: TokenConstraint, sampling: SamplingOptions, maxNew: Int) -> [[Int]: Double] {
        var result: [[Int]: Double] = [:]
        func walk(_ reply: [Int], _ guided: GuidedReply, _ probability: Double) {
            if reply.count >= maxNew {
                result[reply, default: 0] += probability
                return
            }
            var logits = s.target.forward(s.prompt + reply, cache: s.target.makeCache())
            guard logits.withUnsafeMutableBufferPointer({ guided.mask($0, remaining: maxNew - reply.count) }) != nil else {
                result[reply, default: 0] += probability
                return
            }
            let p = Sampler.probabilities(logits[...], sampling)
            for (v, pv) in p.enumerated() where pv > 0 {
                var g = guided
                let forced = g.take(v, room: maxNew - reply.count - 1)
                if s.base.stopTokenIds.contains(v) {
                    result[reply, default: 0] += probability * Double(pv)
                } else {
                    walk(reply + [v] + forced, g, probability * Double(pv))
                }
            }
        }
        walk([], GuidedReply(GenerationRequest(prompt: s.prompt, maxNewTokens: maxNew, stopTokens: s.base.stopTokenIds, constraint: constraint))!, 1)
        return result
    }

    func testSampledConstrainedRepliesFollowTheConstrainedTarget() throws {
        let s = try setup()
        let cases: [(String, TokenConstraint, SamplingOptions)] = [
            ("choice with forced tokens", try s.library.choice(["abc", "abd", "bcd", "bce", "cab"]), SamplingOptions(temperature: 1)),
            ("two letters", try s.library.regex("[a-f][a-f]"), SamplingOptions(temperature: 0.8, topK: 4)),
        ]
        let n = 3000
        for (name, constraint, sampling) in cases {
            let exact = exactReplies(s, constraint, sampling: sampling, maxNew: 6)
            var keys: [[Int]: Int] = [:]
            var probabilities: [Int: Double] = [:]
            for (reply, p) in exact {
                keys[reply] = keys.count
                probabilities[keys[reply]!] = p
            }
            XCTAssertEqual(exact.values.reduce(0, +), 1, accuracy: 1e-4)
            for (draftName, drafter) in s.drafters where draftName != "target itself" && draftName != "ngram default" {
                for gamma in [1, 3] {
                    let decoder = SpeculativeDecoder(target: s.target, drafter: drafter, draftTokens: gamma)
                    var counts: [Int: Int] = [:]
                    for seed in 0..<n {
                        let request = GenerationRequest(prompt: s.prompt, maxNewTokens: 6, stopTokens: s.base.stopTokenIds, sampling: sampling,
                                                        seed: UInt64(seed) &* 0x9E37_79B9 &+ 3, constraint: constraint)
                        let (tokens, _) = decoder.generate(request)
                        counts[keys[tokens] ?? -1, default: 0] += 1
                    }
                    let (stat, df) = ChiSquare.statistic(counts: counts, probabilities: probabilities, n: n)
                    XCTAssertLessThan(stat, ChiSquare.critical(df: df), "\(name), \(draftName), gamma \(gamma): chi2 \(stat), df \(df)")
                    XCTAssertNil(counts[-1], "\(name), \(draftName): a reply the constrained target cannot give")
                }
            }
            // control: the unconstrained target's first letter is told apart from the constrained one
            var control: [Int: Int] = [:]
            for seed in 0..<n {
                let request = GenerationRequest(prompt: s.prompt, maxNewTokens: 6, stopTokens: s.base.stopTokenIds, sampling: sampling,
                                                seed: UInt64(seed) &+ 11)
                let (tokens, _) = Generator.generate(s.target, request)
                control[keys[tokens] ?? -1, default: 0] += 1
            }
            let (stat, df) = ChiSquare.statistic(counts: control, probabilities: probabilities, n: n)
            XCTAssertGreaterThan(stat, ChiSquare.critical(df: df), "\(name): the test should reject unconstrained replies")
        }
    }

    // MARK: prompt lookup

    func testPromptLookupProposesWhatFollowedTheLongestSuffix() {
        let draft = NGramDraft(minimum: 1, maximum: 3)
        XCTAssertEqual(draft.propose(after: [1, 2, 3, 9, 1, 2, 3]), 9, "the suffix 1 2 3 was followed by 9")
        XCTAssertEqual(draft.propose(after: [1, 2, 3, 9, 5, 2, 3, 8, 7, 2, 3]), 8, "the latest occurrence of 2 3 wins")
        XCTAssertEqual(draft.propose(after: [4, 2, 3, 9, 7, 3, 5, 3]), 5, "one-token suffix, latest occurrence")
        XCTAssertNil(draft.propose(after: [1, 2, 5, 9, 1, 2, 3]), "3 never occurred before")
        XCTAssertEqual(NGramDraft(minimum: 2, maximum: 3).propose(after: [1, 2, 5, 9, 7, 3]), nil, "no two-token suffix occurs earlier")
        XCTAssertEqual(NGramDraft(minimum: 2, maximum: 4).propose(after: [6, 1, 2, 3, 4, 8, 1, 2, 3, 4]), 8)
        XCTAssertEqual(draft.propose(after: [7]), nil)
        XCTAssertEqual(draft.propose(after: [7, 7]), 7)
    }
}
