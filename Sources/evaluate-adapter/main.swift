// evaluate-adapter: the base model and adapters (any form) side by side on an eval file (eval
// loss, perplexity, exact match, JSON/schema checks, tool-call accuracy, tokens/s). Thin: parse
// flags, call Evaluation.EvaluationRun, print the table (or JSON) to stdout, progress to stderr.
import ArgumentParser
import CLISupport
import DataSchema
import Evaluation
import Foundation
import Training

extension TurnSelection: ExpressibleByArgument {}

struct EvaluateAdapter: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evaluate-adapter",
        abstract: "Evaluate the base model and adapters on an eval file, side by side.",
        discussion: """
            For each model: eval loss and perplexity over the assistant tokens (teacher-forced, as \
            train-adapter reports them), then greedy generation of each sample's last assistant turn from the \
            turns before it, scored by exact match (ends trimmed), JSON validity, schema conformance and \
            equality where the user turn has a response_format, and tool-call name and argument accuracy \
            where the reference calls tools. Prints one row per model; --output keeps every reply.
            """)

    @OptionGroup(title: "Base model") var model: BaseModelOptions
    @OptionGroup(title: "Chat template") var chatTemplate: ChatTemplateOptions
    @OptionGroup(title: "Decoding") var decoding: DecodingOptions
    @OptionGroup(title: "Reporting") var report: ReportOptions
    @OptionGroup(title: "Speculative decoding") var drafting: DraftOptions

    @Option(help: "Eval data: JSONL conversations ending in an assistant turn (Schema.md).")
    var evalData: String

    @Option(help: "An adapter to evaluate: \(AdapterForms.phrase). Repeat to compare several.")
    var checkpoint: [String] = []

    @Option(help: "Also score every model on these preference pairs (prompt, chosen, rejected; Schema.md \"Preference pairs\"): pref acc, the share of pairs whose chosen reply the model gives the higher log-probability; pref margin, the mean of that difference; reward acc, the share whose difference is above the base model's (TRL's rewards/accuracies with the base as reference).")
    var preferenceData: String?

    @Option(help: "A train-adapter --checkpoint-dir: evaluates every adapter-epoch{N}.safetensors and adapter-final.safetensors in it.")
    var checkpointDir: String?

    @Flag(help: "Evaluate the base model without an adapter too (always done when no checkpoint is given).")
    var includeBase = false

    @Option(help: "Evaluate only the first N samples of the file.")
    var maxSamples: Int?

    @Option(help: "Most new tokens per reply. Default: the longest reference reply in tokens plus 16.")
    var maxNewTokens: Int?

    @Option(help: "Longest sample in tokens for the eval loss; longer samples are cut (and counted in a note).")
    var maxSequenceLength: Int = 1024

    @Option(help: "Samples per batch for the eval loss.")
    var batchSize: Int = 8

    @Option(help: "Replies generated at once: their decoding steps share one pass over the weights, so a batch is several times faster than one at a time; the replies are identical.")
    var generationBatchSize: Int = 8

    @Option(help: "Assistant turns to generate: last (each sample's final reply) or all (every assistant turn, tool calls included).")
    var turns: TurnSelection = .last

    @Option(help: "Write every generated reply with its scores to this JSONL file.")
    var output: String?

    @Option(help: "Keep the scores in DIR/evaluation/ (metrics.jsonl, and with --report-to tensorboard one TensorBoard run per model at its training step). Default: the folder of --output, else --checkpoint-dir, else that of the first --checkpoint.")
    var logDir: String?

    @Flag(help: "Print the summary as JSON instead of the table.")
    var json = false

    @Flag(help: "Skip the eval loss (generation only).")
    var skipLoss = false

    @Flag(help: "Skip generation (eval loss and perplexity only).")
    var skipGeneration = false

    @Flag(help: "Also generate each model's replies to response_format turns constrained to their schema (guided generation; docs/guided-generation.md): one more row per model, with the replies the token limit cut counted as incomplete.")
    var constrained = false

    func validate() throws {
        if let n = maxSamples, n < 1 { throw ValidationError("--max-samples must be at least 1") }
        if let n = maxNewTokens, n < 1 { throw ValidationError("--max-new-tokens must be at least 1") }
        guard maxSequenceLength >= 2 else { throw ValidationError("--max-sequence-length must be at least 2 tokens") }
        guard batchSize >= 1 else { throw ValidationError("--batch-size must be at least 1") }
        guard generationBatchSize >= 1 else { throw ValidationError("--generation-batch-size must be at least 1") }
        if skipLoss && skipGeneration { throw ValidationError("--skip-loss and --skip-generation together leave nothing to do; drop one") }
    }

    func run() throws {
        let printer = ProgressPrinter()
        let t0 = Date()
        var base = try model.load()
        try chatTemplate.apply(to: &base, data: [evalData])
        printer.log(String(format: "loaded base model %@ in %.1fs (signature %@)", base.path, Date().timeIntervalSince(t0), String(base.signature.prefix(16))))
        var s = EvaluationSettings(evalData: evalData)
        s.checkpoints = checkpoint
        s.checkpointDir = checkpointDir
        s.preferenceData = preferenceData
        s.includeBase = includeBase
        s.maxSamples = maxSamples
        s.maxNewTokens = maxNewTokens
        s.maxSequenceLength = maxSequenceLength
        s.batchSize = batchSize
        s.generationBatchSize = generationBatchSize
        s.turns = turns
        s.outputPath = output
        s.computeLoss = !skipLoss
        s.generate = !skipGeneration
        s.activations = decoding.activations
        s.kvCache = decoding.kvCache
        s.constrained = constrained
        let draft = drafting.selection(default: .none)
        s.draft = draft.kind == .none ? nil : draft
        if s.draft != nil && generationBatchSize > 1 {
            printer.log("note: with a draft each reply is generated alone (speculative decoding), not \(generationBatchSize) at a time; the replies are the same")
        }
        s.report = report.settings()
        s.logRoot = logDir ?? s.defaultLogRoot
        if s.logRoot == nil { printer.log("note: the scores are not logged (no folder): give --log-dir to keep them for TensorBoard") }
        var progress = EvaluationProgress()
        let report = try EvaluationRun.run(s, base: base) { event in
            switch event {
            case .note(let text):
                printer.log("note: \(text)")
            case .dataLoaded(let samples, let targets, let summary):
                printer.log("eval data: \(summary); evaluating \(samples) samples, \(targets) turns to generate")
            case .modelStarted(let label, let index, let count):
                printer.log("[\(index + 1)/\(count)] \(label)")
            case .lossComputed(let label, let loss, let tokens, let seconds):
                printer.log(String(format: "%@: eval loss %.4f, perplexity %.3f over %d tokens (%.1fs)", label, loss, Foundation.exp(loss), tokens, seconds))
            case .generated:
                if let line = progress.line(for: event) { printer.log(line) }
            case .modelFinished(let m):
                printer.log(String(format: "%@ done in %@", m.label, ProgressPrinter.duration(m.seconds)))
            }
        }
        if json {
            print(try EvaluationTable.json(report))
        } else {
            print(EvaluationTable.render(report), terminator: "")
        }
        if let output { printer.log("per-sample results: \(output)") }
    }
}

EvaluateAdapter.main()
