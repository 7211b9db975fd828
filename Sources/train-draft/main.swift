// train-draft: distils a small draft model from the teacher (base + adapter) for speculative
// decoding. Thin: parse flags, call Distillation.DraftRun, print what happens. Same data, schedule
// and checkpoint flags as train-adapter (shared groups).
import ArgumentParser
import Autograd
import CLISupport
import DataParallel
import DataSchema
import Distillation
import Foundation
import Training

extension Divergence: ExpressibleByArgument {}
extension DraftVocabularyMode: ExpressibleByArgument {}

struct TrainDraft: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "train-draft",
        abstract: "Train a draft model for speculative decoding by distillation from the base model and its adapter.",
        discussion: """
            The teacher is the base model with the adapter of --checkpoint merged in (the bare base without it); \
            the draft is N evenly spaced blocks of the base (--draft-layers) or a smaller model with the same \
            vocabulary (--draft-model), trained in full on the divergence between the two next-token distributions \
            at the assistant positions. After each epoch: eval KL, the acceptance rate α, the greedy agreement, the \
            measured cost ratio c and the expected speed-up for γ = 1...8; draft-model-epoch{N}.safetensors and \
            draft-model-final.safetensors in --checkpoint-dir, and the run's log in --checkpoint-dir/draft/ (metrics.jsonl, \
            loss-curve.svg, TensorBoard event files). Use the draft with \
            generate --draft-checkpoint ... --num-draft-tokens γ.
            """)

    @OptionGroup(title: "Base model") var model: BaseModelOptions
    @OptionGroup(title: "Chat template") var chatTemplate: ChatTemplateOptions
    @OptionGroup(title: "Data") var data: DataOptions
    @OptionGroup(title: "Schedule") var schedule: ScheduleOptions
    @OptionGroup(title: "Checkpoints") var checkpoints: CheckpointOptions
    @OptionGroup(title: "Reporting") var report: TrainingReportOptions

    @Option(help: "The teacher's adapter: \(AdapterForms.phrase). Without it the teacher is the bare base model.")
    var checkpoint: String?

    @Option(help: "Build the draft from this many evenly spaced blocks of the base model (with its embeddings and final norm). Default 2 unless --draft-model is given.")
    var draftLayers: Int?

    @Option(help: "Start the draft from this smaller model instead (.gguf or Hugging Face folder); it must have the base model's vocabulary.")
    var draftModel: String?

    @Flag(help: "Keep the draft's token embeddings and output head frozen: they stay as the base stores them (with --base-weights stored, never copied; a draft checkpoint then takes them from its base). Without it they are trained, so the draft holds them as float32 with their AdamW moments (four times the float32 embedding: 450 MB on SmolLM2, 6 GB on Llama-3.2-3B).")
    var freezeEmbeddings = false

    @Option(help: "Distillation loss: reverse = KL(draft || teacher), forward = KL(teacher || draft), tvd = total variation.")
    var divergence: Divergence = .reverse

    @Option(help: "Tokens the draft's head scores: task = those in the training data and the stop tokens (a much cheaper draft step; the output stays exactly the target's), full = the whole vocabulary.")
    var draftVocabulary: DraftVocabularyMode = .task

    func validate() throws {
        if draftLayers != nil && draftModel != nil { throw ValidationError("give --draft-layers or --draft-model, not both") }
        if let n = draftLayers, n < 1 { throw ValidationError("--draft-layers must be at least 1") }
    }

    func run() throws {
        let printer = ProgressPrinter()
        printer.silent = !DataParallelJob.isRoot
        if let line = DataParallelJob.summary { printer.log(line) }
        let t0 = Date()
        var base = try model.load()
        try chatTemplate.apply(to: &base, quiet: !DataParallelJob.isRoot, data: [data.trainData] + (data.evalData.map { [$0] } ?? []))
        printer.log(String(format: "loaded base model %@ in %.1fs (signature %@)", base.path, Date().timeIntervalSince(t0), String(base.signature.prefix(16))))
        let source: DraftSource = draftModel.map { .model(path: $0) } ?? .baseLayers(draftLayers ?? 2)
        var settings = DraftRunSettings(
            data: data.settings(schedule), teacherAdapter: checkpoint, source: source, freezeEmbeddings: freezeEmbeddings,
            divergence: divergence, vocabulary: draftVocabulary, checkpoints: checkpoints.settings,
            makeOptions: { schedule.trainingOptions(batchesPerEpoch: $0, checkpointFrequency: checkpoints.checkpointFrequency) })
        settings.activationCheckpointing = schedule.activationCheckpointing
        settings.report = report.settings()
        settings.group = DataParallelJob.group
        if checkpoints.resume { printer.logResumeScan(directory: checkpoints.checkpointDir, prefix: "draft-model") }
        StopSignal.install()
        let outcome = try DraftRun.run(settings, base: base, shouldStop: { StopSignal.requested }, notice: { n in
            switch n {
            case .dataSummary(let train, let eval, let tokens, let targets, let computed, let skipped):
                printer.logData(train: train, eval: eval, trainTokens: tokens, targetTokens: targets, computedPositions: computed, skipped: skipped)
            case .teacher(let adapter, _, let prefix):
                printer.log("teacher: " + (adapter.map { "base model + adapter \($0) (merged)" } ?? "the bare base model") + " on the KV-cache path"
                            + (prefix > 0 ? "; the \(prefix)-token prompt prefix every sample begins with runs once" : ""))
            case .draft(let summary, let trainable, let frozen, let div):
                printer.log("draft: \(summary); \(trainable) trained and \(frozen) frozen parameters; loss \(div.rawValue) divergence")
            case .resuming(let path, let step, let epoch):
                printer.log("resuming from \(path) at step \(step) (epoch \(epoch + 1))")
            case .log(let text):
                printer.log(text)
            case .metrics(let m):
                printer.log(Self.describe(m))
            }
        }, onEvent: printer.handle)
        switch outcome {
        case .finished(let path):
            printer.log("draft: \(path)")
        case .interrupted(let path):
            printer.log("interrupted; resume with: train-draft ... --resume-from \(path)")
            throw ExitCode(130)
        }
    }

    static func describe(_ m: DraftEpochMetrics) -> String {
        var s = String(format: "draft after epoch %d on %@ data (%d positions): KL(draft||teacher) %.4f, KL(teacher||draft) %.4f, acceptance rate alpha %.3f, greedy agreement %.3f, teacher mass outside the draft's head %.4f\n",
                       m.epoch, m.dataSet, m.eval.positions, m.eval.klReverse, m.eval.klForward, m.eval.acceptance,
                       m.eval.greedyAgreement, m.eval.teacherMassOutsideHead)
        s += String(format: "  cost ratio c = %.3f (draft %.2f ms, target %.2f ms per token)\n", m.cost.ratio,
                    m.cost.draftSecondsPerToken * 1000, m.cost.targetSecondsPerToken * 1000)
        s += "  gamma:                 " + m.estimates.map { String(format: "%6d", $0.gamma) }.joined() + "\n"
        s += "  tokens/target call:    " + m.estimates.map { String(format: "%6.2f", $0.tokensPerTargetCall) }.joined() + "\n"
        s += "  expected speed-up:     " + m.estimates.map { String(format: "%6.2f", $0.speedup) }.joined() + "\n"
        s += "  greedy speed-up:       " + m.greedyEstimates.map { String(format: "%6.2f", $0.speedup) }.joined() + "\n"
        if let b = m.best, let g = m.bestGreedy {
            s += String(format: "  best gamma %d (expected %.2fx sampling); greedy: best gamma %d (%.2fx)", b.gamma, b.speedup, g.gamma, g.speedup)
        }
        return s
    }
}

DataParallelJob.main(TrainDraft.self)
