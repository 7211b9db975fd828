// Phi-3 and Phi-4-mini (Phi3ForCausalLM) beyond what every architecture's tests check: the tiny
// Phi-4-mini-like model's row that passes LongRoPE's original context (logits, loss and LoRA
// gradients on the long factors against PEFT; transformers' own KV-cache decoding across the switch,
// which our KV-cache pass must reproduce), the config values read against what llama.cpp's
// converter wrote, the sliding window on every layer or none, and fused modules adapted whole.
// Fixtures: scripts/fixtures/make_architecture_fixtures.py (phi3, phi4).
import Autograd
import Foundation
import Inference
import ModelAssets
import ModelDefinition
@testable import Training
import XCTest

final class PhiReferenceTests: XCTestCase {
    /// Partial rotary, LongRoPE and the window as decoded, against the converter's keys for the same config.
    func testConfigsHoldPhisFeatures() throws {
        let phi4 = try ArchitectureFixture("phi4"), phi3 = try ArchitectureFixture("phi3")
        let c4 = phi4.config, c3 = phi3.config
        XCTAssertEqual(c4.architecture, .phi3)
        XCTAssertTrue(c4.definition.fusedProjections)
        XCTAssertEqual([c4.headDim, c4.rotaryDim], [16, 12])  // partial_rotary_factor 0.75
        let s = try XCTUnwrap(c4.ropeScaling)
        XCTAssertEqual(s.kind, .longrope)
        XCTAssertEqual(s.shortFactors, [1.0, 1.05, 1.1, 1.3, 1.6, 2.0])
        XCTAssertEqual(s.longFactors, [1.0, 1.5, 3.0, 6.0, 11.0, 20.0])
        XCTAssertEqual(s.originalMaxPositionEmbeddings, 9)
        XCTAssertTrue(c4.tieWordEmbeddings)
        XCTAssertNil(c4.slidingWindow)
        XCTAssertEqual(c4.slidingWindowLayers, [])
        // the attention factor transformers derives (max / original = 64 / 9) is the one llama.cpp's converter wrote
        let manifest = try JSONSerialization.jsonObject(
            with: Data(contentsOf: ArchitectureFixture.root.appendingPathComponent("phi4/gguf_manifest.json"))) as! [String: Any]
        let written = ((manifest["metadata"] as! [String: Any])["phi3.rope.scaling.attn_factor"] as! [String: NSNumber])["float32"]!
        XCTAssertEqual(Float(try XCTUnwrap(s.attentionFactor)), written.floatValue)
        XCTAssertEqual(c4.rope(reaching: 9).factors, s.shortFactors)
        XCTAssertEqual(c4.rope(reaching: 10).factors, s.longFactors)
        // Phi-3-mini-like: whole heads, a window transformers applies on every layer, as the executors do
        XCTAssertEqual(c3.rotaryDim, c3.headDim)
        XCTAssertNil(c3.ropeScaling)
        XCTAssertFalse(c3.tieWordEmbeddings)
        XCTAssertEqual(c3.slidingWindow, 16)
        XCTAssertEqual(c3.slidingWindowLayers, [0, 1, 2])
        XCTAssertEqual((0..<3).map { c3.window(layer: $0) }, [16, 16, 16])
        XCTAssertEqual((0..<3).map { c3.ropeTheta(layer: $0) }, [10000, 10000, 10000])  // one RoPE base
        XCTAssertEqual(TensorTable.loraTensors(config: c3, lora: ArchitectureFixture.lora).prefix(4).map(\.name), [
            "model.layers.0.self_attn.qkv_proj.lora_A.weight", "model.layers.0.self_attn.qkv_proj.lora_B.weight",
            "model.layers.0.self_attn.o_proj.lora_A.weight", "model.layers.0.self_attn.o_proj.lora_B.weight",
        ])
        XCTAssertEqual(TensorTable.loraTensors(config: c3, lora: ArchitectureFixture.lora)[1].shape, [3 * c3.queryDim, 2])
    }

    /// The row past the original context in one training pass: every position on the long factors,
    /// as transformers' one forward call; logits, loss and every LoRA gradient against PEFT.
    func testLongRowMatchesPEFTOnTheLongFactors() throws {
        let f = try ArchitectureFixture("phi4")
        let ids = f.ints("long_input_ids")
        XCTAssertGreaterThan(ids[0].count - 1, f.config.ropeScaling!.originalMaxPositionEmbeddings!, "the loss row passes the original context")
        let model = try f.model(withLoRA: true)
        assertClose(ArchitectureFixture.logits(model, ids), try f.floats("long_logits"), "phi4 long row logits")
        var rng = SeededRNG(seed: 0)
        let n = ids[0].count - 1
        let loss = model.loss(inputs: Array(ids[0].dropLast()), targets: Array(ids[0].dropFirst()), lossMask: [Bool](repeating: true, count: n),
                              layout: .rows(batch: 1, length: n), rng: &rng, training: true)
        assertClose(loss.data, try f.floats("long_loss"), "phi4 long row loss")
        loss.backward()
        for (name, t) in model.loraParameters {
            assertClose(t.grad ?? [], try f.floats("long_grad." + name), "phi4 long row gradient of \(name)")
        }
    }

    /// transformers' KV-cache decoding a token at a time across the original context (short factors
    /// until the step that passes it; cached keys keep theirs): ours, merged float32 and stored with
    /// the adapter per row. A prefill of the whole row is one pass on the long factors.
    func testKVCacheDecodingAcrossTheOriginalContextMatchesTransformers() throws {
        let f = try ArchitectureFixture("phi4")
        let ids = f.ints("long_input_ids")[0], V = f.config.vocabSize
        let model = try f.model(withLoRA: true)
        let adapter = try XCTUnwrap(model.adapter(baseSignature: nil))
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try f.writeGGUF(dir + "/m.gguf")
        let stored = try BaseWeights(file: ModelLoader.load(path: dir + "/m.gguf", storage: .stored))
        XCTAssertTrue(stored.layers[0].projection(.k).isStored)
        let decode = try f.floats("decode_logits"), whole = try f.floats("long_logits")
        for (what, engine) in [("merged", try InferenceModel(model)), ("stored, adapter per row", InferenceModel(base: stored, adapter: adapter))] {
            let cache = engine.makeCache()
            var got: [Float] = []
            for t in ids { got += engine.forward([t], cache: cache) }
            XCTAssertEqual(got.count, ids.count * V)
            assertClose(got, decode, "phi4 \(what): decoding across the original context")
            assertClose(engine.forward(ids, cache: engine.makeCache(), allLogits: true), whole, "phi4 \(what): one prefill of the long row")
        }
        // and the switch is real: the decoded steps past the original context differ from the one-pass logits
        let past = (f.config.ropeScaling!.originalMaxPositionEmbeddings! * V)..<(ids.count * V)
        XCTAssertGreaterThan(relativeError(Array(decode[past]), Array(whole[past])), 1e-3)
    }

    /// Phi-3's window is on every layer or none: a config that windows some layers is refused
    /// naming the field, and a config.json written before the merge (window, no layer list) reads
    /// as every layer.
    func testWindowCoversEveryLayer() throws {
        let c3 = try ArchitectureFixture("phi3").config
        var some = c3
        some.slidingWindowLayers = [0, 2]
        XCTAssertThrowsError(try some.validate()) { e in
            guard case .invalidConfig(_, "slidingWindowLayers", _) = e as? ModelAssetsError else { return XCTFail("\(e)") }
        }
        var json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(c3)) as! [String: Any]
        XCTAssertNotNil(json.removeValue(forKey: "slidingWindowLayers"))
        let old = try JSONDecoder().decode(ModelConfig.self, from: JSONSerialization.data(withJSONObject: json))
        XCTAssertEqual(old, c3)
        XCTAssertEqual(c3.selectingLayers([2, 0]).slidingWindowLayers, [0, 1])
    }

    /// A fused module is one Linear to PEFT: LoRA adapts q, k and v together or none of them.
    func testFusedModulesAreAdaptedWhole() throws {
        let f = try ArchitectureFixture("phi3")
        var rng = SeededRNG(seed: 1)
        XCTAssertThrowsError(try LlamaModel(weights: f.baseWeights(), lora: LoRAConfig(rank: 2, targets: [.q, .v]), rng: &rng)) { e in
            XCTAssertTrue("\(e.localizedDescription)".contains("qkv_proj"), "\(e.localizedDescription)")
        }
        let model = try LlamaModel(weights: f.baseWeights(), lora: LoRAConfig(rank: 2, targets: [.gate, .up]), rng: &rng)
        XCTAssertEqual(model.loraParameters.map(\.name).prefix(2), ["model.layers.0.mlp.gate_up_proj.lora_A.weight", "model.layers.0.mlp.gate_up_proj.lora_B.weight"])
        XCTAssertEqual(model.loraParameters[1].tensor.shape, [2 * f.config.intermediateSize, 2])
    }
}
