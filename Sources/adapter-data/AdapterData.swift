// The data tool's root command: `adapter-data validate|stats|split|tokenize|render|inspect ...`. Each subcommand
// lives in its own file and only parses, calls one library function and prints. Follows swift-argument-parser's layout.
import ArgumentParser

@main
struct AdapterData: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "adapter-data",
        abstract: "Check, describe and split JSONL training data (the sample schema is in Schema.md).",
        subcommands: [ValidateCommand.self, StatsCommand.self, SplitCommand.self, TokenizeCommand.self, RenderCommand.self, InspectCommand.self])
}
