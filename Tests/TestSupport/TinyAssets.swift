// Builds, in a temporary folder, a complete tiny base model as a GGUF file (random Llama
// weights, a byte-level BPE vocabulary with ChatML specials, a ChatML template) and small JSONL
// data sets, so training, resume, draft distillation, speculative decoding and export run in
// milliseconds without the network or the real model. Shared by the test targets (a library
// target only tests depend on); options give a model of other depth or another vocabulary.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition

public enum TinyAssets {
    /// GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 + n.
    public static func byteSymbols() -> [String] {
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

    public static let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

    public static func tokenizer(extraMerges: [String] = []) -> TokenizerData {
        let bytes = byteSymbols()
        let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"] + extraMerges
        var tokens = specials + bytes
        for m in merges { tokens.append(m.replacingOccurrences(of: " ", with: "")) }
        var types = [Int32](repeating: 1, count: tokens.count)
        for i in 0..<specials.count { types[i] = 3 }
        let template = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
        return TokenizerData(tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: "gpt2",
                             bosTokenId: 1, eosTokenId: 2, padTokenId: 0, chatTemplate: template)
    }

    public static func config(vocab: Int, layers: Int = 2, context: Int = 512) throws -> ModelConfig {
        try ModelConfig(architecture: .llama, hiddenSize: 32, intermediateSize: 48, numLayers: layers, numHeads: 4, numKVHeads: 2,
                    headDim: 8, vocabSize: vocab, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true,
                    attentionBias: false, maxPositionEmbeddings: context)
    }

    /// Writes tiny.gguf into `dir` and returns its path. `seed` changes every weight; the same seed
    /// gives the same file.
    /// `addBOS` sets `tokenizer.ggml.add_bos_token` (absent by default: no BOS before raw text).
    /// `extraSpecials`: special tokens added after the vocabulary (a chat format's markers).
    public static func writeModel(in dir: String, seed: UInt64 = 1, name: String = "tiny", layers: Int = 2,
                           extraMerges: [String] = [], extraSpecials: [String] = [], context: Int = 512,
                           addBOS: Bool? = nil) throws -> String {
        var tok = tokenizer(extraMerges: extraMerges)
        tok.addBOS = addBOS
        for t in extraSpecials {
            tok.tokens.append(t)
            tok.tokenTypes?.append(3)
        }
        let cfg = try config(vocab: tok.tokens.count, layers: layers, context: context)
        var rng = SeededRNG(seed: seed)
        var tensors: [String: HostTensor] = [:]
        // In name order: the same seed gives the same weights in every process (a dictionary's
        // order changes from one run to the next).
        for (name, shape) in TensorTable.shapes(for: cfg).sorted(by: { $0.key < $1.key }) {
            let n = shape.reduce(1, *)
            let isNorm = shape.count == 1
            let values = (0..<n).map { _ in isNorm ? 1 + 0.1 * Float.random(in: -1...1, using: &rng) : 0.2 * Float.random(in: -1...1, using: &rng) }
            tensors[name] = HostTensor(shape: shape, data: values)
        }
        let path = dir + "/\(name).gguf"
        try ModelExport.writeGGUF(config: cfg, tensors: tensors, tokenizer: tok, to: path)
        return path
    }

    /// A tiny base wide enough for every block type (hidden 256, feed-forward 512: rows of whole
    /// K-quant blocks), its matrices written as `type`; returns its path.
    public static func writeBlockModel(_ type: GGMLType, in dir: String, seed: UInt64 = 3, tied: Bool = true) throws -> String {
        let tok = tokenizer()
        let cfg = try ModelConfig(architecture: .llama, hiddenSize: 256, intermediateSize: 512, numLayers: 2, numHeads: 4, numKVHeads: 2,
                                  headDim: 64, vocabSize: tok.tokens.count, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: tied,
                                  attentionBias: false, maxPositionEmbeddings: 512)
        var rng = SeededRNG(seed: seed)
        var tensors: [String: HostTensor] = [:]
        for (name, shape) in TensorTable.shapes(for: cfg).sorted(by: { $0.key < $1.key }) {  // in name order, as writeModel
            let n = shape.reduce(1, *)
            tensors[name] = HostTensor(shape: shape, data: (0..<n).map { _ in shape.count == 1 ? 1 + 0.1 * Float.random(in: -1...1, using: &rng) : 0.08 * Float.random(in: -1...1, using: &rng) })
        }
        let path = dir + "/tiny-\(type.name)\(tied ? "" : "-untied").gguf"
        try ModelExport.writeGGUF(config: cfg, tensors: tensors, tokenizer: tok, to: path, matrixType: type)
        return path
    }

    /// `count` short conversations: the assistant repeats the user's word in upper case.
    public static func writeData(_ path: String, count: Int, offset: Int = 0) throws {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
        var lines: [String] = []
        for i in 0..<count {
            let w = words[(i + offset) % words.count] + String(i % 3)
            lines.append(#"{"messages": [{"role": "user", "content": "say \#(w)"}, {"role": "assistant", "content": "\#(w.uppercased())"}]}"#)
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// A new folder for one test's files, inside this process's folder (`processFolder`).
    public static func tempDir(_ name: String = #function) -> String {
        let dir = processFolder + "/\(name.filter { $0.isLetter || $0.isNumber })-\(UInt32.random(in: 0...UInt32.max))"
        try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    /// `$TMPDIR/adapter-tests-<pid>`, removed with everything in it when the test process exits
    /// (a run writes ~1 GB of models and checkpoints; they used to stay in /tmp). Set
    /// ADAPTER_KEEP_TEST_FILES=1 to keep them for a look after a failure.
    public static let processFolder: String = {
        let root = NSTemporaryDirectory() + "adapter-tests-\(getpid())"
        try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        if ProcessInfo.processInfo.environment["ADAPTER_KEEP_TEST_FILES"] != "1" {
            atexit { try? FileManager.default.removeItem(atPath: TinyAssets.processFolder) }
        }
        return root
    }()
}
