// train-adapter's whole job as one library call: check the folder, read and validate the data
// before any compute, build the model with LoRA, resume if asked (refusing a checkpoint from
// another base, LoRA shape or data), run the loop, and keep the run's log (RUN/adapter/:
// metrics.jsonl, TensorBoard events, the loss curve).
import Autograd
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import RunLog

public struct DataSettings: Sendable {
    public var trainData: String
    public var evalData: String?
    public var maxSequenceLength: Int
    public var fixedSizedSequences: Bool
    public var packSequences: Bool
    public var skipInvalid: Bool
    public var batchSize: Int
    public var seed: UInt64
    /// With the default padding: one row per batch with the samples' common prompt prefix once
    /// (`BatchOptions.Layout.sharePrefix`).
    public var sharePrefix: Bool

    public init(trainData: String, evalData: String?, maxSequenceLength: Int, fixedSizedSequences: Bool,
                packSequences: Bool, skipInvalid: Bool, batchSize: Int, seed: UInt64, sharePrefix: Bool = false) {
        self.trainData = trainData
        self.evalData = evalData
        self.maxSequenceLength = maxSequenceLength
        self.fixedSizedSequences = fixedSizedSequences
        self.packSequences = packSequences
        self.skipInvalid = skipInvalid
        self.batchSize = batchSize
        self.seed = seed
        self.sharePrefix = sharePrefix
    }

    var layout: BatchOptions.Layout {
        packSequences ? .pack(maxSequenceLength) : fixedSizedSequences ? .padToFixed(maxSequenceLength)
            : sharePrefix ? .sharePrefix : .padToLongest
    }
}

/// What the data step found, for the start summary.
public struct PreparedData {
    public var train: EpochBatches
    public var eval: EpochBatches?
    public var trainSummary: DataSummary
    public var evalSummary: DataSummary?
    public var issues: [DataIssue]
    public var trainTokens: Int
    public var trainTargetTokens: Int
    /// Positions the first epoch's batches compute (padding included, shared prefixes once).
    public var firstEpochPositions: Int
    public var fingerprint: String
}

public enum DataPreparation {
    /// Reads, validates, renders and batches the train (and eval) files. Throws before any
    /// training compute on bad data, listing the problems.
    public static func prepare(_ s: DataSettings, base: BaseModel, extraSettings: [String] = []) throws -> PreparedData {
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: s.maxSequenceLength)
        func load(_ path: String, role: String) throws -> (EncodedDataSet, DataSet) {
            let data = try DataReader.read(path: path, options: ReadOptions(mode: .train, skipInvalid: s.skipInvalid))
            guard !data.samples.isEmpty else {
                throw TrainingError.data("\(path): no usable samples in the \(role) file (\(data.summary)); see Schema.md for the format")
            }
            return (try encoder.encode(data, skipInvalid: s.skipInvalid), data)
        }
        let (train, _) = try load(s.trainData, role: "training")
        let pad = base.tokenizer.padTokenId ?? base.tokenizer.eosTokenId ?? 0
        let trainOptions = BatchOptions(batchSize: s.batchSize, layout: s.layout, shuffle: true, seed: s.seed, padTokenId: pad)
        let trainBatches = try EpochBatches(examples: train.examples, options: trainOptions)
        var evalBatches: EpochBatches? = nil
        var evalSummary: DataSummary? = nil
        var issues = train.issues
        if let evalPath = s.evalData {
            let (ev, _) = try load(evalPath, role: "eval")
            guard ev.examples.count >= s.batchSize else {
                throw TrainingError.data("\(evalPath): the eval file has \(ev.examples.count) usable samples, fewer than --batch-size \(s.batchSize); add eval samples or lower --batch-size")
            }
            let evalOptions = BatchOptions(batchSize: s.batchSize, layout: s.layout, shuffle: false, seed: 0, padTokenId: pad)
            evalBatches = try EpochBatches(examples: ev.examples, options: evalOptions)
            evalSummary = ev.summary
            issues += ev.issues
        }
        // Prefix sharing changes how a batch is laid out, not what it computes: a run may resume
        // with it switched either way.
        let layoutText = s.layout == .sharePrefix ? "\(BatchOptions.Layout.padToLongest)" : "\(s.layout)"
        let settingsText = (["maxSequenceLength=\(s.maxSequenceLength) layout=\(layoutText) batchSize=\(s.batchSize) seed=\(s.seed) skipInvalid=\(s.skipInvalid)"]
            + extraSettings).joined(separator: " ")
        return PreparedData(
            train: trainBatches, eval: evalBatches, trainSummary: train.summary, evalSummary: evalSummary, issues: issues,
            trainTokens: train.examples.reduce(0) { $0 + $1.count },
            trainTargetTokens: train.examples.reduce(0) { $0 + $1.targetTokenCount },
            firstEpochPositions: (0..<trainBatches.batchCount(epoch: 0)).reduce(0) { $0 + trainBatches.batch(epoch: 0, index: $1).inputIds.count },
            fingerprint: try Fingerprint.sha256(file: s.trainData, then: Data(settingsText.utf8)))
    }
}

/// Where a run keeps its checkpoints and how it resumes: the same for adapter and draft runs.
public struct CheckpointSettings: Sendable {
    /// The run folder (checkpoints, and each run's log in a subfolder: adapter/, draft/).
    public var directory: String
    /// Write an epoch checkpoint every this many epochs.
    public var frequency: Int
    /// Continue exactly from this checkpoint.
    public var resumeFrom: String?
    /// Continue from the newest checkpoint in `directory`.
    public var resume: Bool
    /// Keep only the N epoch checkpoints with the lowest eval loss.
    public var keepBest: Int?

    public init(directory: String, frequency: Int = 1, resumeFrom: String? = nil, resume: Bool = false, keepBest: Int? = nil) {
        self.directory = directory
        self.frequency = frequency
        self.resumeFrom = resumeFrom
        self.resume = resume
        self.keepBest = keepBest
    }

    /// The checkpoint to resume from (`resumeFrom`, or with `resume` the newest `prefix`-*
    /// checkpoint of the folder), read; nil for a fresh run.
    public func resumeCheckpoint(in folder: RunFolder, prefix: String) throws -> Checkpoint? {
        var path = resumeFrom
        if resume {
            path = folder.newestCheckpoint(prefix: prefix)
            if path == nil {
                throw TrainingError.io(path: directory, reason: "--resume found no \(prefix) checkpoint in the folder; start without --resume")
            }
        }
        return try path.map { try Checkpoint.load($0) }
    }
}

public struct AdapterRunSettings {
    public var data: DataSettings
    public var lora: LoRAConfig
    public var checkpoints: CheckpointSettings
    /// The loop's options, given the first epoch's batch count (warmup epochs need it).
    public var makeOptions: (_ batchesPerEpoch: Int) -> TrainingOptions
    /// Recompute block activations in backward (less memory, one more forward of compute).
    /// Not part of the checkpoint: a run may be resumed with it on or off.
    public var activationCheckpointing = false
    /// TensorBoard events or not, the command line for the log's header, the curve's scale.
    public var report = ReportSettings()
    /// The processes of a data-parallel run (nil: this process alone). Only rank 0 uses the run
    /// folder (lock, resume, checkpoints, metrics, log); the others start from its state.
    public var group: ProcessGroup?
    /// Preference training (DPO, IPO, ORPO) on a file of pairs; nil: supervised (the default).
    public var preference: PreferenceSettings? = nil
    /// An adapter (any form `Adapter.load` reads) the run starts from instead of a fresh one;
    /// its LoRA shape is the run's.
    public var initCheckpoint: String? = nil
    /// DPO/IPO: the reference adapter (any form). Without it the reference is the adapter the run
    /// starts from (`initCheckpoint`), or the base with the adapter off.
    public var referenceCheckpoint: String? = nil

    public init(data: DataSettings, lora: LoRAConfig, checkpoints: CheckpointSettings, makeOptions: @escaping (Int) -> TrainingOptions) {
        self.data = data
        self.lora = lora
        self.checkpoints = checkpoints
        self.makeOptions = makeOptions
    }
}

/// Messages for the start of a run (the CLI prints them).
public enum RunNotice {
    case dataSummary(train: DataSummary, eval: DataSummary?, trainTokens: Int, targetTokens: Int, computedPositions: Int, skipped: [DataIssue])
    case model(path: String, signature: String, layers: Int, hidden: Int, trainable: Int, lora: LoRAConfig)
    case resuming(from: String, step: Int, epoch: Int)
    /// Where the run's log is, what opening it did, or that writing it failed.
    case log(String)
}

public enum AdapterRun {
    public static func run(_ s: AdapterRunSettings, base: BaseModel, shouldStop: () -> Bool,
                           notice: (RunNotice) -> Void, onEvent: (TrainingEvent) -> Void) throws -> TrainingOutcome {
        let parallel = s.group.flatMap { $0.size > 1 ? $0 : nil }
        let folder = (parallel?.rank ?? 0) == 0 ? try RunFolder(s.checkpoints.directory) : nil
        defer { folder?.releaseLock() }
        try s.preference?.validate()
        let initial = try s.initCheckpoint.map { path -> Adapter in
            let a = try Adapter.load(path, base: base)
            try a.requireBase(base)
            return a
        }
        let referenceAdapter = try s.referenceCheckpoint.map { path -> Adapter in
            guard s.preference?.needsReference == true else {
                throw TrainingError.invalidConfig("--reference-checkpoint applies to --objective dpo or ipo only")
            }
            let a = try Adapter.load(path, base: base)
            try a.requireBase(base)
            return a
        } ?? (s.preference?.needsReference == true ? initial : nil)
        // What the data fingerprint also holds, so that a resume with another objective is refused.
        let objectiveText = s.preference.map { p in
            "objective=\(p.objective.rawValue) beta=\(p.beta) labelSmoothing=\(p.labelSmoothing)\(p.rpoAlpha > 0 ? " rpoAlpha=\(p.rpoAlpha)" : "") reference=\(referenceAdapter?.signature ?? "base")"
        }.map { [$0] } ?? []
        let startText = initial.map { ["init=\($0.signature)"] } ?? []
        let data = try s.preference == nil
            ? RunData(DataPreparation.prepare(s.data, base: base, extraSettings: startText))
            : RunData(DataPreparation.preparePreferences(s.data, base: base, extraSettings: objectiveText + startText))
        notice(.dataSummary(train: data.trainSummary, eval: data.evalSummary, trainTokens: data.trainTokens,
                            targetTokens: data.trainTargetTokens, computedPositions: data.firstEpochPositions, skipped: data.issues))
        let options = s.makeOptions(data.train.batchCount(epoch: 0))

        let resumed = try folder.flatMap { try s.checkpoints.resumeCheckpoint(in: $0, prefix: "adapter") }
        let lora = resumed?.header.lora ?? initial?.lora ?? s.lora
        if let r = resumed {
            try r.requireAdapter(for: base)
            guard r.header.lora == (initial?.lora ?? s.lora) else {
                throw TrainingError.incompatible(path: r.path, reason: "was trained with LoRA \(r.header.lora!.summary), but this run asks for \(s.lora.summary); resume with the same --rank/--alpha/--targets/--dropout")
            }
            guard r.header.dataFingerprint == data.fingerprint else {
                throw TrainingError.incompatible(path: r.path, reason: "was trained on different data or data settings (train file contents, --max-sequence-length, --batch-size, packing, --seed); exact resume needs the same ones")
            }
        }
        var rng = SeededRNG(seed: options.seed)
        let model = try LlamaModel(weights: base.weights, lora: lora, rng: &rng)
        model.activationCheckpointing = s.activationCheckpointing
        if let initial { try load(initial, into: model) }
        let objective: TrainingObjective
        if let p = s.preference {
            // The reference: the same base weights (no copy), with the reference adapter or none.
            let reference = p.needsReference ? try LlamaModel(base: base.weights, adapter: referenceAdapter) : nil
            objective = try PreferenceObjective(model: model, reference: reference, settings: p)
        } else {
            objective = AdapterObjective(model: model)
        }
        var state = TrainerState(seed: options.seed)
        var optimizer: AdamW? = nil
        var runOptions = options
        if let r = resumed {
            optimizer = try r.restore(into: model.loraParameters, weightDecay: options.weightDecay)
            state = r.header.state
            if r.header.label == "final" {
                throw TrainingError.incompatible(path: r.path, reason: "is the final checkpoint of a finished run; there is nothing to resume (raise --epochs in a new run to train further)")
            }
            runOptions = r.header.options
            notice(.resuming(from: r.path, step: state.step, epoch: state.epoch))
        }
        let params = model.loraParameters
        notice(.model(path: base.path, signature: base.signature, layers: base.config.numLayers, hidden: base.config.hiddenSize,
                      trainable: params.reduce(0) { $0 + $1.tensor.count }, lora: lora))
        // Rank 0 alone keeps the run's log; the other ranks' checkpoints are never written.
        let recorder: RunRecorder? = try folder.map { folder in
            var settings = RunRecorder.settings(base: base, data: s.data, options: runOptions, fingerprint: data.fingerprint,
                                                activationCheckpointing: s.activationCheckpointing)
            settings["lora"] = RunRecorder.jsonObject(lora)
            settings["objective"] = s.preference?.objective.rawValue ?? "sft"
            if let p = s.preference {
                settings["preference"] = ["beta": p.beta, "label_smoothing": p.labelSmoothing, "rpo_alpha": p.rpoAlpha,
                                          "reference": p.needsReference ? (s.referenceCheckpoint ?? s.initCheckpoint ?? "base") : NSNull()] as [String: Any]
            }
            if let i = s.initCheckpoint { settings["init_checkpoint"] = i }
            if let parallel { settings["processes"] = parallel.size }
            return try RunRecorder.open(
                folder: folder, kind: "adapter",
                title: "\(s.preference.map { $0.objective.rawValue.uppercased() + " " } ?? "")adapter training on \(URL(fileURLWithPath: s.data.trainData).lastPathComponent)",
                lossLabel: s.preference.map { "\($0.objective.rawValue.uppercased()) loss of the preference pairs" } ?? "cross-entropy of the assistant tokens",
                settings: settings, report: s.report, resumed: resumed, perplexity: s.preference == nil)
        }
        if let recorder {
            for n in recorder.log.notes { notice(.log(n)) }
            notice(.log("run \(recorder.log.runId): log \(recorder.log.metricsPath), loss curve \(recorder.log.curvePath)"
                        + (s.report.target == .tensorboard ? ", TensorBoard events in \(recorder.log.folder)/" : "")))
        }
        let runId = recorder?.log.runId
        let checkpointer = FolderCheckpointer(directory: s.checkpoints.directory, prefix: "adapter", params: params) { st, opts, label in
            CheckpointHeader(content: .adapter, baseSignature: base.signature, baseConfig: base.config, lora: lora,
                             state: st, options: opts, dataFingerprint: data.fingerprint, label: label, runId: runId)
        }
        var trainer = Trainer(options: runOptions, keepBest: s.checkpoints.keepBest)
        trainer.group = parallel
        if let parallel { try GroupSetup.agree(parallel, key: "data \(data.fingerprint), base \(base.signature)", error: nil) }
        return try trainer.run(objective: objective, train: data.train, eval: data.eval, checkpointer: checkpointer,
                               state: state, optimizer: optimizer, shouldStop: shouldStop) { event in
            if let problem = recorder?.record(event) { notice(.log(problem)) }
            onEvent(event)
        }
    }
}

extension AdapterRun {
    /// Copies an adapter's tensors into the model's LoRA tensors (the same LoRA shape).
    static func load(_ adapter: Adapter, into model: LlamaModel) throws {
        let stored = Dictionary(uniqueKeysWithValues: adapter.tensors.map { ($0.name, $0.tensor) })
        for (name, t) in model.loraParameters {
            guard let v = stored[name], v.shape == t.shape else {
                throw TrainingError.incompatible(path: adapter.source, reason: "has no tensor '\(name)' of shape \(t.shape) (LoRA \(adapter.lora.summary))")
            }
            t.data = v.data
        }
    }
}

/// The data of a run as the loop takes it (supervised examples or preference pairs).
struct RunData {
    var train: BatchSource
    var eval: BatchSource?
    var trainSummary: DataSummary
    var evalSummary: DataSummary?
    var issues: [DataIssue]
    var trainTokens: Int
    var trainTargetTokens: Int
    var firstEpochPositions: Int
    var fingerprint: String

    init(train: BatchSource, eval: BatchSource?, trainSummary: DataSummary, evalSummary: DataSummary?, issues: [DataIssue],
         trainTokens: Int, trainTargetTokens: Int, firstEpochPositions: Int, fingerprint: String) {
        self.train = train
        self.eval = eval
        self.trainSummary = trainSummary
        self.evalSummary = evalSummary
        self.issues = issues
        self.trainTokens = trainTokens
        self.trainTargetTokens = trainTargetTokens
        self.firstEpochPositions = firstEpochPositions
        self.fingerprint = fingerprint
    }

    init(_ d: PreparedData) {
        self.init(train: d.train, eval: d.eval, trainSummary: d.trainSummary, evalSummary: d.evalSummary, issues: d.issues,
                  trainTokens: d.trainTokens, trainTargetTokens: d.trainTargetTokens, firstEpochPositions: d.firstEpochPositions,
                  fingerprint: d.fingerprint)
    }

    init(_ d: PreparedPreferenceData) {
        self.init(train: d.train, eval: d.eval, trainSummary: d.trainSummary, evalSummary: d.evalSummary, issues: d.issues,
                  trainTokens: d.trainTokens, trainTargetTokens: d.trainTargetTokens, firstEpochPositions: d.firstEpochPositions,
                  fingerprint: d.fingerprint)
    }
}
