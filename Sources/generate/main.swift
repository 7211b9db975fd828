// generate: text from the base model, optionally with a trained adapter, streamed as it is
// produced. Thin: parse flags, load, call Inference, print. Stats go to stderr.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Inference
import ModelAssets
import Training

struct Generate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate a reply with the base model, or with the base model and a trained adapter.",
        discussion: """
            The prompt is a user message rendered through the model's chat template (with its default \
            system message unless --system is given), or a .jsonl file of conversations that end in a user \
            turn (Schema.md), each answered in turn. Output streams to stdout; tokens/second to stderr.
            """)

    @OptionGroup var model: BaseModelOptions

    @Option(help: "Adapter checkpoint (adapter-*.safetensors) to apply to the base model.")
    var checkpoint: String?

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

    @Flag(help: "Print the generated token ids to stderr as well.")
    var showIds = false

    func validate() throws {
        guard maxNewTokens >= 1 else { throw ValidationError("--max-new-tokens must be at least 1") }
        guard temperature >= 0, temperature.isFinite else { throw ValidationError("--temperature must be 0 (greedy) or positive") }
        if let k = topK, k < 1 { throw ValidationError("--top-k must be at least 1") }
        if let p = topP, !(p > 0 && p <= 1) { throw ValidationError("--top-p must be in (0, 1]") }
    }

    func run() throws {
        let base = try model.load()
        let adapter = try checkpoint.map { try Checkpoint.load($0) }
        let llama = try LlamaModel.load(base: base, adapter: adapter)
        let engine = InferenceModel(llama)
        let encoder = TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)

        var conversations: [[Message]] = []
        if prompt.hasSuffix(".jsonl") && FileManager.default.fileExists(atPath: prompt) {
            let data = try DataReader.read(path: prompt, options: ReadOptions(mode: .prompt))
            conversations = data.samples.map(\.messages)
        } else {
            var messages: [Message] = []
            if let system { messages.append(Message(role: .system, content: system)) }
            messages.append(Message(role: .user, content: prompt))
            conversations = [messages]
        }
        let sampling = SamplingOptions(temperature: temperature, topK: topK, topP: topP)
        for (i, conversation) in conversations.enumerated() {
            if conversations.count > 1 { print("### \(i + 1)") }
            let ids = encoder.encodePrompt(conversation)
            var decoder = StreamingDecoder(tokenizer: base.tokenizer, skipSpecialTokens: true)
            let request = GenerationRequest(prompt: ids, maxNewTokens: maxNewTokens, stopTokens: base.stopTokenIds,
                                            sampling: sampling, seed: seed)
            let (tokens, stats) = Generator.generate(engine, request) { id in
                let text = decoder.feed(id)
                if !text.isEmpty {
                    FileHandle.standardOutput.write(Data(text.utf8))
                }
                return true
            }
            FileHandle.standardOutput.write(Data((decoder.finish() + "\n").utf8))
            if showIds { FileHandle.standardError.write(Data("ids: \(tokens)\n".utf8)) }
            let line = String(format: "[%d prompt tokens, %d new tokens, prefill %.2fs, %.1f tokens/s%@]\n",
                              stats.promptTokens, stats.generatedTokens, stats.prefillSeconds, stats.tokensPerSecond,
                              stats.stoppedAtEndOfTurn ? ", stopped at end of turn" : "")
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}

do {
    var command = try Generate.parseAsRoot()
    try command.run()
} catch {
    Generate.exit(withError: error)
}
