// Our logits for a token sequence, written as JSON for an outside checker
// (scripts/fixtures/check_peft_export.py compares them with PEFT's). Full-sequence logits from
// the inference engine (adapter merged), one row per input token. Sampling is left out.
import Foundation
import Inference
import ModelDefinition

public enum LogitsDump {
    /// Logits [ids.count, V] of `model` for `ids`, row-major.
    public static func logits(_ model: LoadedModel, ids: [Int]) -> [Float] {
        let engine = InferenceModel(model)
        return engine.forward(ids, cache: engine.makeCache(capacity: ids.count + 1), allLogits: true)
    }

    /// `{"ids": [...], "vocab_size": V, "logits": [[...], ...], "source": ...}`; floats in
    /// their shortest round-trip form.
    public static func json(ids: [Int], logits: [Float], vocabSize: Int, source: String) -> Data {
        var s = "{\"source\": \(quoted(source)), \"vocab_size\": \(vocabSize), \"ids\": \(ids), \"logits\": [\n"
        for r in 0..<ids.count {
            let row = logits[(r * vocabSize)..<((r + 1) * vocabSize)].map { "\($0)" }.joined(separator: ",")
            s += "[" + row + "]" + (r + 1 < ids.count ? ",\n" : "\n")
        }
        return Data((s + "]}\n").utf8)
    }

    static func quoted(_ s: String) -> String {
        let data = (try? JSONEncoder().encode(s)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
