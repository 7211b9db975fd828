// `adapter-data validate FILE`: every issue as `file:line: reason`, then the summary; exit
// status 1 when any sample is invalid. A file of preference pairs (its first record has
// "chosen"/"rejected") is checked as pairs (Schema.md "Preference pairs").
import ArgumentParser
import DataSchema

struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check every sample of a JSONL file and list every problem.",
        discussion: "A file whose first record has \"chosen\" or \"rejected\" is read as preference pairs (prompt, chosen, rejected; Schema.md \"Preference pairs\"), whatever --mode says.")

    @OptionGroup var data: DataFileOptions

    func run() throws {
        if try DataReader.holdsPreferences(path: data.file) {
            // preference pairs (prompt/chosen/rejected): always training data, whatever --mode says
            let pairs = try DataReader.readPreferences(path: data.file, options: data.readOptions(skipInvalid: true))
            for issue in pairs.issues { print(issue) }
            if pairs.summary.hadByteOrderMark { print("note: \(data.file) starts with a UTF-8 byte-order mark (accepted)") }
            print("\(data.file): preference pairs: \(pairs.summary)")
            if !pairs.issues.isEmpty { throw ExitCode.failure }
            return
        }
        let dataSet = try DataReader.read(path: data.file, options: data.readOptions(skipInvalid: true))
        for issue in dataSet.issues { print(issue) }
        if dataSet.summary.hadByteOrderMark { print("note: \(data.file) starts with a UTF-8 byte-order mark (accepted)") }
        print("\(data.file): \(dataSet.summary)")
        if !dataSet.issues.isEmpty { throw ExitCode.failure }
    }
}
