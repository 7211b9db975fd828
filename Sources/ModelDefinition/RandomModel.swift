// A GGUF model of a given shape with seeded random weights, written tensor by tensor (never whole
// in memory): llama.cpp's tensor names and metadata keys, q/k rows permuted as the converter does,
// Llama 3's `rope_freqs.weight`, Phi's fused tensors and `rope_factors_long/short.weight`, one block type for every matrix with llama-quantize's fallback for
// rows a K-quant cannot hold, and a tokenizer copied from another GGUF, padded to the published
// vocabulary. Trained weights are left out. Follows convert_hf_to_gguf.py and llama-quant.cpp.
import Foundation
import ModelAssets

public enum RandomModel {
    /// What to write. `config.vocabSize` is the vocabulary written; `tokenizer` holds `tokenizer.*`
    /// keys whose token list has exactly that many entries (see `tokenizerMetadata`).
    public struct Options: Sendable {
        public var config: ModelConfig
        /// Block type of every matrix (norms, biases and rope factors stay F32, as llama.cpp keeps them).
        public var type: GGMLType
        /// Which matrices get more bits than `type` (llama-quantize's "_M" mixes).
        public var mix: Mix = .uniform
        public var seed: UInt64
        /// `general.name`.
        public var name: String
        public var tokenizer: [(String, GGUFValue)]
        /// Also write `{arch}.attention.key_length`/`value_length` (when config.json has `head_dim`).
        public var declaresHeadDim: Bool
        public var threads: Int

        public init(config: ModelConfig, type: GGMLType, mix: Mix = .uniform, seed: UInt64 = 0, name: String, tokenizer: [(String, GGUFValue)],
                    declaresHeadDim: Bool = false, threads: Int = ProcessInfo.processInfo.activeProcessorCount) {
            self.config = config
            self.type = type
            self.mix = mix
            self.seed = seed
            self.name = name
            self.tokenizer = tokenizer
            self.declaresHeadDim = declaresHeadDim
            self.threads = threads
        }
    }

    /// How a file's matrices share out block types.
    public enum Mix: String, Sendable, CaseIterable {
        /// Every matrix `type` (llama-quantize's "_S" files for K-quants).
        case uniform
        /// llama-quantize's Q4_K_M over `type` = Q4_K (llama-quant.cpp's `llama_tensor_get_type`): Q6_K
        /// for the head (the embedding when the head is tied to it), and for `attn_v` and `ffn_down`
        /// in the layers `usesMoreBits` picks; every other matrix `type`.
        case q4KM
    }

    /// llama-quant.cpp's `use_more_bits`: the first and last eighth of the layers and every third
    /// one between.
    public static func usesMoreBits(layer i: Int, of n: Int) -> Bool {
        i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
    }

    /// The block type `mix` asks for the matrix named `name` (llama.cpp's name), before the
    /// fallback for rows a K-quant cannot hold.
    static func requestedType(_ name: String, type: GGMLType, mix: Mix, config: ModelConfig) -> GGMLType {
        guard mix == .q4KM else { return type }
        if name == "output.weight" || (name == "token_embd.weight" && config.tieWordEmbeddings) { return .q6_K }
        let parts = name.split(separator: ".")
        if parts.count == 4, parts[0] == "blk", let layer = Int(parts[1]), parts[2] == "attn_v" || parts[2] == "ffn_down",
           usesMoreBits(layer: layer, of: config.numLayers) {
            return .q6_K
        }
        return type
    }

    public enum Role: Sendable, Equatable {
        /// Random values, std 0.02.
        case matrix, bias
        /// All ones.
        case norm
        /// Llama 3 RoPE frequency factors.
        case ropeFrequencies
    }

    /// One tensor of the file: llama.cpp name, row-major shape, stored type.
    public struct PlannedTensor: Sendable, Equatable {
        public var name: String
        public var shape: [Int]
        public var type: GGMLType
        /// The type asked for, when `type` is a fallback from it.
        public var fallbackFrom: GGMLType?
        public var role: Role
        /// Heads whose rows are permuted for llama.cpp's RoPE (q and k of Llama-style models).
        public var ropeHeads: Int?
        public var elementCount: Int { shape.reduce(1, *) }
    }

    public struct Progress: Sendable {
        public var tensorIndex: Int
        public var tensorCount: Int
        public var tensor: PlannedTensor
        /// The tensor has all its bytes (otherwise a piece of a large tensor was written).
        public var tensorDone: Bool
        public var bytesWritten: Int
        public var fileSize: Int
    }

    public struct Summary: Sendable {
        public var path: String
        public var fileSize: Int
        /// Elements of every weight (rope factors are a constant, not counted).
        public var parameterCount: Int
        public var tensors: [PlannedTensor]
    }

    /// Weights are drawn with this standard deviation (the usual initializer range), norms are 1:
    /// activations keep a unit-ish scale through a forward pass.
    public static let weightStd: Float = 0.02

    // MARK: plan

    /// The tensors in file order: rope factors (when the config has llama3 scaling), then the
    /// converter's order (embedding, layers by number, final norm, head).
    public static func plan(config: ModelConfig, type: GGMLType, mix: Mix = .uniform) throws -> [PlannedTensor] {
        if mix == .q4KM && type != .q4_K {
            throw ModelAssetsError.cannotQuantize(tensor: "<every matrix>", type: type.name, reason: "the Q4_K_M mix is over Q4_K only")
        }
        guard Quantize.types.contains(type) else {
            throw ModelAssetsError.cannotQuantize(tensor: "<every matrix>", type: type.name,
                                                  reason: "this package writes only \(Quantize.types.map(\.name).joined(separator: ", "))")
        }
        try config.validate()
        try ModelExport.checkGGUFExpressible(config)
        var out: [PlannedTensor] = []
        if config.ropeScaling?.kind == .llama3 {
            out.append(PlannedTensor(name: "rope_freqs.weight", shape: [config.headDim / 2], type: .f32, role: .ropeFrequencies))
        }
        if config.ropeScaling?.kind == .longrope {  // Phi-3's LongRoPE lists, first as conversion/phi.py yields them
            for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
                out.append(PlannedTensor(name: name, shape: [config.rotaryDim / 2], type: .f32, role: .ropeFrequencies))
            }
        }
        // as the files hold them (Phi-3's q/k/v and gate/up fused)
        let shapes = Dictionary(uniqueKeysWithValues: TensorTable.fileTensors(
            TensorTable.shapes(for: config).map { ($0.key, $0.value, $0.value) }, config: config) { $0[0] }.map { ($0.name, $0.shape) })
        for hf in shapes.keys.sorted(by: TensorTable.order) {
            let shape = shapes[hf]!
            let name = TensorTable.ggufName(forHuggingFace: hf, architecture: config.architecture)!
            let heads = TensorTable.ggufRopeHeads(forHuggingFace: hf, config: config)
            if shape.count == 1 {
                let role: Role = hf.hasSuffix(".bias") ? .bias : .norm
                out.append(PlannedTensor(name: name, shape: shape, type: .f32, role: role, ropeHeads: heads))
            } else {
                let requested = requestedType(name, type: type, mix: mix, config: config)
                let stored = storedType(for: requested, rowLength: shape[1])
                out.append(PlannedTensor(name: name, shape: shape, type: stored, fallbackFrom: stored == requested ? nil : requested,
                                         role: .matrix, ropeHeads: heads))
            }
        }
        return out
    }

    /// The type a matrix with rows of `rowLength` values is stored as when `requested` is asked
    /// for, as llama-quantize (`tensor_type_fallback`) picks it when the rows are not a whole
    /// number of 256-value super-blocks: Q4_K becomes Q5_0, Q5_K Q5_1, Q6_K Q8_0, and Q2_K and Q3_K
    /// IQ4_NL. Rows that are not even a multiple of 32 get F16, llama.cpp's last resort (and so
    /// does any other type whose block does not divide the rows).
    public static func storedType(for requested: GGMLType, rowLength: Int) -> GGMLType {
        if rowLength % requested.blockGeometry.blockSize == 0 { return requested }
        let fallback: GGMLType = switch requested {
        case .q4_K: .q5_0
        case .q5_K: .q5_1
        case .q2_K, .q3_K: .iq4_NL
        default: .q8_0
        }
        return rowLength % fallback.blockGeometry.blockSize == 0 ? fallback : .f16
    }

    /// llama.cpp's `general.file_type` (LLAMA_FTYPE_*) for a file whose matrices are `type`;
    /// K-quants without llama-quantize's mixes are its "_S" variants.
    public static func fileType(for type: GGMLType) -> UInt32 {
        switch type {
        case .f32: 0
        case .f16: 1
        case .q4_0: 2
        case .q4_1: 3
        case .q8_0: 7
        case .q5_0: 8
        case .q5_1: 9
        case .q2_K: 10  // MOSTLY_Q2_K
        case .q3_K: 11  // MOSTLY_Q3_K_S
        case .q4_K: 14  // MOSTLY_Q4_K_S
        case .q5_K: 16  // MOSTLY_Q5_K_S
        case .q6_K: 18
        case .iq4_NL: 25
        case .bf16: 32
        default: 0
        }
    }

    // MARK: metadata

    /// `general.*`, the architecture's keys (ModelExport's, as convert_hf_to_gguf.py writes them),
    /// the tokenizer keys, `general.quantization_version`.
    public static func metadata(_ options: Options) -> [(String, GGUFValue)] {
        let config = options.config
        let arch = ModelExport.ggufMetadata(for: config)
        let p = config.definition.ggufName + "."
        var kv: [(String, GGUFValue)] = [
            arch[0],  // general.architecture
            ("general.type", .string("model")),
            ("general.name", .string(options.name)),
        ]
        kv += arch.dropFirst()
        if options.declaresHeadDim, !kv.contains(where: { $0.0 == p + "attention.key_length" }) {
            kv.append((p + "attention.key_length", .uint32(UInt32(config.headDim))))
            kv.append((p + "attention.value_length", .uint32(UInt32(config.headDim))))
        }
        kv.append(("general.file_type", .uint32(options.mix == .q4KM ? 15 : fileType(for: options.type))))  // 15: MOSTLY_Q4_K_M
        kv += options.tokenizer
        kv.append(("general.quantization_version", .uint32(2)))  // GGML_QNT_VERSION
        return kv
    }

    /// llama.cpp's token type for vocabulary slots no token uses (gguf-py `TokenType.UNUSED`).
    public static let unusedTokenType: Int32 = 5

    /// Every `tokenizer.*` key of `file`, in file order, with the token list padded to
    /// `vocabularySize` as convert_hf_to_gguf.py pads a vocabulary smaller than the model's: slot i
    /// becomes `[PAD<i>]` of type unused (scores, if any, -1000). The tokenizer must be one this
    /// package reads (byte-level BPE).
    public static func tokenizerMetadata(from file: GGUFFile, vocabularySize: Int) throws -> [(String, GGUFValue)] {
        _ = try TokenizerData(gguf: file)
        let tokens = try file.stringArray("tokenizer.ggml.tokens")
        guard vocabularySize >= tokens.count else {
            throw ModelAssetsError.invalidConfig(
                path: file.path, field: "tokenizer.ggml.tokens",
                reason: "its \(tokens.count) tokens do not fit a \(vocabularySize)-token vocabulary; keep the tokenizer's own vocabulary size")
        }
        let padding = tokens.count..<vocabularySize
        var out: [(String, GGUFValue)] = []
        var sawTypes = false
        for key in file.metadataKeys where key.hasPrefix("tokenizer.") {
            var value = file.metadata[key]!
            switch key {
            case "tokenizer.ggml.tokens":
                value = .array(elementType: .string, values: tokens.map { .string($0) } + padding.map { .string("[PAD\($0)]") })
            case "tokenizer.ggml.token_type":
                sawTypes = true
                guard case let .array(.int32, types) = value else {
                    throw ModelAssetsError.malformed(path: file.path, item: "key '\(key)'", reason: "expected an array of int32")
                }
                value = .array(elementType: .int32, values: types + padding.map { _ in .int32(unusedTokenType) })
            case "tokenizer.ggml.scores":
                guard case let .array(.float32, scores) = value else {
                    throw ModelAssetsError.malformed(path: file.path, item: "key '\(key)'", reason: "expected an array of float32")
                }
                value = .array(elementType: .float32, values: scores + padding.map { _ in .float32(-1000) })
            default:
                break
            }
            out.append((key, value))
        }
        if !sawTypes, !padding.isEmpty {
            let types = [GGUFValue](repeating: .int32(1), count: tokens.count) + padding.map { _ in .int32(unusedTokenType) }
            let at = (out.firstIndex { $0.0 == "tokenizer.ggml.tokens" } ?? out.count - 1) + 1
            out.insert(("tokenizer.ggml.token_type", .array(elementType: .int32, values: types)), at: at)
        }
        return out
    }

    // MARK: values

    /// Llama 3's per-frequency RoPE divisors as `rope_freqs.weight` stores them (the config's
    /// own definition, ModelConfig.ropeFrequencyFactors); nil without llama3 scaling.
    public static func ropeFrequencyFactors(_ config: ModelConfig) -> [Float]? {
        guard config.ropeScaling?.kind == .llama3 else { return nil }
        return config.ropeFrequencyFactors?.map { Float($0) }
    }

    /// A LongRoPE list as `rope_factors_long/short.weight` stores it.
    static func ropeFactors(_ name: String, _ config: ModelConfig) -> [Float]? {
        guard let s = config.ropeScaling, s.kind == .longrope else { return nil }
        return (name == "rope_factors_long.weight" ? s.longFactors : s.shortFactors)?.map { Float($0) }
    }

    /// The Hugging Face row (or bias element) stored at GGUF position `g` after the converter's
    /// q/k permutation: GGUF h·D + 2i + s holds Hugging Face h·D + s·D/2 + i (D = rows / heads).
    @inline(__always)
    static func huggingFaceIndex(_ g: Int, rows: Int, heads: Int?) -> Int {
        guard let heads else { return g }
        let d = rows / heads
        let h = g / d, w = g % d
        return h * d + (w % 2) * (d / 2) + w / 2
    }

    /// Rows `rows` of a planned tensor in GGUF layout, row-major into `out`.
    static func fill(_ t: PlannedTensor, rows: Range<Int>, seed: UInt64, config: ModelConfig, into out: UnsafeMutablePointer<Float>, threads: Int) {
        let k = t.shape.count == 1 ? t.shape[0] : t.shape[1]
        let totalRows = t.shape.count == 1 ? 1 : t.shape[0]
        switch t.role {
        case .norm:
            out.update(repeating: 1, count: rows.count * k)
        case .ropeFrequencies:
            let factors = ropeFactors(t.name, config) ?? ropeFrequencyFactors(config) ?? []
            for (i, f) in factors.enumerated() { out[i] = f }
        case .bias:  // one row; q/k elements permuted like rows
            SeededNormal.fillRow(seed: seed, tensor: t.name, row: 0, std: weightStd, count: k,
                    column: { huggingFaceIndex($0, rows: k, heads: t.ropeHeads) }, into: out)
        case .matrix:
            let n = rows.count
            let slices = max(1, min(threads, n))
            let buffer = SharedRows(base: out)
            let body: @Sendable (Int) -> Void = { s in
                let out = buffer.base  // slice s fills its own rows
                for r in (rows.lowerBound + n * s / slices)..<(rows.lowerBound + n * (s + 1) / slices) {
                    let source = huggingFaceIndex(r, rows: totalRows, heads: t.ropeHeads)
                    SeededNormal.fillRow(seed: seed, tensor: t.name, row: source, std: weightStd, count: k, into: out + (r - rows.lowerBound) * k)
                }
            }
            if slices == 1 { body(0) } else { DispatchQueue.concurrentPerform(iterations: slices, execute: body) }
        }
    }

    // MARK: writing

    /// Values generated, quantized and written per step (bounds memory at ~4 bytes each plus the encoding).
    static let valuesPerStep = 1 << 23

    /// Writes the model to `path` (temporary file renamed into place when complete), reporting
    /// progress after every piece written. An error thrown by `progress` (a stop request) stops
    /// the writing, removes the temporary file and is rethrown.
    @discardableResult
    public static func write(_ options: Options, to path: String, progress: (Progress) throws -> Void = { _ in }) throws -> Summary {
        let plan = try plan(config: options.config, type: options.type, mix: options.mix)
        try checkTokenizer(options)
        let writer = try GGUFStreamWriter(
            path: path, metadata: metadata(options),
            tensors: plan.map { GGUFStreamWriter.Tensor(name: $0.name, shape: $0.shape, type: $0.type) })
        do {
            var values: [Float] = []
            var encoded: [UInt8] = []
            for (index, t) in plan.enumerated() {
                let k = t.shape.count == 1 ? t.shape[0] : t.shape[1]
                let rows = t.shape.count == 1 ? 1 : t.shape[0]
                let rowsPerStep = max(1, min(rows, valuesPerStep / k))
                var start = 0
                while start < rows {
                    let end = min(rows, start + rowsPerStep)
                    let n = (end - start) * k
                    if values.count < n { values = [Float](repeating: 0, count: n) }
                    let bytes = try Quantize.byteCount(t.type, rows: end - start, k: k, tensor: t.name)
                    if encoded.count < bytes { encoded = [UInt8](repeating: 0, count: bytes) }
                    try values.withUnsafeMutableBufferPointer { v in
                        fill(t, rows: start..<end, seed: options.seed, config: options.config, into: v.baseAddress!, threads: options.threads)
                        try encoded.withUnsafeMutableBytes { e in
                            try Quantize.run(t.type, rows: end - start, k: k, values: UnsafeBufferPointer(rebasing: v[0..<n]),
                                             into: e, tensor: t.name, threads: options.threads)
                            try writer.write(UnsafeRawBufferPointer(rebasing: e[0..<bytes]))
                        }
                    }
                    start = end
                    try progress(Progress(tensorIndex: index, tensorCount: plan.count, tensor: t, tensorDone: start == rows,
                                      bytesWritten: writer.bytesWritten, fileSize: writer.fileSize))
                }
            }
            let size = try writer.finish()
            let parameters = plan.filter { $0.role != .ropeFrequencies }.reduce(0) { $0 + $1.elementCount }
            return Summary(path: path, fileSize: size, parameterCount: parameters, tensors: plan)
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// The token list must have exactly `config.vocabSize` entries, or llama.cpp refuses the file.
    private static func checkTokenizer(_ options: Options) throws {
        guard let tokens = options.tokenizer.first(where: { $0.0 == "tokenizer.ggml.tokens" })?.1.arrayValue else {
            throw ModelAssetsError.missingKey(path: "<tokenizer metadata>", key: "tokenizer.ggml.tokens")
        }
        guard tokens.count == options.config.vocabSize else {
            throw ModelAssetsError.invalidConfig(
                path: "<tokenizer metadata>", field: "tokenizer.ggml.tokens",
                reason: "\(tokens.count) tokens for a \(options.config.vocabSize)-row embedding; pad the vocabulary with tokenizerMetadata(from:vocabularySize:)")
        }
    }
}

/// The output buffer shared with the threads that fill disjoint rows of it.
private struct SharedRows: @unchecked Sendable {
    let base: UnsafeMutablePointer<Float>
}
