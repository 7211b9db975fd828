// A draft holding its weights in float16 proposes from nearly the float32 draft's logits, and
// speculative decoding with it still gives exactly the target's greedy output (the target, always
// float32, checks every proposal). Tiny models only.
import Autograd
import Distillation
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class HalfPrecisionDraftTests: XCTestCase {
    func testHalfPrecisionDraftLogitsAreCloseToFloat32() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let letters = Array(0..<3) + "abcdefghijklmnopqrstuvwxyz".compactMap { base.tokenizer.tokenId(String($0)) }
        for vocabulary in [nil, Array(Set(letters)).sorted()] {
            let draft = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: vocabulary)
            let full = DraftEngine(try draft.definition()), half = DraftEngine(try draft.definition(), precision: .float16)
            XCTAssertEqual(half.trunk.precision, .float16)
            let ids = base.tokenizer.encode("<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n")
            let a = full.nextLogits(ids, cache: full.makeCache()), b = half.nextLogits(ids, cache: half.makeCache())
            XCTAssertEqual(a.count, b.count)
            let scale = a.map(abs).max() ?? 1
            for (x, y) in zip(a, b) { XCTAssertEqual(x, y, accuracy: 1e-2 * max(scale, 1)) }
            XCTAssertNotEqual(a, b, "float16 weights should round somewhere")
        }
    }

    /// A prompt of more than 16 rows goes through sgemm on widened weights, fewer rows through the
    /// streaming kernel: the same logits either way, to float rounding.
    func testHalfPrecisionPrefillAgreesWithStreamedSteps() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let draft = DraftEngine(try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: nil).definition(), precision: .float16)
        let ids = base.tokenizer.encode("<|im_start|>system\nRepeat the word, please.<|im_end|>\n<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n")
        XCTAssertGreaterThan(ids.count, 40)
        let whole = draft.nextLogits(ids, cache: draft.makeCache())
        let cache = draft.makeCache()
        var pieces: [Float] = []
        var start = 0
        while start < ids.count {
            let end = min(ids.count, start + 10)
            pieces = draft.nextLogits(Array(ids[start..<end]), cache: cache)
            start = end
        }
        let scale = whole.map(abs).max() ?? 1
        for (x, y) in zip(whole, pieces) { XCTAssertEqual(x, y, accuracy: 1e-4 * max(scale, 1)) }
    }

    func testSpeculativeOutputWithAHalfPrecisionDraftIsTheTargets() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let target = InferenceModel(base: base.weights)
        let drafts = try [try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: nil),
                      try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: nil)].map { DraftEngine(try $0.definition(), precision: .float16) }
        for text in ["say alpha0", "say hotel2", "the thing"] {
            let prompt = base.tokenizer.encode("<|im_start|>user\n\(text)<|im_end|>\n<|im_start|>assistant\n")
            for stops in [base.stopTokenIds, []] {
                let request = GenerationRequest(prompt: prompt, maxNewTokens: 40, stopTokens: stops)
                let (reference, _) = Generator.generate(target, request)
                for draft in drafts {
                    for gamma in [1, 3, 6] {
                        let (tokens, stats) = SpeculativeDecoder(target: target, draft: draft, draftTokens: gamma).generate(request)
                        XCTAssertEqual(tokens, reference, "\(text), gamma \(gamma)")
                        XCTAssertLessThanOrEqual(stats.generation.draftTokensAccepted, stats.generation.draftTokensProposed)
                    }
                }
            }
        }
    }
}
