// evaluate-adapter's whole job as one library call: choose the models (base, listed adapter
// checkpoints, every epoch checkpoint of a run folder), read the eval file once, and for each
// model compute the eval loss and generate and score every target, streaming per-sample
// results to a JSONL file and progress as events; the scores also go to the evaluation's log
// (LOGROOT/evaluation/: metrics.jsonl, a TensorBoard run per model). The CLI parses flags and prints.
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
import RunLog
import Training

public struct EvaluationSettings: Sendable {
    public var evalData: String
    /// Adapter checkpoints given one by one, evaluated in the order given.
    public var checkpoints: [String] = []
    /// A run folder: every adapter-epoch{N}.safetensors (by N) and adapter-final.safetensors.
    public var checkpointDir: String?
    /// Evaluate the bare base model too (always when no checkpoint is given).
    public var includeBase = false
    /// Only the first N samples of the file (file order), for loss and generation alike.
    public var maxSamples: Int?
    /// Token budget per reply; nil: the longest reference reply plus 16.
    public var maxNewTokens: Int?
    public var maxSequenceLength = 1024
    public var batchSize = 8
    /// Replies generated at once (their decoding steps share one pass over the weights; the
    /// replies are the same as one at a time).
    public var generationBatchSize = 8
    public var turns: TurnSelection = .last
    /// Per-sample results (JSONL), one line per model and target.
    public var outputPath: String?
    public var computeLoss = true
    public var generate = true
    /// What stored base weights are multiplied with when generating (float32: the reference).
    public var activations: ActivationPrecision = .float32
    /// How generation's KV caches store keys and values.
    public var kvCache: KVCachePrecision = .float32
    /// Also generate every model's replies to response_format turns constrained to their schema
    /// (guided generation): one more row per model, "LABEL constrained".
    public var constrained = false
    /// Generate with a draft (speculative decoding, one reply at a time instead of batched; the
    /// same replies): a trained one given as a checkpoint or carried by an adapter's package, or
    /// prompt lookup. nil: no draft.
    public var draft: DraftSelection?
    /// The folder whose evaluation/ subfolder keeps the scores (metrics.jsonl, and with TensorBoard
    /// reporting a run per model at its training step); nil keeps no log.
    public var logRoot: String?
    public var report = ReportSettings()
    /// A file of preference pairs (Schema.md "Preference pairs") each model is also scored on:
    /// preference accuracy, margin, and reward accuracy against the base.
    public var preferenceData: String?

    public init(evalData: String) {
        self.evalData = evalData
    }

    /// Where the CLI keeps the log unless told: beside --output, else the --checkpoint-dir, else
    /// beside the first checkpoint; nil when only the base is evaluated without --output.
    public var defaultLogRoot: String? {
        if let o = outputPath { return URL(fileURLWithPath: o).deletingLastPathComponent().path }
        if let d = checkpointDir { return d }
        return checkpoints.first.map { URL(fileURLWithPath: $0).deletingLastPathComponent().path }
    }
}

/// Everything an evaluation found, for the table and the --json summary.
public struct EvaluationReport: Sendable, Codable, Equatable {
    public var evalData: String
    public var baseModel: String
    public var baseSignature: String
    public var samples: Int
    public var targets: Int
    public var turns: TurnSelection
    public var maxNewTokens: Int
    public var models: [ModelSummary]
    public var notes: [String]
}

public enum EvaluationEvent: Sendable {
    case note(String)
    case dataLoaded(samples: Int, targets: Int, summary: DataSummary)
    case modelStarted(label: String, index: Int, count: Int)
    case lossComputed(label: String, loss: Double, tokens: Int, seconds: Double)
    case generated(label: String, done: Int, total: Int, result: TargetResult)
    case modelFinished(ModelSummary)
}

public enum EvaluationRun {
    /// adapter-epoch{N}.safetensors in `dir` by N, then adapter-final.safetensors. Interrupted
    /// and draft checkpoints are not adapters of a finished epoch and are left out.
    public static func checkpoints(in dir: String) throws -> [String] {
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: dir) } catch {
            throw EvaluationError.io(path: dir, reason: "cannot list the folder (\(error.localizedDescription)); pass the --checkpoint-dir train-adapter wrote")
        }
        var epochs: [(Int, String)] = []
        var final: String? = nil
        for name in names {
            if name == "adapter-final.safetensors" { final = name; continue }
            guard name.hasPrefix("adapter-epoch"), name.hasSuffix(".safetensors") else { continue }
            let digits = name.dropFirst("adapter-epoch".count).dropLast(".safetensors".count)
            if let n = Int(digits) { epochs.append((n, name)) }
        }
        let ordered = epochs.sorted { $0.0 < $1.0 }.map(\.1) + (final.map { [$0] } ?? [])
        return ordered.map { (dir as NSString).appendingPathComponent($0) }
    }

    /// The label of a checkpoint in the table: its file name without ".safetensors".
    public static func label(for path: String) -> String {
        let name = (path as NSString).lastPathComponent
        return name.hasSuffix(".safetensors") ? String(name.dropLast(".safetensors".count)) : name
    }

    /// The models in table order: the base (when asked, or when nothing else is), the listed
    /// checkpoints, then the folder's.
    public static func models(_ s: EvaluationSettings) throws -> [ModelUnderTest] {
        var paths = s.checkpoints
        if let dir = s.checkpointDir {
            let found = try checkpoints(in: dir)
            if found.isEmpty {
                throw EvaluationError.nothingToEvaluate("\(dir) holds no adapter-epoch*.safetensors or adapter-final.safetensors; train with --checkpoint-dir \(dir) first")
            }
            paths += found
        }
        var out: [ModelUnderTest] = []
        if s.includeBase || paths.isEmpty { out.append(ModelUnderTest(label: "base", checkpoint: nil)) }
        var labels = Set(out.map(\.label))
        for p in paths {
            var l = label(for: p)
            if labels.contains(l) { l = p }
            labels.insert(l)
            out.append(ModelUnderTest(label: l, checkpoint: p))
        }
        return out
    }

    public static func run(_ s: EvaluationSettings, base: BaseModel,
                           onEvent: (EvaluationEvent) -> Void = { _ in }) throws -> EvaluationReport {
        if let n = s.maxSamples, n < 1 { throw EvaluationError.invalidOption(name: "--max-samples", reason: "must be at least 1") }
        if let n = s.maxNewTokens, n < 1 { throw EvaluationError.invalidOption(name: "--max-new-tokens", reason: "must be at least 1") }
        if s.generationBatchSize < 1 { throw EvaluationError.invalidOption(name: "--generation-batch-size", reason: "must be at least 1") }
        guard s.computeLoss || s.generate else {
            throw EvaluationError.invalidOption(name: "--skip-loss/--skip-generation", reason: "both skip everything; keep one")
        }
        var models = try self.models(s)
        var notes: [String] = []

        // Checkpoints first (cheap headers, fail early on another base); the final checkpoint
        // holds the same weights as the last epoch's when the run ended on an epoch: once is enough.
        // Any adapter form (checkpoint, .fmadapter package, PEFT folder); checkpoints also give their step.
        var loaded: [String: Adapter] = [:]
        var packagedDrafts: [String: LoadedModel] = [:]
        var steps: [String: Int] = [:]
        for m in models {
            guard let path = m.checkpoint else { continue }
            let adapter: Adapter
            if s.draft != nil && Adapter.form(of: path) == .package {
                let l = try LoadedModel.load(base: base, adapter: path)  // the package's own draft too
                packagedDrafts[path] = l
                adapter = l.adapter!
            } else if Adapter.form(of: path) == .checkpoint {
                let c = try Checkpoint.load(path, moments: false)
                try c.requireAdapter(for: base)
                steps[path] = c.header.state.step
                adapter = try Adapter.fromCheckpoint(c.file)
            } else {
                adapter = try Adapter.load(path, base: base)
            }
            try adapter.requireBase(base)
            loaded[path] = adapter
        }
        func sameWeights(_ a: String, _ b: String) -> Bool {
            guard let x = loaded[a], let y = loaded[b], x.lora == y.lora else { return false }
            return x.tensors.map(\.tensor) == y.tensors.map(\.tensor)
        }
        if s.checkpointDir != nil,
           let final = models.last(where: { $0.label == "adapter-final" }), let fp = final.checkpoint,
           let twin = models.firstIndex(where: { $0.checkpoint != nil && $0.checkpoint != fp && $0.label.hasPrefix("adapter-epoch")
                                            && steps[$0.checkpoint!] == steps[fp] && sameWeights($0.checkpoint!, fp) }) {
            notes.append("\(models[twin].label) and adapter-final hold the same weights (step \(steps[fp]!)); evaluated once as \(models[twin].label)")
            models[twin].label += "=final"
            models.removeAll { $0.checkpoint == fp }
        }
        for n in notes { onEvent(.note(n)) }

        var data = try DataReader.read(path: s.evalData, options: ReadOptions(mode: .train))
        guard !data.samples.isEmpty else {
            throw EvaluationError.noTargets(path: s.evalData, reason: "no samples in the file (\(data.summary)); see Schema.md")
        }
        if let n = s.maxSamples, n < data.samples.count { data.samples = Array(data.samples.prefix(n)) }
        let targets = Evaluator.targets(of: data.samples, turns: s.turns)
        guard !targets.isEmpty else {
            throw EvaluationError.noTargets(path: s.evalData, reason: "no assistant turn to generate")
        }
        onEvent(.dataLoaded(samples: data.samples.count, targets: targets.count, summary: data.summary))

        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: s.maxSequenceLength)
        let calls = (encoder.renderer as? ChatFormat).flatMap { if case let .format(f) = $0.toolCalls { f } else { nil } } ?? .documented
        let longest = targets.map { base.tokenizer.encode(ReplyMetrics.referenceText($0.reference, format: calls)).count }.max() ?? 0
        let maxNew = s.maxNewTokens ?? max(16, longest + 16)
        var examples: [TrainingExample] = []
        if s.computeLoss {
            var truncated = 0
            for sample in data.samples {
                // A sample the template renders as several sequences contributes each.
                for full in try encoder.encodeAll(sample.messages) {
                    let e = encoder.truncated(full)
                    if e.isTruncated { truncated += 1 }
                    let ex = TrainingEncoder.example(from: e, sampleIndex: sample.index, line: sample.line)
                    if ex.targetTokenCount > 0 { examples.append(ex) }
                }
            }
            if truncated > 0 {
                let n = "\(truncated) samples are longer than --max-sequence-length \(s.maxSequenceLength); the eval loss covers their first \(s.maxSequenceLength + 1) tokens"
                notes.append(n)
                onEvent(.note(n))
            }
        }

        var output: FileHandle? = nil
        if let path = s.outputPath {
            guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path) else {
                throw EvaluationError.io(path: path, reason: "cannot create the --output file; check the folder exists and is writable")
            }
            output = h
        }
        defer { try? output?.close() }
        let jsonEncoder = JSONEncoder()
        jsonEncoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        jsonEncoder.keyEncodingStrategy = .convertToSnakeCase

        var log: RunLog? = nil
        if let root = s.logRoot {
            do { try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true) } catch {
                throw EvaluationError.io(path: root, reason: "cannot create the log folder: \(error.localizedDescription)")
            }
            let settings: [String: Any] = [
                "eval_data": s.evalData, "base_model": base.path, "base_signature": base.signature,
                "models": models.map { ["label": $0.label, "checkpoint": $0.checkpoint ?? NSNull()] as [String: Any] },
                "samples": data.samples.count, "targets": targets.count, "turns": "\(s.turns)", "max_new_tokens": maxNew,
                "max_sequence_length": s.maxSequenceLength, "batch_size": s.batchSize, "generation_batch_size": s.generationBatchSize,
                "activations": "\(s.activations)", "kv_cache": "\(s.kvCache)", "constrained": s.constrained,
                "draft": s.draft.map { "\($0.kind)" } ?? "none"]
            let l = try RunLog(root: root, runId: RunLog.newRunId(kind: "evaluation"),
                               header: RunHeader(kind: "evaluation", title: "evaluation on \(URL(fileURLWithPath: s.evalData).lastPathComponent)", settings: settings),
                               report: s.report, resume: nil)
            for n in l.notes { onEvent(.note(n)) }
            onEvent(.note("scores logged to \(l.metricsPath)" + (s.report.target == .tensorboard ? ", one TensorBoard run per model under \(l.folder)/" : "")))
            log = l
        }
        // A preference eval set: its pairs batched as training batches them, the base's log-probabilities once.
        var preference: (batches: PreferenceBatches, base: [(chosen: Double, rejected: Double)])? = nil
        if let path = s.preferenceData {
            let pairs = try DataReader.readPreferences(path: path, options: ReadOptions(mode: .train, skipInvalid: false))
            let encoded = try encoder.encode(pairs)
            let pad = base.tokenizer.padTokenId ?? base.tokenizer.eosTokenId ?? 0
            let batches = try PreferenceBatches(examples: encoded.examples,
                                                options: BatchOptions(batchSize: s.batchSize, layout: .sharePrefix, shuffle: false, seed: 0, padTokenId: pad))
            preference = (batches, PreferenceObjective.pairLogProbs(try LlamaModel(base: base.weights, adapter: nil), batches))
        }
        var summaries: [ModelSummary] = []
        let constraints = s.constrained ? try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds) : nil
        for (mi, m) in models.enumerated() {
            onEvent(.modelStarted(label: m.label, index: mi, count: models.count))
            let t0 = Date()
            let adapter = m.checkpoint.flatMap { loaded[$0] }
            let llama = try LlamaModel(base: base.weights, adapter: adapter)
            var summary = ModelSummary(label: m.label, checkpoint: m.checkpoint, step: m.checkpoint.flatMap { steps[$0] })
            if s.computeLoss && !examples.isEmpty {
                let tl = Date()
                let pad = base.tokenizer.padTokenId ?? base.tokenizer.eosTokenId ?? 0
                let (loss, tokens) = try Evaluator.evalLoss(model: llama, examples: examples, batchSize: s.batchSize, padTokenId: pad)
                summary.evalLoss = loss
                summary.perplexity = Foundation.exp(loss)
                summary.evalTokens = tokens
                onEvent(.lossComputed(label: m.label, loss: loss, tokens: tokens, seconds: Date().timeIntervalSince(tl)))
            }
            if let preference {
                let p = Evaluator.preferenceScores(model: llama, pairs: preference.batches, base: preference.base)
                (summary.preferencePairs, summary.preferenceAccuracy, summary.preferenceMargin, summary.rewardAccuracy) =
                    (p.pairs, p.accuracy, p.margin, p.rewardAccuracy)
            }
            var constrainedSummary: ModelSummary? = nil
            if s.generate {
                let engine = InferenceModel(base: base.weights, adapter: adapter, activations: s.activations, kvCache: s.kvCache)
                let draft = try s.draft?.resolve(m.checkpoint.flatMap { packagedDrafts[$0] } ?? LoadedModel(base: base, adapter: adapter))
                for n in draft?.notes ?? [] { onEvent(.note("\(m.label): \(n)")) }
                for guided in s.constrained ? [false, true] : [false] {
                    let tg = Date()
                    var row = guided ? ModelSummary(label: m.label + " constrained", checkpoint: m.checkpoint, step: summary.step) : summary
                    row.constrained = guided
                    row.draft = draft.map { "\($0.drafter.name), gamma \($0.tokens)" }
                    let label = row.label
                    try Evaluator.generate(engine, targets: targets, base: base, encoder: encoder, maxNewTokens: maxNew,
                                           batchSize: s.generationBatchSize, label: label, constraints: guided ? constraints : nil,
                                           draft: draft.map { ($0.drafter, $0.tokens) }) { ti, r in
                    row.add(r)
                    if let output {
                        do {
                            var line = try jsonEncoder.encode(r)
                            line.append(0x0A)
                            try output.write(contentsOf: line)
                        } catch {
                            throw EvaluationError.io(path: s.outputPath ?? "", reason: "cannot write a result (\(error.localizedDescription))")
                        }
                    }
                    onEvent(.generated(label: label, done: ti + 1, total: targets.count, result: r))
                    }
                    row.seconds = Date().timeIntervalSince(tg)
                    if guided { constrainedSummary = row } else { summary = row }
                }
            }
            summary.seconds = Date().timeIntervalSince(t0) - (constrainedSummary?.seconds ?? 0)
            for var row in [summary] + (constrainedSummary.map { [$0] } ?? []) {
                row.finish()
                summaries.append(row)
                if let log { try Self.logScores(row, to: log) }
                onEvent(.modelFinished(row))
            }
        }
        return EvaluationReport(evalData: s.evalData, baseModel: base.path, baseSignature: base.signature,
                                samples: data.samples.count, targets: targets.count, turns: s.turns, maxNewTokens: maxNew,
                                models: summaries, notes: notes)
    }

    /// One row per model: its scores (ModelSummary in snake_case) at its training step (0 for
    /// the base and for adapters that record none), events in a subfolder named after the label.
    static func logScores(_ m: ModelSummary, to log: RunLog) throws {
        let enc = JSONEncoder()
        enc.keyEncodingStrategy = .convertToSnakeCase
        var row = (try? JSONSerialization.jsonObject(with: try enc.encode(m))) as? [String: Any] ?? [:]
        row["type"] = "evaluation"
        row["step"] = m.step ?? 0
        row["events_folder"] = m.label.map { $0.isLetter || $0.isNumber || "-_.=".contains($0) ? $0 : "_" }.reduce(into: "") { $0.append($1) }
        try log.append(row)
    }
}
