// Options every data subcommand shares: the JSONL file, the mode (train or prompt data) and
// the line-size bound. Converts them to DataSchema's `ReadOptions`.
import ArgumentParser
import DataSchema

extension DataMode: ExpressibleByArgument {}

struct DataFileOptions: ParsableArguments {
    @Argument(help: "The JSONL data file, one sample per line.")
    var file: String

    @Option(help: "train: samples end with an assistant turn; prompt: samples end with a user turn.")
    var mode: DataMode = .train

    @Option(help: "Reject lines longer than this many MiB (they are never held in memory).")
    var maxLineMib: Int = ReadOptions.defaultMaxLineBytes >> 20

    func validate() throws {
        guard maxLineMib >= 1 else {
            throw ValidationError("--max-line-mib must be at least 1 (the default is \(ReadOptions.defaultMaxLineBytes >> 20)).")
        }
    }

    func readOptions(skipInvalid: Bool) -> ReadOptions {
        ReadOptions(mode: mode, skipInvalid: skipInvalid, maxLineBytes: maxLineMib << 20)
    }
}
