// The real base model (SmolLM2-135M-Instruct, Q4_1 GGUF dequantized) against transformers on
// the same fp32 weights: chat-template ids, logits at chosen positions, greedy text with the KV
// cache, and the assistant-masked loss of a conversation. Skipped, saying so, when the model
// file is not fetched. Fixture: Fixtures/smollm2_reference.json.
import Autograd
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
@testable import Training
import XCTest

final class SmolLM2ReferenceTests: XCTestCase {
    nonisolated(unsafe) static var cached: (BaseModel, LlamaModel, InferenceModel)?

    func load() throws -> (BaseModel, LlamaModel, InferenceModel) {
        if let c = Self.cached { return c }
        let base = try BaseModel.load(path: try realModelPath())
        let model = try LlamaModel(base: base.weights, adapter: nil)
        let c = (base, model, try InferenceModel(model))
        Self.cached = c
        return c
    }

    func messages(_ list: Any?) -> [ChatMessage] {
        (list as! [[String: String]]).map { ChatMessage(role: ChatRole(rawValue: $0["role"]!)!, content: $0["content"]!) }
    }

    func testChatTemplateIdsMatchTransformers() throws {
        let (base, _, _) = try load()
        let ref = try Fixture.json("smollm2_reference.json")
        for p in ref["prompts"] as! [[String: Any]] {
            // The model's own template (its GGUF's tokenizer.chat_template), through the toolkit's Jinja engine.
            let text = try ChatFormat(base: base.template, tokenizer: base.tokenizer)
                .promptText(messages(p["messages"]).map { Message(role: $0.role, content: $0.content) })
            XCTAssertEqual(text, p["rendered_text"] as? String, p["name"] as! String)
            XCTAssertEqual(base.tokenizer.encode(text), p.ints("input_ids"), p["name"] as! String)
        }
    }

    func testLogitsMatchTransformers() throws {
        let (_, model, engine) = try load()
        let ref = try Fixture.json("smollm2_reference.json")
        let fixed = ref.ints("fixed_ids")
        for p in ref["prompts"] as! [[String: Any]] {
            let ids = p.ints("input_ids")
            var rng = SeededRNG(seed: 0)
            let logits = withNoGrad {
                model.logits(hidden: model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false)).data
            }
            let viaCache = engine.forward(ids, cache: engine.makeCache(), allLogits: true)
            let V = model.config.vocabSize
            for at in p["logits_at"] as! [[String: Any]] {
                let pos = (at["position"] as! NSNumber).intValue
                for (label, row) in [("autograd", logits), ("kv-cache", viaCache)] {
                    let r = Array(row[(pos * V)..<((pos + 1) * V)])
                    let topIds = at.ints("top_ids")
                    assertClose(topIds.map { r[$0] }, at.floats("top_values"), "\(label) top logits at \(pos)")
                    assertClose(fixed.map { r[$0] }, at.floats("fixed_values"), "\(label) fixed-id logits at \(pos)")
                    let mx = r.max()!
                    let lse = Double(mx) + log(r.reduce(0.0) { $0 + exp(Double($1 - mx)) })
                    XCTAssertEqual(lse, at.double("logsumexp"), accuracy: 1e-4 * abs(at.double("logsumexp")) + 1e-4)
                }
            }
        }
    }

    func testGreedyGenerationMatchesTransformers() throws {
        let (_, _, engine) = try load()
        let ref = try Fixture.json("smollm2_reference.json")
        for p in ref["prompts"] as! [[String: Any]] {
            let want = p.ints("greedy_new_ids")
            let margins = p.floats("greedy_top1_minus_top2")
            // pure greedy without stopping, as the fixture was made
            let (got, _) = Generator.generate(engine, GenerationRequest(prompt: p.ints("input_ids"), maxNewTokens: 32, stopTokens: []))
            // a ~1e-4 logit error may only flip a step whose top-2 margin is about that small
            let firstClose = margins.firstIndex { $0 < 1e-3 } ?? want.count
            XCTAssertEqual(Array(got.prefix(firstClose)), Array(want.prefix(firstClose)), p["name"] as! String)
            XCTAssertGreaterThanOrEqual(firstClose, 32, "fixture has a near-tie at step \(firstClose); only the prefix is compared")
        }
    }

    func testAssistantMaskedLossMatchesTransformers() throws {
        let (base, model, _) = try load()
        let ref = try Fixture.json("smollm2_reference.json").dict("conversation")
        let ids = ref.ints("input_ids")
        let tokenMask = ref.ints("token_mask").map { $0 == 1 }
        // our renderer's mask must equal the reference's, token by token
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 4096)
        let msgs = (ref["messages"] as! [[String: String]]).map { Message(role: ChatRole(rawValue: $0["role"]!)!, content: $0["content"]!) }
        let encoded = try encoder.encode(msgs)
        XCTAssertEqual(encoded.tokens, ids)
        XCTAssertEqual(encoded.isTarget, tokenMask)
        var rng = SeededRNG(seed: 0)
        let loss = withNoGrad {
            model.loss(inputs: Array(ids.dropLast()), targets: Array(ids.dropFirst()), lossMask: Array(tokenMask.dropFirst()),
                       layout: .rows(batch: 1, length: ids.count - 1), rng: &rng, training: false)
        }
        assertClose(loss.data, [Float(ref.double("loss"))], "conversation loss")
    }
}
