// Renders training events for a person: one live, rewritten status line on a terminal
// (epoch, step/total, smoothed loss, learning rate, tokens/s, ETA), plain log lines otherwise
// (CI logs, files). Everything goes to stderr so stdout stays for results.
import DataSchema
import Foundation
import RunLog
import Training

public final class ProgressPrinter {
    let live: Bool
    /// Prints nothing (the ranks other than 0 of a data-parallel run).
    public var silent = false
    /// The loss's moving average, bias-corrected as the run's log writes it.
    var smoothed = BiasCorrectedEMA()
    var lineOpen = false
    /// The step this run started after (non-zero when resumed): the ETA divides the elapsed time
    /// by the steps taken in this run, not by the step number.
    var firstStep = 0
    /// A data-parallel run's report for the next step line.
    var parallel: DataParallelReport?

    public init(live: Bool = isatty(STDERR_FILENO) == 1) {
        self.live = live
    }

    public func log(_ text: String) {
        if silent { return }
        if lineOpen {
            FileHandle.standardError.write(Data("\n".utf8))
            lineOpen = false
        }
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    func status(_ text: String) {
        if silent { return }
        if live {
            FileHandle.standardError.write(Data(("\r\u{1B}[K" + text).utf8))
            lineOpen = true
        } else {
            log(text)
        }
    }

    public static func duration(_ s: Double) -> String {
        guard s.isFinite, s >= 0 else { return "?" }
        let t = Int(s.rounded())
        if t >= 3600 { return String(format: "%dh%02dm", t / 3600, (t % 3600) / 60) }
        if t >= 60 { return String(format: "%dm%02ds", t / 60, t % 60) }
        return "\(t)s"
    }

    /// Seconds left at this run's pace: `elapsed` covers the steps after `firstStep` only.
    public static func remainingSeconds(step: Int, total: Int, firstStep: Int, elapsed: Double) -> Double {
        Double(total - step) * elapsed / Double(max(1, step - firstStep))
    }

    /// What the data step found, as train-adapter and train-draft both print it.
    public func logData(train: DataSummary, eval: DataSummary?, trainTokens: Int, targetTokens: Int, computedPositions: Int,
                        skipped: [DataIssue]) {
        log("train data: \(train)")
        if let eval { log("eval data: \(eval)") }
        log("train tokens: \(trainTokens) (\(targetTokens) assistant tokens in the loss); an epoch computes \(computedPositions) positions"
            + (computedPositions < trainTokens ? String(format: " (prompt prefixes shared within batches: %.2fx fewer)", Double(trainTokens) / Double(computedPositions)) : ""))
        for issue in skipped.prefix(20) { log("skipped: \(issue)") }
        if skipped.count > 20 { log("skipped: ... and \(skipped.count - 20) more") }
    }

    /// Before a `--resume`: which damaged checkpoints it passes over, so nothing is skipped silently.
    public func logResumeScan(directory: String, prefix: String) {
        let scan = RunFolder.scanCheckpoints(in: directory, prefix: prefix)
        for d in scan.damaged { log("warning: skipping damaged checkpoint \(d.path) (left in place): \(d.reason)") }
        if !scan.damaged.isEmpty, let newest = scan.newest { log("--resume uses the newest valid checkpoint, \(newest)") }
    }

    /// A data-parallel window as the step line's tail: tokens/s and compute time per rank, and
    /// the gradient sum's time and size per step.
    public static func describe(_ p: DataParallelReport) -> String {
        let seconds = max(p.seconds, 1e-9)
        let rates = p.tokensPerRank.map { String(format: "%.0f", Double($0) / seconds) }.joined(separator: "/")
        let compute = p.computeSecondsPerRank.map { String(format: "%.2f", $0 / Double(max(1, p.steps))) }.joined(separator: "/")
        return String(format: "| %d ranks: %@ tok/s, compute %@ s/step, allreduce %.3f s/step of %.1f MB",
                      p.ranks, rates, compute, p.allreduceSecondsPerStep, Double(p.allreduceBytesPerStep) / 1e6)
    }

    public func handle(_ event: TrainingEvent) {
        switch event {
        case .started(let plan):
            smoothed = BiasCorrectedEMA()
            firstStep = plan.resumedFromStep
            log("training: \(plan.totalSteps) optimizer steps (\(plan.stepsPerEpoch) per epoch, \(plan.trainBatchesPerEpoch) batches per epoch), \(plan.trainableParameters) trainable parameters"
                + (plan.resumedFromStep > 0 ? ", resuming after step \(plan.resumedFromStep)" : ""))
        case .step(let r, let total, let tps, let elapsed):
            let average = smoothed.add(Double(r.loss))
            let remaining = Self.remainingSeconds(step: r.step, total: total, firstStep: firstStep, elapsed: elapsed)
            status(String(format: "epoch %d  step %d/%d  loss %.4f (smoothed %.4f)  lr %.2e  |g| %.3f  %.0f tok/s  elapsed %@  ETA %@",
                          r.epoch, r.step, total, r.loss, average, r.learningRate, r.gradNorm, tps,
                          Self.duration(elapsed), Self.duration(remaining))
                   + Self.preference(r.metrics) + (parallel.map { "  " + Self.describe($0) } ?? ""))
            parallel = nil
        case .dataParallel(let report):
            parallel = report
        case .evaluated(let e) where e.metrics != nil:
            log(String(format: "eval after epoch %d (step %d): loss %.4f", e.epoch, e.step, e.loss) + Self.preference(e.metrics))
        case .evaluated(let e):
            log(String(format: "eval after epoch %d (step %d): loss %.4f  perplexity %.3f  over %d tokens", e.epoch, e.step, e.loss, e.perplexity, e.tokens))
        case .checkpointSaved(let path, _):
            log("saved \(path)")
        case .checkpointsPruned(let paths):
            log("removed (not among the best by eval loss): " + paths.joined(separator: ", "))
        case .stopped(let step, let path):
            log("stopped after step \(step); resumable checkpoint: \(path) (continue with --resume-from \(path))")
        case .finished(let state):
            log("finished after \(state.step) optimizer steps (\(state.epoch) full epochs)")
        }
    }

    /// A preference run's rewards on a progress line ("" for other runs).
    static func preference(_ m: [String: Double]?) -> String {
        guard let m, let margin = m["rewards/margins"], let accuracy = m["rewards/accuracies"] else { return "" }
        return String(format: "  reward margin %.4f  accuracy %.3f", margin, accuracy)
            + (m["nll_loss"].map { String(format: "  nll %.4f", $0) } ?? "")
    }
}
