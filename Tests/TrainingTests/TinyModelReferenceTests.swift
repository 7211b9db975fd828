// The Llama model on Autograd, and the KV-cache inference path, against PyTorch/transformers
// and PEFT on the tiny fixture models: base logits, logits with a LoRA adapter, the masked
// loss, every LoRA gradient, and a short AdamW training trajectory (Fixtures/README.md).
import Autograd
@testable import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
@testable import Training
import XCTest

final class TinyModelReferenceTests: XCTestCase {
    static let peftPrefix = "base_model.model."

    func loadTiny(_ name: String, lora: LoRAConfig? = nil) throws -> LlamaModel {
        let file = try ModelLoader.load(path: Fixture.path(name))
        var rng = SeededRNG(seed: 7)
        return try LlamaModel(weights: try BaseWeights(config: file.config, tensors: file.tensors), lora: lora, rng: &rng)
    }

    /// Copies the PEFT adapter of Fixtures/NAME/lora into the model's LoRA tensors.
    func loadPEFTAdapter(_ name: String, into model: LlamaModel) throws {
        let st = try SafetensorsFile(path: Fixture.path(name + "/lora/adapter_model.safetensors"))
        for (pname, t) in model.loraParameters {
            let stored = try st.tensor(Self.peftPrefix + pname)
            XCTAssertEqual(stored.shape, t.shape, pname)
            t.data = stored.data
        }
    }

    func fullLogits(_ model: LlamaModel, ids: [[Int]]) -> [Float] {
        let B = ids.count, T = ids[0].count
        var rng = SeededRNG(seed: 0)
        return withNoGrad {
            let h = model.hiddenStates(ids: ids.flatMap { $0 }, layout: .rows(batch: B, length: T), rng: &rng, training: false)
            return model.logits(hidden: h).data
        }
    }

    static let tinyLoRA = LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases)

    func testBaseLogitsMatchTransformers() throws {
        for name in ["tiny-llama", "tiny-qwen2"] {
            let ref = try Fixture.json(name + "/logits.json")
            let model = try loadTiny(name)
            assertClose(fullLogits(model, ids: ref.intRows("input_ids")), ref.floats("logits"), "\(name) base logits")
        }
    }

    func testLoRALogitsLossAndGradientsMatchPEFT() throws {
        // With activation checkpointing too: the recomputed blocks must give PEFT's gradients.
        for name in ["tiny-llama", "tiny-qwen2"] { for checkpointing in [false, true] {
            let ref = try Fixture.json(name + "/lora_reference.json")
            let model = try loadTiny(name, lora: Self.tinyLoRA)
            model.activationCheckpointing = checkpointing
            try loadPEFTAdapter(name, into: model)
            assertClose(fullLogits(model, ids: ref.intRows("input_ids")), ref.floats("logits"), "\(name) logits with adapter")

            let inputs = ref.intRows("loss_input_ids"), targets = ref.intRows("loss_target_ids")
            let mask = (ref["loss_mask"] as! [[Int]]).flatMap { $0.map { $0 == 1 } }
            var rng = SeededRNG(seed: 0)
            let loss = model.loss(inputs: inputs.flatMap { $0 }, targets: targets.flatMap { $0 }, lossMask: mask,
                                  layout: .rows(batch: inputs.count, length: inputs[0].count), rng: &rng, training: true)
            assertClose(loss.data, [Float(ref.double("loss"))], "\(name) masked loss")
            loss.backward()
            let grads = ref.dict("gradients")
            XCTAssertEqual(grads.count, model.loraParameters.count)
            for (pname, t) in model.loraParameters {
                let g = (grads[Self.peftPrefix + pname] as! [String: Any]).floats("values")
                XCTAssertNotNil(t.grad, "\(pname) got no gradient")
                assertClose(t.grad ?? [], g, rel: 2e-4, "\(name) gradient of \(pname)")
            }
            // frozen weights never get a gradient
            XCTAssertNil(model.embedTokens!.grad)
            XCTAssertNil(model.blocks[0].q.weight!.grad)
        } }
    }

    /// A batch whose samples share a prompt prefix, laid out as one row with the prefix once
    /// (`.sharePrefix`), gives the padded rows' loss and every LoRA gradient, with the nonzero
    /// LoRA weights making the prefix's keys and values depend on the adapter.
    func testSharedPrefixBatchGivesThePaddedBatchsLossAndGradients() throws {
        let model = try loadTiny("tiny-llama", lora: Self.tinyLoRA)
        for (_, t) in model.loraParameters { t.data = t.data.indices.map { Float(($0 * 7919) % 13) / 13 - 0.5 } }
        let V = model.config.vocabSize
        let prefix = (0..<9).map { ($0 * 7 + 2) % V }
        let examples = [5, 11, 3].enumerated().map { i, rest -> TrainingExample in
            let tokens = prefix + (0...rest).map { ($0 * 3 + 11 * i + 1) % V }
            return TrainingExample(sampleIndex: i, line: i + 1, inputs: Array(tokens.dropLast()), targets: Array(tokens.dropFirst()),
                                   targetMask: tokens.indices.dropLast().map { $0 >= prefix.count - 1 && $0 % 2 == 0 })
        }
        var results: [(loss: Float, grads: [[Float]], batch: Batch)] = []
        for layout in [BatchOptions.Layout.padToLongest, .sharePrefix] {
            var batcher = try Batcher(examples: examples, options: BatchOptions(batchSize: 3, layout: layout, shuffle: false))
            let batch = try XCTUnwrap(batcher.next())
            for (_, t) in model.loraParameters { t.grad = nil }
            var rng = SeededRNG(seed: 0)
            let loss = AdapterObjective(model: model).loss(batch, rng: &rng, training: true)
            loss.backward()
            results.append((loss.data[0], model.loraParameters.map { $0.tensor.grad ?? [] }, batch))
        }
        XCTAssertEqual(results[0].batch.batchSize, 3)
        XCTAssertEqual(results[1].batch.batchSize, 1, "the shared layout is one row")
        XCTAssertEqual(results[1].batch.length, 8 + 6 + 12 + 4, "the prefix once, then each sample's rest")
        XCTAssertEqual(results[0].loss, results[1].loss, accuracy: 1e-5 * abs(results[0].loss))
        for (a, b) in zip(results[0].grads, results[1].grads) {
            XCTAssertFalse(a.isEmpty)
            assertClose(b, a, rel: 1e-4, "LoRA gradient with the shared prefix")
        }
    }

    /// Checkpointed blocks replay their dropout masks on the recompute: loss and every LoRA
    /// gradient equal the plain pass's (to float rounding), and the generator ends in the same state.
    func testActivationCheckpointingReplaysDropout() throws {
        let lora = LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases, dropout: 0.3)
        var results: [(loss: Float, grads: [[Float]], rng: SeededRNG)] = []
        for checkpointing in [false, true] {
            let model = try loadTiny("tiny-llama", lora: lora)
            for (_, t) in model.loraParameters { t.data = t.data.indices.map { Float(($0 * 7919) % 13) / 13 - 0.5 } }
            model.activationCheckpointing = checkpointing
            let ids = (0..<16).map { ($0 * 5 + 3) % model.config.vocabSize }
            var rng = SeededRNG(seed: 42)
            let loss = model.loss(inputs: ids, targets: ids.map { ($0 + 1) % model.config.vocabSize },
                                  lossMask: ids.indices.map { $0 % 3 != 0 }, layout: .rows(batch: 2, length: 8),
                                  rng: &rng, training: true)
            loss.backward()
            results.append((loss.data[0], model.loraParameters.map { $0.tensor.grad ?? [] }, rng))
        }
        XCTAssertEqual(results[0].loss, results[1].loss, accuracy: 1e-6)
        XCTAssertEqual(results[0].rng, results[1].rng)
        for (a, b) in zip(results[0].grads, results[1].grads) {
            XCTAssertFalse(a.isEmpty)
            assertClose(b, a, rel: 1e-5, "checkpointed LoRA gradient")
        }
    }

    func testFreshAdapterEqualsBaseModel() throws {
        let ref = try Fixture.json("tiny-llama/logits.json")
        let model = try loadTiny("tiny-llama", lora: Self.tinyLoRA)
        XCTAssertEqual(fullLogits(model, ids: ref.intRows("input_ids")), fullLogits(try loadTiny("tiny-llama"), ids: ref.intRows("input_ids")),
                       "B = 0 must make step 0 identical to the base model")
        for (name, t) in model.loraParameters where name.contains("lora_B") {
            XCTAssert(t.data.allSatisfy { $0 == 0 }, "\(name) must start at zero")
        }
    }

    func testKVCacheInferenceMatchesTrainingForward() throws {
        for name in ["tiny-llama", "tiny-qwen2"] {
            let ref = try Fixture.json(name + "/lora_reference.json")
            let model = try loadTiny(name, lora: Self.tinyLoRA)
            try loadPEFTAdapter(name, into: model)
            let engine = try InferenceModel(model)
            let ids = ref.intRows("input_ids")[1]
            let V = model.config.vocabSize
            let expected = Array(ref.floats("logits")[(ids.count * V)...])  // row 1
            // prefill everything at once
            let cache = engine.makeCache()
            assertClose(engine.forward(ids, cache: cache, allLogits: true), expected, "\(name) prefill (LoRA merged)")
            // then prefix + one token at a time, with a rollback in the middle
            let cache2 = engine.makeCache()
            var got = engine.forward(Array(ids[0..<3]), cache: cache2, allLogits: true)
            for t in 3..<ids.count {
                got += engine.forward([ids[t]], cache: cache2)
                if t == 6 {
                    cache2.truncate(to: 5)
                    got.removeLast(2 * V)
                    got += engine.forward(Array(ids[5...6]), cache: cache2, allLogits: true)
                }
            }
            assertClose(got, expected, "\(name) incremental decoding with rollback")
        }
    }

    /// The training loop itself (Trainer + AdamW + schedule + clipping + accumulation) against
    /// the PEFT trajectory.
    func testTrainingTrajectoryMatchesPEFT() throws {
        let ref = try Fixture.json("tiny-llama/train_reference.json")
        let batchesJSON = ref["batches"] as! [[String: Any]]
        let batches: [Batch] = batchesJSON.map { b in
            let ids = b.intRows("input_ids")
            let mask = (b["loss_mask"] as! [[Int]]).flatMap { $0.map { $0 == 1 } }
            let B = ids.count, T = ids[0].count - 1
            return Batch(batchSize: B, length: T, inputIds: ids.flatMap { $0.dropLast() }, targets: ids.flatMap { $0.dropFirst() },
                         lossMask: mask, segmentIds: [Int32](repeating: 1, count: B * T),
                         positions: (0..<B).flatMap { _ in 0..<T }, targetTokenCount: mask.filter { $0 }.count,
                         rowSamples: [], epoch: 0)
        }
        let initialA = try SafetensorsFile(path: Fixture.path("tiny-llama/lora/adapter_model.safetensors"))
        for (variantName, anyVariant) in ref.dict("variants") {
            let variant = anyVariant as! [String: Any]
            let S = (variant["optimizer_steps"] as! NSNumber).intValue
            let G = (variant["grad_accumulation"] as! NSNumber).intValue
            let W = (variant["num_warmup_steps"] as! NSNumber).intValue
            let model = try loadTiny("tiny-llama", lora: Self.tinyLoRA)
            for (pname, t) in model.loraParameters where pname.contains("lora_A") {
                t.data = try initialA.tensor(Self.peftPrefix + pname).data
            }
            var options = TrainingOptions()
            options.epochs = 1
            options.learningRate = 1e-2
            options.warmupSteps = W
            options.gradientAccumulationSteps = G
            options.weightDecay = 0.01
            options.clipGradNorm = 1.0
            options.schedule = .cosine
            let source = CyclingBatches(batches: batches, count: S * G)
            let sink = MemoryCheckpointer()
            var records: [StepRecord] = []
            _ = try Trainer(options: options).run(objective: AdapterObjective(model: model), train: source, eval: nil,
                                                  checkpointer: sink, state: TrainerState(seed: 1)) { e in
                if case .step(let r, _, _, _) = e { records.append(r) }
            }
            let steps = variant["steps"] as! [[String: Any]]
            XCTAssertEqual(records.count, steps.count, variantName)
            for (r, s) in zip(records, steps) {
                assertClose([r.loss], [Float(s.double("loss"))], "\(variantName) step \(r.step) loss")
                assertClose([r.learningRate], [Float(s.double("lr"))], rel: 1e-6, "\(variantName) step \(r.step) lr")
                assertClose([r.gradNorm], [Float(s.double("grad_norm"))], rel: 2e-4, "\(variantName) step \(r.step) grad norm")
            }
            let finalA = variant["final_lora_A"] as! [String: Any], finalB = variant["final_lora_B"] as! [String: Any]
            for (pname, t) in model.loraParameters {
                let table = pname.contains("lora_A") ? finalA : finalB
                let want = (table[Self.peftPrefix + pname] as! [String: Any]).floats("values")
                assertClose(t.data, want, rel: 5e-4, "\(variantName) final \(pname)")
            }
        }
    }
}

/// The fixture's three batches, cycled: micro-batch i is batches[i % 3].
final class CyclingBatches: BatchSource {
    let batches: [Batch]
    let count: Int
    init(batches: [Batch], count: Int) {
        self.batches = batches
        self.count = count
    }
    func batchCount(epoch: Int) -> Int { count }
    func batch(epoch: Int, index: Int) -> Batch { batches[index % batches.count] }
}

/// Keeps nothing; counts saves. For loop tests that do not look at files.
final class MemoryCheckpointer: Checkpointer {
    var saved: [CheckpointKind] = []
    func save(_ kind: CheckpointKind, state: TrainerState, optimizer: AdamW, options: TrainingOptions) throws -> String {
        saved.append(kind)
        return "memory:\(saved.count)"
    }
    func prune(evals: [EvalRecord], keep: Int?) throws -> [String] { [] }
}
