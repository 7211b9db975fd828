// Speculative decoding is lossless: greedy output identical to plain greedy decoding for drafts
// that agree always, sometimes (another model), or propose from a restricted head, for every γ and
// token budget; and sampled output distributed as the target's (chi-square against the exact
// target probabilities, with a control showing the test rejects the draft's own distribution).
import Autograd
import Distillation
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class SpeculativeDecodingTests: XCTestCase {
    struct Models {
        var base: BaseModel
        var target: InferenceModel
        var drafts: [(name: String, engine: DraftEngine)]
        var prompts: [[Int]]
    }

    func makeModels(_ name: String = #function) throws -> Models {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let target = InferenceModel(base: base.weights)
        let otherPath = try TinyAssets.writeModel(in: dir, seed: 7, name: "small", layers: 1)
        let other = try DraftModel.fromFile(otherPath, base: base, freezeEmbeddings: false, vocabulary: nil)
        // the target's own first block: often agrees
        let sub = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: nil)
        // a restricted head: bytes of lowercase letters, digits, and the specials
        let letters = Array(0..<3) + "abcdefghijklmnopqrstuvwxyz0123456789".compactMap { base.tokenizer.tokenId(String($0)) }
        let restricted = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: Array(Set(letters)).sorted())
        // the target itself: always agrees
        let same = try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: nil)
        let prompts = ["say alpha0", "say hotel2", "the thing", "x"].map {
            base.tokenizer.encode("<|im_start|>user\n\($0)<|im_end|>\n<|im_start|>assistant\n")
        } + [[5]]
        return Models(base: base, target: target,
                      drafts: [("other model", DraftEngine(try other.definition())), ("first block", DraftEngine(try sub.definition())),
                               ("restricted head", DraftEngine(try restricted.definition())), ("target itself", DraftEngine(try same.definition()))],
                      prompts: prompts)
    }

    func testGreedyOutputIsIdenticalWithAndWithoutTheDraft() throws {
        let m = try makeModels()
        for prompt in m.prompts {
            for budget in [1, 2, 7, 48] {
                // stop at the end-of-turn token as generate does, and also run without stops
                for stops in [m.base.stopTokenIds, []] {
                    let request = GenerationRequest(prompt: prompt, maxNewTokens: budget, stopTokens: stops)
                    let (reference, plainStats) = Generator.generate(m.target, request)
                    for (name, draft) in m.drafts {
                        for gamma in [1, 2, 3, 5, 8] {
                            let (tokens, stats) = SpeculativeDecoder(target: m.target, draft: draft, draftTokens: gamma).generate(request)
                            XCTAssertEqual(tokens, reference, "\(name), gamma \(gamma), budget \(budget), prompt \(prompt.count) tokens")
                            XCTAssertEqual(stats.generation.stoppedAtEndOfTurn, plainStats.stoppedAtEndOfTurn)
                            XCTAssertLessThanOrEqual(stats.generation.draftTokensAccepted, stats.generation.draftTokensProposed)
                            if name == "target itself" {
                                XCTAssertEqual(stats.generation.draftTokensAccepted, stats.generation.draftTokensProposed, "the target as its own draft is always accepted")
                                XCTAssertEqual(stats.alpha, stats.checkedPositions > 0 ? 1 : 0)
                            }
                        }
                    }
                }
            }
        }
    }

    func testTheTargetAsItsOwnDraftNeedsFewerTargetPasses() throws {
        let m = try makeModels()
        let request = GenerationRequest(prompt: m.prompts[0], maxNewTokens: 40, stopTokens: [])
        let (_, plain) = Generator.generate(m.target, request)
        let (_, spec) = SpeculativeDecoder(target: m.target, draft: m.drafts[3].engine, draftTokens: 4).generate(request)
        XCTAssertEqual(plain.targetForwardCalls, 40)
        XCTAssertEqual(spec.generation.targetForwardCalls, 1 + 8, "prefill + 40 tokens in passes of 5")
        XCTAssertEqual(spec.tokensPerTargetCall, 5)
    }

    // MARK: the sampled distribution

    func testFirstTokenDistributionIsTheTargets() throws {
        let m = try makeModels()
        let sampling = SamplingOptions(temperature: 0.7)
        let prompt = m.prompts[0]
        let p = Sampler.probabilities(m.target.forward(prompt, cache: m.target.makeCache())[...], sampling)
        var exact: [Int: Double] = [:]
        for (i, x) in p.enumerated() where x > 0 { exact[i] = Double(x) }
        let n = 4000
        for (name, draft) in m.drafts.prefix(3) {
            var counts: [Int: Int] = [:]
            let decoder = SpeculativeDecoder(target: m.target, draft: draft, draftTokens: 3)
            for s in 0..<n {
                let (tokens, _) = decoder.generate(GenerationRequest(prompt: prompt, maxNewTokens: 4, stopTokens: [], sampling: sampling,
                                                                     seed: UInt64(s) &* 0x9E37_79B9 &+ 1))
                counts[tokens[0], default: 0] += 1
            }
            let (stat, df) = ChiSquare.statistic(counts: counts, probabilities: exact, n: n)
            XCTAssertLessThan(stat, ChiSquare.critical(df: df), "\(name): first-token distribution differs from the target's (chi2 \(stat), df \(df))")
        }
        // control: the draft's own distribution is told apart by the same test
        let draft = m.drafts[0].engine
        let q = Sampler.probabilities(draft.fullLogits(draft.nextLogits(prompt, cache: draft.makeCache()))[...], sampling)
        var rng = SeededRNG(seed: 5)
        var counts: [Int: Int] = [:]
        for _ in 0..<n { counts[Sampler.draw(q, rng: &rng), default: 0] += 1 }
        let (stat, df) = ChiSquare.statistic(counts: counts, probabilities: exact, n: n)
        XCTAssertGreaterThan(stat, ChiSquare.critical(df: df), "the test should reject the draft's own distribution")
    }

    func testFirstTwoTokensJointDistributionIsTheTargets() throws {
        // top-k keeps the joint table small; γ = 1 and 2 exercise rejection, the bonus token and rollback
        let m = try makeModels()
        let sampling = SamplingOptions(temperature: 1, topK: 5)
        let prompt = m.prompts[1]
        let V = m.target.config.vocabSize
        let p1 = Sampler.probabilities(m.target.forward(prompt, cache: m.target.makeCache())[...], sampling)
        var exact: [Int: Double] = [:]
        for (a, pa) in p1.enumerated() where pa > 0 {
            let p2 = Sampler.probabilities(m.target.forward(prompt + [a], cache: m.target.makeCache())[...], sampling)
            for (b, pb) in p2.enumerated() where pb > 0 { exact[a * V + b] = Double(pa) * Double(pb) }
        }
        let n = 4000
        for gamma in [1, 2] {
            for (name, draft) in m.drafts.prefix(3) {
                var counts: [Int: Int] = [:]
                let decoder = SpeculativeDecoder(target: m.target, draft: draft, draftTokens: gamma)
                for s in 0..<n {
                    let (t, _) = decoder.generate(GenerationRequest(prompt: prompt, maxNewTokens: 2, stopTokens: [], sampling: sampling,
                                                                    seed: UInt64(s) &* 0x2545_F491 &+ 7))
                    counts[t[0] * V + t[1], default: 0] += 1
                }
                let (stat, df) = ChiSquare.statistic(counts: counts, probabilities: exact, n: n)
                XCTAssertLessThan(stat, ChiSquare.critical(df: df), "\(name), gamma \(gamma): joint distribution differs (chi2 \(stat), df \(df))")
            }
        }
    }
}
