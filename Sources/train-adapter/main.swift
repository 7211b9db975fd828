// train-adapter: LoRA training of an adapter on a frozen base model. Thin: parse flags, call
// Training.AdapterRun, print what happens. See README for a walk-through.
import ArgumentParser
import CLISupport
import DataParallel
import DataSchema
import Foundation
import ModelDefinition
import Training

struct TrainAdapter: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "train-adapter",
        abstract: "Train a LoRA adapter on a frozen base model from a JSONL file of conversations (or of preference pairs: DPO, IPO, ORPO).",
        discussion: """
            Only the adapter's A and B matrices are trained (AdamW), on the cross-entropy of the assistant \
            turns. After each epoch: eval loss and perplexity, and adapter-epoch{N}.safetensors in \
            --checkpoint-dir; adapter-final.safetensors at the end. The run's log goes to --checkpoint-dir/adapter/: \
            metrics.jsonl (a header naming the run, then one row per step and evaluation), loss-curve.svg and \
            TensorBoard event files (tensorboard --logdir DIR). \
            Ctrl-C writes a resumable checkpoint (continue with --resume). \
            With --objective dpo, ipo or orpo the adapter learns from preference pairs instead (a prompt, the \
            chosen reply and the rejected one; Schema.md "Preference pairs"): --batch-size counts pairs, the \
            prompt is computed once per pair, and each step also logs TRL's rewards/chosen, rewards/rejected, \
            rewards/margins, rewards/accuracies and logps (ORPO: nll_loss and the log odds), on the eval pairs too.
            """)

    @OptionGroup(title: "Base model") var model: BaseModelOptions
    @OptionGroup(title: "Chat template") var chatTemplate: ChatTemplateOptions
    @OptionGroup(title: "Data") var data: DataOptions
    @OptionGroup(title: "Schedule") var schedule: ScheduleOptions
    @OptionGroup(title: "Checkpoints") var checkpoints: CheckpointOptions
    @OptionGroup(title: "Reporting") var report: TrainingReportOptions

    @OptionGroup(title: "Adapter") var adapter: LoRAOptions
    @OptionGroup(title: "Objective") var objective: ObjectiveOptions

    func run() throws {
        let printer = ProgressPrinter()
        printer.silent = !DataParallelJob.isRoot
        if let line = DataParallelJob.summary { printer.log(line) }
        let t0 = Date()
        var base = try model.load()
        try chatTemplate.apply(to: &base, quiet: !DataParallelJob.isRoot, data: [data.trainData] + (data.evalData.map { [$0] } ?? []))
        printer.log(String(format: "loaded base model %@ in %.1fs (signature %@)", base.path, Date().timeIntervalSince(t0), String(base.signature.prefix(16))))
        var settings = AdapterRunSettings(
            data: data.settings(schedule), lora: try adapter.config(), checkpoints: checkpoints.settings,
            makeOptions: { schedule.trainingOptions(batchesPerEpoch: $0, checkpointFrequency: checkpoints.checkpointFrequency) })
        settings.activationCheckpointing = schedule.activationCheckpointing
        settings.report = report.settings()
        settings.group = DataParallelJob.group
        settings.preference = objective.preference
        settings.initCheckpoint = objective.initCheckpoint
        settings.referenceCheckpoint = objective.referenceCheckpoint
        if checkpoints.resume { printer.logResumeScan(directory: checkpoints.checkpointDir, prefix: "adapter") }
        StopSignal.install()
        let outcome = try AdapterRun.run(settings, base: base, shouldStop: { StopSignal.requested }, notice: { n in
            switch n {
            case .dataSummary(let train, let eval, let tokens, let targets, let computed, let skipped):
                printer.logData(train: train, eval: eval, trainTokens: tokens, targetTokens: targets, computedPositions: computed, skipped: skipped)
            case .model(_, _, let layers, let hidden, let trainable, let lora):
                printer.log("model: \(layers) layers, hidden \(hidden); LoRA rank \(lora.rank), alpha \(lora.alpha), targets \(lora.targets.map(\.rawValue).joined(separator: ",")): \(trainable) trainable parameters")
            case .resuming(let path, let step, let epoch):
                printer.log("resuming from \(path) at step \(step) (epoch \(epoch + 1))")
            case .log(let text):
                printer.log(text)
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

DataParallelJob.main(TrainAdapter.self)
