// A copy of TrainingTests' TinyAssets (a test target cannot import another's files): a complete
// tiny base model as a GGUF file (random Llama weights, byte-level BPE with ChatML specials, a
// ChatML template) and small JSONL data sets in a temp folder, so train → export → load runs in
// milliseconds without the network. Adds a tiny adapter run and a hand-made draft checkpoint.
import Autograd
import Foundation
import ModelAssets
import XCTest

enum TinyAssets {
    /// GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 + n.
    static func byteSymbols() -> [String] {
        var printable = Set<Int>()
        for r in [33...126, 161...172, 174...255] { for b in r { printable.insert(b) } }
        var out = [String](repeating: "", count: 256)
        var n = 0
        for b in 0..<256 {
            if printable.contains(b) {
                out[b] = String(UnicodeScalar(UInt8(b)))
            } else {
                out[b] = String(UnicodeScalar(UInt32(256 + n))!)
                n += 1
            }
        }
        return out
    }

    static let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

    static func tokenizer() -> TokenizerData {
        let bytes = byteSymbols()
        let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"]
        var tokens = specials + bytes
        for m in merges { tokens.append(m.replacingOccurrences(of: " ", with: "")) }
        var types = [Int32](repeating: 1, count: tokens.count)
        for i in 0..<specials.count { types[i] = 3 }
        let template = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
        return TokenizerData(tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: "gpt2",
                             bosTokenId: 1, eosTokenId: 2, padTokenId: 0, chatTemplate: template)
    }

    static func config(vocab: Int) throws -> ModelConfig {
        try ModelConfig(architecture: .llama, hiddenSize: 32, intermediateSize: 48, numLayers: 2, numHeads: 4, numKVHeads: 2,
                    headDim: 8, vocabSize: vocab, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true,
                    attentionBias: false, maxPositionEmbeddings: 512)
    }

    /// Writes tiny.gguf into `dir` and returns its path. `seed` changes every weight.
    static func writeModel(in dir: String, seed: UInt64 = 1) throws -> String {
        let tok = tokenizer()
        let cfg = try config(vocab: tok.tokens.count)
        var rng = SeededRNG(seed: seed)
        var tensors: [String: HostTensor] = [:]
        for (name, shape) in ModelLoader.expectedShapes(for: cfg) {
            let n = shape.reduce(1, *)
            let isNorm = shape.count == 1
            let values = (0..<n).map { _ in isNorm ? 1 + 0.1 * Float.random(in: -1...1, using: &rng) : 0.2 * Float.random(in: -1...1, using: &rng) }
            tensors[name] = HostTensor(shape: shape, data: values)
        }
        let path = dir + "/tiny.gguf"
        try ModelExport.writeGGUF(config: cfg, tensors: tensors, tokenizer: tok, to: path)
        return path
    }

    /// `count` short conversations: the assistant repeats the user's word in upper case.
    static func writeData(_ path: String, count: Int, offset: Int = 0) throws {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
        var lines: [String] = []
        for i in 0..<count {
            let w = words[(i + offset) % words.count] + String(i % 3)
            lines.append(#"{"messages": [{"role": "user", "content": "say \#(w)"}, {"role": "assistant", "content": "\#(w.uppercased())"}]}"#)
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    static func tempDir(_ name: String = #function) -> String {
        let dir = NSTemporaryDirectory() + "adapter-tests-\(getpid())-\(name.filter { $0.isLetter || $0.isNumber })-\(UInt32.random(in: 0...UInt32.max))"
        try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }
}

import Training

/// A tiny base model on disk with a briefly trained adapter (and optionally a draft).
struct TinyRun {
    var dir: String
    var base: BaseModel
    var adapterPath: String

    /// Writes the base model and data into a fresh temp folder and trains a rank-4 adapter for
    /// a few steps (B moves away from zero, so the adapter changes the logits).
    static func make(_ name: String = #function, seed: UInt64 = 1, targets: [LoRATarget] = LoRATarget.allCases) throws -> TinyRun {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: seed))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 8)
        let settings = AdapterRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8, targets: targets, dropout: 0),
            checkpointDir: dir + "/run", checkpointFrequency: 1, resumeFrom: nil, resume: false, keepBest: nil,
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 2
                o.learningRate = 2e-2
                o.warmupSteps = 1
                o.seed = 11
                return o
            })
        let outcome = try AdapterRun.run(settings, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { _ in })
        guard case .finished(let path) = outcome else { throw XCTSkip("tiny training did not finish: \(outcome)") }
        return TinyRun(dir: dir, base: base, adapterPath: path)
    }

    /// A hand-made draft checkpoint: the base's layer 1 as a 1-layer draft, slightly perturbed.
    /// With `omitShared`, the embedding and final norm are left out (as a draft trained with
    /// frozen embeddings would), so packaging needs the base.
    func writeDraft(omitShared: Bool = false, baseSignature: String? = nil, teacher: String? = nil, vocabulary: [Int]? = nil,
                    name: String = "draft-model-final.safetensors") throws -> String {
        var cfg = base.config
        cfg.numLayers = 1
        var params: [(name: String, tensor: Tensor)] = []
        var rng = SeededRNG(seed: 5)
        for (n, shape) in ModelLoader.expectedShapes(for: cfg).sorted(by: { $0.key < $1.key }) {
            let shared = !n.hasPrefix("model.layers.")
            if omitShared && shared { continue }
            let source = n.replacingOccurrences(of: "model.layers.0.", with: "model.layers.1.")
            var values = base.file.tensors[source]!.data
            if !shared { for i in values.indices { values[i] += 0.01 * Float.random(in: -1...1, using: &rng) } }
            params.append((n, Tensor(shape: shape, data: values)))
        }
        if let vocabulary {
            params.append((DraftModel.vocabularyTensorName, Tensor(shape: [vocabulary.count], data: vocabulary.map(Float.init))))
        }
        let header = CheckpointHeader(content: .draft, baseSignature: baseSignature ?? base.signature, baseConfig: base.config,
                                      lora: nil, draftConfig: cfg, draftLayers: [1], teacherAdapterSignature: teacher,
                                      state: TrainerState(seed: 1), options: TrainingOptions(), dataFingerprint: "test", label: "final")
        let path = dir + "/run/" + name
        try Checkpoint.write(to: path, header: header, params: params, optimizer: nil)
        return path
    }
}
