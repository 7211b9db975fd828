// Keeps a training run's log (RunLog) up to date from the loop's events: a row per logged step
// (with the bias-corrected moving average of the loss), a row per evaluation, the loss curve
// after each evaluation and at the end. Adapter and draft runs share it; the draft adds its own
// rows through `append`. Also the run's settings as the log's header records them, and the rows
// of a run whose log is missing, rebuilt from a checkpoint's history.
import Foundation
import ModelAssets
import ModelDefinition
import RunLog

public final class RunRecorder {
    public let log: RunLog
    /// Eval rows carry exp(loss) (an adapter's cross-entropy; not a draft's divergence).
    let perplexity: Bool
    var ema = BiasCorrectedEMA()
    /// The newest step in the log.
    public private(set) var lastStep = 0
    var failed = false

    public init(log: RunLog, perplexity: Bool) {
        self.log = log
        self.perplexity = perplexity
        // A train loss is a Float (StepRecord): rounding the value read back to Float undoes the
        // last-digit error of Foundation's JSON parser, so the average continues bit for bit.
        for r in log.rows {
            if r["type"] as? String == "train", let loss = MetricScalars.number(r["loss"]) { _ = ema.add(Double(Float(loss))) }
            lastStep = max(lastStep, MetricScalars.integer(r["step"]) ?? 0)
        }
    }

    /// Logs what `event` reports. Returns a problem to show a person the first time writing fails
    /// (the run goes on: a full disk should not cost the training).
    @discardableResult
    public func record(_ event: TrainingEvent) -> String? {
        switch event {
        case .step(let r, _, let tps, _):
            return append(Self.trainRow(r, smoothed: ema.add(Double(r.loss)), tokensPerSecond: tps))
        case .evaluated(let e):
            return append(Self.evalRow(e, perplexity: perplexity)) ?? curve()
        case .finished, .stopped:
            return curve()
        default:
            return nil
        }
    }

    /// Appends a row of the run's own kind (the draft's per-epoch measurements).
    @discardableResult
    public func append(_ row: [String: Any]) -> String? {
        lastStep = max(lastStep, MetricScalars.integer(row["step"]) ?? 0)
        do { try log.append(row) } catch { return failure(error) }
        return nil
    }

    func curve() -> String? {
        do { try log.writeCurve() } catch { return failure(error) }
        return nil
    }

    func failure(_ error: Error) -> String? {
        defer { failed = true }
        guard !failed else { return nil }
        return "cannot write the run's log (training goes on; later failures are not repeated): " + ((error as? LocalizedError)?.errorDescription ?? "\(error)")
    }

    static func trainRow(_ r: StepRecord, smoothed: Double, tokensPerSecond: Double?) -> [String: Any] {
        var row: [String: Any] = ["type": "train", "step": r.step, "epoch": r.epoch, "loss": Double(r.loss), "smoothed_loss": smoothed,
                                  "learning_rate": Double(r.learningRate), "grad_norm": Double(r.gradNorm), "tokens": r.tokens]
        if let tokensPerSecond { row["tokens_per_second"] = tokensPerSecond }
        for (name, value) in r.metrics ?? [:] { row[name] = value }
        return row
    }

    static func evalRow(_ e: EvalRecord, perplexity: Bool) -> [String: Any] {
        var row: [String: Any] = ["type": "eval", "step": e.step, "epoch": e.epoch, "loss": Double(e.loss), "tokens": e.tokens]
        if perplexity { row["perplexity"] = Double(e.perplexity) }
        for (name, value) in e.metrics ?? [:] { row[name] = value }
        return row
    }

    /// The rows a live log of `state`'s run holds, from its history (every step; no tokens/s,
    /// which a checkpoint does not keep): for resuming a run whose log is not in the folder.
    public static func rebuiltRows(_ state: TrainerState, perplexity: Bool) -> [[String: Any]] {
        var ema = BiasCorrectedEMA()
        var rows: [[String: Any]] = []
        var evals = state.evals[...]
        for r in state.history {
            rows.append(trainRow(r, smoothed: ema.add(Double(r.loss)), tokensPerSecond: nil))
            while let e = evals.first, e.step <= r.step {
                rows.append(evalRow(e, perplexity: perplexity))
                evals = evals.dropFirst()
            }
        }
        rows += evals.map { evalRow($0, perplexity: perplexity) }
        return rows
    }

    /// Opens the run's log in `folder` for a run of `kind` (a new run id, or the resumed
    /// checkpoint's), rebuilding it from the checkpoint when it is missing.
    public static func open(folder: RunFolder, kind: String, title: String, lossLabel: String, settings: [String: Any],
                            report: ReportSettings, resumed: Checkpoint?, perplexity: Bool) throws -> RunRecorder {
        let runId = resumed?.header.runId ?? RunLog.newRunId(kind: kind)
        let resume = resumed.map { r in
            ResumePoint(step: r.header.state.step, checkpoint: r.path, rebuiltRows: { rebuiltRows(r.header.state, perplexity: perplexity) })
        }
        let log = try RunLog(root: folder.path, runId: runId, header: RunHeader(kind: kind, title: title, lossLabel: lossLabel, settings: settings),
                             report: report, resume: resume)
        return RunRecorder(log: log, perplexity: perplexity)
    }

    /// The settings every training run records: base, data, schedule (TrainingOptions as a
    /// checkpoint stores them), data fingerprint.
    public static func settings(base: BaseModel, data: DataSettings, options: TrainingOptions, fingerprint: String,
                                activationCheckpointing: Bool) -> [String: Any] {
        ["base_model": base.path, "base_signature": base.signature,
         "train_data": data.trainData, "eval_data": data.evalData ?? NSNull(),
         "data": ["max_sequence_length": data.maxSequenceLength, "layout": "\(data.layout)", "batch_size": data.batchSize,
                  "seed": Int(truncatingIfNeeded: data.seed), "skip_invalid": data.skipInvalid, "share_prefix": data.sharePrefix] as [String: Any],
         "training": jsonObject(options), "data_fingerprint": fingerprint, "activation_checkpointing": activationCheckpointing]
    }

    /// An Encodable value as JSON objects (for a log's settings).
    public static func jsonObject<T: Encodable>(_ v: T) -> Any {
        let enc = JSONEncoder()
        enc.keyEncodingStrategy = .convertToSnakeCase
        guard let data = try? enc.encode(v), let o = try? JSONSerialization.jsonObject(with: data) else { return NSNull() }
        return o
    }
}
