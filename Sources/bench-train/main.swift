// bench-train: the toolkit's side of the peer benchmark (../shared/bench/peft_bench.py).
// On the base model (default SmolLM2-135M) it measures what peft_bench measures, the same way:
// forward tokens/s (no grad), greedy generation tokens/s (KV cache), LoRA training tokens/s
// (forward + backward + AdamW over all seven projections, loss over every position), and peak
// RSS after each phase; and writes them as JSON for scripts/bench.sh to set beside the peer's.
import Autograd
import CLISupport
import DataSchema
import Foundation
import Inference
import ModelAssets
import Training
import ArgumentParser

func peakRSSMB() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

func seconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

struct BenchTrain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-train",
        abstract: "Measure forward, generation and LoRA training speed and peak memory on the base model.")

    @OptionGroup var model: BaseModelOptions
    @Option(help: "LoRA rank.") var rank: Int = 32
    @Option(help: "Rows per batch.") var batch: Int = 4
    @Option(help: "Tokens per row.") var seq: Int = 256
    @Option(help: "Timed training steps (after warm-up).") var steps: Int = 3
    @Option(help: "Untimed warm-up steps.") var warmup: Int = 1
    @Option(help: "Timed forward calls.") var forwardReps: Int = 2
    @Option(help: "New tokens for the generation measurement.") var genTokens: Int = 64
    @Option(help: "Phases to run, comma-separated: forward,generate,train.") var phases: String = "forward,generate,train"
    @Option(help: "Write the results as JSON to this file.") var out: String?

    func run() throws {
        let t0 = seconds()
        let base = try model.load()
        var result: [String: Any] = ["system": "adapter-toolkit (Swift)", "batch": batch, "seq": seq, "rank": rank,
                                     "threads": BLAS.threads, "load_seconds": seconds() - t0, "rss_after_load_mb": peakRSSMB()]
        var rng = SeededRNG(seed: 0)
        let V = base.config.vocabSize
        let ids = (0..<(batch * (seq + 1))).map { _ in Int.random(in: 0..<V, using: &rng) }
        let rows = (0..<batch).map { Array(ids[($0 * (seq + 1))..<(($0 + 1) * (seq + 1))]) }
        let inputs = rows.flatMap { $0.dropLast() }, targets = rows.flatMap { $0.dropFirst() }
        let mask = [Bool](repeating: true, count: inputs.count)
        let layout = ForwardLayout.rows(batch: batch, length: seq)
        let wanted = Set(phases.split(separator: ",").map(String.init))

        if wanted.contains("forward") {
            let plain = try LlamaModel.load(base: base, adapter: nil)
            _ = withNoGrad { plain.logits(hidden: plain.hiddenStates(ids: inputs, layout: layout, rng: &rng, training: false)) }
            var times: [Double] = []
            for _ in 0..<forwardReps {
                let s = seconds()
                _ = withNoGrad { plain.logits(hidden: plain.hiddenStates(ids: inputs, layout: layout, rng: &rng, training: false)) }
                times.append(seconds() - s)
            }
            result["forward"] = ["tokens_per_call": inputs.count, "sec_per_call": times,
                                 "tokens_per_s": Double(inputs.count) / (times.reduce(0, +) / Double(times.count))]
            result["rss_after_forward_mb"] = peakRSSMB()
            log("forward: \(String(format: "%.0f", Double(inputs.count) / (times.reduce(0, +) / Double(times.count)))) tokens/s")
        }
        if wanted.contains("generate") {
            let engine = InferenceModel(try LlamaModel.load(base: base, adapter: nil))
            let prompt = TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 4096)
                .encodePrompt([Message(role: .user, content: "Tell me a long story about a lighthouse keeper.")])
            let (_, stats) = Generator.generate(engine, GenerationRequest(prompt: prompt, maxNewTokens: genTokens, stopTokens: []))
            result["generate"] = ["new_tokens": stats.generatedTokens, "seconds": stats.decodeSeconds, "tokens_per_s": stats.tokensPerSecond,
                                  "prefill_seconds": stats.prefillSeconds]
            result["rss_after_generate_mb"] = peakRSSMB()
            log("generate: \(String(format: "%.1f", stats.tokensPerSecond)) tokens/s")
        }
        if wanted.contains("train") {
            var initRNG = SeededRNG(seed: 1)
            let llama = try LlamaModel(config: base.config, weights: base.file.tensors, lora: LoRAConfig(rank: rank, alpha: Float(rank)), rng: &initRNG)
            let params = llama.loraParameters.map(\.tensor)
            var opt = AdamW(parameterSizes: params.map(\.count), weightDecay: 0.01)
            var times: [Double] = []
            for i in 0..<(warmup + steps) {
                let s = seconds()
                for p in params { p.grad = nil }
                let loss = llama.loss(inputs: inputs, targets: targets, lossMask: mask, layout: layout, rng: &rng, training: true)
                loss.backward()
                opt.update(params, lr: 1e-4)
                let dt = seconds() - s
                if i >= warmup { times.append(dt) }
                log(String(format: "train step %d: %.2fs (loss %.4f)%@", i, dt, loss.data[0], i < warmup ? " warm-up" : ""))
            }
            let mean = times.reduce(0, +) / Double(times.count)
            result["train"] = ["tokens_per_step": inputs.count, "sec_per_step": times, "tokens_per_s": Double(inputs.count) / mean,
                               "trainable_params": params.reduce(0) { $0 + $1.count }]
            result["rss_after_train_mb"] = peakRSSMB()
            log("train: \(String(format: "%.0f", Double(inputs.count) / mean)) tokens/s, peak RSS \(String(format: "%.0f", peakRSSMB())) MB")
        }
        result["peak_rss_mb"] = peakRSSMB()
        let json = try JSONSerialization.data(withJSONObject: result, options: [.prettyPrinted, .sortedKeys])
        if let out { try json.write(to: URL(fileURLWithPath: out)) } else { print(String(decoding: json, as: UTF8.self)) }
    }

    func log(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }
}

BenchTrain.main()
