// Speculative decoding runs the prompt as the generation loop does (issue 34's lossless rule, on
// the real model): the whole prompt in one pass, the first token chosen from its last row. A
// prompt pass of 32 rows or more attends in blocks, whose rounding differs from a verify row's
// one-row attention; when the last prompt token opened the first verify pass instead, the cache
// held other bits at that position and, with q8 activations, a greedy reply on the extraction
// example changed at its 14th token. Checked here bit for bit: the KV cache after the reply
// equals the generation loop's at every prompt position, and the replies are the same.
@testable import Inference
import ModelAssets
import ModelDefinition
import XCTest

final class PromptPassTests: XCTestCase {
    func testSpeculativeDecodingRunsThePromptAsTheGenerationLoop() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let base = try BaseModel.load(path: path, storage: .stored)
        let text = "<|im_start|>system\nTurn the calendar request into JSON with title, day, start, minutes and attendees.<|im_end|>\n"
            + "<|im_start|>user\nput next wednesday project review with pavel @ 8:15 am, 45 minutes, in the small room with anna and li.<|im_end|>\n"
            + "<|im_start|>assistant\n{\"title\": \"project review\", \"day\": \"wednesday\", \"start\": \"8:15\", \"minutes\": 45, \"attendees\": [\"pavel\", "
        let prompt = base.tokenizer.encode(text)
        XCTAssertGreaterThanOrEqual(prompt.count, InferenceModel.blockedAttentionRows, "a prompt long enough to attend in blocks")
        for activations in [ActivationPrecision.q8, .float32] {
            let model = InferenceModel(base: base.weights, activations: activations)
            let request = GenerationRequest(prompt: prompt, maxNewTokens: 12, stopTokens: base.stopTokenIds)
            let plainCache = model.makeCache(capacity: prompt.count + 20), specCache = model.makeCache(capacity: prompt.count + 20)
            let plain = Generator.generate(model, request, cache: plainCache).tokens
            let (spec, _) = SpeculativeDecoder(target: model, drafter: .ngram(NGramDraft()), draftTokens: 3).generate(request, cache: specCache)
            XCTAssertEqual(spec, plain, "\(activations): the same greedy reply")
            for layer in [0, base.config.numLayers - 1] {
                let a = plainCache.view(layer: layer), b = specCache.view(layer: layer)
                let bytes = prompt.count * plainCache.rowBytes
                XCTAssertEqual(a.first, 0)
                XCTAssertEqual(b.first, 0)
                XCTAssertEqual(memcmp(a.keys, b.keys, bytes), 0, "\(activations): layer \(layer)'s keys of the prompt differ")
                XCTAssertEqual(memcmp(a.values, b.values, bytes), 0, "\(activations): layer \(layer)'s values of the prompt differ")
            }
        }
    }
}
