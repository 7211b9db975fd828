// `adapter-data stats FILE [--tokenizer-json PATH --max-sequence-length N]`: sample, turn,
// role and character counts; with a tokenizer.json also tokens, assistant tokens, length
// percentiles and how many samples training would truncate.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import Training

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Describe a JSONL file: samples, turns, roles, characters, and tokens with a tokenizer.",
        discussion: "A file whose first record has \"chosen\" or \"rejected\" is described as preference pairs: pairs, prompt turns, the characters of prompts and of each side's replies, and with a tokenizer the prompt and reply tokens.")

    @OptionGroup var data: DataFileOptions
    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions

    @Option(help: "A Hugging Face tokenizer.json (chat template from tokenizer_config.json beside it) for token statistics.")
    var tokenizerJson: String?

    @Option(help: "Input positions per training example; longer samples are counted as truncated.")
    var maxSequenceLength: Int = 1024

    func validate() throws {
        guard maxSequenceLength >= 1 else { throw ValidationError("--max-sequence-length must be at least 1.") }
    }

    func run() throws {
        let pairs = try DataReader.holdsPreferences(path: data.file)
            ? try DataReader.readPreferences(path: data.file, options: data.readOptions(skipInvalid: true)) : nil
        let dataSet = pairs == nil ? try DataReader.read(path: data.file, options: data.readOptions(skipInvalid: true))
            : DataSet(file: data.file, samples: [], issues: [], summary: DataSummary())
        var encoder: TrainingEncoder?
        if let tokenizerJson {
            let tokenizer = try BPETokenizer.load(tokenizerJSON: URL(fileURLWithPath: tokenizerJson))
            let format = try ChatFormat(base: try chatTemplate.source(model: .model(tokenizer)), tokenizer: tokenizer)
            ChatTemplateOptions.announce(format, data: [data.file])
            encoder = TrainingEncoder(tokenizer: tokenizer, renderer: format, maxSequenceLength: maxSequenceLength)
        } else if model.baseModel != nil || BaseModel.defaultPath() != nil {
            // the base model's tokenizer (the fetched default when --base-model is not given)
            let (_, tokenizer, template) = try model.loadTokenizer()
            let format = try ChatFormat(base: try chatTemplate.source(model: template), tokenizer: tokenizer)
            ChatTemplateOptions.announce(format, data: [data.file])
            encoder = TrainingEncoder(tokenizer: tokenizer, renderer: format, maxSequenceLength: maxSequenceLength)
        }
        if let pairs { return try printPreferences(pairs, encoder: encoder) }
        let stats = try DataStats.compute(dataSet, encoder: encoder)
        print("\(data.file): \(dataSet.summary)")
        if !dataSet.issues.isEmpty { print("(statistics cover the accepted samples; run `adapter-data validate` for the issues)") }
        print("samples: \(stats.samples)" + (stats.textSamples > 0 ? " (\(stats.textSamples) plain {\"text\"} records, no turns)" : ""))
        print("turns: \(stats.turns)  " + ChatRole.allCases.map { "\($0.rawValue) \(stats.turnsByRole[$0, default: 0])" }.joined(separator: ", "))
        print("characters (rendered turn text\(stats.textSamples > 0 ? " and plain text" : "")): \(stats.characters)  "
            + ChatRole.allCases.map { "\($0.rawValue) \(stats.charactersByRole[$0, default: 0])" }.joined(separator: ", "))
        print("tool calls: \(stats.toolCalls); samples with tools: \(stats.samplesWithTools); with response_format: \(stats.samplesWithResponseFormat)")
        guard let tokens = stats.tokens else {
            print("tokens: not counted (character statistics only): no base model is fetched; pass --base-model PATH or --tokenizer-json PATH")
            return
        }
        print("tokens: \(tokens.tokens); \(stats.textSamples > 0 ? "trained tokens (assistant turns and plain text)" : "assistant (trained) tokens"): \(tokens.targetTokens)")
        print("tokens per sample: " + tokens.lengthPercentiles.map { "p\($0.percentile) \($0.tokens)" }.joined(separator: ", "))
        print("samples over --max-sequence-length \(tokens.maxSequenceLength) (more than \(tokens.maxSequenceLength + 1) tokens, truncated in training): \(tokens.exceeding)")
    }

    func printPreferences(_ pairs: PreferenceDataSet, encoder: TrainingEncoder?) throws {
        let stats = try PreferenceStats.compute(pairs, encoder: encoder)
        print("\(data.file): preference pairs: \(pairs.summary)")
        if !pairs.issues.isEmpty { print("(statistics cover the accepted pairs; run `adapter-data validate` for the issues)") }
        print("pairs: \(stats.pairs)")
        print("prompt turns: \(stats.promptTurns)  " + ChatRole.allCases.map { "\($0.rawValue) \(stats.promptTurnsByRole[$0, default: 0])" }.joined(separator: ", "))
        print("characters (rendered turn text): prompts \(stats.promptCharacters), chosen replies \(stats.chosenCharacters), rejected replies \(stats.rejectedCharacters)")
        print("tool calls: \(stats.toolCalls); pairs with tools: \(stats.pairsWithTools); with response_format: \(stats.pairsWithResponseFormat)")
        guard let t = stats.tokens else {
            print("tokens: not counted (character statistics only): no base model is fetched; pass --base-model PATH or --tokenizer-json PATH")
            return
        }
        print("tokens: prompts \(t.promptTokens) (once per pair), chosen replies \(t.chosenTokens) (\(t.chosenTargetTokens) trained), rejected replies \(t.rejectedTokens) (\(t.rejectedTargetTokens) trained)")
        print("positions per pair, prompt once: " + zip([50, 90, 95, 99, 100], t.pairPercentiles).map { "p\($0) \($1)" }.joined(separator: ", "))
        print("pairs over --max-sequence-length \(t.maxSequenceLength) (a conversation of more than \(t.maxSequenceLength + 1) tokens, truncated in training): \(t.exceeding)")
    }
}
