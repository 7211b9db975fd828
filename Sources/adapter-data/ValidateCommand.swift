// `adapter-data validate FILE`: every issue as `file:line: reason`, then the summary; exit
// status 1 when any sample is invalid.
import ArgumentParser
import DataSchema

struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check every sample of a JSONL file and list every problem.")

    @OptionGroup var data: DataFileOptions

    func run() throws {
        let dataSet = try DataReader.read(path: data.file, options: data.readOptions(skipInvalid: true))
        for issue in dataSet.issues { print(issue) }
        if dataSet.summary.hadByteOrderMark { print("note: \(data.file) starts with a UTF-8 byte-order mark (accepted)") }
        print("\(data.file): \(dataSet.summary)")
        if !dataSet.issues.isEmpty { throw ExitCode.failure }
    }
}
