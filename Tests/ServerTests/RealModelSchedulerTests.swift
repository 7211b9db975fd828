// The server's scheduler runs a prompt as the generation loop (`generate`) does, on the real model
// with q8 and float32 activations: the whole prompt in one pass, the first token chosen from its
// last row. When the last prompt token opened the first decoding pass instead, its keys and values
// came from a one-row pass, whose rounding differs from a prompt pass's (blocked attention), and a
// greedy reply could change (as speculative decoding's did: PromptPassTests). Checked bit for bit
// on the prompt's keys and values the scheduler keeps in its prompt cache, and on the replies.
@testable import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import XCTest

final class RealModelSchedulerTests: XCTestCase {
    func testServedRepliesAreTheGenerationLoopsBitForBit() async throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let base = try BaseModel.load(path: path, storage: .stored)
        let texts = [
            "<|im_start|>system\nTurn the calendar request into JSON with title, day, start, minutes and attendees.<|im_end|>\n"
                + "<|im_start|>user\nput next wednesday project review with pavel @ 8:15 am, 45 minutes, in the small room with anna and li.<|im_end|>\n"
                + "<|im_start|>assistant\n{\"title\": \"project review\", \"day\": \"wednesday\", \"start\": \"8:15\", \"minutes\": 45, \"attendees\": [\"pavel\", ",
            "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
        ]
        for activations in [ActivationPrecision.q8, .float32] {
            let model = InferenceModel(base: base.weights, activations: activations)
            // the prompts share no prefix of 8 tokens: each is prefilled whole
            let scheduler = Scheduler(model: model, maxActive: 2, queueCapacity: 4)
            scheduler.start()
            defer { scheduler.shutdown() }
            for text in texts {
                let prompt = base.tokenizer.encode(text)
                let request = DecodeRequest(prompt: prompt, adapter: nil, maxTokens: 24, stopTokens: base.stopTokenIds)
                let served = await SchedulerTests.collect(try scheduler.submit(request).events).tokens
                let cache = model.makeCache(capacity: prompt.count + 30)
                let alone = Generator.generate(model, request.generation, cache: cache).tokens
                XCTAssertEqual(served, alone, "\(activations), \(prompt.count)-token prompt: served = generated")
                // the reply has ended: the decoding thread waits, its prompt cache holds this prompt
                guard let kept = scheduler.promptCache.entries.first(where: { $0.tokens == prompt }) else {
                    XCTFail("\(activations): the prompt was not kept")
                    continue
                }
                for layer in [0, base.config.numLayers - 1] {
                    let a = cache.view(layer: layer), b = kept.cache.view(layer: layer)
                    let bytes = prompt.count * cache.rowBytes
                    XCTAssertEqual(memcmp(a.keys, b.keys, bytes), 0, "\(activations), \(prompt.count)-token prompt: layer \(layer)'s keys differ")
                    XCTAssertEqual(memcmp(a.values, b.values, bytes), 0, "\(activations), \(prompt.count)-token prompt: layer \(layer)'s values differ")
                }
            }
        }
    }
}
