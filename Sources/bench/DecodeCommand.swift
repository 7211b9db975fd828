// `bench decode`: the toolkit's side of the decoding benchmark beside llama.cpp's llama-bench
// (scripts/bench-decode.sh runs both on the same GGUF): prefill tokens/s of a P-token prompt,
// greedy decoding tokens/s of G one-token steps from an empty context (as llama-bench's tg) and,
// with --decode-depth D, after D tokens of context (llama-bench's tg at -d D),
// load time, peak RSS, the weight bytes one decoding step reads and the fraction of this
// machine's measured memory bandwidth that makes. Thin: flags, Inference, print/JSON.
import ArgumentParser
import Autograd
import CLISupport
import Foundation
import Inference
import ModelAssets
import ModelDefinition

struct DecodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Measure prefill and decoding speed, load time and peak memory on a base model (the llama-bench comparison).")

    @OptionGroup var model: BaseModelOptions

    @Option(help: "Prompt tokens for the prefill measurement (llama-bench -p).")
    var promptTokens: Int = 256

    @Option(help: "One-token decoding steps from an empty context (llama-bench -n).")
    var genTokens: Int = 128

    @Option(help: "Repeats of each measurement, on one KV cache emptied between them (as llama-bench's repetitions; the prompt is run once untimed first); the mean and the best are reported.")
    var repeats: Int = 3

    @Option(help: "Also time the --gen-tokens decoding steps after this many tokens already in the context (llama-bench -d; prefilled first, not timed); 0: only from an empty context.")
    var decodeDepth: Int = 0

    @OptionGroup var decoding: DecodingOptions

    @Option(help: "How stored matrices meet more than \(FrozenMatrix.streamingRows) rows (the prefill): auto (whichever measured faster), blocks (the block kernels, a group of rows at a time) or panels (pieces of rows unpacked to float32 and multiplied: bk_gemm on AVX-512, sgemm below).")
    var manyRows: ManyRowsPath = .auto

    @Option(help: "How a prompt's rows attend to the cache: auto (blocked products from \(InferenceModel.blockedAttentionRows) rows), rows (one row at a time, the bits of one-token steps) or blocked.")
    var promptAttention: InferenceModel.PromptAttention = .auto

    @Option(help: "Threads (cores) to use.")
    var threads: Int = ProcessInfo.processInfo.activeProcessorCount

    @Option(parsing: .upToNextOption, help: "Also time batched decoding (one new token for each of B conversations per pass, as serve's batches) at these row counts B, e.g. 1 2 4 8.")
    var batchRows: [Int] = []

    @Option(help: "With --batch-rows: give the rows this many different random adapters (rank 32 on all seven projections), dealt round-robin, as serve's rows each add their own (0: the base alone).")
    var batchAdapters: Int = 0

    @Option(help: "With --batch-adapters: the adapters' factors as float32 (as trained) or float16 (serve --adapter-precision).")
    var batchAdapterPrecision: InferenceModel.WeightPrecision = .float32

    @Option(help: "With --batch-rows: tokens already in each row's context before the timed passes.")
    var batchContext: Int = 64

    @Option(parsing: .upToNextOption, help: "Also time verify passes: k new tokens scored at once with every row's logits (speculative decoding checks k - 1 proposals so) at these row counts k, e.g. 2 3 4 5, each against a one-row pass after the same context, the row counts taking turns (best of --repeats + 2 rounds of 8 passes).")
    var verifyRows: [Int] = []

    @Option(help: "With --verify-rows: tokens in the context before each pass.")
    var verifyContext: Int = 200

    @Option(help: "With --verify-rows: time the passes again with a random adapter of this rank on all seven projections (its low-rank terms added per row over the stored weights, as generate with an adapter does); 0: the base alone.")
    var verifyAdapterRank: Int = 0

    @Option(help: "Write the figures as JSON to this file.")
    var out: String?

    func validate() throws {
        guard promptTokens >= 1, genTokens >= 1, repeats >= 1 else { throw ValidationError("--prompt-tokens, --gen-tokens and --repeats must be at least 1") }
        guard decodeDepth >= 0 else { throw ValidationError("--decode-depth must be at least 0") }
        guard threads >= 1 else { throw ValidationError("--threads must be at least 1") }
        guard batchRows.allSatisfy({ $0 >= 1 }), batchAdapters >= 0, batchContext >= 1 else {
            throw ValidationError("--batch-rows must be at least 1 each, --batch-adapters at least 0, --batch-context at least 1")
        }
        guard verifyRows.allSatisfy({ $0 >= 1 }), verifyContext >= 1, verifyAdapterRank >= 0 else {
            throw ValidationError("--verify-rows must be at least 1 each, --verify-context at least 1, --verify-adapter-rank at least 0")
        }
    }

    func run() throws {
        try withThreads(threads) { try FrozenMatrix.$manyRows.withValue(manyRows) { try InferenceModel.$promptAttention.withValue(promptAttention) { try measure() } } }
    }

    func measure() throws {
        let t0 = monotonicSeconds()
        let base = try model.load()
        let engine = InferenceModel(base: base.weights, activations: decoding.activations, kvCache: decoding.kvCache)
        let loadSeconds = monotonicSeconds() - t0
        let V = base.config.vocabSize
        func tokens(_ count: Int) -> [Int] { (0..<count).map { ($0 * 7919 + 13) % V } }
        let prompt = tokens(promptTokens)
        var logits: [Float] = []
        // The timed passes of each kind reuse one KV cache, emptied between repeats, as llama-bench
        // reuses its context and clears its cache: a new cache's pages are faulted in by the pass
        // that first writes them (1-2% of a Qwen3-0.6B prefill or decode), which only a first
        // repeat pays. Warm-up: the whole prompt, untimed (llama-bench's warm-up runs it too):
        // the mapped file's pages and the prompt cache's.
        let promptCache = engine.makeCache(capacity: promptTokens + 1)
        engine.forward(prompt, cache: promptCache, into: &logits)
        var prefill: [Double] = [], decode: [Double] = []
        for _ in 0..<repeats {
            promptCache.truncate(to: 0)
            let s = monotonicSeconds()
            engine.forward(prompt, cache: promptCache, into: &logits)
            prefill.append(Double(promptTokens) / (monotonicSeconds() - s))
        }
        let cacheBytes = promptCache.bytes  // the prompt's KV cache (sliding layers: window + margin positions)
        let unboundedCacheBytes = KVCache.bytes(base.config, positions: promptTokens + 1, precision: engine.kvCache, slidingMargin: nil)
        var decodeCaches: [Int: KVCache] = [:]  // by context length
        /// Tokens/s of genTokens greedy steps after `context` (prefilled first, not timed).
        func decodeRate(after context: [Int]) -> Double {
            let cache = decodeCaches[context.count] ?? engine.makeCache(capacity: context.count + genTokens + 1)
            decodeCaches[context.count] = cache
            cache.truncate(to: 0)
            var token = 1
            if !context.isEmpty {
                engine.forward(context, cache: cache, into: &logits)
                token = Sampler.argmax(logits[...])
            }
            let s = monotonicSeconds()
            for _ in 0..<genTokens {
                engine.forward([token], cache: cache, into: &logits)
                token = Sampler.argmax(logits[...])
            }
            return Double(genTokens) / (monotonicSeconds() - s)
        }
        decode = (0..<repeats).map { _ in decodeRate(after: []) }
        // the same steps after decodeDepth tokens of context
        let atDepth = decodeDepth > 0 ? (0..<repeats).map { _ in decodeRate(after: tokens(decodeDepth)) } : []
        let batched = batchRows.isEmpty ? [] : measureBatches(engine, base: base)
        let verify = verifyRows.isEmpty ? [] : measureVerify(engine, base: base)
        let rss = peakRSSMB()  // before the bandwidth probe allocates its buffer
        let bandwidth = Self.memoryBandwidth()
        let bytes = engine.bytesPerToken
        let meanDecode = decode.reduce(0, +) / Double(decode.count)
        let streamed = Double(bytes) * meanDecode / 1e9
        let result: [String: Any] = [
            "model": base.path, "base_weights": model.baseWeights.rawValue, "activations": decoding.activations.rawValue, "kv_cache": decoding.kvCache.rawValue, "many_rows": manyRows.rawValue, "prompt_attention": promptAttention.rawValue, "threads": threads,
            "cpu_level": CPULevel.active, "blas_core": BLAS.coreName,
            "prompt_tokens": promptTokens, "gen_tokens": genTokens,
            "prefill_tokens_per_s": prefill.reduce(0, +) / Double(prefill.count), "prefill_tokens_per_s_best": prefill.max()!,
            "decode_tokens_per_s": meanDecode, "decode_tokens_per_s_best": decode.max()!,
            "decode_depth": decodeDepth, "decode_at_depth_tokens_per_s": atDepth.isEmpty ? NSNull() as Any : atDepth.reduce(0, +) / Double(atDepth.count) as Any,
            "peak_rss_mb": rss, "load_seconds": loadSeconds, "bytes_per_token": bytes, "weight_bytes": engine.weightBytes,
            "kv_cache_bytes": cacheBytes, "kv_cache_bytes_every_position": unboundedCacheBytes,
            "bandwidth_gb_s": bandwidth, "streamed_gb_s": streamed, "fraction_of_bandwidth": streamed / bandwidth,
            "batched": batched.map { ["rows": $0.rows, "adapters": batchAdapters, "adapter_precision": batchAdapterPrecision.rawValue, "context": batchContext, "tokens_per_s": $0.tokensPerSecond, "ms_per_pass": $0.msPerPass] },
            "verify": verify.map { ["adapter_rank": $0.adapterRank, "context": verifyContext, "rows": $0.rows, "ms_per_pass": $0.ms, "one_row_passes": $0.ratio] },
        ]
        FileHandle.standardError.write(Data(String(format: "%@ (%@ weights, %d threads, CPU level %@): prefill %.1f tokens/s (best %.1f), decode %.1f tokens/s (best %.1f); load %.2fs; peak RSS %.0f MB; %.1f MB read per token = %.1f GB/s, %.0f%% of the measured %.1f GB/s\n",
                                                   base.path, model.baseWeights.rawValue, threads, CPULevel.summary, result["prefill_tokens_per_s"] as! Double, prefill.max()!,
                                                   meanDecode, decode.max()!, loadSeconds, rss, Double(bytes) / 1e6, streamed, 100 * streamed / bandwidth, bandwidth).utf8))
        if streamed > bandwidth {
            // The probe runs once, after the passes (its buffer would count in the peak RSS
            // before them): on a shared machine whose memory bandwidth moves from minute to minute
            // decoding can outrun it.
            FileHandle.standardError.write(Data(String(format: "note: decoding read more than the probe (%.1f GB/s against %.1f GB/s, read just after the runs): the machine's memory bandwidth moved during the run; compare ratios from one sitting\n",
                                                       streamed, bandwidth).utf8))
        }
        if !atDepth.isEmpty {
            FileHandle.standardError.write(Data(String(format: "decode after %d tokens of context: %.1f tokens/s (best %.1f)\n",
                                                       decodeDepth, atDepth.reduce(0, +) / Double(atDepth.count), atDepth.max()!).utf8))
        }
        FileHandle.standardError.write(Data(String(format: "KV cache after the %d-token prompt: %.1f MB (%d bytes; every position on every layer: %.1f MB)\n",
                                                   promptTokens, Double(cacheBytes) / 1e6, cacheBytes, Double(unboundedCacheBytes) / 1e6).utf8))
        if let out {
            let data = try JSONSerialization.data(withJSONObject: result, options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: out))
        }
    }

    /// Verify passes at each of `verifyRows` against one-row passes (SpeculativeCost.passSeconds), of
    /// the base and, with `verifyAdapterRank`, of the base with a random adapter. Prints one line each.
    func measureVerify(_ engine: InferenceModel, base: BaseModel) -> [(adapterRank: Int, rows: Int, ms: Double, ratio: Double)] {
        var results: [(adapterRank: Int, rows: Int, ms: Double, ratio: Double)] = []
        let rows = [1] + verifyRows.filter { $0 != 1 }
        for rank in verifyAdapterRank > 0 ? [0, verifyAdapterRank] : [0] {
            var rng = SeededRNG(seed: 11)
            let model = rank == 0 ? engine : InferenceModel(base: base.weights, adapter: Self.randomAdapter(base, rank: rank, using: &rng),
                                                            activations: engine.activations, kvCache: engine.kvCache)
            let seconds = SpeculativeCost.passSeconds(target: model, context: verifyContext, rows: rows, steps: 8, repeats: repeats + 2)
            var line = String(format: "verify passes after %d tokens, %@: 1 row %.2f ms", verifyContext, rank == 0 ? "base" : "adapter rank \(rank)", seconds[0] * 1000)
            for (k, n) in rows.enumerated() {
                results.append((rank, n, seconds[k] * 1000, seconds[k] / seconds[0]))
                if k > 0 { line += String(format: "; %d rows %.2f ms = %.2f one-row passes", n, seconds[k] * 1000, seconds[k] / seconds[0]) }
            }
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
        return results
    }

    /// A random adapter (rank `rank`, alpha 2·rank, all seven projections), factors uniform in ±0.02.
    static func randomAdapter(_ base: BaseModel, rank: Int, name: String = "random", using rng: inout SeededRNG) -> Adapter {
        let c = base.config, lora = LoRAConfig(rank: rank, alpha: Float(2 * rank))
        let tensors = TensorTable.loraTensors(config: c, lora: lora).map { name, shape in
            (name, HostTensor(shape: shape, data: (0..<shape.reduce(1, *)).map { _ in 0.02 * Float.random(in: -1...1, using: &rng) }))
        }
        return Adapter(source: name, lora: lora, baseConfig: c, baseSignature: base.signature, tensors: tensors)
    }

    /// Batched decoding at each of `batchRows`: B conversations of `batchContext` tokens each,
    /// then `genTokens` passes of one new token per row (the best of `repeats`), each row with
    /// its own random adapter when `batchAdapters` > 0. Prints one line per B.
    func measureBatches(_ engine: InferenceModel, base: BaseModel) -> [(rows: Int, tokensPerSecond: Double, msPerPass: Double)] {
        let c = base.config, V = c.vocabSize
        var rng = SeededRNG(seed: 7)
        let adapters: [RowAdapter] = (0..<batchAdapters).map { i in
            RowAdapter(Self.randomAdapter(base, rank: 32, name: "random \(i)", using: &rng), config: c, precision: batchAdapterPrecision)
        }
        var results: [(rows: Int, tokensPerSecond: Double, msPerPass: Double)] = []
        var logits: [Float] = []
        for rows in batchRows {
            let rowAdapters: [RowAdapter?] = (0..<rows).map { adapters.isEmpty ? nil : adapters[$0 % adapters.count] }
            var best = 0.0
            for _ in 0..<repeats {
                let caches = (0..<rows).map { _ in engine.makeCache(capacity: batchContext + genTokens + 1) }
                for b in 0..<rows {
                    engine.forward((0..<batchContext).map { ($0 * 7919 + 31 * b + 13) % V }, cache: caches[b], adapter: rowAdapters[b], into: &logits)
                }
                var tokens = [Int](repeating: 1, count: rows)
                let s = monotonicSeconds()
                for _ in 0..<genTokens {
                    engine.forward(batch: tokens, caches: caches, adapters: rowAdapters, into: &logits)
                    for b in 0..<rows { tokens[b] = Sampler.argmax(logits[(b * V)..<((b + 1) * V)]) }
                }
                best = max(best, Double(rows * genTokens) / (monotonicSeconds() - s))
            }
            results.append((rows, best, 1000 * Double(rows) / best))
            FileHandle.standardError.write(Data(String(format: "batched decoding, %d rows, %d adapters, context %d: %.1f tokens/s (%.2fx one row), %.2f ms per pass\n",
                                                       rows, batchAdapters, batchContext, best, best / (results.first?.tokensPerSecond ?? best), 1000 * Double(rows) / best).utf8))
        }
        return results
    }

    /// GB/s of summing a 512 MiB buffer on every core (best of 3), after the timed passes: the
    /// memory-bound ceiling a decoding step that streams its weights can approach, at that moment.
    static func memoryBandwidth() -> Double {
        let count = 128 << 20  // floats
        let buffer = UnsafeMutablePointer<Float>.allocate(capacity: count)
        defer { buffer.deallocate() }
        buffer.initialize(repeating: 1, count: count)
        let chunks = 64, per = count / chunks
        var best = 0.0
        let sums = UnsafeMutablePointer<Float>.allocate(capacity: chunks)
        defer { sums.deallocate() }
        for _ in 0..<3 {
            let s = monotonicSeconds()
            WorkerPool.forEach(chunks) { c in
                var acc = SIMD16<Float>()
                var p = UnsafeRawPointer(buffer + c * per)
                for _ in 0..<(per / 16) {
                    acc += p.loadUnaligned(as: SIMD16<Float>.self)
                    p += 64
                }
                sums[c] = acc.sum()
            }
            best = max(best, Double(count * 4) / (monotonicSeconds() - s) / 1e9)
        }
        return best
    }
}

