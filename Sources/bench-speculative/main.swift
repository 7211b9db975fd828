// bench-speculative: greedy tokens/second with and without a trained draft on the same prompts,
// checking that the outputs are identical (speculative decoding is lossless), and printing α, γ,
// both speeds and their ratio. Rerun it to check any speed-up claimed for speculative decoding.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition

extension InferenceModel.WeightPrecision: ExpressibleByArgument {}

struct BenchSpeculative: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-speculative",
        abstract: "Measure greedy decoding speed with and without a draft model (speculative decoding) and check identical output.")

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions
    @OptionGroup var decoding: DecodingOptions

    @Option(help: "Adapter for the target model (base + adapter): a checkpoint, an .fmadapter package or a PEFT folder.")
    var checkpoint: String?

    @Option(help: "Draft-model checkpoint (from train-draft).")
    var draftCheckpoint: String

    @Option(help: "Prompts: a .jsonl file of conversations ending in a user turn (Schema.md). Default: a few built-in ones.")
    var prompts: String?

    @Option(help: "Use at most this many prompts from the file.")
    var maxPrompts: Int = 8

    @Option(parsing: .upToNextOption, help: "Draft tokens per target pass (gamma) to try, e.g. 3 4 5 6.")
    var numDraftTokens: [Int] = [4]

    @Option(help: "New tokens per reply.")
    var maxNewTokens: Int = 128

    @Option(help: "Generate every prompt this many times, alternating plain and speculative runs, and keep each one's fastest decode (steadier on a shared machine).")
    var repeats: Int = 1

    @Option(help: "How the draft holds its weights: float16 (half the bytes per draft step) or float32. The output is the same either way.")
    var draftPrecision: InferenceModel.WeightPrecision = .float16

    func validate() throws {
        guard numDraftTokens.allSatisfy({ $0 >= 1 }), !numDraftTokens.isEmpty else { throw ValidationError("--num-draft-tokens values must be at least 1") }
        guard maxNewTokens >= 1, maxPrompts >= 1, repeats >= 1 else { throw ValidationError("--max-new-tokens, --max-prompts and --repeats must be at least 1") }
    }

    static let builtIn = [
        "What is the capital of France?",
        "Write a short poem about the sea.",
        "Explain what a binary search does.",
        "Give me three tips for staying focused while studying.",
    ]

    func run() throws {
        var loaded = try model.load(adapter: checkpoint)
        try chatTemplate.apply(to: &loaded.base)
        let base = loaded.base
        let target = InferenceModel(loaded, activations: decoding.activations, kvCache: decoding.kvCache)
        let draft = try DraftEngine.load(path: draftCheckpoint, base: base, precision: draftPrecision)
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)
        var conversations: [[Message]] = []
        if let prompts {
            conversations = try DataReader.read(path: prompts, options: ReadOptions(mode: .prompt)).samples.map(\.messages)
        } else {
            conversations = Self.builtIn.map { [Message(role: .user, content: $0)] }
        }
        conversations = Array(conversations.prefix(maxPrompts))
        let cost = SpeculativeCost.measure(target: target, draft: draft)
        func out(_ s: String) { FileHandle.standardOutput.write(Data((s + "\n").utf8)) }
        out("target: \(base.path)" + (checkpoint.map { " + adapter \($0)" } ?? "") + "; draft: \(draftCheckpoint) (\(draftPrecision.rawValue) weights)")
        out(String(format: "measured cost ratio c = %.3f (draft %.2f ms, target %.2f ms per token); %d prompts, %d new tokens max, greedy",
                   cost.ratio, cost.draftSecondsPerToken * 1000, cost.targetSecondsPerToken * 1000, conversations.count, maxNewTokens))
        // the cost of a target pass by rows scored, at the first prompt's length: verifying γ proposals is a (γ+1)-row pass
        let context = try encoder.encodePrompt(conversations[0]).count
        func cpuSeconds() -> Double {
            var u = rusage()
            getrusage(RUSAGE_SELF.rawValue, &u)
            return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6
        }
        func pass(_ rows: Int) -> (wall: Double, cpu: Double) {
            let c0 = cpuSeconds()
            let t = SpeculativeCost.passSeconds(target: target, context: context, rows: rows, steps: 8, repeats: 3)
            return (t, (cpuSeconds() - c0) / 24)  // cpu: mean over all 24 passes, every core
        }
        let single = pass(1)
        var passLine = String(format: "target pass after %d tokens (best wall time; mean cpu time): 1 row %.1f ms (cpu %.1f ms)",
                              context, single.wall * 1000, single.cpu * 1000)
        for g in numDraftTokens.sorted() {
            let t = pass(g + 1)
            passLine += String(format: ", %d rows %.1f ms (%.2fx; cpu %.1f ms)", g + 1, t.wall * 1000, t.wall / single.wall, t.cpu * 1000)
        }
        out(passLine)
        // warm-up (page in weights, allocate)
        let warm = GenerationRequest(prompt: try encoder.encodePrompt(conversations[0]), maxNewTokens: 8, stopTokens: base.stopTokenIds)
        _ = Generator.generate(target, warm)
        _ = SpeculativeDecoder(target: target, draft: draft, draftTokens: numDraftTokens[0]).generate(warm)

        struct Totals { var tokens = 0; var decode = 0.0; var all = 0.0; var proposed = 0; var accepted = 0; var checked = 0; var overlap = 0.0; var calls = 0
                       var draft = 0.0; var verify = 0.0 }
        var plain = Totals()
        var spec = [Int: Totals]()
        var allIdentical = true
        for (i, conversation) in conversations.enumerated() {
            let request = GenerationRequest(prompt: try encoder.encodePrompt(conversation), maxNewTokens: maxNewTokens, stopTokens: base.stopTokenIds)
            // Plain and each gamma in turn, `repeats` rounds; outputs are deterministic, so each
            // keeps its fastest decode.
            let decoders = numDraftTokens.map { SpeculativeDecoder(target: target, draft: draft, draftTokens: $0) }
            let (reference, firstStats) = Generator.generate(target, request)
            var ps = firstStats
            var runs = decoders.map { $0.generate(request) }
            for _ in 1..<repeats {
                let again = Generator.generate(target, request).stats
                if again.decodeSeconds < ps.decodeSeconds { ps = again }
                for (j, decoder) in decoders.enumerated() {
                    let r = decoder.generate(request)
                    allIdentical = allIdentical && r.tokens == reference
                    if r.stats.generation.decodeSeconds < runs[j].stats.generation.decodeSeconds { runs[j].stats = r.stats }
                }
            }
            plain.tokens += ps.generatedTokens
            plain.decode += ps.decodeSeconds
            plain.all += ps.decodeSeconds + ps.prefillSeconds
            var line = String(format: "prompt %d (%d tokens): plain %d tokens %.1f tok/s", i + 1, request.prompt.count, ps.generatedTokens, ps.tokensPerSecond)
            for (j, g) in numDraftTokens.enumerated() {
                let (tokens, s) = runs[j]
                let same = tokens == reference
                allIdentical = allIdentical && same
                var t = spec[g] ?? Totals()
                t.tokens += s.generation.generatedTokens
                t.decode += s.generation.decodeSeconds
                t.all += s.generation.decodeSeconds + s.generation.prefillSeconds
                t.proposed += s.generation.draftTokensProposed
                t.accepted += s.generation.draftTokensAccepted
                t.checked += s.checkedPositions
                t.overlap += s.overlapSum
                t.calls += s.generation.targetForwardCalls
                t.draft += s.draftSeconds
                t.verify += s.verifySeconds
                spec[g] = t
                line += String(format: " | gamma %d: %.1f tok/s (%.2fx), alpha %.2f, %@", g, s.generation.tokensPerSecond,
                               s.generation.tokensPerSecond / max(ps.tokensPerSecond, 1e-9), s.alpha, same ? "identical" : "DIFFERENT")
                if !same {
                    let firstDiff = zip(tokens, reference).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(tokens.count, reference.count)
                    line += " (first difference at token \(firstDiff))"
                }
            }
            out(line)
        }
        let plainTPS = Double(plain.tokens) / max(plain.decode, 1e-9)
        out(String(format: "plain greedy: %d tokens, %.2f tokens/s decode (%.2f tokens/s with prefill)", plain.tokens, plainTPS,
                   Double(plain.tokens) / max(plain.all, 1e-9)))
        for g in numDraftTokens {
            let t = spec[g]!
            let tps = Double(t.tokens) / max(t.decode, 1e-9)
            let alpha = t.checked > 0 ? t.overlap / Double(t.checked) : 0
            out(String(format: "speculative gamma %d: %d tokens, %.2f tokens/s decode (%.2f with prefill), speed-up %.2fx (%.2fx with prefill); alpha %.3f, %d proposed, %d accepted (ratio %.3f), %.2f tokens per target pass",
                       g, t.tokens, tps, Double(t.tokens) / max(t.all, 1e-9), tps / max(plainTPS, 1e-9),
                       (Double(t.tokens) / max(t.all, 1e-9)) / max(Double(plain.tokens) / max(plain.all, 1e-9), 1e-9),
                       alpha, t.proposed, t.accepted, t.proposed > 0 ? Double(t.accepted) / Double(t.proposed) : 0,
                       Double(t.tokens) / Double(max(1, t.calls - conversations.count))))
            let passes = max(1, t.calls - conversations.count)
            out(String(format: "  gamma %d decode time: draft %.2fs (%.2f ms per proposal), verification %.2fs (%.2f ms per pass), other %.2fs",
                       g, t.draft, t.draft * 1000 / Double(max(1, t.proposed)), t.verify, t.verify * 1000 / Double(passes),
                       t.decode - t.draft - t.verify))
        }
        out(allIdentical ? "outputs: identical with and without the draft on every prompt" : "outputs: DIFFERENT on some prompt (see above)")
        if !allIdentical { throw ExitCode(1) }
    }
}

BenchSpeculative.main()
