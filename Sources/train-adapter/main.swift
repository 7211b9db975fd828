// train-adapter: LoRA training of an adapter on a frozen base model. Thin: parse flags, call
// Training.AdapterRun, print what happens. See README for a walk-through.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Training

extension LoRATarget: ExpressibleByArgument {}

struct TrainAdapter: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "train-adapter",
        abstract: "Train a LoRA adapter on a frozen base model from a JSONL file of conversations.",
        discussion: """
            Only the adapter's A and B matrices are trained (AdamW), on the cross-entropy of the assistant \
            turns. After each epoch: eval loss and perplexity, and adapter-epoch{N}.safetensors in \
            --checkpoint-dir; adapter-final.safetensors at the end, with metrics.jsonl and loss-curve.svg. \
            Ctrl-C writes a resumable checkpoint (continue with --resume).
            """)

    @OptionGroup(title: "Base model") var model: BaseModelOptions
    @OptionGroup(title: "Data") var data: DataOptions
    @OptionGroup(title: "Schedule") var schedule: ScheduleOptions
    @OptionGroup(title: "Checkpoints") var checkpoints: CheckpointOptions

    @Option(help: "LoRA rank r.")
    var rank: Int = 32

    @Option(help: "LoRA alpha; the adapter's output is scaled by alpha / rank. Default: the rank (scale 1).")
    var alpha: Float?

    @Option(parsing: .upToNextOption, help: "Projections to adapt, comma- or space-separated: q,k,v,o,gate,up,down (default all).")
    var targets: [String] = ["q,k,v,o,gate,up,down"]

    @Option(help: "Dropout on the LoRA path during training.")
    var dropout: Float = 0

    func loraTargets() throws -> [LoRATarget] {
        var out: [LoRATarget] = []
        for item in targets.flatMap({ $0.split(separator: ",") }) {
            let name = item.trimmingCharacters(in: .whitespaces)
            guard let t = LoRATarget(rawValue: name) else {
                throw ValidationError("unknown --targets entry '\(name)'; choose from q,k,v,o,gate,up,down")
            }
            if !out.contains(t) { out.append(t) }
        }
        guard !out.isEmpty else { throw ValidationError("--targets needs at least one of q,k,v,o,gate,up,down") }
        return out
    }

    func validate() throws {
        guard rank >= 1 else { throw ValidationError("--rank must be at least 1") }
        if let a = alpha, !(a > 0) { throw ValidationError("--alpha must be positive") }
        guard dropout >= 0 && dropout < 1 else { throw ValidationError("--dropout must be in [0, 1)") }
        _ = try loraTargets()
    }

    func run() throws {
        let printer = ProgressPrinter()
        let t0 = Date()
        let base = try model.load()
        printer.log(String(format: "loaded base model %@ in %.1fs (signature %@)", base.path, Date().timeIntervalSince(t0), String(base.signature.prefix(16))))
        var settings = AdapterRunSettings(
            data: DataSettings(trainData: data.trainData, evalData: data.evalData, maxSequenceLength: data.maxSequenceLength,
                               fixedSizedSequences: data.fixedSizedSequences, packSequences: data.packSequences,
                               skipInvalid: data.skipInvalid, batchSize: schedule.batchSize, seed: schedule.seed,
                               sharePrefix: data.sharePrefix),
            lora: LoRAConfig(rank: rank, alpha: alpha, targets: try loraTargets(), dropout: dropout),
            checkpointDir: checkpoints.checkpointDir, checkpointFrequency: checkpoints.checkpointFrequency,
            resumeFrom: checkpoints.resumeFrom, resume: checkpoints.resume, keepBest: checkpoints.keepBest,
            makeOptions: { schedule.trainingOptions(batchesPerEpoch: $0, checkpointFrequency: checkpoints.checkpointFrequency) })
        settings.activationCheckpointing = schedule.activationCheckpointing
        if checkpoints.resume {
            // --resume skips checkpoints that do not load; say which, so nothing is passed over silently.
            let scan = RunFolder.scanCheckpoints(in: checkpoints.checkpointDir, prefix: "adapter")
            for d in scan.damaged {
                printer.log("warning: skipping damaged checkpoint \(d.path) (left in place): \(d.reason)")
            }
            if !scan.damaged.isEmpty, let newest = scan.newest { printer.log("--resume uses the newest valid checkpoint, \(newest)") }
        }
        StopSignal.install()
        let outcome = try AdapterRun.run(settings, base: base, shouldStop: { StopSignal.requested }, notice: { n in
            switch n {
            case .dataSummary(let train, let eval, let tokens, let targets, let computed, let skipped):
                printer.log("train data: \(train)")
                if let eval { printer.log("eval data: \(eval)") }
                printer.log("train tokens: \(tokens) (\(targets) assistant tokens in the loss); an epoch computes \(computed) positions"
                            + (computed < tokens ? String(format: " (prompt prefixes shared within batches: %.2fx fewer)", Double(tokens) / Double(computed)) : ""))
                for issue in skipped.prefix(20) { printer.log("skipped: \(issue)") }
                if skipped.count > 20 { printer.log("skipped: ... and \(skipped.count - 20) more") }
            case .model(_, _, let layers, let hidden, let trainable, let lora):
                printer.log("model: \(layers) layers, hidden \(hidden); LoRA rank \(lora.rank), alpha \(lora.alpha), targets \(lora.targets.map(\.rawValue).joined(separator: ",")): \(trainable) trainable parameters")
            case .resuming(let path, let step, let epoch):
                printer.log("resuming from \(path) at step \(step) (epoch \(epoch + 1))")
            }
        }, onEvent: printer.handle)
        switch outcome {
        case .finished(let path):
            printer.log("adapter: \(path)")
        case .interrupted(let path):
            printer.log("interrupted; resume with: train-adapter ... --resume-from \(path)")
            throw ExitCode(130)
        }
    }
}

TrainAdapter.main()
