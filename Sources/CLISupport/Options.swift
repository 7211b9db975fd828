// Option groups shared by the executables (swift-argument-parser @OptionGroup), so train-adapter
// and train-draft take the same data, schedule and checkpoint flags with the same defaults and
// help, and every tool names the base model the same way. Each setting is defined once: its
// default is the library's (TrainingOptions, LoRAConfig), its check the library's where one exists.
// Defaults follow Apple's adapter training toolkit where it has them.
import ArgumentParser
import DataSchema
import Foundation
import ModelDefinition
import RunLog
import Training

public struct BaseModelOptions: ParsableArguments {
    @Option(name: [.customLong("base-model"), .customLong("model")],
            help: "Base model: a .gguf file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json). Default: the fetched SmolLM2-135M-Instruct (scripts/fetch-model.sh) or $ADAPTER_BASE_MODEL.")
    public var baseModel: String?

    @Option(help: "How the frozen base weights are held: stored (as the file stores them, memory-mapped and never copied whole: GGUF blocks, safetensors F16/BF16/F32 matrices; far less memory, faster decoding) or float32 (dequantized at load: the reference path).")
    public var baseWeights: BaseWeightStorage = .stored

    public init() {}

    public func load() throws -> BaseModel {
        FullCopyReport.install()
        try CPULevel.checkEnvironment()  // a misspelt ADAPTER_CPU_LEVEL is refused, not ignored
        return try BaseModel.load(path: try BaseModel.resolvePath(baseModel), storage: baseWeights)
    }

    /// Loads the base and the adapter at `adapter` (a checkpoint, .fmadapter package or PEFT
    /// folder; nil for the bare base), refusing an adapter made for another base.
    public func load(adapter: String?) throws -> LoadedModel {
        try LoadedModel.load(base: try load(), adapter: adapter)
    }
}

extension LRSchedule: ExpressibleByArgument {}
extension BaseWeightStorage: ExpressibleByArgument {}

public struct DataOptions: ParsableArguments {
    @Option(help: "Training data: JSONL, one conversation per line (see Schema.md).")
    public var trainData: String

    @Option(help: "Evaluation data (JSONL, same schema); eval loss and perplexity are reported after each epoch.")
    public var evalData: String?

    @Option(help: "Longest sample in tokens; longer samples are truncated and counted in the summary.")
    public var maxSequenceLength: Int = 1024

    @Flag(help: "Pad every batch to --max-sequence-length instead of to its longest sample.")
    public var fixedSizedSequences = false

    @Flag(help: "Pack several samples into each row up to --max-sequence-length (attention never crosses samples).")
    public var packSequences = false

    @Flag(inversion: .prefixedNo,
          help: "Compute a prompt prefix common to a batch's samples (a system prompt, a response_format schema) once per batch instead of once per sample: one row with the prefix, then each sample's rest; the same loss, fewer tokens. Used with the default padding when it saves at least a quarter of the batch's tokens.")
    public var sharePrefix = true

    @Flag(help: "Train on the valid samples and report the invalid ones, instead of stopping before training.")
    public var skipInvalid = false

    public init() {}

    /// The library's data settings, with the schedule's batch size and seed.
    public func settings(_ schedule: ScheduleOptions) -> DataSettings {
        DataSettings(trainData: trainData, evalData: evalData, maxSequenceLength: maxSequenceLength,
                     fixedSizedSequences: fixedSizedSequences, packSequences: packSequences, skipInvalid: skipInvalid,
                     batchSize: schedule.batchSize, seed: schedule.seed, sharePrefix: sharePrefix)
    }

    public func validate() throws {
        guard maxSequenceLength >= 2 else { throw ValidationError("--max-sequence-length must be at least 2 tokens") }
        if fixedSizedSequences && packSequences {
            throw ValidationError("--fixed-sized-sequences and --pack-sequences exclude each other; packing already fills rows to --max-sequence-length")
        }
    }
}

public struct ScheduleOptions: ParsableArguments {
    @Option(help: "Number of passes over the training data.")
    public var epochs: Int = TrainingOptions().epochs

    @Option(help: "Peak learning rate of AdamW.")
    public var learningRate: Float = TrainingOptions().learningRate

    @Option(help: "Linear warmup length in epochs (fractions allowed). Excludes --warmup-steps.")
    public var warmupEpochs: Double?

    @Option(help: "Linear warmup length in optimizer steps. Excludes --warmup-epochs.")
    public var warmupSteps: Int?

    @Option(help: "Learning-rate schedule after warmup: cosine, linear or constant.")
    public var lrSchedule: LRSchedule = TrainingOptions().schedule

    @Option(help: "Samples per micro-batch.")
    public var batchSize: Int = 4

    @Option(help: "Micro-batches whose gradients are averaged into one optimizer step.")
    public var gradientAccumulationSteps: Int = TrainingOptions().gradientAccumulationSteps

    @Option(help: "AdamW decoupled weight decay.")
    public var weightDecay: Float = TrainingOptions().weightDecay

    @Option(help: "Clip the global gradient norm to this value (0 turns clipping off).")
    public var clipGradNorm: Float = TrainingOptions().clipGradNorm ?? 0

    @Option(help: "Stop after this many optimizer steps (the schedule is laid out over them).")
    public var maxSteps: Int?

    @Option(help: "Seed for adapter initialisation, data order and dropout.")
    public var seed: UInt64 = TrainingOptions().seed

    @Flag(help: "Recompute each block's activations in the backward pass instead of keeping them: far less memory (long sequences, big batches) for about 30% more time per step.")
    public var activationCheckpointing = false

    @Option(help: "Report the training loss every this many optimizer steps.")
    public var lossUpdateFrequency: Int = TrainingOptions().lossUpdateFrequency

    public init() {}

    public func validate() throws {
        guard epochs >= 1 else { throw ValidationError("--epochs must be at least 1") }
        guard learningRate > 0, learningRate.isFinite else { throw ValidationError("--learning-rate must be a positive number") }
        guard batchSize >= 1 else { throw ValidationError("--batch-size must be at least 1") }
        guard gradientAccumulationSteps >= 1 else { throw ValidationError("--gradient-accumulation-steps must be at least 1") }
        guard weightDecay >= 0 else { throw ValidationError("--weight-decay must not be negative") }
        guard clipGradNorm >= 0 else { throw ValidationError("--clip-grad-norm must not be negative (0 turns clipping off)") }
        if warmupEpochs != nil && warmupSteps != nil { throw ValidationError("give --warmup-epochs or --warmup-steps, not both") }
        if let w = warmupEpochs, w < 0 { throw ValidationError("--warmup-epochs must not be negative") }
        if let w = warmupSteps, w < 0 { throw ValidationError("--warmup-steps must not be negative") }
        if let m = maxSteps, m < 1 { throw ValidationError("--max-steps must be at least 1") }
        guard lossUpdateFrequency >= 1 else { throw ValidationError("--loss-update-frequency must be at least 1") }
    }

    /// The loop's options, with warmup epochs turned into steps for `batchesPerEpoch`.
    public func trainingOptions(batchesPerEpoch: Int, checkpointFrequency: Int) -> TrainingOptions {
        var o = TrainingOptions()
        o.epochs = epochs
        o.learningRate = learningRate
        o.gradientAccumulationSteps = gradientAccumulationSteps
        o.warmupSteps = warmupSteps ?? Int(((warmupEpochs ?? 0) * Double(o.stepsPerEpoch(batchesPerEpoch))).rounded())
        o.weightDecay = weightDecay
        o.clipGradNorm = clipGradNorm > 0 ? clipGradNorm : nil
        o.schedule = lrSchedule
        o.maxSteps = maxSteps
        o.seed = seed
        o.checkpointFrequency = checkpointFrequency
        o.lossUpdateFrequency = lossUpdateFrequency
        return o
    }
}

public struct CheckpointOptions: ParsableArguments {
    @Option(help: "Folder for checkpoints and the run's log (created if missing): DIR/adapter/ or DIR/draft/ holds metrics.jsonl, loss-curve.svg and TensorBoard event files.")
    public var checkpointDir: String

    @Option(help: "Write an epoch checkpoint every this many epochs.")
    public var checkpointFrequency: Int = TrainingOptions().checkpointFrequency

    @Option(help: "Continue exactly from this checkpoint (same data and settings).")
    public var resumeFrom: String?

    @Flag(help: "Continue from the newest checkpoint in --checkpoint-dir.")
    public var resume = false

    @Option(help: "Keep only the N epoch checkpoints with the lowest eval loss (the final one is always kept).")
    public var keepBest: Int?

    public init() {}

    public func validate() throws {
        guard checkpointFrequency >= 1 else { throw ValidationError("--checkpoint-frequency must be at least 1 (epochs)") }
        if resume && resumeFrom != nil { throw ValidationError("give --resume or --resume-from, not both") }
        if let k = keepBest, k < 0 { throw ValidationError("--keep-best must not be negative") }
    }

    public var settings: CheckpointSettings {
        CheckpointSettings(directory: checkpointDir, frequency: checkpointFrequency, resumeFrom: resumeFrom, resume: resume, keepBest: keepBest)
    }
}

extension LoRATarget: ExpressibleByArgument {}
extension ActivationPrecision: ExpressibleByArgument {}
extension KVCachePrecision: ExpressibleByArgument {}

/// How decoding multiplies stored weights and stores the KV cache (generate, evaluate-adapter, serve,
/// bench decode, bench speculative).
public struct DecodingOptions: ParsableArguments {
    @Option(help: "What stored quantized base weights are multiplied with when decoding: q8 (activations quantized to int8 per 32 values, per 256 for K-quant weights, with integer dot products, as llama.cpp computes: decoding 1.1x (SmolLM2 Q4_1) to 2.3x (a 1B Q4_K_M file) faster; logits move by a few percent, and the extraction adapter's replies stayed 98-100% identical, see docs/generation.md) or float32 (the reference numbers the equality tests hold to). Float (F32/F16/BF16) weights always meet float32 activations.")
    public var activations: ActivationPrecision = .q8

    @Option(name: .customLong("kv-cache"), help: "How the KV cache stores keys and values: float32 (the reference numbers) or float16 (half the memory per position, as llama.cpp's default cache; each value rounded once: SmolLM2's logits moved by 4e-4 of the largest).")
    public var kvCache: KVCachePrecision = .float32

    public init() {}
}

/// The adapter's shape: rank, alpha, targets, dropout (train-adapter).
public struct LoRAOptions: ParsableArguments {
    @Option(help: "LoRA rank r.")
    public var rank: Int = LoRAConfig().rank

    @Option(help: "LoRA alpha; the adapter's output is scaled by alpha / rank. Default: the rank (scale 1).")
    public var alpha: Float?

    @Option(parsing: .upToNextOption, help: "Projections to adapt, comma- or space-separated: q,k,v,o,gate,up,down (default all).")
    public var targets: [String] = [LoRATarget.allCases.map(\.rawValue).joined(separator: ",")]

    @Option(help: "Dropout on the LoRA path during training.")
    public var dropout: Float = LoRAConfig().dropout

    public init() {}

    /// The configuration the flags describe, checked by `LoRAConfig.validate` (the one check).
    public func config() throws -> LoRAConfig {
        var out: [LoRATarget] = []
        for item in targets.flatMap({ $0.split(separator: ",") }) {
            let name = item.trimmingCharacters(in: .whitespaces)
            guard let t = LoRATarget(rawValue: name) else {
                throw ValidationError("unknown --targets entry '\(name)'; choose from q,k,v,o,gate,up,down")
            }
            if !out.contains(t) { out.append(t) }
        }
        let c = LoRAConfig(rank: rank, alpha: alpha, targets: out, dropout: dropout)
        do { try c.validate() } catch { throw ValidationError("\(error.localizedDescription) (--rank, --alpha, --targets, --dropout)") }
        return c
    }

    public func validate() throws { _ = try config() }
}

/// The adapter forms every tool takes, for option help: ModelDefinition's one list
/// (`Adapter.formDescriptions`), which the loader's own errors name too, so `--help` says what
/// the loader reads (Tests/CLISupportTests/HelpTextTests checks every adapter option against it).
public enum AdapterForms {
    /// "an adapter checkpoint (adapter-*.safetensors), an .fmadapter package or a PEFT folder (...)".
    public static var phrase: String { Adapter.acceptedForms }
}

extension ReportTarget: ExpressibleByArgument {}
extension LossCurve.Scale: ExpressibleByArgument {}

/// Where metrics go besides metrics.jsonl (train-adapter, train-draft, evaluate-adapter).
public struct ReportOptions: ParsableArguments {
    @Option(help: "Also report metrics to: tensorboard (event files beside metrics.jsonl; view with tensorboard --logdir on the run folder) or none.")
    public var reportTo: ReportTarget = ReportSettings().target

    public init() {}

    /// The library's report settings, recording `commandLine` in the log's header.
    public func settings(commandLine: [String] = CommandLine.arguments, curveScale: LossCurve.Scale = ReportSettings().curveScale) -> ReportSettings {
        ReportSettings(target: reportTo, commandLine: commandLine, curveScale: curveScale)
    }
}

/// A training run's reporting: --report-to and the loss curve's axis (train-adapter, train-draft).
public struct TrainingReportOptions: ParsableArguments {
    @OptionGroup public var report: ReportOptions

    @Option(help: "The loss axis of loss-curve.svg: log (losses that fall by orders of magnitude stay readable) or linear.")
    public var lossCurveScale: LossCurve.Scale = ReportSettings().curveScale

    public init() {}

    public func settings(commandLine: [String] = CommandLine.arguments) -> ReportSettings {
        report.settings(commandLine: commandLine, curveScale: lossCurveScale)
    }
}
