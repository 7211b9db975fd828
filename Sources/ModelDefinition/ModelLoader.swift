// Loading a base model from a `.gguf` file or a Hugging Face folder into one convention:
// Hugging Face tensor names and layout (q/k rows un-permuted from llama.cpp's RoPE order where the
// architecture's description says its converter permutes them; Phi-3's fused qkv / gate-up tensors
// split into the seven projections by rows, stored ones as views of the mapped bytes), matrices
// as float32 or kept as the file stores them (memory-mapped), names and shapes checked against the tensor table. Tokenizer building is left to ModelAssets.
// Name and permutation rules follow llama.cpp's convert_hf_to_gguf.py (`LlamaModel.permute`).
import Foundation
import ModelAssets

public enum BaseModelFormat: String, Sendable, Codable {
    case gguf, huggingFace
}

/// Where the tokenizer comes from: GGUF metadata, or a Hugging Face folder's files.
public enum TokenizerSource: Sendable, Equatable {
    /// The `tokenizer.ggml.*` metadata of the GGUF file at `path`, checked when it was loaded and
    /// read again by `ggufData()` when needed (export): a loaded base holds its vocabulary and merges
    /// once, in its BPETokenizer (~1.6 MB for SmolLM2 otherwise held twice for a whole run).
    case gguf(path: String)
    /// `tokenizerJSON` is the folder's tokenizer.json path when the folder has one.
    case huggingFace(folder: String, tokenizerJSON: String?)

    /// A GGUF base's tokenizer metadata, read from its file; nil for a Hugging Face folder.
    public func ggufData() throws -> TokenizerData? {
        guard case .gguf(let path) = self else { return nil }
        return try TokenizerData(gguf: GGUFFile(path: path))
    }
}

/// How the frozen base weights are held once loaded.
public enum BaseWeightStorage: String, Sendable, CaseIterable, Codable {
    /// As the file stores them: GGUF blocks (and F16/BF16) memory-mapped, never copied whole.
    case stored
    /// Dequantized to float32 at load: the reference path.
    case float32
}

/// A loaded base model: config, every weight in Hugging Face naming and layout, tokenizer source.
public struct BaseModelFile: Sendable {
    public let path: String
    public let format: BaseModelFormat
    public let config: ModelConfig
    /// Float32 tensors keyed by Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...):
    /// every tensor when loaded as float32, the vectors (norms, biases) when matrices are stored.
    public let tensors: [String: HostTensor]
    /// Matrices kept as the file stores them (empty when loaded as float32).
    public let matrices: [String: FrozenMatrix]
    public let tokenizer: TokenizerSource

    public init(path: String, format: BaseModelFormat, config: ModelConfig, tensors: [String: HostTensor],
                matrices: [String: FrozenMatrix] = [:], tokenizer: TokenizerSource) {
        self.path = path
        self.format = format
        self.config = config
        self.tensors = tensors
        self.matrices = matrices
        self.tokenizer = tokenizer
    }

    /// Every tensor as float32 in Hugging Face layout, one at a time (stored matrices dequantized).
    public func tensor(_ name: String) -> HostTensor {
        if let t = tensors[name] { return t }
        return Self.dequantized(matrices[name]!)
    }

    static func dequantized(_ m: FrozenMatrix) -> HostTensor { HostTensor(shape: m.shape, data: m.values) }

    /// The base model signature (lowercase hex SHA-256) in `encoding`; see `BaseModelSignature`.
    /// Costs one pass over the weights (stored matrices dequantized a few rows at a time into a
    /// buffer of about 1 MiB per chunk; v2 on every core), so compute it once (`SignatureCache`).
    /// (`chunkValues` other than v2's own is for tests of chunks that split rows.)
    public func signature(encoding: BaseModelSignature.Encoding = BaseModelSignature.current,
                          chunkValues: Int = BaseModelSignature.chunkValues) -> String {
        let tensors = tensors, matrices = matrices
        return BaseModelSignature.compute(config: config, names: Array(tensors.keys) + Array(matrices.keys),
                                          shape: { tensors[$0]?.shape ?? matrices[$0]!.shape }, encoding: encoding,
                                          chunkValues: chunkValues) { name, range, feed in
            if let t = tensors[name] {
                t.data.withUnsafeBufferPointer { feed(UnsafeBufferPointer(rebasing: $0[range])) }
                return
            }
            let m = matrices[name]!
            guard !range.isEmpty, m.columns > 0 else { return }
            let step = Swift.max(1, Swift.min(m.rows, (1 << 18) / m.columns))
            let buffer = UnsafeMutablePointer<Float>.allocate(capacity: step * m.columns)
            defer { buffer.deallocate() }
            // The rows that hold `range`, `step` at a time; feed only the part inside the range.
            var r0 = range.lowerBound / m.columns
            let end = (range.upperBound - 1) / m.columns + 1
            while r0 < end {
                let r1 = Swift.min(end, r0 + step)
                m.dequantizeRows(r0..<r1, into: buffer)
                let lo = Swift.max(range.lowerBound, r0 * m.columns), hi = Swift.min(range.upperBound, r1 * m.columns)
                feed(UnsafeBufferPointer(start: buffer + (lo - r0 * m.columns), count: hi - lo))
                r0 = r1
            }
        }
    }
}

public enum ModelLoader {
    /// Loads a `.gguf` file or a Hugging Face folder (config.json + safetensors). `storage`
    /// `.stored` keeps the matrices as the file stores them, memory-mapped: a GGUF's blocks, a
    /// safetensors file's F32, F16 and BF16 matrices.
    public static func load(path: String, storage: BaseWeightStorage = .float32) throws -> BaseModelFile {
        try loadWithTokenizerData(path: path, storage: storage).file
    }

    /// `load`, and a GGUF file's tokenizer metadata from the same reading of its header (nil for a
    /// Hugging Face folder, whose tokenizer is read from its tokenizer.json).
    public static func loadWithTokenizerData(path: String, storage: BaseWeightStorage = .float32) throws -> (file: BaseModelFile, tokenizer: TokenizerData?) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ModelAssetsError.io(path: path, reason: "no such file or folder")
        }
        if isDirectory.boolValue { return (try loadHuggingFace(folder: path, storage: storage), nil) }
        let (file, tokenizer) = try loadGGUFWithTokenizerData(path: path, storage: storage)
        return (file, tokenizer)
    }

    // MARK: GGUF

    public static func loadGGUF(path: String, storage: BaseWeightStorage = .float32) throws -> BaseModelFile {
        try loadGGUFWithTokenizerData(path: path, storage: storage).file
    }

    /// The file and its tokenizer metadata, from one reading of the GGUF header.
    static func loadGGUFWithTokenizerData(path: String, storage: BaseWeightStorage) throws -> (file: BaseModelFile, tokenizer: TokenizerData) {
        let file = try GGUFFile(path: path)
        let tokenizer = try TokenizerData(gguf: file)
        var read = try ModelConfig.fromGGUF(file, hasOutputTensor: file.tensorInfo(named: "output.weight") != nil)
        var pairs: [(gguf: String, hf: String)] = []
        for info in file.tensors {
            guard let hf = TensorTable.huggingFaceName(forGGUF: info.name, architecture: read.architecture) else {
                if info.name == "rope_freqs.weight" {
                    // Llama 3.1-style scaling: the per-frequency divisors themselves
                    let f = try file.dequantize(info.name).data.map(Double.init)
                    guard f.count == read.headDim / 2, f.allSatisfy({ $0.isFinite && $0 > 0 }) else {
                        throw ModelAssetsError.invalidConfig(path: path, field: "rope_freqs.weight", reason: "holds \(f.count) values; RoPE needs \(read.headDim / 2) positive divisors")
                    }
                    read.ropeScaling = RopeScaling(kind: .llama3, factor: f.max() ?? 1, frequencyFactors: f)
                    continue
                }
                // Phi-3's LongRoPE factor lists, read with the config (ModelConfig.fromGGUF).
                if read.ropeScaling?.kind == .longrope, info.name == "rope_factors_long.weight" || info.name == "rope_factors_short.weight" { continue }
                throw ModelAssetsError.unexpectedTensor(path: path, tensor: info.name)
            }
            if !info.type.isDequantizable {
                throw ModelAssetsError.unsupportedTensorType(
                    path: path, tensor: info.name, type: info.type.name, supported: GGMLType.dequantizable.map(\.name))
            }
            pairs.append((info.name, hf))
        }
        let config = read  // settled: the closures below only read it
        // A fused tensor (Phi-3's attn_qkv, ffn_up = gate and up) becomes the projections it holds,
        // each a range of its rows.
        var expanded: [(gguf: String, hf: String, rows: Range<Int>?)] = []
        for p in pairs {
            if let parts = TensorTable.fusedParts(ofFileTensor: p.hf, config: config) {
                expanded += parts.map { (p.gguf, $0.name, $0.rows) }
            } else {
                expanded.append((p.gguf, p.hf, nil))
            }
        }
        let renames = expanded
        func shape(_ r: (gguf: String, hf: String, rows: Range<Int>?)) -> [Int] {
            let s = file.tensorInfo(named: r.gguf)!.shape
            return r.rows.map { [$0.count, s[1]] } ?? s
        }
        guard renames.allSatisfy({ r in r.rows.map { $0.upperBound <= file.tensorInfo(named: r.gguf)!.shape[0] } ?? true }) else {
            throw ModelAssetsError.invalidConfig(path: path, field: "attn_qkv/ffn_up", reason: "a fused tensor has fewer rows than the projections it holds need")
        }
        // Fewer embedding rows than tokens: llama.cpp's Gemma 3 converter cuts token_embd to a
        // tokenizer.json's len(vocab) + len(added_tokens) while padding the token list to config.json's
        // vocab_size (docs/models.md). llama.cpp refuses such a file too; say why rather than a shape.
        if let embd = file.tensorInfo(named: "token_embd.weight"), embd.shape.count == 2, embd.shape[0] < config.vocabSize {
            throw ModelAssetsError.invalidConfig(
                path: path, field: "token_embd.weight",
                reason: "has \(embd.shape[0]) rows for a \(config.vocabSize)-token vocabulary, so ids \(embd.shape[0]) and up have no embedding (llama.cpp refuses this file too). llama.cpp's Gemma 3 converter writes this when a folder has tokenizer.json but no tokenizer.model and config.json's vocab_size exceeds the tokenizer's token count: it cuts the embedding to the tokenizer's count but pads the token list to vocab_size. Load the Hugging Face folder itself, or convert it again with its tokenizer.model present")
        }
        try TensorTable.check(renames.map { ($0.hf, shape($0)) }, config: config, path: path)

        if storage == .stored {
            // Matrices stay in the mapping; q/k rows stay in llama.cpp's order, undone on output.
            var tensors: [String: HostTensor] = [:], matrices: [String: FrozenMatrix] = [:]
            for r in renames {
                let info = file.tensorInfo(named: r.gguf)!
                guard info.shape.count == 2 else {
                    var t = try file.dequantize(r.gguf)
                    if let heads = TensorTable.ggufRopeHeads(forHuggingFace: r.hf, config: config) { t = RoPELayout.unpermuteFromGGUF(t, heads: heads) }
                    if let shift = TensorTable.ggufValueShift(forHuggingFace: r.hf, config: config) { t.data = t.data.map { $0 - shift } }
                    tensors[r.hf] = t
                    continue
                }
                if let rows = r.rows {
                    matrices[r.hf] = FrozenMatrix(stored: try file.stored(r.gguf).rows(rows))
                    continue
                }
                let order = TensorTable.ggufRopeHeads(forHuggingFace: r.hf, config: config).map { RoPELayout.storedRows(rows: info.shape[0], heads: $0) }
                matrices[r.hf] = FrozenMatrix(stored: try file.stored(r.gguf), rowOrder: order)
            }
            return (BaseModelFile(path: path, format: .gguf, config: config, tensors: tensors, matrices: matrices,
                                  tokenizer: .gguf(path: path)), tokenizer)
        }
        let slots = ResultSlots<HostTensor>(count: renames.count)
        // Largest first, so the embedding does not start last on a busy core.
        let order = renames.indices.sorted { file.tensorInfo(named: renames[$0].gguf)!.elementCount > file.tensorInfo(named: renames[$1].gguf)!.elementCount }
        DispatchQueue.concurrentPerform(iterations: order.count) { k in
            let i = order[k]
            slots.set(i, Result {
                var t = try file.dequantize(renames[i].gguf)
                if let rows = renames[i].rows { t = t.rows(rows) }
                // Gemma's norms: the converter's 1 + w back to Hugging Face's w
                if let shift = TensorTable.ggufValueShift(forHuggingFace: renames[i].hf, config: config) { t.data = t.data.map { $0 - shift } }
                guard let heads = TensorTable.ggufRopeHeads(forHuggingFace: renames[i].hf, config: config) else { return t }
                return RoPELayout.unpermuteFromGGUF(t, heads: heads)
            })
        }
        var tensors: [String: HostTensor] = [:]
        tensors.reserveCapacity(renames.count)
        for (i, r) in renames.enumerated() { tensors[r.hf] = try slots.get(i) }
        return (BaseModelFile(path: path, format: .gguf, config: config, tensors: tensors, tokenizer: .gguf(path: path)), tokenizer)
    }

    // MARK: Hugging Face folder

    public static func loadHuggingFace(folder: String, storage: BaseWeightStorage = .float32) throws -> BaseModelFile {
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
        // A fused tensor (Phi-3's qkv_proj, gate_up_proj) becomes the projections it holds, each a
        // range of its rows: (name in the table, name in the file, rows).
        var entries: [(name: String, file: String, rows: Range<Int>?)] = []
        for name in kept {
            if let parts = TensorTable.fusedParts(ofFileTensor: name, config: config) {
                guard let rows = checkpoint.tensorInfo(named: name)?.shape.first, rows >= parts.last!.rows.upperBound else {
                    throw ModelAssetsError.shapeMismatch(path: checkpoint.shards[name]?.path ?? folder, tensor: name,
                                                         expected: [parts.last!.rows.upperBound, config.hiddenSize], found: checkpoint.tensorInfo(named: name)?.shape ?? [])
                }
                entries += parts.map { ($0.name, name, $0.rows) }
            } else {
                entries.append((name, name, nil))
            }
        }
        let names = entries.map(\.name)
        let fileOf = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0) })
        let sourcePath = { (name: String) in checkpoint.shards[fileOf[name]?.file ?? name]?.path ?? folder }
        try TensorTable.check(entries.map { e in
            let s = checkpoint.tensorInfo(named: e.file)!.shape
            return (e.name, e.rows.map { [$0.count, s[1]] } ?? s)
        }, config: config, path: folder, pathForTensor: sourcePath)

        // Stored: 16- and 32-bit matrices stay in the mapped files (Hugging Face layout already);
        // the vectors, and matrices of other dtypes, are read as float32.
        var matrices: [String: FrozenMatrix] = [:]
        if storage == .stored {
            for e in entries where checkpoint.tensorInfo(named: e.file)!.shape.count == 2 {
                if let t = try checkpoint.shards[e.file]!.stored(e.file) { matrices[e.name] = FrozenMatrix(stored: e.rows.map { t.rows($0) } ?? t) }
            }
        }
        let loaded = names.filter { matrices[$0] == nil }
        let slots = ResultSlots<HostTensor>(count: loaded.count)
        DispatchQueue.concurrentPerform(iterations: loaded.count) { i in
            slots.set(i, Result {
                let e = fileOf[loaded[i]]!
                let t = try checkpoint.tensor(e.file)
                return e.rows.map { t.rows($0) } ?? t
            })
        }
        var tensors: [String: HostTensor] = [:]
        for (i, name) in loaded.enumerated() { tensors[name] = try slots.get(i) }
        if tiedHead {
            // A tied model may still store the head; accept it only if it is the embedding.
            let same: Bool
            if let embedding = matrices[TensorTable.embedding], let head = try checkpoint.shards["lm_head.weight"]!.stored("lm_head.weight"),
               case .stored(let e, _) = embedding.storage, e.type == head.type, e.shape == head.shape {
                same = memcmp(e.bytes, head.bytes, e.byteCount) == 0
            } else {
                same = try checkpoint.tensor("lm_head.weight") == tensors[TensorTable.embedding] ?? BaseModelFile.dequantized(matrices[TensorTable.embedding]!)
            }
            guard same else {
                throw ModelAssetsError.invalidConfig(
                    path: sourcePath("lm_head.weight"), field: "tie_word_embeddings",
                    reason: "config says the head is tied but lm_head.weight differs from model.embed_tokens.weight; set tie_word_embeddings to false")
            }
        }
        let tokenizerJSON = dir.appendingPathComponent("tokenizer.json").path
        return BaseModelFile(
            path: folder, format: .huggingFace, config: config, tensors: tensors, matrices: matrices,
            tokenizer: .huggingFace(folder: folder, tokenizerJSON: FileManager.default.fileExists(atPath: tokenizerJSON) ? tokenizerJSON : nil))
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

    /// For a GGUF q/k matrix of `rows` rows: the stored row that holds each Hugging Face row
    /// (`storedRows[r]` is Hugging Face row r's row in the file).
    public static func storedRows(rows: Int, heads: Int) -> [Int32] {
        precondition(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, "[RoPELayout] \(rows) rows do not split into \(heads) heads of even size")
        let d = rows / heads
        var out = [Int32](repeating: 0, count: rows)
        for h in 0..<heads {
            for i in 0..<(d / 2) {
                for s in 0..<2 { out[h * d + s * d / 2 + i] = Int32(h * d + 2 * i + s) }
            }
        }
        return out
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


extension StoredTensor {
    /// Rows `r` of a matrix as a view of the same bytes (a row is whole blocks in every encoding).
    func rows(_ r: Range<Int>) -> StoredTensor {
        precondition(shape.count == 2 && r.lowerBound >= 0 && r.upperBound <= shape[0], "[StoredTensor.rows] \(r) of \(shape)")
        return StoredTensor(type: type, shape: [r.count, shape[1]], bytes: bytes + r.lowerBound * rowBytes, byteCount: r.count * rowBytes, owner: owner)
    }
}

extension HostTensor {
    /// Rows `r` of a matrix, copied.
    func rows(_ r: Range<Int>) -> HostTensor {
        let c = shape[1]
        return HostTensor(shape: [r.count, c], data: Array(data[(r.lowerBound * c)..<(r.upperBound * c)]))
    }
}
