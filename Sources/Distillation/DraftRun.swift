// train-draft's whole job as one library call, shaped like AdapterRun: check the folder, read the
// data before any compute, build the teacher (base + adapter, merged) and the draft, resume if
// asked (refusing an adapter checkpoint, another base, teacher, draft shape or data), run the one
// loop with DraftObjective, and after each epoch measure α, greedy agreement, c and the γ table.
// Draft checkpoints are self-contained: trained tensors with AdamW moments, frozen ones, head tokens.
import Autograd
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import RunLog
import Training

public struct DraftRunSettings {
    public var data: DataSettings
    /// The teacher's adapter (a checkpoint, .fmadapter package or PEFT folder); nil distils the bare base model.
    public var teacherAdapter: String?
    public var source: DraftSource
    public var freezeEmbeddings: Bool
    public var divergence: Divergence
    public var vocabulary: DraftVocabularyMode
    public var checkpoints: CheckpointSettings
    /// The loop's options, given the first epoch's batch count (warmup epochs need it).
    public var makeOptions: (_ batchesPerEpoch: Int) -> TrainingOptions
    /// The shortest prompt prefix shared by every training sample that the teacher computes
    /// once (PrefixTeacher); shorter ones are run with each sample.
    public var teacherPrefixMinimum = PrefixTeacher.defaultMinimumLength
    /// Assistant positions the per-epoch metrics look at (at most).
    public var metricsPositions = 2048
    /// Recompute the draft's block activations in backward (less memory, more compute).
    public var activationCheckpointing = false
    /// TensorBoard events or not, the command line for the log's header, the curve's scale.
    public var report = ReportSettings()
    /// The processes of a data-parallel run (nil: this process alone). Only rank 0 uses the run
    /// folder and measures the per-epoch draft metrics; the others start from its state.
    public var group: ProcessGroup?

    public init(data: DataSettings, teacherAdapter: String?, source: DraftSource, freezeEmbeddings: Bool,
                divergence: Divergence, vocabulary: DraftVocabularyMode, checkpoints: CheckpointSettings,
                makeOptions: @escaping (Int) -> TrainingOptions) {
        self.data = data
        self.teacherAdapter = teacherAdapter
        self.source = source
        self.freezeEmbeddings = freezeEmbeddings
        self.divergence = divergence
        self.vocabulary = vocabulary
        self.checkpoints = checkpoints
        self.makeOptions = makeOptions
    }
}

/// Messages for a person (the CLI prints them).
public enum DraftNotice {
    case dataSummary(train: DataSummary, eval: DataSummary?, trainTokens: Int, targetTokens: Int, computedPositions: Int, skipped: [DataIssue])
    case teacher(adapter: String?, baseSignature: String, sharedPrefixTokens: Int)
    case draft(summary: String, trainable: Int, frozen: Int, divergence: Divergence)
    case resuming(from: String, step: Int, epoch: Int)
    case metrics(DraftEpochMetrics)
    /// Where the run's log is, what opening it did, or that writing it failed.
    case log(String)
}

/// How a draft was trained, beyond what CheckpointHeader holds; stored as header key
/// `draft_training` and compared on resume.
struct DraftTrainingRecord: Codable, Equatable {
    var divergence: String
    var freezeEmbeddings: Bool
    var vocabulary: String
    var source: String

    static let key = "draft_training"
}

/// Writes draft checkpoints: trainable tensors with their AdamW moments (what resume restores),
/// then the frozen tensors and the head's token list (what inference needs besides). A draft
/// made from the base's blocks leaves out a frozen embedding and head the base stores as blocks:
/// loading a draft needs its base (signature checked), which holds them.
final class DraftCheckpointer: Checkpointer {
    let names: FolderCheckpointer
    let draft: DraftModel
    let record: DraftTrainingRecord
    let makeHeader: (TrainerState, TrainingOptions, String) -> CheckpointHeader

    init(directory: String, draft: DraftModel, record: DraftTrainingRecord,
         makeHeader: @escaping (TrainerState, TrainingOptions, String) -> CheckpointHeader) {
        names = FolderCheckpointer(directory: directory, prefix: "draft-model", params: draft.trainableParameters, makeHeader: makeHeader)
        self.draft = draft
        self.record = record
        self.makeHeader = makeHeader
    }

    func save(_ kind: CheckpointKind, state: TrainerState, optimizer: AdamW, options: TrainingOptions) throws -> String {
        let label: String
        switch kind {
        case .epoch(let n): label = "epoch\(n)"
        case .final: label = "final"
        case .interrupted: label = "interrupted"
        }
        var metadata = try makeHeader(state, options, label).metadata()
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        metadata[DraftTrainingRecord.key] = String(decoding: try enc.encode(record), as: UTF8.self)
        // Streamed to disk a tensor at a time: a whole-file writer would hold the trained weights
        // and both moments twice more while saving (GBs for a draft of a 1-3B model's blocks).
        var entries: [(name: String, shape: [Int], values: () -> [Float])] = []
        for (i, p) in draft.trainableParameters.enumerated() {
            entries.append((p.name, p.tensor.shape, { p.tensor.data }))
            entries.append((Checkpoint.mPrefix + p.name, p.tensor.shape, { optimizer.m[i] }))
            entries.append((Checkpoint.vPrefix + p.name, p.tensor.shape, { optimizer.v[i] }))
        }
        for p in draft.frozenParameters { entries.append((p.name, p.tensor.shape, { p.tensor.data })) }
        if draft.layers == nil {
            // a draft of its own weights keeps them all (one float32 copy at a time, while writing)
            for (name, m) in draft.baseEmbeddings { entries.append((name, m.shape, { m.values })) }
        }
        if let v = draft.vocabulary { entries.append((DraftModel.vocabularyTensorName, [v.count], { v.map(Float.init) })) }
        let path = names.path(kind)
        let w = try SafetensorsStreamWriter(path: path, metadata: metadata, tensors: entries.map { .init(name: $0.name, dtype: .f32, shape: $0.shape) })
        do {
            for e in entries { try w.write(e.values()) }
            try w.finish()
        } catch {
            w.abandon()
            throw error
        }
        return path
    }

    func prune(evals: [EvalRecord], keep: Int?) throws -> [String] {
        try names.prune(evals: evals, keep: keep)
    }
}

public enum DraftRun {
    public static func run(_ s: DraftRunSettings, base: BaseModel, shouldStop: () -> Bool,
                           notice: (DraftNotice) -> Void, onEvent: (TrainingEvent) -> Void) throws -> TrainingOutcome {
        // Files are checked before the folder is locked or any data is read.
        let adapter = try s.teacherAdapter.map { try Adapter.load($0, base: base) }
        try adapter?.requireBase(base)
        let parallel = s.group.flatMap { $0.size > 1 ? $0 : nil }
        let isRoot = (parallel?.rank ?? 0) == 0
        let folder = isRoot ? try RunFolder(s.checkpoints.directory) : nil
        defer { folder?.releaseLock() }
        let data = try DataPreparation.prepare(s.data, base: base)
        notice(.dataSummary(train: data.trainSummary, eval: data.evalSummary, trainTokens: data.trainTokens,
                            targetTokens: data.trainTargetTokens, computedPositions: data.firstEpochPositions, skipped: data.issues))
        let options = s.makeOptions(data.train.batchCount(epoch: 0))

        var vocabulary: [Int]? = nil
        if s.vocabulary == .task {
            let ex = data.train.examples
            vocabulary = DraftModel.taskVocabulary(examples: ex.map(\.inputs) + ex.map(\.targets), extra: base.stopTokenIds,
                                                   vocabSize: base.config.vocabSize)
        }
        let draft: DraftModel
        let sourceText: String
        switch s.source {
        case .baseLayers(let n):
            draft = try DraftModel.fromBase(base, layers: n, freezeEmbeddings: s.freezeEmbeddings, vocabulary: vocabulary)
            sourceText = "base-layers:\(n)"
        case .model(let path):
            draft = try DraftModel.fromFile(path, base: base, freezeEmbeddings: s.freezeEmbeddings, vocabulary: vocabulary)
            sourceText = "model:\(try ModelLoader.load(path: path, storage: .stored).signature())"
        }
        draft.model.activationCheckpointing = s.activationCheckpointing
        let record = DraftTrainingRecord(divergence: s.divergence.rawValue, freezeEmbeddings: s.freezeEmbeddings,
                                         vocabulary: s.vocabulary.rawValue, source: sourceText)
        let teacherSignature = adapter?.signature

        let resumed = try folder.flatMap { try s.checkpoints.resumeCheckpoint(in: $0, prefix: "draft-model") }
        var state = TrainerState(seed: options.seed)
        var optimizer: AdamW? = nil
        var runOptions = options
        if let r = resumed {
            try r.requireDraft(for: base)
            guard r.header.teacherAdapterSignature == teacherSignature else {
                let was = r.header.teacherAdapterSignature.map { "the adapter with signature \($0.prefix(16))" } ?? "the bare base model"
                let now = teacherSignature.map { "the adapter with signature \($0.prefix(16))" } ?? "the bare base model"
                throw TrainingError.incompatible(path: r.path, reason: "is a draft distilled from \(was), but this run's teacher is \(now); resume with the same --checkpoint")
            }
            let stored = readRecord(r)
            guard r.header.draftConfig == draft.config, r.header.draftLayers == draft.layers, stored == record,
                  storedVocabulary(r) == draft.vocabulary else {
                throw TrainingError.incompatible(path: r.path, reason: "was trained as a different draft (\(stored.map { "\($0.source), divergence \($0.divergence), vocabulary \($0.vocabulary), freeze-embeddings \($0.freezeEmbeddings)" } ?? "unknown settings")); resume with the same --draft-layers/--draft-model, --divergence, --draft-vocabulary and --freeze-embeddings")
            }
            guard r.header.dataFingerprint == data.fingerprint else {
                throw TrainingError.incompatible(path: r.path, reason: "was trained on different data or data settings (train file contents, --max-sequence-length, --batch-size, packing, --seed); exact resume needs the same ones")
            }
            if r.header.label == "final" {
                throw TrainingError.incompatible(path: r.path, reason: "is the final checkpoint of a finished run; there is nothing to resume (raise --epochs in a new run to train further)")
            }
            var trained = r
            let names = Set(draft.trainableParameters.map(\.name))
            trained.tensors = r.tensors.filter { names.contains($0.key) }
            optimizer = try trained.restore(into: draft.trainableParameters, weightDecay: options.weightDecay)
            state = r.header.state
            runOptions = r.header.options
            notice(.resuming(from: r.path, step: state.step, epoch: state.epoch))
        }

        // The teacher runs on the KV-cache path, the prompt prefix every sample shares computed once.
        let ex = data.train.examples
        let shared = ex.isEmpty ? [] : Array(ex[0].inputs.prefix(Batcher.commonPrefix(ex)))
        let teacher = PrefixTeacher(base: base.weights, adapter: adapter, sharedPrefix: shared, minimumLength: s.teacherPrefixMinimum)
        notice(.teacher(adapter: s.teacherAdapter, baseSignature: base.signature, sharedPrefixTokens: teacher.prefix.count))
        let objective = DraftObjective(draft: draft, teacher: teacher, head: base.weights.head, divergence: s.divergence)
        notice(.draft(summary: draft.summary, trainable: draft.trainableParameters.reduce(0) { $0 + $1.tensor.count },
                      frozen: draft.frozenParameters.reduce(0) { $0 + $1.tensor.count } + draft.baseEmbeddings.reduce(0) { $0 + $1.matrix.rows * $1.matrix.columns },
                      divergence: s.divergence))
        // Rank 0 alone keeps the run's log; the other ranks' checkpoints are never written.
        let recorder: RunRecorder? = try folder.map { folder in
            var settings = RunRecorder.settings(base: base, data: s.data, options: runOptions, fingerprint: data.fingerprint,
                                                activationCheckpointing: s.activationCheckpointing)
            settings["draft"] = ["teacher_adapter": s.teacherAdapter ?? NSNull(), "teacher_adapter_signature": teacherSignature ?? NSNull(),
                                 "source": sourceText, "layers": draft.layers ?? [], "divergence": s.divergence.rawValue,
                                 "vocabulary": s.vocabulary.rawValue, "freeze_embeddings": s.freezeEmbeddings] as [String: Any]
            if let parallel { settings["processes"] = parallel.size }
            return try RunRecorder.open(
                folder: folder, kind: "draft",
                title: "draft distillation (\(s.divergence.rawValue) divergence) on \(URL(fileURLWithPath: s.data.trainData).lastPathComponent)",
                lossLabel: s.divergence.lossLabel, settings: settings, report: s.report, resumed: resumed, perplexity: false)
        }
        if let recorder {
            for n in recorder.log.notes { notice(.log(n)) }
            notice(.log("run \(recorder.log.runId): log \(recorder.log.metricsPath), loss curve \(recorder.log.curvePath)"
                        + (s.report.target == .tensorboard ? ", TensorBoard events in \(recorder.log.folder)/" : "")))
        }
        let runId = recorder?.log.runId
        let checkpointer = DraftCheckpointer(directory: s.checkpoints.directory, draft: draft, record: record) { st, opts, label in
            CheckpointHeader(content: .draft, baseSignature: base.signature, baseConfig: base.config, lora: nil,
                             draftConfig: draft.config, draftLayers: draft.layers, teacherAdapterSignature: teacherSignature,
                             state: st, options: opts, dataFingerprint: data.fingerprint, label: label, runId: runId)
        }
        var trainer = Trainer(options: runOptions, keepBest: s.checkpoints.keepBest)
        trainer.group = parallel
        // c on the engine generation uses, the teacher's KV-cache model against the draft's: a cost
        // of shapes, not of values, so it is measured once, before training (by rank 0, which
        // alone measures the per-epoch metrics while the other ranks wait).
        let cost = isRoot ? SpeculativeCost.measure(target: teacher.model, draft: DraftEngine(try draft.definition())) : nil
        let metricsSource: BatchSource = data.eval ?? data.train
        if let parallel { try GroupSetup.agree(parallel, key: "data \(data.fingerprint), base \(base.signature)", error: nil) }
        func epochMetrics(epoch: Int, step: Int) {
            guard let cost, let recorder else { return }
            let m = DraftEvaluation.measure(objective, metricsSource, maxPositions: s.metricsPositions)
            let metrics = DraftEpochMetrics(epoch: epoch, step: step, eval: m, dataSet: data.eval == nil ? "train" : "eval", cost: cost)
            if let problem = recorder.append(metrics.json) { notice(.log(problem)) }
            notice(.metrics(metrics))
        }
        return try trainer.run(objective: objective, train: data.train, eval: data.eval, checkpointer: checkpointer,
                               state: state, optimizer: optimizer, shouldStop: shouldStop) { event in
            if let problem = recorder?.record(event) { notice(.log(problem)) }
            onEvent(event)
            switch event {
            case .evaluated(let e):
                epochMetrics(epoch: e.epoch, step: e.step)
            case .checkpointSaved(_, .epoch(let n)) where data.eval == nil:
                epochMetrics(epoch: n, step: recorder?.lastStep ?? 0)
            default:
                break
            }
        }
    }

    /// The `draft_training` header record of a checkpoint (nil when absent or unreadable).
    static func readRecord(_ c: Checkpoint) -> DraftTrainingRecord? {
        c.file.metadata[DraftTrainingRecord.key].flatMap { try? JSONDecoder().decode(DraftTrainingRecord.self, from: Data($0.utf8)) }
    }

    static func storedVocabulary(_ c: Checkpoint) -> [Int]? {
        c.tensors[DraftModel.vocabularyTensorName].map { $0.data.map { Int($0) } }
    }
}

extension Divergence {
    /// The loss a draft's curve shows.
    var lossLabel: String {
        switch self {
        case .forward: "forward KL(teacher ‖ draft)"
        case .reverse: "reverse KL(draft ‖ teacher)"
        case .tvd: "total variation distance"
        }
    }
}
