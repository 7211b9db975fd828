// Preference training against TRL (Fixtures/preference/, scripts/fixtures/make_preference_fixtures.py):
// DPO (reference = base, and = an adapter), robust DPO, IPO, RPO (DPO + the chosen replies'
// cross-entropy) and ORPO on the tiny Llama fixture —
// loss, TRL's logged rewards and log-probabilities, every LoRA gradient — in each batch layout
// (the prompt once per pair, chosen and rejected whole, pairs packed, and split over two
// ranks' shares); a 3-step DPO trajectory through the one training loop; and DPO on SmolLM2,
// whose pairs our encoder renders to TRL's token ids, with its own 3-step trajectory.
import Autograd
@testable import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
@testable import Training
import XCTest

final class PreferenceReferenceTests: XCTestCase {
    static let peftPrefix = "base_model.model."

    func tiny(lora: Bool = true) throws -> LlamaModel {
        let file = try ModelLoader.load(path: Fixture.path("tiny-llama"))
        var rng = SeededRNG(seed: 7)
        return try LlamaModel(weights: try BaseWeights(config: file.config, tensors: file.tensors),
                              lora: lora ? TinyModelReferenceTests.tinyLoRA : nil, rng: &rng)
    }

    /// Sets the model's LoRA tensors from a safetensors file (PEFT names, optionally behind `prefix`).
    func load(_ model: LlamaModel, _ path: String, prefix: String = "") throws {
        let st = try SafetensorsFile(path: Fixture.path(path))
        for (name, t) in model.loraParameters { t.data = try st.tensor(prefix + Self.peftPrefix + name).data }
    }

    /// The fixture's pairs as examples: prompt + reply, the loss on the reply's tokens.
    func pairs(_ ref: [String: Any]) -> [PreferenceExample] {
        (ref["pairs"] as! [[String: Any]]).enumerated().map { i, p in
            let prompt = p.ints("prompt")
            func example(_ reply: [Int]) -> TrainingExample {
                let tokens = prompt + reply, target = [Bool](repeating: false, count: prompt.count) + [Bool](repeating: true, count: reply.count)
                return TrainingEncoder.example(from: EncodedSample(tokens: tokens, isTarget: target, fullTokenCount: tokens.count),
                                               sampleIndex: i, line: i + 1)
            }
            return PreferenceExample(sampleIndex: i, line: i + 1, chosen: example(p.ints("chosen")), rejected: example(p.ints("rejected")))
        }
    }

    func batch(_ examples: [PreferenceExample], _ layout: BatchOptions.Layout) throws -> Batch {
        let b = try PreferenceBatcher(examples: examples, options: BatchOptions(batchSize: 3, layout: layout, shuffle: false)).batches(epoch: 0)
        XCTAssertEqual(b.count, 1)
        return b[0]
    }

    func settings(_ name: String, _ config: [String: Any]) -> PreferenceSettings {
        let beta = (config["beta"] as! NSNumber).doubleValue
        switch name {
        case "ipo": return PreferenceSettings(objective: .ipo, beta: beta)
        case "orpo": return PreferenceSettings(objective: .orpo, beta: beta)
        default:
            // RPO: TRL's loss_type [sigmoid, sft] with loss_weights [1, α]
            let weights = (config["loss_weights"] as? [NSNumber])?.map(\.doubleValue)
            return PreferenceSettings(objective: .dpo, beta: beta, labelSmoothing: (config["label_smoothing"] as? NSNumber)?.doubleValue ?? 0,
                                      rpoAlpha: weights.map { $0[1] / $0[0] } ?? 0)
        }
    }

    /// TRL's logged metrics: log-probabilities within 1e-4 relative; rewards (β times a
    /// difference of a policy and a reference log-probability, and the margins a difference of
    /// two rewards) within 2e-3 relative plus β·2e-6·(|logps/chosen| + |logps/rejected|)
    /// absolute. The log-probabilities (~8 and ~30 here) are sums of float32 log-softmaxes whose
    /// last bits follow the BLAS kernels' summation order (OpenBLAS's Haswell and Cooperlake
    /// sgemm differ); a margin can be ~1e-3, so relative to it alone that rounding of the
    /// log-probabilities measured 2.08e-3 under Cooperlake. A wrong reference, β or token is
    /// off by far more than 1e-5.
    static func assertMetrics(_ got: [String: Double], _ want: [String: Any], beta: Double, _ what: String,
                              file: StaticString = #filePath, line: UInt = #line) {
        func value(_ key: String) -> Double { (want[key] as? NSNumber)?.doubleValue ?? .nan }
        let logScale = abs(value("logps/chosen")) + abs(value("logps/rejected"))
        for (key, w) in want where !key.contains("accuracies") {
            let expected = (w as! NSNumber).doubleValue, actual = got[key] ?? .nan
            let tolerance = key.hasPrefix("rewards") ? 2e-3 * abs(expected) + beta * 2e-6 * logScale : 1e-4 * abs(expected)
            XCTAssertLessThanOrEqual(abs(actual - expected), tolerance, "\(what) \(key): \(actual) vs TRL's \(expected)", file: file, line: line)
        }
    }

    func testLossRewardsAndGradientsMatchTRL() throws {
        let ref = try Fixture.json("preference/tiny-llama.json")
        let examples = pairs(ref)
        let grads = try SafetensorsFile(path: Fixture.path("preference/tiny-llama.safetensors"))
        for (name, anyCase) in ref.dict("cases") {
            let c = anyCase as! [String: Any]
            let s = settings(name, c.dict("config"))
            // one pair per row with its prompt once; chosen and rejected whole; pairs packed
            for layout in [BatchOptions.Layout.sharePrefix, .padToLongest, .pack(40)] {
                let policy = try tiny()
                var reference: LlamaModel? = nil
                if name == "dpo_adapter" {
                    try load(policy, "preference/tiny-llama.safetensors", prefix: "policy.")
                    reference = try tiny()
                    try load(reference!, "tiny-llama/lora/adapter_model.safetensors")
                } else {
                    try load(policy, "tiny-llama/lora/adapter_model.safetensors")
                    if s.needsReference { reference = try tiny(lora: false) }
                }
                let objective = try PreferenceObjective(model: policy, reference: reference, settings: s)
                let b = try batch(examples, layout)
                var rng = SeededRNG(seed: 0)
                let loss = objective.loss(b, rng: &rng, training: true)
                assertClose(loss.data, [Float(c.double("loss"))], "\(name) \(layout) loss")
                let metrics = MetricSum.means(objective.takeMetrics()) ?? [:]
                for (key, want) in c.dict("metrics") {
                    let got = try XCTUnwrap(metrics[key], "\(name): no metric \(key)")
                    // an accuracy is a count; the rest are numbers compared as every value here
                    assertClose([Float(got)], [Float((want as! NSNumber).doubleValue)], rel: key.contains("accuracies") ? 0 : 1e-4, "\(name) \(layout) \(key)")
                }
                loss.backward()
                for (pname, t) in policy.loraParameters {
                    let want = try grads.tensor("grad.\(name)." + Self.peftPrefix + pname).data
                    assertClose(t.grad ?? [], want, rel: 2e-4, "\(name) \(layout) gradient of \(pname)")
                }
            }
        }
    }

    /// The shares two ranks compute add up to the whole batch: loss and gradients.
    func testTwoRanksSharesAddUpToTheBatch() throws {
        let ref = try Fixture.json("preference/tiny-llama.json")
        let examples = pairs(ref)
        for name in ["dpo_base", "orpo", "dpo_rpo"] {
            let c = ref.dict("cases").dict(name)
            let s = settings(name, c.dict("config"))
            let policy = try tiny()
            try load(policy, "tiny-llama/lora/adapter_model.safetensors")
            let objective = try PreferenceObjective(model: policy, reference: s.needsReference ? try tiny(lora: false) : nil, settings: s)
            let whole = try batch(examples, .sharePrefix)
            var total: Float = 0
            for rank in 0..<2 {
                let part = try XCTUnwrap(objective.share(whole, rank: rank, of: 2))
                var rng = SeededRNG(seed: 0)
                let (l, w) = objective.partLoss(part, of: whole, rng: &rng, training: true)
                scale(l, Float(w)).backward()
                total += l.data[0] * Float(w)
            }
            assertClose([total], [Float(c.double("loss"))], "\(name) shares' loss")
            let grads = try SafetensorsFile(path: Fixture.path("preference/tiny-llama.safetensors"))
            for (pname, t) in policy.loraParameters {
                assertClose(t.grad ?? [], try grads.tensor("grad.\(name)." + Self.peftPrefix + pname).data, rel: 2e-4, "\(name) shares' gradient of \(pname)")
            }
        }
    }

    func testDPOTrajectoryMatchesTRL() throws {
        let ref = try Fixture.json("preference/tiny-llama.json")
        let t = ref.dict("trajectory")
        let policy = try tiny()
        try load(policy, "tiny-llama/lora/adapter_model.safetensors")
        let objective = try PreferenceObjective(model: policy, reference: try tiny(lora: false),
                                                settings: PreferenceSettings(objective: .dpo, beta: t.double("beta")))
        var options = TrainingOptions()
        options.epochs = 1
        options.learningRate = Float(t.dict("optimizer").double("lr"))
        options.warmupSteps = (t["num_warmup_steps"] as! NSNumber).intValue
        options.weightDecay = Float(t.dict("optimizer").double("weight_decay"))
        options.clipGradNorm = Float(t.double("max_grad_norm"))
        options.schedule = .cosine
        let steps = t["steps"] as! [[String: Any]]
        let source = CyclingBatches(batches: [try batch(pairs(ref), .sharePrefix)], count: steps.count)
        var records: [StepRecord] = []
        _ = try Trainer(options: options).run(objective: objective, train: source, eval: nil, checkpointer: MemoryCheckpointer(),
                                              state: TrainerState(seed: 1)) { e in
            if case .step(let r, _, _, _) = e { records.append(r) }
        }
        XCTAssertEqual(records.count, steps.count)
        for (r, s) in zip(records, steps) {
            assertClose([r.loss], [Float(s.double("loss"))], "step \(r.step) loss")
            assertClose([r.learningRate], [Float(s.double("lr"))], rel: 1e-6, "step \(r.step) lr")
            assertClose([r.gradNorm], [Float(s.double("grad_norm"))], rel: 2e-4, "step \(r.step) grad norm")
            for (key, want) in s.dict("metrics") where !key.contains("accuracies") {
                assertClose([Float(r.metrics?[key] ?? .nan)], [Float((want as! NSNumber).doubleValue)], rel: 2e-4, "step \(r.step) \(key)")
            }
        }
        XCTAssertEqual(objective.referenceForwards, 3, "the reference runs once per pair, then comes from the cache")
        let final = try SafetensorsFile(path: Fixture.path("preference/tiny-llama.safetensors"))
        for (pname, p) in policy.loraParameters {
            assertClose(p.data, try final.tensor("final." + Self.peftPrefix + pname).data, rel: 1e-4, "final \(pname)")
        }
    }

    func testSmolLM2DPOMatchesTRL() throws {
        let path = try realModelPath()
        let ref = try Fixture.json("preference/smollm2.json")
        let base = try BaseModel.load(path: path)
        let lora = LoRAConfig(rank: 1, alpha: 2, targets: [.q, .v])
        var rng = SeededRNG(seed: 0)
        let policy = try LlamaModel(weights: base.weights, lora: lora, rng: &rng)
        for (name, t) in policy.loraParameters {  // the fixture's formula
            t.data = (0..<t.count).map { k in
                Float(name.contains("lora_A") ? 0.02 * sin(1 + 0.37 * Double(k)) : 0.02 * cos(1 + 0.29 * Double(k)))
            }
        }
        // our rendering of the pairs gives TRL's ids: the chat template's, the reply where TRL starts it
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 512)
        let text = try JSONSerialization.data(withJSONObject: ref["pairs"] as! [Any])
        let lines = (try JSONSerialization.jsonObject(with: text) as! [Any]).map {
            String(decoding: try! JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]), as: UTF8.self)
        }
        let data = try DataReader.readPreferences(bytes: Array(lines.joined(separator: "\n").utf8), file: "smollm2-pairs", options: ReadOptions())
        let encoded = try encoder.encode(data)
        for (e, ids) in zip(encoded.examples, ref["ids"] as! [[String: Any]]) {
            for (x, key) in [(e.chosen, "chosen"), (e.rejected, "rejected")] {
                let full = ids.ints(key + "_full"), reply = ids.ints(key)
                XCTAssertEqual([x.inputs[0]] + x.targets, full, "\(key) ids")
                XCTAssertEqual(zip(x.targets, x.targetMask).filter(\.1).map(\.0), reply, "\(key) trained tokens")
            }
        }
        let objective = try PreferenceObjective(model: policy, reference: try LlamaModel(base: base.weights, adapter: nil),
                                                settings: PreferenceSettings(objective: .dpo, beta: ref.double("beta")))
        let b = try PreferenceBatcher(examples: encoded.examples, options: BatchOptions(batchSize: 2, layout: .sharePrefix, shuffle: false))
            .batches(epoch: 0)[0]
        var r2 = SeededRNG(seed: 0)
        let loss = objective.loss(b, rng: &r2, training: true)
        assertClose(loss.data, [Float(ref.double("loss"))], "SmolLM2 DPO loss")
        let metrics = MetricSum.means(objective.takeMetrics()) ?? [:]
        Self.assertMetrics(metrics, ref.dict("metrics"), beta: ref.double("beta"), "SmolLM2")
        loss.backward()
        let grads = try SafetensorsFile(path: Fixture.path("preference/smollm2-gradients.safetensors"))
        var worst: Float = 0
        for (name, t) in policy.loraParameters {
            let want = try grads.tensor(Self.peftPrefix + name).data
            worst = max(worst, relativeError(t.grad ?? [], want))
            assertClose(t.grad ?? [], want, rel: 1e-3, "SmolLM2 gradient of \(name)")
        }
        print("SmolLM2 DPO: loss \(loss.data[0]) vs TRL \(ref.double("loss")); largest relative gradient error \(worst)")

        // three DPO steps through the one loop from the same adapter: TRL + PEFT + torch's AdamW
        let t = ref.dict("trajectory")
        for (name, p) in policy.loraParameters {
            p.grad = nil
            p.data = (0..<p.count).map { k in
                Float(name.contains("lora_A") ? 0.02 * sin(1 + 0.37 * Double(k)) : 0.02 * cos(1 + 0.29 * Double(k)))
            }
        }
        var options = TrainingOptions()
        options.epochs = 1
        options.learningRate = Float(t.dict("optimizer").double("lr"))
        options.warmupSteps = 0
        options.weightDecay = Float(t.dict("optimizer").double("weight_decay"))
        options.clipGradNorm = Float(t.double("max_grad_norm"))
        options.schedule = .cosine
        let steps = t["steps"] as! [[String: Any]]
        var records: [StepRecord] = []
        _ = try Trainer(options: options).run(objective: objective, train: CyclingBatches(batches: [b], count: steps.count), eval: nil,
                                              checkpointer: MemoryCheckpointer(), state: TrainerState(seed: 1)) { e in
            if case .step(let r, _, _, _) = e { records.append(r) }
        }
        XCTAssertEqual(records.count, steps.count)
        for (r, s) in zip(records, steps) {
            assertClose([r.loss], [Float(s.double("loss"))], "SmolLM2 step \(r.step) loss")
            assertClose([r.learningRate], [Float(s.double("lr"))], rel: 1e-6, "SmolLM2 step \(r.step) lr")
            assertClose([r.gradNorm], [Float(s.double("grad_norm"))], rel: 1e-3, "SmolLM2 step \(r.step) grad norm")
            Self.assertMetrics(r.metrics ?? [:], s.dict("metrics"), beta: ref.double("beta"), "SmolLM2 step \(r.step)")
        }
        // The final adapter: as a whole within 1e-4 (‖Δ‖/‖θ‖ over every factor), and each tensor's
        // largest difference within 5e-3 of its largest value. Per tensor the error is bounded by
        // AdamW, not by our arithmetic: each value moves lr·m̂/√v̂, so a value whose gradient is
        // small or changes sign between steps turns the ~4e-5 gradient difference (above) into a
        // visible share of its step — the same effect MPIRunTests' bounds describe. The largest
        // per-tensor error seen is about 2e-3 (a value that moved ~5% of one 1e-3 step apart).
        worst = 0
        var diff = 0.0, norm = 0.0
        for (name, p) in policy.loraParameters {
            let want = try grads.tensor("final." + Self.peftPrefix + name).data
            worst = max(worst, relativeError(p.data, want))
            assertClose(p.data, want, rel: 5e-3, "SmolLM2 final \(name)")
            for (x, y) in zip(p.data, want) {
                diff += Double(x - y) * Double(x - y)
                norm += Double(y) * Double(y)
            }
        }
        let whole = (diff / norm).squareRoot()
        XCTAssertLessThanOrEqual(whole, 1e-4, "SmolLM2 final adapter: ‖Δ‖/‖θ‖ = \(whole)")
        print("SmolLM2 DPO trajectory: losses \(records.map(\.loss)); final adapter ‖Δ‖/‖θ‖ \(whole), largest per-tensor error \(worst)")
    }
}
