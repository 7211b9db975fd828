// Qwen3, OLMo 2, Granite 3, SmolLM3 and Gemma 3 against transformers and PEFT on tiny random models built
// from each architecture's own config class (scripts/fixtures/make_architecture_fixtures.py):
// the config as decoded, base logits, LoRA logits, masked loss and every LoRA gradient, a 3-step
// AdamW trajectory, and the KV-cache pass equal to the training pass (prefill, decoding steps with
// a rollback, batched rows, a verify pass, a segmented pass; float32 weights with the adapter
// merged, and stored F16 weights with the adapter added per row).
import Autograd
@testable import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
@testable import Training
import XCTest

final class ArchitectureReferenceTests: XCTestCase {
    func testConfigsDecodeWithEachArchitecturesFeatures() throws {
        let c = Dictionary(uniqueKeysWithValues: try ArchitectureFixture.all.map { ($0.name, $0.config) })
        let qwen3 = try XCTUnwrap(c["qwen3"]), olmo2 = try XCTUnwrap(c["olmo2"])
        let granite = try XCTUnwrap(c["granite"]), smollm3 = try XCTUnwrap(c["smollm3"])
        XCTAssertEqual(qwen3.architecture, .qwen3)
        XCTAssertEqual(qwen3.definition.qkNorm, .perHead)
        XCTAssertEqual([qwen3.headDim, qwen3.queryDim, qwen3.hiddenSize], [12, 48, 40])
        XCTAssertTrue(qwen3.tieWordEmbeddings)
        XCTAssertEqual(olmo2.definition.qkNorm, .wholeProjection)
        XCTAssertEqual(olmo2.definition.norms.map(\.slot), [.query, .key, .attentionOutput, .feedForwardOutput])
        XCTAssertFalse(olmo2.tieWordEmbeddings)
        XCTAssertEqual(TensorTable.shapes(for: olmo2)["model.layers.2.self_attn.k_norm.weight"], [24])
        XCTAssertEqual(TensorTable.shapes(for: qwen3)["model.layers.0.self_attn.q_norm.weight"], [12])
        XCTAssertEqual(granite.multipliers, Multipliers(embedding: 12, residual: 0.22, attention: 0.09, logits: 8))
        XCTAssertEqual(smollm3.noRopeLayers, [3])
        XCTAssertEqual(smollm3.ropeTheta, 5_000_000)
        XCTAssertEqual((0..<5).map { smollm3.rope(layer: $0) }, [.full, .full, .full, .none, .full])
        XCTAssertEqual(try XCTUnwrap(c["phi4"]).rotaryDim, 12)  // the rest: PhiReferenceTests
        // Gemma 3: config.json's model_type gemma3_text, layer_types, the two RoPE bases, the scalar
        let gemma3 = try XCTUnwrap(c["gemma3"])
        XCTAssertEqual(gemma3.architecture, .gemma3)
        XCTAssertEqual(gemma3.definition.norms.map(\.slot), [.query, .key, .attentionInput, .attentionOutput, .feedForwardInput, .feedForwardOutput])
        XCTAssertEqual(gemma3.slidingWindow, 4)
        XCTAssertEqual(gemma3.slidingWindowLayers, [0, 1, 2, 3, 4, 6])
        XCTAssertEqual((0..<7).map { gemma3.window(layer: $0) }, [4, 4, 4, 4, 4, nil, 4])
        XCTAssertEqual([gemma3.ropeTheta(layer: 0), gemma3.ropeTheta(layer: 5)], [10000, 1_000_000])
        XCTAssertEqual(gemma3.queryPreAttentionScalar, 16)
        XCTAssertEqual(gemma3.embeddingScale, Float(48.0.squareRoot()))
        XCTAssertTrue(gemma3.tieWordEmbeddings)
        for config in c.values {
            // what the toolkit writes as config.json reads back to the same config
            XCTAssertEqual(try ModelConfig.fromHuggingFace(json: config.huggingFaceConfigJSON(), path: "x"), config)
            // and so does the checkpoint encoding
            XCTAssertEqual(try JSONDecoder().decode(ModelConfig.self, from: JSONEncoder().encode(config)), config)
        }
    }

    /// The weights the tests rebuild are the ones transformers ran (sums recorded by the script).
    func testRebuiltWeightsAreTheScriptsWeights() throws {
        for f in try ArchitectureFixture.all {
            let sums = f.reference["weight_sums"] as! [String: NSNumber]
            let weights = f.fileWeights()
            XCTAssertEqual(Set(sums.keys), Set(weights.keys), f.name)
            for (name, sum) in sums {
                let ours = weights[name]!.data.reduce(0.0) { $0 + Double($1) }
                XCTAssertEqual(ours, sum.doubleValue, accuracy: 1e-9 * max(1, abs(sum.doubleValue)), "\(f.name) \(name)")
            }
        }
    }

    func testBaseLogitsMatchTransformers() throws {
        for f in try ArchitectureFixture.all {
            let model = try f.model(withLoRA: false)
            assertClose(ArchitectureFixture.logits(model, f.ints("input_ids")), try f.floats("logits"), "\(f.name) base logits")
        }
    }

    func testLoRALogitsLossAndGradientsMatchPEFT() throws {
        for f in try ArchitectureFixture.all { for checkpointing in [false, true] {
            let model = try f.model(withLoRA: true)
            model.activationCheckpointing = checkpointing
            let ids = f.ints("input_ids")
            assertClose(ArchitectureFixture.logits(model, ids), try f.floats("lora_logits"), "\(f.name) logits with the adapter")
            let mask = f.ints("loss_mask").flatMap { $0.map { $0 == 1 } }
            var rng = SeededRNG(seed: 0)
            let loss = model.loss(inputs: ids.flatMap { $0.dropLast() }, targets: ids.flatMap { $0.dropFirst() }, lossMask: mask,
                                  layout: .rows(batch: ids.count, length: ids[0].count - 1), rng: &rng, training: true)
            assertClose(loss.data, [Float(f.double("lora_loss"))], "\(f.name) masked loss")
            loss.backward()
            XCTAssertEqual(model.loraParameters.count, 2 * (f.config.definition.fusedProjections ? 4 : 7) * f.config.numLayers)
            for (name, t) in model.loraParameters {
                assertClose(t.grad ?? [], try f.floats("grad." + name), "\(f.name) gradient of \(name)\(checkpointing ? " (checkpointed)" : "")")
            }
            XCTAssertNil(model.blocks[0].norm(f.config.definition.norms[0].slot)!.grad, "frozen norms get no gradient")
        } }
    }

    /// Trainer + AdamW + cosine schedule + clipping for 3 steps against PEFT's trajectory, and the
    /// loss of every batch after them.
    func testTrainingTrajectoryMatchesPEFT() throws {
        for f in try ArchitectureFixture.all {
            let training = f.reference["training"] as! [String: Any]
            let batches: [Batch] = (training["batches"] as! [[String: Any]]).map { b in
                let ids = (b["input_ids"] as! [[NSNumber]]).map { $0.map(\.intValue) }
                let mask = (b["loss_mask"] as! [[NSNumber]]).flatMap { $0.map { $0.intValue == 1 } }
                let B = ids.count, T = ids[0].count - 1
                return Batch(batchSize: B, length: T, inputIds: ids.flatMap { $0.dropLast() }, targets: ids.flatMap { $0.dropFirst() },
                             lossMask: mask, segmentIds: [Int32](repeating: 1, count: B * T),
                             positions: (0..<B).flatMap { _ in 0..<T }, targetTokenCount: mask.filter { $0 }.count,
                             rowSamples: [], epoch: 0)
            }
            let model = try f.model(withLoRA: true)
            var options = TrainingOptions()
            options.epochs = 1
            options.learningRate = Float((training["lr"] as! NSNumber).doubleValue)
            options.warmupSteps = (training["warmup"] as! NSNumber).intValue
            options.gradientAccumulationSteps = 1
            options.weightDecay = Float((training["weight_decay"] as! NSNumber).doubleValue)
            options.clipGradNorm = Float((training["max_grad_norm"] as! NSNumber).doubleValue)
            options.schedule = .cosine
            var records: [StepRecord] = []
            _ = try Trainer(options: options).run(objective: AdapterObjective(model: model), train: FixedBatches(batches), eval: nil,
                                                  checkpointer: NoCheckpoints(), state: TrainerState(seed: 1)) { e in
                if case .step(let r, _, _, _) = e { records.append(r) }
            }
            let steps = training["steps"] as! [[String: NSNumber]]
            XCTAssertEqual(records.count, steps.count, f.name)
            for (r, s) in zip(records, steps) {
                assertClose([r.loss], [s["loss"]!.floatValue], "\(f.name) step \(r.step) loss")
                assertClose([r.learningRate], [s["lr"]!.floatValue], rel: 1e-6, "\(f.name) step \(r.step) learning rate")
                assertClose([r.gradNorm], [s["grad_norm"]!.floatValue], "\(f.name) step \(r.step) gradient norm")
            }
            let after = (training["loss_after"] as! [NSNumber]).map(\.floatValue)
            for (b, want) in zip(batches, after) {
                var rng = SeededRNG(seed: 0)
                let loss = withNoGrad {
                    model.loss(inputs: b.inputIds, targets: b.targets, lossMask: b.lossMask, layout: .rows(batch: b.batchSize, length: b.length),
                               rng: &rng, training: false).data[0]
                }
                assertClose([loss], [want], "\(f.name) loss after training")
            }
        }
    }

    /// The KV-cache pass against the training pass on the same weights and adapter: a whole
    /// prefill, a prefix then one token at a time with a rollback, two conversations as batched
    /// rows, and a verify pass asking for some rows only.
    func testKVCachePassEqualsTheTrainingPass() throws {
        for f in try ArchitectureFixture.all {
            let model = try f.model(withLoRA: true)
            let ids = f.ints("input_ids")
            let V = f.config.vocabSize
            let expected = ArchitectureFixture.logits(model, ids)  // [2·T, V]
            let rows = ids.indices.map { Array(expected[($0 * ids[0].count * V)..<(($0 + 1) * ids[0].count * V)]) }
            assertClose(expected, try f.floats("lora_logits"), "\(f.name) training pass")
            // float32 weights with the adapter merged; stored F16 weights with the adapter per row
            let engines: [(String, InferenceModel)] = try [
                ("merged", InferenceModel(model)),
                ("stored F16, adapter per row", storedEngine(f, adapter: model.adapter(baseSignature: nil)!)),
            ]
            for (what, engine) in engines {
                let tolerance: Float = 1e-4
                let reference = what == "merged" ? rows : try storedReference(f, adapter: model.adapter(baseSignature: nil)!, ids: ids)
                let cache = engine.makeCache()
                assertClose(engine.forward(ids[1], cache: cache, allLogits: true), reference[1], rel: tolerance, "\(f.name) \(what): prefill")
                // the prompt's blocked attention products (a long prefill's path; Gemma 3's window masked there too)
                let blocked = InferenceModel.$promptAttention.withValue(.blocked) { engine.forward(ids[1], cache: engine.makeCache(), allLogits: true) }
                assertClose(blocked, reference[1], rel: tolerance, "\(f.name) \(what): blocked prefill")
                let cache2 = engine.makeCache()
                var got = engine.forward(Array(ids[1][0..<3]), cache: cache2, allLogits: true)
                for t in 3..<ids[1].count {
                    got += engine.forward([ids[1][t]], cache: cache2)
                    if t == 6 {
                        cache2.truncate(to: 5)
                        got.removeLast(2 * V)
                        got += engine.forward(Array(ids[1][5...6]), cache: cache2, allLogits: true)
                    }
                }
                assertClose(got, reference[1], rel: tolerance, "\(f.name) \(what): decoding steps with a rollback")
                // batched rows: both conversations one token at a time in one pass
                let caches = [engine.makeCache(), engine.makeCache()]
                var batched: [[Float]] = [[], []]
                var out: [Float] = []
                for t in 0..<ids[0].count {
                    engine.forward(batch: [ids[0][t], ids[1][t]], caches: caches, into: &out)
                    batched[0] += out[0..<V]
                    batched[1] += out[V..<(2 * V)]
                }
                for b in 0..<2 { assertClose(batched[b], reference[b], rel: tolerance, "\(f.name) \(what): batched row \(b)") }
                // a verify pass over the last 4 tokens, logits of rows 1 and 3 only
                let cache3 = engine.makeCache()
                _ = engine.forward(Array(ids[0][0..<5]), cache: cache3)
                var verify: [Float] = []
                engine.forward(Array(ids[0][5...]), cache: cache3, logitsAt: [1, 3], into: &verify)
                assertClose(verify, Array(reference[0][(6 * V)..<(7 * V)] + reference[0][(8 * V)..<(9 * V)]), rel: tolerance,
                            "\(f.name) \(what): verify pass")
                // a segmented pass (the server's step): both conversations' next 3 tokens after a prefix each
                let seg = [engine.makeCache(), engine.makeCache()]
                _ = engine.forward(Array(ids[0][0..<4]), cache: seg[0])
                _ = engine.forward(Array(ids[1][0..<2]), cache: seg[1])
                var segmented: [Float] = []
                engine.forward(segments: [.init(tokens: Array(ids[0][4..<7]), cache: seg[0], adapter: nil, logitRows: [0, 2]),
                                          .init(tokens: Array(ids[1][2..<5]), cache: seg[1], adapter: nil, logitRows: [1])], into: &segmented)
                assertClose(segmented, Array(reference[0][(4 * V)..<(5 * V)] + reference[0][(6 * V)..<(7 * V)] + reference[1][(3 * V)..<(4 * V)]),
                            rel: tolerance, "\(f.name) \(what): segmented pass")
            }
        }
    }

    /// The tiny model written as an F16 GGUF and loaded stored, with `adapter` added per row.
    private func storedEngine(_ f: ArchitectureFixture, adapter: Adapter) throws -> InferenceModel {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try f.writeGGUF(dir + "/m.gguf", matrixType: .f16)
        let base = try BaseWeights(file: ModelLoader.load(path: dir + "/m.gguf", storage: .stored))
        XCTAssertTrue(base.layers[0].projection(.q).isStored)
        return InferenceModel(base: base, adapter: adapter)
    }

    /// The training pass on the F16-rounded weights (what the stored engine must give).
    private func storedReference(_ f: ArchitectureFixture, adapter: Adapter, ids: [[Int]]) throws -> [[Float]] {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try f.writeGGUF(dir + "/m.gguf", matrixType: .f16)
        let model = try LlamaModel(base: BaseWeights(file: ModelLoader.load(path: dir + "/m.gguf")), adapter: adapter)
        let all = ArchitectureFixture.logits(model, ids), V = f.config.vocabSize, T = ids[0].count
        return ids.indices.map { Array(all[($0 * T * V)..<(($0 + 1) * T * V)]) }
    }

    /// Gemma 3 (window 4 on 6 of 7 layers) and Phi-3 (window 16 on every layer) over 150 tokens,
    /// each window passed many times, prefill blocks of 64: the KV-cache pass in each attention path
    /// (rows, blocked, auto) and one-token decoding after a 100-token prefix, against the training
    /// pass whose mask transformers' logits checked above (Gemma 3's 9 tokens pass its window;
    /// Phi-3's past 16 tokens are checked against PEFT by check_peft_architectures.py).
    func testSlidingWindowLongPassesMatchTheTrainingPass() throws {
        for name in ["gemma3", "phi3"] {
            let f = try ArchitectureFixture(name)
            var config = f.config
            config.maxPositionEmbeddings = 256  // room for the positions; no effect on the numbers
            XCTAssertFalse(config.slidingWindowLayers.isEmpty, name)
            var rng = SeededRNG(seed: 7)
            let model = try LlamaModel(weights: BaseWeights(config: config, tensors: f.weights()), lora: nil, rng: &rng)
            var g = SeededRNG(seed: 5)
            let ids = (0..<150).map { _ in Int(g.next() % 297) + 3 }
            let expected = ArchitectureFixture.logits(model, [ids])
            let engine = try InferenceModel(model)
            for mode in InferenceModel.PromptAttention.allCases {
                let got = InferenceModel.$promptAttention.withValue(mode) { engine.forward(ids, cache: engine.makeCache(), allLogits: true) }
                assertClose(got, expected, "\(name), 150 tokens, \(mode) attention")
            }
            let cache = engine.makeCache()
            var got = engine.forward(Array(ids[0..<100]), cache: cache, allLogits: true)
            for t in 100..<150 { got += engine.forward([ids[t]], cache: cache) }
            assertClose(got, expected, "\(name), decoding past the window")
            // and the window is what makes them agree: the same weights with every layer global differ
            var global = config
            global.slidingWindowLayers = []
            global.slidingWindow = nil
            let unwindowed = try LlamaModel(weights: BaseWeights(config: global, tensors: f.weights()), lora: nil, rng: &rng)
            XCTAssertGreaterThan(relativeError(ArchitectureFixture.logits(unwindowed, [ids]), expected), 1e-2, name)
        }
    }
}

/// The given batches, once each, in order.
final class FixedBatches: BatchSource {
    let batches: [Batch]
    init(_ batches: [Batch]) { self.batches = batches }
    func batchCount(epoch: Int) -> Int { batches.count }
    func batch(epoch: Int, index: Int) -> Batch { batches[index] }
}

/// Keeps nothing.
final class NoCheckpoints: Checkpointer {
    func save(_ kind: CheckpointKind, state: TrainerState, optimizer: AdamW, options: TrainingOptions) throws -> String { "memory" }
    func prune(evals: [EvalRecord], keep: Int?) throws -> [String] { [] }
}
