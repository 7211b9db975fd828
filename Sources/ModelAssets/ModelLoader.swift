// Loading a base model from a `.gguf` file or a Hugging Face folder into one convention:
// Hugging Face tensor names and layout (q/k rows un-permuted from llama.cpp's RoPE order), all
// Float, shapes checked against the config. Tokenizer building is left to Tokenizer*.swift.
// Name and permutation rules follow llama.cpp's convert_hf_to_gguf.py (`LlamaModel.permute`).
import Foundation

public enum BaseModelFormat: String, Sendable, Codable {
    case gguf, huggingFace
}

/// Where the tokenizer comes from: GGUF metadata, or a Hugging Face folder's files.
public enum TokenizerSource: Sendable, Equatable {
    case gguf(TokenizerData)
    /// `tokenizerJSON` is the folder's tokenizer.json path when the folder has one.
    case huggingFace(folder: String, tokenizerJSON: String?)
}

/// A loaded base model: config, every weight in Hugging Face naming and layout, tokenizer source.
public struct BaseModelFile: Sendable {
    public let path: String
    public let format: BaseModelFormat
    public let config: ModelConfig
    /// Keyed by Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
    public let tensors: [String: HostTensor]
    public let tokenizer: TokenizerSource

    public init(path: String, format: BaseModelFormat, config: ModelConfig, tensors: [String: HostTensor], tokenizer: TokenizerSource) {
        self.path = path
        self.format = format
        self.config = config
        self.tensors = tensors
        self.tokenizer = tokenizer
    }

    /// The base model signature (lowercase hex SHA-256); see `BaseModelSignature`. Costs one
    /// pass over the weights, so compute it once.
    public func signature() -> String {
        BaseModelSignature.compute(config: config, tensors: tensors)
    }
}

public enum ModelLoader {
    /// Loads a `.gguf` file or a Hugging Face folder (config.json + safetensors).
    public static func load(path: String) throws -> BaseModelFile {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ModelAssetsError.io(path: path, reason: "no such file or folder")
        }
        return isDirectory.boolValue ? try loadHuggingFace(folder: path) : try loadGGUF(path: path)
    }

    // MARK: GGUF

    public static func loadGGUF(path: String) throws -> BaseModelFile {
        let file = try GGUFFile(path: path)
        let config = try ModelConfig.fromGGUF(file, hasOutputTensor: file.tensorInfo(named: "output.weight") != nil)
        var pairs: [(gguf: String, hf: String)] = []
        for info in file.tensors {
            guard let hf = huggingFaceName(forGGUF: info.name) else {
                if info.name == "rope_freqs.weight" {
                    throw ModelAssetsError.invalidConfig(
                        path: path, field: "rope_freqs.weight", reason: "Llama 3.1-style RoPE frequency factors are not supported; load the Hugging Face folder instead")
                }
                throw ModelAssetsError.unexpectedTensor(path: path, tensor: info.name)
            }
            if !info.type.isDequantizable {
                throw ModelAssetsError.unsupportedTensorType(
                    path: path, tensor: info.name, type: info.type.name, supported: GGMLType.dequantizable.map(\.name))
            }
            pairs.append((info.name, hf))
        }
        let renames = pairs
        try checkShapes(renames.map { ($0.hf, file.tensorInfo(named: $0.gguf)!.shape) }, config: config, path: path)

        let permuted = config.architecture != .qwen2
        let slots = ResultSlots<HostTensor>(count: renames.count)
        // Largest first, so the embedding does not start last on a busy core.
        let order = renames.indices.sorted { file.tensorInfo(named: renames[$0].gguf)!.elementCount > file.tensorInfo(named: renames[$1].gguf)!.elementCount }
        DispatchQueue.concurrentPerform(iterations: order.count) { k in
            let i = order[k]
            slots.set(i, Result {
                let t = try file.dequantize(renames[i].gguf)
                guard permuted, let heads = ropeHeads(forHuggingFace: renames[i].hf, config: config) else { return t }
                return RoPELayout.unpermuteFromGGUF(t, heads: heads)
            })
        }
        var tensors: [String: HostTensor] = [:]
        tensors.reserveCapacity(renames.count)
        for (i, r) in renames.enumerated() { tensors[r.hf] = try slots.get(i) }
        return BaseModelFile(path: path, format: .gguf, config: config, tensors: tensors, tokenizer: .gguf(try tokenizerData(from: file)))
    }

    /// `tokenizer.ggml.*` and `tokenizer.chat_template` as `TokenizerData`.
    /// Only byte-level BPE (`tokenizer.ggml.model` "gpt2", or absent) is accepted: a SentencePiece
    /// vocabulary would otherwise be tokenized wrongly without any error.
    public static func tokenizerData(from file: GGUFFile) throws -> TokenizerData {
        if file.metadata["tokenizer.ggml.model"] != nil {
            let model = try file.string("tokenizer.ggml.model")
            guard model == "gpt2" else {
                throw ModelAssetsError.invalidConfig(
                    path: file.path, field: "tokenizer.ggml.model",
                    reason: "tokenizer '\(model)' is not supported; only byte-level BPE ('gpt2': SmolLM, Llama 3, Qwen2, Mistral Nemo ...) is")
            }
        }
        let tokens = try file.stringArray("tokenizer.ggml.tokens")
        var merges: [String] = []
        if file.metadata["tokenizer.ggml.merges"] != nil { merges = try file.stringArray("tokenizer.ggml.merges") }
        var types: [Int32]?
        if let v = file.metadata["tokenizer.ggml.token_type"] {
            guard let ints = v.intArray, ints.allSatisfy({ Int(Int32.min)...Int(Int32.max) ~= $0 }) else {
                throw ModelAssetsError.malformed(path: file.path, item: "key 'tokenizer.ggml.token_type'", reason: "expected an array of integers")
            }
            guard ints.count == tokens.count else {
                throw ModelAssetsError.malformed(
                    path: file.path, item: "key 'tokenizer.ggml.token_type'", reason: "has \(ints.count) entries for \(tokens.count) tokens")
            }
            types = ints.map { Int32($0) }
        }
        func optionalID(_ key: String) throws -> Int? {
            guard file.metadata[key] != nil else { return nil }
            let id = try file.int(key)
            guard id >= 0, id < tokens.count else {
                throw ModelAssetsError.malformed(path: file.path, item: "key '\(key)'", reason: "token id \(id) is outside the \(tokens.count)-token vocabulary")
            }
            return id
        }
        let pre = file.metadata["tokenizer.ggml.pre"] == nil ? "default" : try file.string("tokenizer.ggml.pre")
        let template = file.metadata["tokenizer.chat_template"] == nil ? nil : try file.string("tokenizer.chat_template")
        return TokenizerData(
            tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: pre,
            bosTokenId: try optionalID("tokenizer.ggml.bos_token_id"), eosTokenId: try optionalID("tokenizer.ggml.eos_token_id"),
            padTokenId: try optionalID("tokenizer.ggml.padding_token_id"), chatTemplate: template)
    }

    // MARK: Hugging Face folder

    public static func loadHuggingFace(folder: String) throws -> BaseModelFile {
        let dir = URL(fileURLWithPath: folder)
        let configPath = dir.appendingPathComponent("config.json").path
        let config = try ModelConfig.fromHuggingFace(path: configPath)
        let checkpoint = try SafetensorsCheckpoint(folder: folder)
        var kept: [String] = []
        var tiedHead = false
        for name in checkpoint.tensorNames {
            if name.hasSuffix(".rotary_emb.inv_freq") { continue }  // a buffer older checkpoints saved; recomputed from the config
            if name == "lm_head.weight", config.tieWordEmbeddings { tiedHead = true; continue }
            kept.append(name)
        }
        let names = kept
        let sourcePath = { (name: String) in checkpoint.shards[name]?.path ?? folder }
        try checkShapes(names.map { ($0, checkpoint.tensorInfo(named: $0)!.shape) }, config: config, path: folder, pathForTensor: sourcePath)

        let slots = ResultSlots<HostTensor>(count: names.count)
        DispatchQueue.concurrentPerform(iterations: names.count) { i in
            slots.set(i, Result { try checkpoint.tensor(names[i]) })
        }
        var tensors: [String: HostTensor] = [:]
        for (i, name) in names.enumerated() { tensors[name] = try slots.get(i) }
        if tiedHead {
            // A tied model may still store the head; accept it only if it is the embedding.
            let head = try checkpoint.tensor("lm_head.weight")
            guard head == tensors["model.embed_tokens.weight"] else {
                throw ModelAssetsError.invalidConfig(
                    path: sourcePath("lm_head.weight"), field: "tie_word_embeddings",
                    reason: "config says the head is tied but lm_head.weight differs from model.embed_tokens.weight; set tie_word_embeddings to false")
            }
        }
        let tokenizerJSON = dir.appendingPathComponent("tokenizer.json").path
        return BaseModelFile(
            path: folder, format: .huggingFace, config: config, tensors: tensors,
            tokenizer: .huggingFace(folder: folder, tokenizerJSON: FileManager.default.fileExists(atPath: tokenizerJSON) ? tokenizerJSON : nil))
    }

    // MARK: Names and shapes

    /// Every tensor the config implies, Hugging Face name -> row-major shape.
    public static func expectedShapes(for config: ModelConfig) -> [String: [Int]] {
        let d = config.hiddenSize, f = config.intermediateSize, v = config.vocabSize
        let q = config.queryDim, kv = config.keyValueDim
        var shapes: [String: [Int]] = ["model.embed_tokens.weight": [v, d], "model.norm.weight": [d]]
        if !config.tieWordEmbeddings { shapes["lm_head.weight"] = [v, d] }
        for i in 0..<config.numLayers {
            let p = "model.layers.\(i)."
            shapes[p + "input_layernorm.weight"] = [d]
            shapes[p + "post_attention_layernorm.weight"] = [d]
            shapes[p + "self_attn.q_proj.weight"] = [q, d]
            shapes[p + "self_attn.k_proj.weight"] = [kv, d]
            shapes[p + "self_attn.v_proj.weight"] = [kv, d]
            shapes[p + "self_attn.o_proj.weight"] = [d, q]
            if config.attentionBias {
                shapes[p + "self_attn.q_proj.bias"] = [q]
                shapes[p + "self_attn.k_proj.bias"] = [kv]
                shapes[p + "self_attn.v_proj.bias"] = [kv]
            }
            shapes[p + "mlp.gate_proj.weight"] = [f, d]
            shapes[p + "mlp.up_proj.weight"] = [f, d]
            shapes[p + "mlp.down_proj.weight"] = [d, f]
        }
        return shapes
    }

    /// Checks a set of (name, shape) against the config: nothing missing, nothing extra, every shape right.
    public static func checkShapes(_ found: [(name: String, shape: [Int])], config: ModelConfig, path: String,
                                   pathForTensor: ((String) -> String)? = nil) throws {
        let expected = expectedShapes(for: config)
        var seen = Set<String>()
        for (name, shape) in found {
            let where_ = pathForTensor?(name) ?? path
            guard let want = expected[name] else { throw ModelAssetsError.unexpectedTensor(path: where_, tensor: name) }
            guard want == shape else { throw ModelAssetsError.shapeMismatch(path: where_, tensor: name, expected: want, found: shape) }
            seen.insert(name)
        }
        if let missing = expected.keys.filter({ !seen.contains($0) }).sorted(by: sortedTensorOrder).first {
            throw ModelAssetsError.missingTensor(path: path, tensor: missing)
        }
    }

    /// Hugging Face name of a llama.cpp tensor name, or nil if it is not a decoder weight.
    public static func huggingFaceName(forGGUF name: String) -> String? {
        switch name {
        case "token_embd.weight": return "model.embed_tokens.weight"
        case "output_norm.weight": return "model.norm.weight"
        case "output.weight": return "lm_head.weight"
        default: break
        }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "blk", let layer = Int(parts[1]), layer >= 0, String(layer) == parts[1],
              let kind = layerNames.first(where: { $0.gguf == parts[2] }), parts[3] == "weight" || parts[3] == "bias"
        else { return nil }
        if parts[3] == "bias", !kind.mayHaveBias { return nil }
        return "model.layers.\(layer).\(kind.hf).\(parts[3])"
    }

    /// llama.cpp name of a Hugging Face tensor name, or nil if it is not a decoder weight.
    public static func ggufName(forHuggingFace name: String) -> String? {
        switch name {
        case "model.embed_tokens.weight": return "token_embd.weight"
        case "model.norm.weight": return "output_norm.weight"
        case "lm_head.weight": return "output.weight"
        default: break
        }
        guard name.hasPrefix("model.layers.") else { return nil }
        let rest = name.dropFirst("model.layers.".count)
        guard let dot = rest.firstIndex(of: "."), let layer = Int(rest[..<dot]), String(layer) == rest[..<dot] else { return nil }
        let tail = rest[rest.index(after: dot)...]
        for kind in layerNames {
            if tail == kind.hf + ".weight" { return "blk.\(layer).\(kind.gguf).weight" }
            if kind.mayHaveBias, tail == kind.hf + ".bias" { return "blk.\(layer).\(kind.gguf).bias" }
        }
        return nil
    }

    private static let layerNames: [(gguf: Substring, hf: String, mayHaveBias: Bool)] = [
        ("attn_norm", "input_layernorm", false), ("ffn_norm", "post_attention_layernorm", false),
        ("attn_q", "self_attn.q_proj", true), ("attn_k", "self_attn.k_proj", true), ("attn_v", "self_attn.v_proj", true),
        ("attn_output", "self_attn.o_proj", false),
        ("ffn_gate", "mlp.gate_proj", false), ("ffn_up", "mlp.up_proj", false), ("ffn_down", "mlp.down_proj", false),
    ]

    /// Heads to (un)permute by for q and k projections (weights and biases); nil for other tensors.
    public static func ropeHeads(forHuggingFace name: String, config: ModelConfig) -> Int? {
        if name.hasSuffix(".self_attn.q_proj.weight") || name.hasSuffix(".self_attn.q_proj.bias") { return config.numHeads }
        if name.hasSuffix(".self_attn.k_proj.weight") || name.hasSuffix(".self_attn.k_proj.bias") { return config.numKVHeads }
        return nil
    }

    /// Layer-aware order: embeddings, layers by number, final norm, head.
    static func sortedTensorOrder(_ a: String, _ b: String) -> Bool {
        func key(_ s: String) -> (Int, Int, String) {
            if s.hasPrefix("model.embed") { return (0, 0, s) }
            if s.hasPrefix("model.layers.") {
                let n = Int(s.dropFirst(13).prefix { $0.isNumber }) ?? 0
                return (1, n, s)
            }
            return (2, 0, s)
        }
        return key(a) < key(b)
    }
}

/// llama.cpp stores Llama q and k projection rows per head in interleaved order (pairs
/// (0, D/2), (1, D/2+1), ...) for its RoPE kernel; Hugging Face stores each head as two halves.
/// GGUF row h*D + 2i + s holds Hugging Face row h*D + s*D/2 + i (D = rows / heads, s in {0, 1}).
public enum RoPELayout {
    /// Hugging Face -> GGUF: convert_hf_to_gguf's `w.reshape(heads, 2, D/2, cols).swapaxes(1, 2)`.
    public static func permuteForGGUF(_ t: HostTensor, heads: Int) -> HostTensor {
        remap(t, heads: heads) { h, d, i, s in (h * d + s * d / 2 + i, h * d + 2 * i + s) }
    }

    /// GGUF -> Hugging Face, the inverse of `permuteForGGUF`.
    public static func unpermuteFromGGUF(_ t: HostTensor, heads: Int) -> HostTensor {
        remap(t, heads: heads) { h, d, i, s in (h * d + 2 * i + s, h * d + s * d / 2 + i) }
    }

    /// Copies row `from` to row `to` for every (head, pair, half); rows are the first dimension.
    private static func remap(_ t: HostTensor, heads: Int, _ rows: (Int, Int, Int, Int) -> (from: Int, to: Int)) -> HostTensor {
        let total = t.shape.first ?? 0
        precondition(heads > 0 && total % heads == 0 && (total / heads) % 2 == 0,
                     "[RoPELayout] \(total) rows do not split into \(heads) heads of even size")
        let d = total / heads
        let cols = total == 0 ? 0 : t.data.count / total
        var out = t.data
        t.data.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                for h in 0..<heads {
                    for i in 0..<(d / 2) {
                        for s in 0..<2 {
                            let (from, to) = rows(h, d, i, s)
                            for c in 0..<cols { dst[to * cols + c] = src[from * cols + c] }
                        }
                    }
                }
            }
        }
        return HostTensor(shape: t.shape, data: out)
    }
}
