// `bench speculative`: greedy tokens/second with and without a draft (a trained one, or prompt
// lookup) on the same prompts, plain or constrained to each prompt's response_format, checking
// that the outputs are identical (speculative decoding is lossless), and printing α, γ, both
// speeds and their ratio. Forced tokens count as the target's work on both sides. Rerun it to
// check any speed-up claimed for speculative decoding.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition

struct SpeculativeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "speculative",
        abstract: "Measure greedy decoding speed with and without a draft (speculative decoding), plain or constrained, and check identical output.")

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions
    @OptionGroup var decoding: DecodingOptions

    @Option(help: "Adapter for the target model (base + adapter): \(AdapterForms.phrase).")
    var checkpoint: String?

    @OptionGroup var drafting: DraftSourceOptions

    @Flag(help: "Constrain each reply to its prompt's response_format (guided generation), with and without the draft alike; prompts without one stay unconstrained.")
    var constrained = false

    @Option(help: "Prompts: a .jsonl file of conversations ending in a user turn, or an eval file (each conversation up to its last user turn) (Schema.md). Default: a few built-in ones.")
    var prompts: String?

    @Option(help: "Use at most this many prompts from the file.")
    var maxPrompts: Int = 8

    @Option(parsing: .upToNextOption, help: "Draft tokens per target pass (gamma) to try, e.g. 3 4 5 6.")
    var numDraftTokens: [Int] = [4]

    @Option(help: "New tokens per reply.")
    var maxNewTokens: Int = 128

    @Option(help: "Generate every prompt this many times, alternating plain and speculative runs, and keep each one's fastest decode (steadier on a shared machine).")
    var repeats: Int = 1

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
        guard let resolved = try drafting.selection(default: .auto).resolve(loaded) else {
            throw ValidationError("no draft to measure: give --draft-checkpoint (from train-draft), an .fmadapter package that carries a draft, or --draft ngram")
        }
        let drafter = resolved.drafter
        for n in resolved.notes { FileHandle.standardError.write(Data("note: \(n)\n".utf8)) }
        let library = constrained ? try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds) : nil
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)
        var conversations: [[Message]] = []
        if let prompts {
            // conversations ending in a user turn, or an eval file's (ending in the reference reply,
            // which is dropped: the prompt is the turns before it)
            if let read = try? DataReader.read(path: prompts, options: ReadOptions(mode: .prompt)) {
                conversations = read.samples.map(\.messages)
            } else {
                conversations = try DataReader.read(path: prompts, options: ReadOptions(mode: .train)).samples.map { sample in
                    let m = sample.messages
                    return Array(m[...(m.lastIndex(where: { $0.role == .user }) ?? m.count - 1)])
                }
            }
        } else {
            conversations = Self.builtIn.map { [Message(role: .user, content: $0)] }
        }
        conversations = Array(conversations.prefix(maxPrompts))
        func out(_ s: String) { FileHandle.standardOutput.write(Data((s + "\n").utf8)) }
        let draftName: String
        switch drafter {
        case .model:
            draftName = (drafting.draftCheckpoint ?? "the package's draft") + " (\(drafting.draftPrecision.rawValue) weights)"
        case .ngram:
            draftName = "prompt lookup, n \(drafting.ngramMin)-\(drafting.ngramMax)"
        }
        out("target: \(base.path)" + (checkpoint.map { " + adapter \($0)" } ?? "") + "; draft: \(draftName)")
        let mode = constrained ? "greedy, constrained to each prompt's response_format" : "greedy"
        if case .model(let draft) = drafter {
            let cost = SpeculativeCost.measure(target: target, draft: draft)
            out(String(format: "measured cost ratio c = %.3f (draft %.2f ms, target %.2f ms per token); %d prompts, %d new tokens max, %@",
                       cost.ratio, cost.draftSecondsPerToken * 1000, cost.targetSecondsPerToken * 1000, conversations.count, maxNewTokens, mode))
        } else {
            out("\(conversations.count) prompts, \(maxNewTokens) new tokens max, \(mode)")
        }
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
        _ = SpeculativeDecoder(target: target, drafter: drafter, draftTokens: numDraftTokens[0]).generate(warm)

        struct Totals { var tokens = 0; var decode = 0.0; var all = 0.0; var proposed = 0; var accepted = 0; var checked = 0; var overlap = 0.0; var calls = 0
                       var draft = 0.0; var verify = 0.0; var rows = 0 }
        var plain = Totals()
        var spec = [Int: Totals]()
        var allIdentical = true
        for (i, conversation) in conversations.enumerated() {
            var constraint: TokenConstraint? = nil
            if let library, let format = conversation.last(where: { $0.role == .user })?.responseFormat {
                constraint = try library.jsonSchema(format.schema)
            }
            let request = GenerationRequest(prompt: try encoder.encodePrompt(conversation), maxNewTokens: maxNewTokens, stopTokens: base.stopTokenIds,
                                            constraint: constraint)
            // Plain and each gamma in turn, `repeats` rounds; outputs are deterministic, so each
            // keeps its fastest decode.
            let decoders = numDraftTokens.map { SpeculativeDecoder(target: target, drafter: drafter, draftTokens: $0) }
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
            plain.calls += ps.targetForwardCalls
            var line = String(format: "prompt %d (%d tokens): plain %d tokens %.1f tok/s", i + 1, request.prompt.count, ps.generatedTokens, ps.tokensPerSecond)
            if constraint != nil { line += " (constrained: \(ps.forcedTokens) forced\(ps.incomplete ? ", INCOMPLETE" : ""))" }
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
                t.rows += s.rowsFed
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
        out(String(format: "plain greedy: %d tokens, %.2f tokens/s decode (%.2f tokens/s with prefill), %.2f tokens per target pass", plain.tokens, plainTPS,
                   Double(plain.tokens) / max(plain.all, 1e-9), Double(plain.tokens) / Double(max(1, plain.calls - conversations.count))))
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
            out(String(format: "  gamma %d decode time: draft %.2fs (%.2f ms per proposal), verification %.2fs (%.2f ms per pass of %.2f tokens on average), other %.2fs",
                       g, t.draft, t.draft * 1000 / Double(max(1, t.proposed)), t.verify, t.verify * 1000 / Double(passes),
                       Double(t.rows) / Double(max(1, t.calls)), t.decode - t.draft - t.verify))
        }
        out(allIdentical ? "outputs: identical with and without the draft on every prompt" : "outputs: DIFFERENT on some prompt (see above)")
        if !allIdentical { throw ExitCode(1) }
    }
}

