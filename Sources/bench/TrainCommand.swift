// `bench train`: the toolkit's side of the peer benchmark (scripts/peers/peft_bench.py).
// On the base model (default SmolLM2-135M) it measures what peft_bench measures, the same way:
// forward tokens/s (no grad), greedy generation tokens/s (KV cache), LoRA training tokens/s
// (forward + backward + AdamW over all seven projections, loss over every position), and peak
// RSS after each phase; and writes them as JSON for scripts/bench.sh to set beside the peer's.
// The preference phase times a DPO step against a supervised step on the same tokens.
import ArgumentParser
import Autograd
import CLISupport
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import Training

struct TrainCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "train",
        abstract: "Measure forward, generation and LoRA training speed and peak memory on the base model.")

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions
    @Option(help: "LoRA rank.") var rank: Int = 32
    @Option(help: "Rows per batch.") var batch: Int = 4
    @Option(help: "Tokens per row.") var seq: Int = 256
    @Option(help: "Timed training steps (after warm-up).") var steps: Int = 3
    @Option(help: "Untimed warm-up steps.") var warmup: Int = 1
    @Option(help: "Timed forward calls.") var forwardReps: Int = 2
    @Option(help: "New tokens for the generation measurement.") var genTokens: Int = 64
    @Option(help: "Phases to run, comma-separated: startup,forward,generate,train; also signature (the base signature uncached, in the v1 and v2 encodings) and preference (a DPO step against a supervised step on the same tokens: --batch pairs of a --pair-prompt token prompt and two --pair-reply token replies).") var phases: String = "startup,forward,generate,train"
    @Option(help: "preference phase: prompt tokens of each pair.") var pairPrompt: Int = 128
    @Option(help: "preference phase: tokens of each reply (chosen and rejected alike).") var pairReply: Int = 64
    @Flag(help: "Train with activation checkpointing (memory for compute).") var activationCheckpointing = false
    @Option(help: "JSONL file the startup phase reads and tokenizes (time to first training step).")
    var startupData = "examples/extraction/train.jsonl"
    @Option(help: "Write the results as JSON to this file.") var out: String?

    func run() throws {
        let t0 = monotonicSeconds()
        var base = try model.load()
        try chatTemplate.apply(to: &base)
        var result: [String: Any] = ["system": "adapter-toolkit (Swift)", "batch": batch, "seq": seq, "rank": rank,
                                     "threads": BLAS.threads, "load_seconds": monotonicSeconds() - t0, "rss_after_load_mb": peakRSSMB()]
        var rng = SeededRNG(seed: 0)
        let V = base.config.vocabSize
        let ids = (0..<(batch * (seq + 1))).map { _ in Int.random(in: 0..<V, using: &rng) }
        let rows = (0..<batch).map { Array(ids[($0 * (seq + 1))..<(($0 + 1) * (seq + 1))]) }
        let inputs = rows.flatMap { $0.dropLast() }, targets = rows.flatMap { $0.dropFirst() }
        let mask = [Bool](repeating: true, count: inputs.count)
        let layout = ForwardLayout.rows(batch: batch, length: seq)
        let wanted = Set(phases.split(separator: ",").map(String.init))

        if wanted.contains("startup") {
            // What a user waits for before the first step: load the model, read and tokenize the data.
            let s = monotonicSeconds()
            let fresh = try model.load()
            let settings = DataSettings(trainData: startupData, evalData: nil, maxSequenceLength: 4096, fixedSizedSequences: false,
                                        packSequences: false, skipInvalid: false, batchSize: batch, seed: 0)
            let prepared = try DataPreparation.prepare(settings, base: fresh)
            let dt = monotonicSeconds() - s
            result["startup"] = ["seconds": dt, "samples": prepared.trainSummary.accepted, "data": startupData]
            log(String(format: "startup: %.2fs to load the model and tokenize %d samples of %@", dt, prepared.trainSummary.accepted, startupData))
        }
        if wanted.contains("signature") {
            // The base signature without its cache (what a model's first load pays), in each encoding.
            var seconds: [String: Double] = [:]
            for encoding in [BaseModelSignature.Encoding.v1, .v2] {
                let s = monotonicSeconds()
                let sig = base.file.signature(encoding: encoding)
                let dt = monotonicSeconds() - s
                seconds["\(encoding)"] = dt
                log(String(format: "signature %@: %.2fs (%@...)", "\(encoding)", dt, String(sig.prefix(16))))
            }
            result["signature_seconds"] = seconds
        }
        if wanted.contains("forward") {
            let plain = try LlamaModel(base: base.weights, adapter: nil)
            _ = withNoGrad { plain.logits(hidden: plain.hiddenStates(ids: inputs, layout: layout, rng: &rng, training: false)) }
            var times: [Double] = []
            for _ in 0..<forwardReps {
                let s = monotonicSeconds()
                _ = withNoGrad { plain.logits(hidden: plain.hiddenStates(ids: inputs, layout: layout, rng: &rng, training: false)) }
                times.append(monotonicSeconds() - s)
            }
            result["forward"] = ["tokens_per_call": inputs.count, "sec_per_call": times,
                                 "tokens_per_s": Double(inputs.count) / (times.reduce(0, +) / Double(times.count))]
            result["rss_after_forward_mb"] = peakRSSMB()
            log("forward: \(String(format: "%.0f", Double(inputs.count) / (times.reduce(0, +) / Double(times.count)))) tokens/s")
        }
        if wanted.contains("generate") {
            let engine = InferenceModel(base: base.weights)
            let prompt = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 4096)
                .encodePrompt([Message(role: .user, content: "Tell me a long story about a lighthouse keeper.")])
            let (_, stats) = Generator.generate(engine, GenerationRequest(prompt: prompt, maxNewTokens: genTokens, stopTokens: []))
            result["generate"] = ["new_tokens": stats.generatedTokens, "seconds": stats.decodeSeconds, "tokens_per_s": stats.tokensPerSecond,
                                  "prefill_seconds": stats.prefillSeconds]
            result["rss_after_generate_mb"] = peakRSSMB()
            log("generate: \(String(format: "%.1f", stats.tokensPerSecond)) tokens/s")
        }
        if wanted.contains("train") {
            var initRNG = SeededRNG(seed: 1)
            let llama = try LlamaModel(weights: base.weights, lora: LoRAConfig(rank: rank, alpha: Float(rank)), rng: &initRNG)
            llama.activationCheckpointing = activationCheckpointing
            let params = llama.loraParameters.map(\.tensor)
            var opt = AdamW(parameterSizes: params.map(\.count), weightDecay: 0.01)
            var times: [Double] = []
            for i in 0..<(warmup + steps) {
                let s = monotonicSeconds()
                for p in params { p.grad = nil }
                let loss = llama.loss(inputs: inputs, targets: targets, lossMask: mask, layout: layout, rng: &rng, training: true)
                loss.backward()
                opt.update(params, lr: 1e-4)
                let dt = monotonicSeconds() - s
                if i >= warmup { times.append(dt) }
                log(String(format: "train step %d: %.2fs (loss %.4f)%@", i, dt, loss.data[0], i < warmup ? " warm-up" : ""))
            }
            let mean = times.reduce(0, +) / Double(times.count)
            // The sgemm-bound limit: the step's matrix FLOPs at the sgemm rate measured now.
            let flops = StepFlops(config: base.config, rank: rank, batch: batch, seq: seq, lossRows: inputs.count)
            let gemm = measureSgemm(rows: batch * seq, config: base.config)
            let limit = gemm * 1e9 / flops.perStep * Double(inputs.count)
            let tokensPerS = Double(inputs.count) / mean
            result["train"] = ["tokens_per_step": inputs.count, "sec_per_step": times, "tokens_per_s": tokensPerS,
                               "trainable_params": params.reduce(0) { $0 + $1.count }, "activation_checkpointing": activationCheckpointing,
                               "matrix_gflop_per_step": flops.perStep / 1e9, "sgemm_gflops": gemm,
                               "sgemm_bound_tokens_per_s": limit, "fraction_of_sgemm_bound": tokensPerS / limit]
            result["rss_after_train_mb"] = peakRSSMB()
            log(String(format: "train: %.0f tokens/s, peak RSS %.0f MB; %.1f matrix GFLOP/step, sgemm %.1f GFLOP/s -> bound %.0f tokens/s (%.0f%% of it)",
                       tokensPerS, peakRSSMB(), flops.perStep / 1e9, gemm, limit, 100 * tokensPerS / limit))
        }
        if wanted.contains("preference") {
            result["preference"] = try preferencePhase(base, rng: &rng)
        }
        result["peak_rss_mb"] = peakRSSMB()
        let json = try JSONSerialization.data(withJSONObject: result, options: [.prettyPrinted, .sortedKeys])
        if let out { try json.write(to: URL(fileURLWithPath: out)) } else { print(String(decoding: json, as: UTF8.self)) }
    }

    func log(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

    /// A DPO step (reference = the base, its log-probabilities cached after the warm-up step, as
    /// from the second epoch on; each pair's prompt once, and again with each sequence whole)
    /// against a supervised step on the same tokens (the 2·B sequences prompt + reply, each row
    /// whole, the loss on the replies), all forward + backward + AdamW over the LoRA of every projection.
    func preferencePhase(_ base: BaseModel, rng: inout SeededRNG) throws -> [String: Any] {
        let V = base.config.vocabSize
        func ids(_ n: Int) -> [Int] { (0..<n).map { _ in Int.random(in: 0..<V, using: &rng) } }
        func example(_ prompt: [Int], _ reply: [Int], _ i: Int) -> TrainingExample {
            let tokens = prompt + reply
            let target = [Bool](repeating: false, count: prompt.count) + [Bool](repeating: true, count: reply.count)
            return TrainingExample(sampleIndex: i, line: i + 1, inputs: Array(tokens.dropLast()), targets: Array(tokens.dropFirst()),
                                   targetMask: Array(target.dropFirst()))
        }
        let pairs = (0..<batch).map { i -> PreferenceExample in
            let p = ids(pairPrompt)
            return PreferenceExample(sampleIndex: i, line: i + 1, chosen: example(p, ids(pairReply), i), rejected: example(p, ids(pairReply), i))
        }
        let pairBatch = try PreferenceBatcher(examples: pairs, options: BatchOptions(batchSize: batch, layout: .sharePrefix, shuffle: false)).batches(epoch: 0)[0]
        // the same DPO step with each sequence whole (--no-share-prefix): the positions the supervised step computes
        let wholeBatch = try PreferenceBatcher(examples: pairs, options: BatchOptions(batchSize: batch, layout: .padToLongest, shuffle: false)).batches(epoch: 0)[0]
        let sequences = pairs.flatMap { [$0.chosen, $0.rejected] }
        var plain = try Batcher(examples: sequences, options: BatchOptions(batchSize: 2 * batch, layout: .padToLongest, shuffle: false))
        let sftBatch = plain.next()!
        var results: [String: Any] = ["pairs": batch, "prompt_tokens": pairPrompt, "reply_tokens": pairReply,
                                      "sft_positions": sftBatch.inputIds.count, "dpo_positions": pairBatch.inputIds.count]
        var means: [String: Double] = [:]
        for name in ["sft", "dpo", "dpo_whole"] {
            var initRNG = SeededRNG(seed: 1)
            let llama = try LlamaModel(weights: base.weights, lora: LoRAConfig(rank: rank, alpha: Float(rank)), rng: &initRNG)
            llama.activationCheckpointing = activationCheckpointing
            let objective: TrainingObjective = name == "sft" ? AdapterObjective(model: llama)
                : try PreferenceObjective(model: llama, reference: try LlamaModel(base: base.weights, adapter: nil),
                                          settings: PreferenceSettings(objective: .dpo, beta: 0.1))
            let b = name == "sft" ? sftBatch : name == "dpo" ? pairBatch : wholeBatch
            let params = llama.loraParameters.map(\.tensor)
            var opt = AdamW(parameterSizes: params.map(\.count), weightDecay: 0.01)
            var times: [Double] = []
            for i in 0..<(warmup + steps) {
                let s = monotonicSeconds()
                for p in params { p.grad = nil }
                let loss = objective.loss(b, rng: &rng, training: true)
                loss.backward()
                opt.update(params, lr: 1e-4)
                let dt = monotonicSeconds() - s
                if i >= warmup { times.append(dt) }
                log(String(format: "%@ step %d: %.2fs (loss %.4f)%@", name, i, dt, loss.data[0], i < warmup ? " warm-up (DPO: the reference pass too)" : ""))
            }
            means[name] = times.reduce(0, +) / Double(times.count)
            results[name] = ["sec_per_step": times, "positions": b.inputIds.count]
        }
        results["dpo_over_sft"] = means["dpo"]! / means["sft"]!
        results["dpo_whole_over_sft"] = means["dpo_whole"]! / means["sft"]!
        log(String(format: "preference: a DPO step takes %.2fx a supervised step on the same tokens (%d pairs, prompt %d, replies %d; positions %d vs %d); with each sequence whole (the same positions) %.2fx",
                   means["dpo"]! / means["sft"]!, batch, pairPrompt, pairReply, pairBatch.inputIds.count, sftBatch.inputIds.count,
                   means["dpo_whole"]! / means["sft"]!))
        return results
    }
}

/// The matrix FLOPs of one LoRA training step (issue 9's sgemm-bound limit): the forward
/// through every block, the input gradients back through every block (the first block's
/// frozen projections need none: nothing below them trains), the output head and its input
/// gradient on the loss rows, attention's products (forward 2, backward 5 with the recompute),
/// and the LoRA terms (forward 2·r·(in+out) per row, backward twice that).
struct StepFlops {
    let perStep: Double

    init(config c: ModelConfig, rank r: Int, batch: Int, seq: Int, lossRows: Int) {
        let D = Double(c.hiddenSize), F = Double(c.intermediateSize), V = Double(c.vocabSize)
        let qw = Double(c.numHeads * c.headDim), kw = Double(c.numKVHeads * c.headDim), R = Double(r)
        let N = Double(batch * seq), L = Double(c.numLayers)
        let inputSide = 2 * D * (qw + 2 * kw) + 2 * 2 * D * F  // q, k, v, gate, up per row
        let outputSide = 2 * qw * D + 2 * F * D  // o, down per row
        let blockForward = N * (inputSide + outputSide)
        let blockInputGrads = N * (inputSide + outputSide) * L - N * inputSide  // not block 0's q,k,v,gate,up
        let visible = Double(seq + 1) / 2  // mean keys a causal query sees
        let attention = Double(batch * seq) * visible * Double(c.headDim) * Double(c.numHeads) * 2 * (2 + 5)
        let lora = N * 3 * 2 * R * ((D + qw) + 2 * (D + kw) + (qw + D) + 2 * (D + F) + (F + D))
        let head = Double(lossRows) * 2 * 2 * D * V
        perStep = blockForward * L + blockInputGrads + attention * L + lora * L + head
    }
}

/// GFLOP/s of the toolkit's sgemm (both cores, deterministic blocks) on the block's projection
/// shapes at this row count: x·Wᵀ for q and gate, dY·W for down. Best of three rounds.
func measureSgemm(rows n: Int, config c: ModelConfig) -> Double {
    let D = c.hiddenSize, F = c.intermediateSize, Q = c.numHeads * c.headDim
    let shapes = [(n, Q, D, true), (n, F, D, true), (n, F, D, false)]  // (m, n, k, transB)
    var rng = SeededRNG(seed: 5)
    var best = Double.infinity, flops = 0.0
    let buffers = shapes.map { (m, nn, k, _) in
        ((0..<(m * k)).map { _ in Float.random(in: -1...1, using: &rng) }, (0..<(nn * k)).map { _ in Float.random(in: -1...1, using: &rng) },
         [Float](repeating: 0, count: m * nn))
    }
    for (m, nn, k, _) in shapes { flops += 2 * Double(m * nn * k) }
    for _ in 0..<3 {
        let s = monotonicSeconds()
        for (i, (m, nn, k, tb)) in shapes.enumerated() {
            var (a, b, out) = buffers[i]
            a.withUnsafeBufferPointer { ap in b.withUnsafeBufferPointer { bp in out.withUnsafeMutableBufferPointer { cp in
                BLAS.sgemm(transA: false, transB: tb, m: m, n: nn, k: k, alpha: 1, a: ap.baseAddress!, lda: k,
                           b: bp.baseAddress!, ldb: tb ? k : nn, beta: 0, c: cp.baseAddress!, ldc: nn)
            } } }
        }
        best = min(best, monotonicSeconds() - s)
    }
    return flops / best / 1e9
}

