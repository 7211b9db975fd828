// `adapter-data split FILE --eval-fraction F --seed S --output-dir DIR`: writes train.jsonl and
// eval.jsonl, the same files for the same seed.
import ArgumentParser
import DataSchema

struct SplitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "split",
        abstract: "Split a JSONL file into train.jsonl and eval.jsonl, deterministically for a seed.")

    @OptionGroup var data: DataFileOptions

    @Option(help: "Share of samples for eval.jsonl, at least 0 and below 1 (for example 0.1).")
    var evalFraction: Double

    @Option(help: "Seed of the random choice of eval samples.")
    var seed: UInt64 = 0

    @Option(help: "Folder for train.jsonl and eval.jsonl (created if missing).")
    var outputDir: String

    @Flag(help: "Leave invalid samples out (listed) instead of refusing to split.")
    var skipInvalid = false

    func validate() throws {
        guard evalFraction >= 0, evalFraction < 1 else {
            throw ValidationError("--eval-fraction must be at least 0 and below 1, for example 0.1.")
        }
    }

    func run() throws {
        let result = try DataSplitter.split(path: data.file, evalFraction: evalFraction, seed: seed,
                                            outputDirectory: outputDir, options: data.readOptions(skipInvalid: skipInvalid))
        for issue in result.issues { print(issue) }
        print("\(data.file): \(result.summary)")
        print("wrote \(result.trainCount) sample\(result.trainCount == 1 ? "" : "s") to \(result.trainPath) and \(result.evalCount) to \(result.evalPath)")
    }
}
