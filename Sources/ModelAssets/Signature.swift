// The base model signature: lowercase hex SHA-256 over a canonical encoding of the config's
// computational fields and every tensor (Hugging Face names and layout, fp32 little-endian), so
// one set of weights gets one signature whether it came from GGUF or a Hugging Face folder.
// The file name, format, architecture label and context length are left out on purpose.
//
// Two encodings. v2 (today's) hashes each tensor in fixed chunks of float32 values, the chunks on
// every core, and signs the list of chunk digests: a 3B base's 12.8 GB of float32 take half the
// time of one SHA-256 stream on 2 cores. v1 hashed all the values as one stream; checkpoints,
// packages and adapters made before v2 carry v1 signatures, and `BaseModel.recognizes` still
// accepts them (computing v1 only when it meets one).
import Dispatch
import Foundation

public enum BaseModelSignature {
    public enum Encoding: String, Sendable, CaseIterable {
        /// One SHA-256 stream over every value (signatures written before 2026-11-26).
        case v1 = "adapter-toolkit/base-model-signature/v1"
        /// Values hashed in chunks of `chunkValues`, in parallel; the chunk digests signed.
        case v2 = "adapter-toolkit/base-model-signature/v2"
    }

    /// The encoding new signatures use.
    public static let current = Encoding.v2

    /// v2's chunk: 2^20 float32 values (4 MiB), each tensor's last chunk shorter.
    public static let chunkValues = 1 << 20

    /// Encoding, all integers little-endian UInt64, all reals as Float32 bit patterns (GGUF
    /// stores rope base and norm epsilon as float32, config.json as decimal: both round alike):
    /// version string; hiddenSize, intermediateSize, numLayers, numHeads, numKVHeads, headDim,
    /// vocabSize; ropeTheta, rmsNormEps; tieWordEmbeddings, attentionBias (0/1); rope scaling
    /// (kind string or "none", factor, low, high, original context; absent values as 0); with NoPE
    /// layers the string "no_rope_layers", their count and indices; with multipliers the string
    /// "multipliers" and embedding, residual, attention, logits; with partial rotary (Phi) the string
    /// "rotary_dim" and it; with LongRoPE the string "longrope", the short factors, the long ones and
    /// the attention factor; with a sliding window the string "sliding_window" and it, then for
    /// Gemma 3 (whose sliding layers are not all of them) the sliding layers' count and indices,
    /// their RoPE base and query_pre_attn_scalar; tensor count; then per tensor in UTF-8 byte order of names: name, rank, dims, and
    /// - v1: its fp32 data;
    /// - v2: its chunk count, then per chunk (values [i·chunk, min((i+1)·chunk, n)) of the
    ///   row-major data) the 32-byte SHA-256 of that chunk's fp32 data.
    /// (A Gemma 3 norm's data is 1 + w rounded to float32, as its GGUF stores it.)
    /// Strings are a UInt64 byte length followed by UTF-8.
    /// The architecture label is omitted: llama and mistral with equal weights compute the same
    /// function, `attentionBias` already captures what distinguishes qwen2, and the other
    /// architectures differ in their tensors' names (q/k norms, post-sublayer norms) or in the
    /// NoPE layers and multipliers encoded above.
    /// `scripts/fixtures/base_signature.py` computes both encodings independently (the goldens).
    public static func compute(config: ModelConfig, tensors: [String: HostTensor], encoding: Encoding = current,
                               chunkValues: Int = chunkValues) -> String {
        compute(config: config, names: Array(tensors.keys), shape: { tensors[$0]!.shape }, encoding: encoding,
                chunkValues: chunkValues) { name, range, feed in
            tensors[name]!.data.withUnsafeBufferPointer { feed(UnsafeBufferPointer(rebasing: $0[range])) }
        }
    }

    /// The same digest with each tensor's shape given by `shape` and its float32 values (row-major,
    /// Hugging Face layout) handed over by `values(name, range, feed)`: the values at flat indices
    /// `range`, in order, in one or more consecutive pieces. A stored base dequantizes a few rows
    /// at a time, so not even one tensor is held as float32. v2 calls `values` from several
    /// threads at once (different ranges); v1 once per tensor, with its whole range, on one thread.
    public static func compute(config: ModelConfig, names: [String], shape: (String) -> [Int],
                               encoding: Encoding = current, chunkValues: Int = chunkValues,
                               values rawValues: @escaping @Sendable (String, Range<Int>, (UnsafeBufferPointer<Float>) -> Void) -> Void) -> String {
        precondition(chunkValues > 0, "[BaseModelSignature] chunkValues must be positive")
        // Gemma 3's norms are hashed as 1 + w rounded to float32, the values a GGUF stores: a
        // folder's w and a GGUF's (1 + w) − 1 differ in their last bits but give the same 1 + w
        // (and the same logits), so both files of one model get one signature.
        let offset = config.definition.normWeightOffset
        @Sendable func values(_ name: String, _ range: Range<Int>, _ feed: (UnsafeBufferPointer<Float>) -> Void) {
            guard offset != 0, name.hasSuffix("norm.weight") else { return rawValues(name, range, feed) }
            rawValues(name, range) { piece in
                let shifted = piece.map { $0 + offset }
                shifted.withUnsafeBufferPointer { feed($0) }
            }
        }
        var hasher = SHA256()
        var header = ByteSink()
        func string(_ s: String) {
            header.append(UInt64(s.utf8.count))
            header.append(bytes: s.utf8)
        }
        func int(_ v: Int) { header.append(UInt64(v)) }
        func real(_ v: Double?) { header.append(Float(v ?? 0).bitPattern) }
        string(encoding.rawValue)
        for v in [config.hiddenSize, config.intermediateSize, config.numLayers, config.numHeads, config.numKVHeads,
                  config.headDim, config.vocabSize] { int(v) }
        real(config.ropeTheta)
        real(config.rmsNormEps)
        int(config.tieWordEmbeddings ? 1 : 0)
        int(config.attentionBias ? 1 : 0)
        let scaling = config.ropeScaling
        string(scaling?.kind.rawValue ?? "none")
        real(scaling?.factor)
        real(scaling?.lowFrequencyFactor)
        real(scaling?.highFrequencyFactor)
        int(scaling?.originalMaxPositionEmbeddings ?? 0)
        // The features the tensors do not show, only when a config has them (so every signature
        // made before them is unchanged): NoPE layers, then Granite's multipliers.
        if !config.noRopeLayers.isEmpty {
            string("no_rope_layers")
            int(config.noRopeLayers.count)
            for layer in config.noRopeLayers { int(layer) }
        }
        if let m = config.multipliers {
            string("multipliers")
            for v in [m.embedding, m.residual, m.attention, m.logits] { real(v) }
        }
        if config.rotaryDim != config.headDim {
            string("rotary_dim")
            int(config.rotaryDim)
        }
        if let s = scaling, s.kind == .longrope {
            string("longrope")
            for v in (s.shortFactors ?? []) + (s.longFactors ?? []) { real(v) }
            real(s.attentionFactor)
        }
        if let w = config.slidingWindow {
            string("sliding_window")
            int(w)
            if config.definition.hasSlidingWindowLayers {
                // Gemma 3: the sliding layers, their RoPE base and the attention scalar (Phi-3's
                // window is on every layer, so the window alone says it, as before the merge)
                int(config.slidingWindowLayers.count)
                for layer in config.slidingWindowLayers { int(layer) }
                real(config.localRopeTheta)
                real(config.queryPreAttentionScalar)
            }
        }
        int(names.count)
        hasher.update(data: header.bytes)

        let sorted = names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        let shapes = sorted.map(shape)
        // v2: every tensor's chunks, hashed on every core first.
        var chunks: [(tensor: Int, range: Range<Int>)] = []
        if encoding == .v2 {
            for (t, dims) in shapes.enumerated() {
                let n = dims.reduce(1, *)
                var start = 0
                while start < n {
                    chunks.append((t, start..<Swift.min(n, start + chunkValues)))
                    start += chunkValues
                }
            }
        }
        let digests = ResultSlots<[UInt8]>(count: chunks.count)
        if !chunks.isEmpty {
            let work = chunks
            DispatchQueue.concurrentPerform(iterations: work.count) { i in
                var h = SHA256()
                values(sorted[work[i].tensor], work[i].range) { update(&h, with: $0) }
                digests.set(i, .success(Array(h.finalize())))
            }
        }
        var next = 0
        for (t, name) in sorted.enumerated() {
            let dims = shapes[t]
            header = ByteSink()
            string(name)
            int(dims.count)
            for d in dims { int(d) }
            switch encoding {
            case .v1:
                hasher.update(data: header.bytes)
                values(name, 0..<dims.reduce(1, *)) { update(&hasher, with: $0) }
            case .v2:
                var count = 0
                while next + count < chunks.count, chunks[next + count].tensor == t { count += 1 }
                int(count)
                // Every slot was set with .success above, so get cannot throw.
                for i in next..<(next + count) { header.append(bytes: try! digests.get(i)) }
                next += count
                hasher.update(data: header.bytes)
            }
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// Hashes float32 values as little-endian bytes (in place on a little-endian host).
    private static func update(_ hasher: inout SHA256, with piece: UnsafeBufferPointer<Float>) {
        #if _endian(little)
        hasher.update(bufferPointer: UnsafeRawBufferPointer(piece))
        #else
        var le = ByteSink()
        for v in piece { le.append(v) }
        hasher.update(data: le.bytes)
        #endif
    }
}
