// `bench decode`: the toolkit's side of the decoding benchmark beside llama.cpp's llama-bench
// (scripts/bench-decode.sh runs both on the same GGUF): prefill tokens/s of a P-token prompt,
// greedy decoding tokens/s of G one-token steps from an empty context (as llama-bench's tg),
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

    @Option(help: "Repeats of each measurement; the mean and the best are reported.")
    var repeats: Int = 3

    @OptionGroup var decoding: DecodingOptions

    @Option(help: "How stored matrices meet more than \(FrozenMatrix.streamingRows) rows (the prefill): auto (whichever measured faster), blocks (the block kernels, a group of rows at a time) or panels (float32 panels and sgemm).")
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

    @Option(help: "Write the figures as JSON to this file.")
    var out: String?

    func validate() throws {
        guard promptTokens >= 1, genTokens >= 1, repeats >= 1 else { throw ValidationError("--prompt-tokens, --gen-tokens and --repeats must be at least 1") }
        guard threads >= 1 else { throw ValidationError("--threads must be at least 1") }
        guard batchRows.allSatisfy({ $0 >= 1 }), batchAdapters >= 0, batchContext >= 1 else {
            throw ValidationError("--batch-rows must be at least 1 each, --batch-adapters at least 0, --batch-context at least 1")
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
        let prompt = (0..<promptTokens).map { ($0 * 7919 + 13) % V }
        var logits: [Float] = []
        // warm-up: pages of a mapped file come in on first touch
        _ = engine.forward(Array(prompt.prefix(8)), cache: engine.makeCache(capacity: 16))
        var prefill: [Double] = [], decode: [Double] = []
        for _ in 0..<repeats {
            let cache = engine.makeCache(capacity: promptTokens + 1)
            let s = monotonicSeconds()
            engine.forward(prompt, cache: cache, into: &logits)
            prefill.append(Double(promptTokens) / (monotonicSeconds() - s))
        }
        for _ in 0..<repeats {
            let cache = engine.makeCache(capacity: genTokens + 1)
            var token = 1
            let s = monotonicSeconds()
            for _ in 0..<genTokens {
                engine.forward([token], cache: cache, into: &logits)
                token = Sampler.argmax(logits[...])
            }
            decode.append(Double(genTokens) / (monotonicSeconds() - s))
        }
        let batched = batchRows.isEmpty ? [] : measureBatches(engine, base: base)
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
            "peak_rss_mb": rss, "load_seconds": loadSeconds, "bytes_per_token": bytes, "weight_bytes": engine.weightBytes,
            "bandwidth_gb_s": bandwidth, "streamed_gb_s": streamed, "fraction_of_bandwidth": streamed / bandwidth,
            "batched": batched.map { ["rows": $0.rows, "adapters": batchAdapters, "adapter_precision": batchAdapterPrecision.rawValue, "context": batchContext, "tokens_per_s": $0.tokensPerSecond, "ms_per_pass": $0.msPerPass] },
        ]
        FileHandle.standardError.write(Data(String(format: "%@ (%@ weights, %d threads, CPU level %@): prefill %.1f tokens/s (best %.1f), decode %.1f tokens/s (best %.1f); load %.2fs; peak RSS %.0f MB; %.1f MB read per token = %.1f GB/s, %.0f%% of the measured %.1f GB/s\n",
                                                   base.path, model.baseWeights.rawValue, threads, CPULevel.summary, result["prefill_tokens_per_s"] as! Double, prefill.max()!,
                                                   meanDecode, decode.max()!, loadSeconds, rss, Double(bytes) / 1e6, streamed, 100 * streamed / bandwidth, bandwidth).utf8))
        if let out {
            let data = try JSONSerialization.data(withJSONObject: result, options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: out))
        }
    }

    /// Batched decoding at each of `batchRows`: B conversations of `batchContext` tokens each,
    /// then `genTokens` passes of one new token per row (the best of `repeats`), each row with
    /// its own random adapter when `batchAdapters` > 0. Prints one line per B.
    func measureBatches(_ engine: InferenceModel, base: BaseModel) -> [(rows: Int, tokensPerSecond: Double, msPerPass: Double)] {
        let c = base.config, V = c.vocabSize
        let lora = LoRAConfig(rank: 32, alpha: 64)
        var rng = SeededRNG(seed: 7)
        let adapters: [RowAdapter] = (0..<batchAdapters).map { i in
            let tensors = TensorTable.loraTensors(config: c, lora: lora).map { name, shape in
                (name, HostTensor(shape: shape, data: (0..<shape.reduce(1, *)).map { _ in 0.02 * Float.random(in: -1...1, using: &rng) }))
            }
            return RowAdapter(Adapter(source: "random \(i)", lora: lora, baseConfig: c, baseSignature: base.signature, tensors: tensors), config: c, precision: batchAdapterPrecision)
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

    /// GB/s of summing a 512 MiB buffer on every core (best of 3): the memory-bound ceiling a
    /// decoding step that streams its weights can approach.
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

