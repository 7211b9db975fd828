// Writing a whole model as GGUF (llama.cpp names, q/k rows permuted for llama.cpp's RoPE, the
// `{arch}.*` and `tokenizer.ggml.*` keys) and as a Hugging Face folder (config.json +
// model.safetensors). Quantized output and LoRA-adapter GGUFs are left to Export.
// Keys follow convert_hf_to_gguf.py; the inverse of ModelLoader.
import Foundation
import ModelAssets

public enum ModelExport {
    /// GGUF metadata describing `config` under `general.architecture` (llama, mistral, qwen2).
    public static func ggufMetadata(for config: ModelConfig) -> [(String, GGUFValue)] {
        let p = config.architecture.rawValue + "."
        var kv: [(String, GGUFValue)] = [
            ("general.architecture", .string(config.architecture.rawValue)),
            (p + "block_count", .uint32(UInt32(config.numLayers))),
            (p + "context_length", .uint32(UInt32(config.maxPositionEmbeddings))),
            (p + "embedding_length", .uint32(UInt32(config.hiddenSize))),
            (p + "feed_forward_length", .uint32(UInt32(config.intermediateSize))),
            (p + "attention.head_count", .uint32(UInt32(config.numHeads))),
            (p + "attention.head_count_kv", .uint32(UInt32(config.numKVHeads))),
            (p + "rope.freq_base", .float32(Float(config.ropeTheta))),
            (p + "attention.layer_norm_rms_epsilon", .float32(Float(config.rmsNormEps))),
            (p + "rope.dimension_count", .uint32(UInt32(config.headDim))),
            (p + "vocab_size", .uint32(UInt32(config.vocabSize))),
        ]
        if config.headDim * config.numHeads != config.hiddenSize {
            kv.append((p + "attention.key_length", .uint32(UInt32(config.headDim))))
            kv.append((p + "attention.value_length", .uint32(UInt32(config.headDim))))
        }
        if let s = config.ropeScaling, s.kind == .linear {
            kv.append((p + "rope.scaling.type", .string("linear")))
            kv.append((p + "rope.scaling.factor", .float32(Float(s.factor))))
        }
        return kv
    }

    /// `tokenizer.ggml.*` keys (a GPT-2-style BPE model) and the chat template.
    public static func ggufMetadata(for tokenizer: TokenizerData) -> [(String, GGUFValue)] {
        var kv: [(String, GGUFValue)] = [
            ("tokenizer.ggml.model", .string("gpt2")),
            ("tokenizer.ggml.pre", .string(tokenizer.preTokenizer)),
            ("tokenizer.ggml.tokens", .array(elementType: .string, values: tokenizer.tokens.map { .string($0) })),
            ("tokenizer.ggml.merges", .array(elementType: .string, values: tokenizer.merges.map { .string($0) })),
        ]
        if let types = tokenizer.tokenTypes {
            kv.append(("tokenizer.ggml.token_type", .array(elementType: .int32, values: types.map { .int32($0) })))
        }
        if let id = tokenizer.bosTokenId { kv.append(("tokenizer.ggml.bos_token_id", .uint32(UInt32(id)))) }
        if let id = tokenizer.eosTokenId { kv.append(("tokenizer.ggml.eos_token_id", .uint32(UInt32(id)))) }
        if let id = tokenizer.padTokenId { kv.append(("tokenizer.ggml.padding_token_id", .uint32(UInt32(id)))) }
        if let t = tokenizer.chatTemplate { kv.append(("tokenizer.chat_template", .string(t))) }
        return kv
    }

    /// A GGUF writer holding the model: metadata, then tensors in layer order. Matrices are stored
    /// as `matrixType` (F32, F16, BF16 or a block type our quantizer writes), 1-D tensors always as
    /// F32 (as llama.cpp does).
    /// Shapes are checked against the config first.
    public static func ggufWriter(config: ModelConfig, tensors: [String: HostTensor], tokenizer: TokenizerData?,
                                  matrixType: GGMLType = .f32, extraMetadata: [(String, GGUFValue)] = []) throws -> GGUFWriter {
        try TensorTable.check(tensors.map { ($0.key, $0.value.shape) }, config: config, path: "<model being exported>")
        var writer = GGUFWriter()
        for (k, v) in ggufMetadata(for: config) { try writer.set(k, v) }
        try writer.set("general.file_type", .uint32(matrixType == .f32 ? 0 : matrixType == .f16 ? 1 : 32))
        if let tokenizer { for (k, v) in ggufMetadata(for: tokenizer) { try writer.set(k, v) } }
        for (k, v) in extraMetadata { try writer.set(k, v) }
        let permuted = config.architecture != .qwen2
        for name in tensors.keys.sorted(by: TensorTable.order) {
            var t = tensors[name]!
            if permuted, let heads = TensorTable.ropeHeads(forHuggingFace: name, config: config) {
                t = RoPELayout.permuteForGGUF(t, heads: heads)
            }
            try writer.addTensor(TensorTable.ggufName(forHuggingFace: name)!, t, as: t.shape.count == 1 ? .f32 : matrixType)
        }
        return writer
    }

    public static func writeGGUF(config: ModelConfig, tensors: [String: HostTensor], tokenizer: TokenizerData?,
                                 to path: String, matrixType: GGMLType = .f32) throws {
        try ggufWriter(config: config, tensors: tensors, tokenizer: tokenizer, matrixType: matrixType).write(to: path)
    }

    /// A Hugging Face folder: config.json and model.safetensors (tokenizer files are not written).
    public static func writeHuggingFaceFolder(config: ModelConfig, tensors: [String: HostTensor], to folder: String,
                                              dtype: SafetensorsDType = .f32) throws {
        try TensorTable.check(tensors.map { ($0.key, $0.value.shape) }, config: config, path: folder)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw ModelAssetsError.io(path: folder, reason: "cannot create folder: \(error.localizedDescription)")
        }
        var writer = SafetensorsWriter(metadata: ["format": "pt"])
        for name in tensors.keys.sorted(by: TensorTable.order) {
            try writer.add(name, tensors[name]!, as: dtype)
        }
        let dir = URL(fileURLWithPath: folder)
        try writer.write(to: dir.appendingPathComponent("model.safetensors").path)
        try AtomicFile.write(config.huggingFaceConfigJSON(), to: dir.appendingPathComponent("config.json").path)
    }
}
