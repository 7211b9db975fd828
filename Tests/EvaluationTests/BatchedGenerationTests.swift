// Batched decoding gives what one conversation at a time gives: a batched pass's rows equal
// single-row steps bit for bit (each cache at its own length), a multi-row pass (verification)
// equals single steps, Generator.generateBatch equals Generator.generate for every batch size,
// budget and stop rule (greedy and seeded sampling), and evaluation's replies do not depend on
// --generation-batch-size. Also the streaming matmul against a plain loop. Tiny model only.
import Autograd
import DataSchema
@testable import Evaluation
import Foundation
@testable import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class BatchedGenerationTests: XCTestCase {
    func makeEngine(_ name: String = #function) throws -> (BaseModel, InferenceModel, [[Int]]) {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let engine = InferenceModel(base: base.weights)
        let prompts = ["say alpha0", "say hotel2", "the thing", "x", "a much longer request about several things at once"].map {
            base.tokenizer.encode("<|im_start|>user\n\($0)<|im_end|>\n<|im_start|>assistant\n")
        } + [[5], [7, 9]]
        return (base, engine, prompts)
    }

    func testBatchedRowsEqualSingleRowSteps() throws {
        let (_, engine, prompts) = try makeEngine()
        let V = engine.config.vocabSize
        for count in [1, 2, 5, prompts.count] {
            let chosen = Array(prompts.prefix(count))
            let single = chosen.map { p -> KVCache in let c = engine.makeCache(); _ = engine.forward(p, cache: c); return c }
            let batched = chosen.map { p -> KVCache in let c = engine.makeCache(); _ = engine.forward(p, cache: c); return c }
            var logits: [Float] = []
            for step in 0..<6 {
                let tokens = (0..<count).map { (step * 31 + $0 * 17 + 3) % V }
                engine.forward(batch: tokens, caches: batched, into: &logits)
                XCTAssertEqual(logits.count, count * V)
                for b in 0..<count {
                    let expected = engine.forward([tokens[b]], cache: single[b])
                    XCTAssertEqual(Array(logits[(b * V)..<((b + 1) * V)]), expected, "batch of \(count), row \(b), step \(step)")
                    XCTAssertEqual(batched[b].count, single[b].count)
                }
            }
        }
    }

    func testMultiRowPassEqualsSingleRowSteps() throws {
        // a draft's proposals verified in one pass: each row gets the bits of a single-token step
        let (_, engine, prompts) = try makeEngine()
        let V = engine.config.vocabSize
        for rows in [2, 4, 9, InferenceModel.streamingRows] {
            let tokens = (0..<rows).map { ($0 * 13 + 1) % V }
            let a = engine.makeCache(), b = engine.makeCache()
            _ = engine.forward(prompts[0], cache: a)
            _ = engine.forward(prompts[0], cache: b)
            let together = engine.forward(tokens, cache: a, allLogits: true)
            var oneByOne: [Float] = []
            for t in tokens { oneByOne += engine.forward([t], cache: b) }
            XCTAssertEqual(together, oneByOne, "\(rows) rows")
        }
    }

    func testGenerateBatchEqualsOneAtATime() throws {
        let (base, engine, prompts) = try makeEngine()
        for sampling in [SamplingOptions(), SamplingOptions(temperature: 0.8, topK: 20)] {
            for stops in [base.stopTokenIds, []] {
                let requests = prompts.enumerated().map { i, p in
                    GenerationRequest(prompt: p, maxNewTokens: [1, 3, 12, 40][i % 4], stopTokens: stops, sampling: sampling, seed: UInt64(i + 1))
                } + [GenerationRequest(prompt: [], maxNewTokens: 5, stopTokens: stops),
                     GenerationRequest(prompt: prompts[0], maxNewTokens: 0, stopTokens: stops)]
                let reference = requests.map { Generator.generate(engine, $0) }
                for batchSize in [1, 2, 3, 8, 32] {
                    var finished: [Int] = []
                    let got = Generator.generateBatch(engine, requests, batchSize: batchSize, sharedPrefixMinimum: 0) { i, tokens, _ in
                        finished.append(i)
                        XCTAssertEqual(tokens, reference[i].tokens)
                    }
                    XCTAssertEqual(finished.sorted(), Array(requests.indices), "every request finishes once")
                    for (i, r) in got.enumerated() {
                        let what = "request \(i), batch \(batchSize), temperature \(sampling.temperature), \(stops.count) stops"
                        XCTAssertEqual(r.tokens, reference[i].tokens, what)
                        XCTAssertEqual(r.stats.generatedTokens, reference[i].stats.generatedTokens, what)
                        XCTAssertEqual(r.stats.stoppedAtEndOfTurn, reference[i].stats.stoppedAtEndOfTurn, what)
                        XCTAssertEqual(r.stats.targetForwardCalls, reference[i].stats.targetForwardCalls, what)
                        XCTAssertEqual(r.stats.promptTokens, reference[i].stats.promptTokens, what)
                    }
                }
            }
        }
    }

    func testSharedPromptPrefixesGiveTheSameReplies() throws {
        // prompts that begin with one long system message: the prefix is prefilled once, and
        // each conversation's logits and greedy reply match a whole-prompt prefill
        let (base, engine, _) = try makeEngine()
        let V = engine.config.vocabSize
        let system = "<|im_start|>system\nyou turn every request into one short word and nothing else, please<|im_end|>\n"
        let asks = ["say alpha0", "say hotel2", "the thing", "x", "say alpha0 again"]
        let prompts = asks.map { base.tokenizer.encode(system + "<|im_start|>user\n\($0)<|im_end|>\n<|im_start|>assistant\n") }
            + [base.tokenizer.encode(system)]  // the prefix alone: nothing of its own, prefilled whole
        let shared = CachedPrefix.commonLength(prompts[0], prompts[1])
        XCTAssertGreaterThan(shared, 20, "the test needs a long common prefix")
        let requests = prompts.map { GenerationRequest(prompt: $0, maxNewTokens: 12, stopTokens: base.stopTokenIds) }
        let reference = requests.map { Generator.generate(engine, $0) }
        for batchSize in [1, 3, 8] {
            let got = try Generator.generateBatch(engine, requests, batchSize: batchSize, sharedPrefixMinimum: 16)
            for i in requests.indices {
                XCTAssertEqual(got[i].tokens, reference[i].tokens, "request \(i), batch \(batchSize)")
                XCTAssertEqual(got[i].stats.promptTokens, prompts[i].count)
            }
        }
        // the logits after a copied prefix, against the whole prompt at once
        let prefixCache = PromptPrefixCache(model: engine, minimumLength: 16)
        var viaPrefix: [Float] = []
        for (i, p) in prompts.prefix(3).enumerated() {
            let c = engine.makeCache()
            prefixCache.prefill(p, into: c, upcoming: prompts[i + 1], logits: &viaPrefix)
            // "say alpha0" and "say hotel2" share "...user\nsay"; "the thing" and "x" share "...user\n"
            XCTAssertEqual(prefixCache.tokens, Array(p.prefix(i < 2 ? shared : CachedPrefix.commonLength(p, prompts[i + 1]))),
                           "prompt \(i) reuses a shared prefix")
            XCTAssertEqual(c.count, p.count)
            let whole = engine.forward(p, cache: engine.makeCache())
            XCTAssertEqual(viaPrefix.count, V)
            let scale = whole.map { abs($0) }.max()!
            for v in 0..<V { XCTAssertEqual(viaPrefix[v], whole[v], accuracy: 1e-5 * scale, "prompt \(i), logit \(v)") }
        }
    }

    func testEvaluationRepliesDoNotDependOnTheGenerationBatch() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        try TinyAssets.writeData(dir + "/eval.jsonl", count: 7, offset: 5)
        var outputs: [[String]] = []
        for batch in [1, 3, 8] {
            var s = EvaluationSettings(evalData: dir + "/eval.jsonl")
            s.computeLoss = false
            s.maxNewTokens = 24
            s.generationBatchSize = batch
            var results: [TargetResult] = []
            var done: [Int] = []
            let report = try EvaluationRun.run(s, base: base) { e in
                if case .generated(_, let d, _, let r) = e {
                    results.append(r)
                    done.append(d)
                }
            }
            XCTAssertEqual(done, Array(1...7), "results arrive in target order")
            XCTAssertEqual(results.map(\.sample), Array(0..<7))
            XCTAssertEqual(report.models[0].generatedTokens, results.map(\.generatedTokens).reduce(0, +))
            outputs.append(results.map(\.output))
        }
        XCTAssertEqual(outputs[1], outputs[0])
        XCTAssertEqual(outputs[2], outputs[0])
    }

    func testStreamingMatmulMatchesPlainLoop() {
        var rng = SeededRNG(seed: 3)
        for (m, n, k) in [(1, 1, 1), (1, 7, 33), (3, 70, 16), (16, 129, 100), (5, 3000, 40)] {
            let a = (0..<(m * k)).map { _ in Float.random(in: -1...1, using: &rng) }
            let b = (0..<(n * k)).map { _ in Float.random(in: -1...1, using: &rng) }
            var c = [Float](repeating: .nan, count: m * n)
            a.withUnsafeBufferPointer { ap in
                b.withUnsafeBufferPointer { bp in
                    c.withUnsafeMutableBufferPointer { cp in
                        InferenceModel.matmulNT(ap.baseAddress!, bp.baseAddress!, m: m, n: n, k: k, cp.baseAddress!)
                    }
                }
            }
            for r in 0..<m {
                for o in 0..<n {
                    var s = 0.0
                    for i in 0..<k { s += Double(a[r * k + i]) * Double(b[o * k + i]) }
                    XCTAssertEqual(Double(c[r * n + o]), s, accuracy: 1e-4 * max(1, abs(s)), "m \(m) n \(n) k \(k) at (\(r), \(o))")
                }
            }
        }
    }
}
