// The benchmark tool's root command: `bench engine|train|decode|kernels|speculative|guidance|guided-decoding`.
// Each subcommand lives in its own file, measures one thing and prints its figures (and JSON
// where a script reads them); what they share (column padding, peak RSS, flag conformances) is
// in Shared.swift. Speed claims in the docs come from here or from the scripts that run it.
// Follows swift-argument-parser's subcommand layout, as adapter-data does.
import ArgumentParser

@main
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure the toolkit's speed and memory: training, decoding, kernels, speculative and guided decoding.",
        discussion: "Every figure in docs/benchmarks.md names the subcommand (or the script around it) that reproduces it.",
        subcommands: [EngineCommand.self, TrainCommand.self, DecodeCommand.self, KernelsCommand.self,
                      SpeculativeCommand.self, GuidanceCommand.self, GuidedDecodingCommand.self])
}
