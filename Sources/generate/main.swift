// generate: text from the base model, optionally with a trained adapter, streamed as it is
// produced. Thin: parse flags, load, call Inference, print. Stats go to stderr.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition


struct Generate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate a reply with the base model, or with the base model and a trained adapter.",
        discussion: """
            The prompt is a user message rendered through the model's chat template (with its default \
            system message unless --system is given), or a .jsonl file of conversations that end in a user \
            turn (Schema.md), each answered in turn. With --raw the prompt is the text itself, without the \
            template (for base models); {"text": ...} records are prompted that way too. Output streams \
            to stdout; tokens/second to stderr.

            Guided generation: a reply to a user turn with a response_format (given with \
            --response-format, or in the .jsonl) is constrained to compact JSON valid against its schema: \
            tokens the schema does not allow are never chosen, so the reply is valid by construction \
            (docs/guided-generation.md). --choice and --regex constrain the reply without changing the \
            prompt. A reply the token limit cuts before it is a whole value is reported incomplete, and \
            the command exits with status 3.

            Speculative decoding: with a draft (a package's own, --draft-checkpoint, or --draft ngram for \
            prompt lookup, which needs no training) the draft proposes tokens and the model checks them \
            several at a time; replies are the same as without it, guided ones included.
            """)

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions
    @OptionGroup var decoding: DecodingOptions

    @Option(help: "Adapter to apply to the base model: \(AdapterForms.phrase). A package's draft (and its draft token count) is used for speculative decoding unless --draft says otherwise.")
    var checkpoint: String?

    @OptionGroup var drafting: DraftOptions

    @Option(help: "The user message, or a path to a .jsonl file of conversations ending in a user turn.")
    var prompt: String

    @Option(help: "System message (replaces the model's default one).")
    var system: String?

    @Option(help: "Most new tokens per reply.")
    var maxNewTokens: Int = 256

    @Option(help: "Sampling temperature; 0 means greedy (always the most likely token).")
    var temperature: Float = 0

    @Option(help: "Sample only from the k most likely tokens.")
    var topK: Int?

    @Option(help: "Sample only from the smallest set of tokens whose probability reaches p.")
    var topP: Float?

    @Option(help: "Random seed for sampling.")
    var seed: UInt64 = 0

    @Option(help: ArgumentHelp("A JSON schema the reply must follow: a file or inline JSON, either the schema itself or an OpenAI response_format ({\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\"}}). It is put on the final user turn (rendered into the prompt as in training) and constrains the reply.", valueName: "schema"))
    var responseFormat: String?

    @Option(help: ArgumentHelp("The reply is exactly one of these strings (repeat the option for each).", valueName: "text"))
    var choice: [String] = []

    @Option(help: ArgumentHelp("The reply is text this regular expression matches in full.", valueName: "pattern"))
    var regex: String?

    @Flag(help: "Do not constrain replies to their response_format (the prompt still shows the schema): what the model writes by itself.")
    var unconstrained = false

    @Flag(help: "Print the generated token ids to stderr as well.")
    var showIds = false

    @Flag(help: "Treat --prompt as raw text: no chat template and no system message (a base model's completion, or a check against another tool's raw completion); a BOS token goes first when the tokenizer adds one to text (as Hugging Face's tokenizer(text) does); the reply still ends at the model's end-of-turn token.")
    var raw = false

    func validate() throws {
        guard maxNewTokens >= 1 else { throw ValidationError("--max-new-tokens must be at least 1") }
        guard temperature >= 0, temperature.isFinite else { throw ValidationError("--temperature must be 0 (greedy) or positive") }
        if let k = topK, k < 1 { throw ValidationError("--top-k must be at least 1") }
        if let p = topP, !(p > 0 && p <= 1) { throw ValidationError("--top-p must be in (0, 1]") }
        if !choice.isEmpty && regex != nil { throw ValidationError("give --choice or --regex, not both") }
        if (!choice.isEmpty || regex != nil) && responseFormat != nil { throw ValidationError("--response-format already constrains the reply; drop --choice/--regex") }
        if raw && (system != nil || responseFormat != nil || prompt.hasSuffix(".jsonl")) {
            throw ValidationError("--raw prompts with the text alone: drop --system and --response-format, and give the text itself (plain {\"text\": ...} records of a .jsonl file are prompted without the template already)")
        }
    }

    /// --response-format: a file or inline JSON, a bare schema or an OpenAI response_format.
    func parsedResponseFormat() throws -> ResponseFormat? {
        guard let text = responseFormat else { return nil }
        let isFile = FileManager.default.fileExists(atPath: text)
        let source = isFile ? "--response-format file \(text)" : "--response-format"
        let json = try JSONValue.parse(isFile ? String(contentsOfFile: text, encoding: .utf8) : text, context: source)
        if json["json_schema"] != nil { return try ResponseFormat(json: json, context: source) }
        return ResponseFormat(name: "reply", schema: try JSONSchema(json, context: source))
    }

    func run() throws {
        var loaded = try model.load(adapter: checkpoint)  // any adapter form, checked against the base
        try chatTemplate.apply(to: &loaded.base)
        let base = loaded.base
        let engine = InferenceModel(loaded, activations: decoding.activations, kvCache: decoding.kvCache)
        let draft = try drafting.selection(default: .auto).resolve(loaded)
        for note in draft?.notes ?? [] { FileHandle.standardError.write(Data("note: \(note)\n".utf8)) }
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)

        let format = try parsedResponseFormat()
        var conversations: [[Message]] = []
        if raw {
            conversations = [[Message.plainText(prompt)]]
        } else if prompt.hasSuffix(".jsonl") && FileManager.default.fileExists(atPath: prompt) {
            let data = try DataReader.read(path: prompt, options: ReadOptions(mode: .prompt))
            conversations = data.samples.map(\.messages)
        } else {
            var messages: [Message] = []
            if let system { messages.append(Message(role: .system, content: system)) }
            messages.append(Message(role: .user, content: prompt))
            conversations = [messages]
        }
        if let format {
            for i in conversations.indices {
                guard let u = conversations[i].lastIndex(where: { $0.role == .user }) else { continue }
                conversations[i][u].responseFormat = format
            }
        }
        // one compiled constraint per schema (masks are cached per automaton state); the vocabulary's
        // byte trie (about 2 MB for SmolLM2) is built only when a reply is constrained
        var built: ConstraintLibrary? = nil
        func library() throws -> ConstraintLibrary {
            if let built { return built }
            let made = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
            built = made
            return made
        }
        let fixed: TokenConstraint? = try choice.isEmpty ? regex.map { try library().regex($0) } : library().choice(choice)
        var incompleteReplies = 0
        let sampling = SamplingOptions(temperature: temperature, topK: topK, topP: topP)
        for (i, conversation) in conversations.enumerated() {
            if conversations.count > 1 { FileHandle.standardOutput.write(Data("### \(i + 1)\n".utf8)) }
            let ids = try encoder.encodePrompt(conversation)
            if ids.isEmpty { throw ValidationError(raw ? "--prompt encodes to no tokens" : "the prompt encodes to no tokens") }
            var decoder = StreamingDecoder(tokenizer: base.tokenizer, skipSpecialTokens: true)
            var constraint = fixed
            if !unconstrained, let f = conversation.last(where: { $0.role == .user })?.responseFormat {
                constraint = try library().jsonSchema(f.schema)
            }
            let request = GenerationRequest(prompt: ids, maxNewTokens: maxNewTokens, stopTokens: base.stopTokenIds,
                                            sampling: sampling, seed: seed, constraint: constraint)
            let stream: (Int) -> Bool = { id in
                let text = decoder.feed(id)
                if !text.isEmpty {
                    FileHandle.standardOutput.write(Data(text.utf8))
                }
                return true
            }
            let tokens: [Int], stats: GenerationStats
            var alpha: Double? = nil
            if let draft {
                let r = SpeculativeDecoder(target: engine, drafter: draft.drafter, draftTokens: draft.tokens).generate(request, onToken: stream)
                (tokens, stats, alpha) = (r.tokens, r.stats.generation, r.stats.alpha)
            } else {
                (tokens, stats) = Generator.generate(engine, request, onToken: stream)
            }
            FileHandle.standardOutput.write(Data((decoder.finish() + "\n").utf8))
            if showIds { FileHandle.standardError.write(Data("ids: \(tokens)\n".utf8)) }
            let line = String(format: "[%d prompt tokens, %d new tokens, prefill %.2fs, %.1f tokens/s%@]\n",
                              stats.promptTokens, stats.generatedTokens, stats.prefillSeconds, stats.tokensPerSecond,
                              stats.stoppedAtEndOfTurn ? ", stopped at end of turn" : "")
            FileHandle.standardError.write(Data(line.utf8))
            if constraint != nil {
                if stats.incomplete { incompleteReplies += 1 }
                FileHandle.standardError.write(Data((stats.incomplete
                    ? "[constrained: INCOMPLETE — the reply stopped before it was a whole value; raise --max-new-tokens (now \(maxNewTokens))]\n"
                    : "[constrained: complete, \(stats.forcedTokens) of \(stats.generatedTokens) tokens forced by the grammar]\n").utf8))
            }
            if let alpha {
                let spec = String(format: "[speculative (%@ draft), gamma %d: %d draft tokens proposed, %d accepted (acceptance ratio %.3f), alpha %.3f, %d target passes]\n",
                                  draft!.drafter.name, draft!.tokens, stats.draftTokensProposed, stats.draftTokensAccepted, stats.acceptanceRatio,
                                  alpha, stats.targetForwardCalls)
                FileHandle.standardError.write(Data(spec.utf8))
            }
        }
        if incompleteReplies > 0 { throw ExitCode(3) }
    }
}

do {
    var command = try Generate.parseAsRoot()
    try command.run()
} catch {
    Generate.exit(withError: error)
}
