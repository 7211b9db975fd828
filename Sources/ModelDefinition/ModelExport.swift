// Writing a whole model as GGUF (llama.cpp names, q/k rows permuted for llama.cpp's RoPE, Phi-3's
// projections stacked into its fused tensors and its LongRoPE lists, the `{arch}.*` and `tokenizer.ggml.*` keys) and as a Hugging Face folder (config.json +
// model.safetensors). Quantized output and LoRA-adapter GGUFs are left to Export.
// Keys follow convert_hf_to_gguf.py; the inverse of ModelLoader.
import Foundation
import ModelAssets

public enum ModelExport {
    /// GGUF metadata describing `config` under `general.architecture` (its description's GGUF
    /// name), as convert_hf_to_gguf.py writes it: the Llama keys, and Granite's four scales.
    public static func ggufMetadata(for config: ModelConfig) -> [(String, GGUFValue)] {
        let p = config.definition.ggufName + "."
        var kv: [(String, GGUFValue)] = [
            ("general.architecture", .string(config.definition.ggufName)),
            (p + "block_count", .uint32(UInt32(config.numLayers))),
            (p + "context_length", .uint32(UInt32(config.maxPositionEmbeddings))),
            (p + "embedding_length", .uint32(UInt32(config.hiddenSize))),
            (p + "feed_forward_length", .uint32(UInt32(config.intermediateSize))),
            (p + "attention.head_count", .uint32(UInt32(config.numHeads))),
            (p + "attention.head_count_kv", .uint32(UInt32(config.numKVHeads))),
            (p + "rope.freq_base", .float32(Float(config.ropeTheta))),
            (p + "attention.layer_norm_rms_epsilon", .float32(Float(config.rmsNormEps))),
            (p + "rope.dimension_count", .uint32(UInt32(config.rotaryDim))),
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
        if config.definition.allowsPartialRotary {  // conversion/phi.py: 0 for no window (Phi-4-mini)
            kv.append((p + "attention.sliding_window", .uint32(UInt32(config.slidingWindow ?? 0))))
            // The converter always writes the original context; without LongRoPE the toolkit keeps
            // none and writes the context length (what Phi-3-mini-4k's config.json has for both).
            let longrope = config.ropeScaling.flatMap { $0.kind == .longrope ? $0 : nil }
            kv.append((p + "rope.scaling.original_context_length",
                       .uint32(UInt32(longrope?.originalMaxPositionEmbeddings ?? config.maxPositionEmbeddings))))
            if let s = longrope { kv.append((p + "rope.scaling.attn_factor", .float32(Float(s.attentionFactor ?? 1)))) }
        }
        if config.definition.hasSlidingWindowLayers {  // conversion/gemma.py: the window, the local RoPE base
            if let w = config.slidingWindow { kv.append((p + "attention.sliding_window", .uint32(UInt32(w)))) }
            kv.append((p + "rope.freq_base_swa", .float32(Float(config.localRopeTheta ?? config.ropeTheta))))
            if config.headDim * config.numHeads == config.hiddenSize {  // the converter always writes them
                kv.append((p + "attention.key_length", .uint32(UInt32(config.headDim))))
                kv.append((p + "attention.value_length", .uint32(UInt32(config.headDim))))
            }
        }
        if let m = config.multipliers {  // conversion/granite.py: the *_multiplier values as *_scale keys
            kv.append((p + "attention.scale", .float32(Float(m.attention))))
            kv.append((p + "embedding_scale", .float32(Float(m.embedding))))
            kv.append((p + "residual_scale", .float32(Float(m.residual))))
            kv.append((p + "logit_scale", .float32(Float(m.logits))))
        }
        return kv
    }

    /// Refuses a config llama.cpp would run differently from the toolkit: SmolLM3 NoPE layers other
    /// than every 4th (llama.cpp's graph hard-codes the step), an OLMo 2 with a tied head or
    /// head_dim other than hidden/heads (its loader requires output.weight and sizes q/k by hidden/heads).
    public static func checkGGUFExpressible(_ config: ModelConfig, path: String = "<GGUF being written>") throws {
        let d = config.definition
        if let step = d.ggufNoRopeStep {
            let expected = (0..<config.numLayers).filter { ($0 + 1) % step == 0 }
            guard config.noRopeLayers == expected else {
                throw ModelAssetsError.invalidConfig(
                    path: path, field: "noRopeLayers",
                    reason: "llama.cpp's \(d.ggufName) skips RoPE on every \(step)th layer (\(expected)); this model's NoPE layers are \(config.noRopeLayers) (a draft made of chosen layers?), so a GGUF of it would compute something else; export a Hugging Face folder instead")
            }
        }
        if let pattern = d.ggufSlidingWindowPattern {
            // llama.cpp's gemma3 makes every 6th layer global and scales scores by 1/√head_dim
            let expected = config.slidingWindow == nil ? [] : (0..<config.numLayers).filter { ($0 + 1) % pattern != 0 }
            guard config.slidingWindowLayers == expected else {
                throw ModelAssetsError.invalidConfig(
                    path: path, field: "slidingWindowLayers",
                    reason: "llama.cpp's \(d.ggufName) makes every \(pattern)th layer global (sliding: \(expected)); this model's sliding layers are \(config.slidingWindowLayers) (a draft made of chosen layers?); export a Hugging Face folder instead")
            }
            if let q = config.queryPreAttentionScalar, q != Double(config.headDim), config.numLayers != 62 {
                throw ModelAssetsError.invalidConfig(
                    path: path, field: "queryPreAttentionScalar",
                    reason: "llama.cpp's \(d.ggufName) scales attention by 1/√head_dim (\(config.headDim)); this model's query_pre_attn_scalar is \(q); export a Hugging Face folder instead")
            }
        }
        if config.architecture == .olmo2 {
            guard !config.tieWordEmbeddings else {
                throw ModelAssetsError.invalidConfig(path: path, field: "tieWordEmbeddings", reason: "llama.cpp's olmo2 needs an untied output.weight")
            }
            guard config.headDim * config.numHeads == config.hiddenSize else {
                throw ModelAssetsError.invalidConfig(path: path, field: "headDim", reason: "llama.cpp's olmo2 takes head_dim = hidden/heads = \(config.hiddenSize / config.numHeads), this model has \(config.headDim)")
            }
        }
    }

    /// `tokenizer.ggml.*` keys (a GPT-2-style BPE model, or a SentencePiece one with its scores,
    /// unknown token and flags) and the chat template.
    public static func ggufMetadata(for tokenizer: TokenizerData) -> [(String, GGUFValue)] {
        var kv: [(String, GGUFValue)] = [
            ("tokenizer.ggml.model", .string(tokenizer.model)),
            ("tokenizer.ggml.pre", .string(tokenizer.preTokenizer)),
            ("tokenizer.ggml.tokens", .array(elementType: .string, values: tokenizer.tokens.map { .string($0) })),
        ]
        if tokenizer.model == "llama" {
            kv.append(("tokenizer.ggml.scores", .array(elementType: .float32, values: (tokenizer.scores ?? []).map { .float32($0) })))
        } else {
            kv.append(("tokenizer.ggml.merges", .array(elementType: .string, values: tokenizer.merges.map { .string($0) })))
        }
        if let id = tokenizer.unknownTokenId { kv.append(("tokenizer.ggml.unknown_token_id", .uint32(UInt32(id)))) }
        if let add = tokenizer.addBOS { kv.append(("tokenizer.ggml.add_bos_token", .bool(add))) }
        if let add = tokenizer.addEOS { kv.append(("tokenizer.ggml.add_eos_token", .bool(add))) }
        if let add = tokenizer.addSpacePrefix { kv.append(("tokenizer.ggml.add_space_prefix", .bool(add))) }
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
        try checkGGUFExpressible(config)
        var writer = GGUFWriter()
        for (k, v) in ggufMetadata(for: config, tokenizer: tokenizer, matrixType: matrixType) + extraMetadata { try writer.set(k, v) }
        let tensors = fileTensors(tensors, config: config)
        for (k, v) in ropeFactorTensors(config) { try writer.addTensor(k, v, as: .f32) }
        for name in tensors.keys.sorted(by: TensorTable.order) {
            var t = tensors[name]!
            if let heads = TensorTable.ggufRopeHeads(forHuggingFace: name, config: config) {
                t = RoPELayout.permuteForGGUF(t, heads: heads)
            }
            if let shift = TensorTable.ggufValueShift(forHuggingFace: name, config: config) { t.data = t.data.map { $0 + shift } }
            try writer.addTensor(TensorTable.ggufName(forHuggingFace: name, architecture: config.architecture)!, t, as: t.shape.count == 1 ? .f32 : matrixType)
        }
        return writer
    }

    /// `tensors` as the architecture's files hold them (Phi-3: q/k/v and gate/up stacked into
    /// qkv_proj and gate_up_proj).
    static func fileTensors(_ tensors: [String: HostTensor], config: ModelConfig) -> [String: HostTensor] {
        guard config.definition.fusedProjections else { return tensors }
        let listed = TensorTable.fileTensors(tensors.map { ($0.key, $0.value.shape, $0.value) }, config: config) { parts in
            HostTensor(shape: [parts.reduce(0) { $0 + $1.shape[0] }, parts[0].shape[1]], data: parts.flatMap(\.data))
        }
        return Dictionary(uniqueKeysWithValues: listed.map { ($0.name, $0.value) })
    }

    /// LongRoPE's factor lists as llama.cpp's converter writes them (`rope_factors_long/short.weight`, F32).
    public static func ropeFactorTensors(_ config: ModelConfig) -> [(String, HostTensor)] {
        guard let s = config.ropeScaling, s.kind == .longrope, let long = s.longFactors, let short = s.shortFactors else { return [] }
        return [("rope_factors_long.weight", HostTensor(shape: [long.count], data: long.map(Float.init))),
                ("rope_factors_short.weight", HostTensor(shape: [short.count], data: short.map(Float.init)))]
    }

    /// The whole header's metadata in the order written: the config's keys, `general.file_type`,
    /// the tokenizer's keys.
    static func ggufMetadata(for config: ModelConfig, tokenizer: TokenizerData?, matrixType: GGMLType) -> [(String, GGUFValue)] {
        ggufMetadata(for: config) + [("general.file_type", .uint32(matrixType == .f32 ? 0 : matrixType == .f16 ? 1 : 32))]
            + (tokenizer.map { ggufMetadata(for: $0) } ?? [])
    }

    public static func writeGGUF(config: ModelConfig, tensors: [String: HostTensor], tokenizer: TokenizerData?,
                                 to path: String, matrixType: GGMLType = .f32) throws {
        try ggufWriter(config: config, tensors: tensors, tokenizer: tokenizer, matrixType: matrixType).write(to: path)
    }

    /// A Hugging Face folder: config.json and model.safetensors (tokenizer files are not written).
    public static func writeHuggingFaceFolder(config: ModelConfig, tensors: [String: HostTensor], to folder: String,
                                              dtype: SafetensorsDType = .f32) throws {
        try streamHuggingFaceFolder(config: config, tensors: tensors.map { name, t in (name, t.shape, .computed { t }) },
                                    to: folder, dtype: dtype)
    }

    // MARK: streaming a model bigger than memory

    /// Where an exported tensor's values come from when its turn comes.
    public enum Source {
        /// A base weight as held: a matrix is read a slice of rows at a time (a stored one
        /// dequantized slice by slice), so no float32 copy of it exists.
        case weight(NamedWeight)
        /// Values made when written (a projection with an adapter merged in), dropped after.
        case computed(() -> HostTensor)

        func whole() -> HostTensor {
            switch self {
            case .weight(let w): w.tensor
            case .computed(let make): make()
            }
        }
    }

    /// Streamed tensors as the files hold them: a fused module's parts stacked when its turn comes.
    static func streamedFileTensors(_ tensors: [(name: String, shape: [Int], source: Source)], config: ModelConfig)
        -> [(name: String, shape: [Int], source: Source)] {
        TensorTable.fileTensors(tensors.map { ($0.name, $0.shape, $0.source) }, config: config) { parts in
            .computed { HostTensor(shape: [0], data: []).stacked(parts.map { $0.whole() }) }
        }.map { ($0.name, $0.shape, $0.value) }
    }

    /// Float32 values per slice of a streamed matrix (16 MiB).
    static let valuesPerSlice = 1 << 22

    /// Calls `body` with the tensor's values in order: a held matrix a slice of whole rows at a
    /// time, anything else whole.
    static func forEachSlice(_ source: Source, shape: [Int], _ body: (UnsafeBufferPointer<Float>, _ rows: Int) throws -> Void) throws {
        guard case .weight(.matrix(let m)) = source, m.rows > 0, m.columns > 0 else {
            let t = source.whole()
            try t.data.withUnsafeBufferPointer { try body($0, shape.count == 1 ? 1 : shape[0]) }
            return
        }
        let step = max(1, min(m.rows, valuesPerSlice / m.columns))
        var buffer = [Float](repeating: 0, count: step * m.columns)
        var r0 = 0
        while r0 < m.rows {
            let r1 = min(m.rows, r0 + step)
            try buffer.withUnsafeMutableBufferPointer { b in
                m.dequantizeRows(r0..<r1, into: b.baseAddress!)
                try body(UnsafeBufferPointer(rebasing: b[0..<((r1 - r0) * m.columns)]), r1 - r0)
            }
            r0 = r1
        }
    }

    /// `writeGGUF` one tensor at a time: memory holds one computed tensor or one slice of a held
    /// matrix (plus a permuted q/k projection's copy), never the model. Same bytes as `writeGGUF`.
    public static func streamGGUF(config: ModelConfig, tensors: [(name: String, shape: [Int], source: Source)], tokenizer: TokenizerData?,
                                  to path: String, matrixType: GGMLType = .f32) throws {
        try TensorTable.check(tensors.map { ($0.name, $0.shape) }, config: config, path: "<model being exported>")
        try checkGGUFExpressible(config, path: path)
        let ordered = streamedFileTensors(tensors, config: config).sorted { TensorTable.order($0.name, $1.name) }
        let extra = ropeFactorTensors(config)
        let writer = try GGUFStreamWriter(
            path: path, metadata: ggufMetadata(for: config, tokenizer: tokenizer, matrixType: matrixType),
            tensors: extra.map { GGUFStreamWriter.Tensor(name: $0.0, shape: $0.1.shape, type: .f32) } + ordered.map { GGUFStreamWriter.Tensor(name: TensorTable.ggufName(forHuggingFace: $0.name, architecture: config.architecture)!, shape: $0.shape,
                                                           type: $0.shape.count == 1 ? .f32 : matrixType) })
        do {
            for (name, t) in extra { try writer.write(try GGUFWriter.encode(t.data, shape: t.shape, as: .f32, tensor: name)) }
            for t in ordered {
                let type: GGMLType = t.shape.count == 1 ? .f32 : matrixType
                if let heads = TensorTable.ggufRopeHeads(forHuggingFace: t.name, config: config) {
                    let p = RoPELayout.permuteForGGUF(t.source.whole(), heads: heads)
                    try writer.write(try GGUFWriter.encode(p.data, shape: p.shape, as: type, tensor: t.name))
                    continue
                }
                let shift = TensorTable.ggufValueShift(forHuggingFace: t.name, config: config)  // Gemma's norms as 1 + w
                try forEachSlice(t.source, shape: t.shape) { values, rows in
                    try writer.write(try GGUFWriter.encode(shift.map { s in values.map { $0 + s } } ?? Array(values), shape: t.shape.count == 1 ? t.shape : [rows, t.shape[1]], as: type, tensor: t.name))
                }
            }
            try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// `writeHuggingFaceFolder` one tensor at a time (as `streamGGUF`).
    public static func streamHuggingFaceFolder(config: ModelConfig, tensors: [(name: String, shape: [Int], source: Source)], to folder: String,
                                               dtype: SafetensorsDType = .f32) throws {
        try TensorTable.check(tensors.map { ($0.name, $0.shape) }, config: config, path: folder)
        let tensors = streamedFileTensors(tensors, config: config)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw ModelAssetsError.io(path: folder, reason: "cannot create folder: \(error.localizedDescription)")
        }
        let ordered = tensors.sorted { TensorTable.order($0.name, $1.name) }
        let dir = URL(fileURLWithPath: folder)
        let writer = try SafetensorsStreamWriter(path: dir.appendingPathComponent("model.safetensors").path, metadata: ["format": "pt"],
                                                 tensors: ordered.map { .init(name: $0.name, dtype: dtype, shape: $0.shape) })
        do {
            for t in ordered { try forEachSlice(t.source, shape: t.shape) { values, _ in try writer.write(values) } }
            try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
        try AtomicFile.write(config.huggingFaceConfigJSON(), to: dir.appendingPathComponent("config.json").path)
    }
}


extension HostTensor {
    /// `parts` stacked by rows (self is unused: a namespace for the call site).
    func stacked(_ parts: [HostTensor]) -> HostTensor {
        HostTensor(shape: [parts.reduce(0) { $0 + $1.shape[0] }, parts[0].shape[1]], data: parts.flatMap(\.data))
    }
}
