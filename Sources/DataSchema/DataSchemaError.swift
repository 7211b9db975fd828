// The one error enum of DataSchema, and `DataIssue`, a single problem found in one JSONL line.
// Issues are collected (every bad line is reported as `file:line: reason`); errors are what a
// caller sees when it must stop. Follows STYLE.md rules 6 and 7: messages carry the file, line
// and turn, and say what to do.
import Foundation

/// What kind of problem a line has; the summary counts rejected samples by kind.
public enum DataIssueKind: String, Sendable, Codable, CaseIterable, Comparable {
    case invalidUTF8 = "invalid UTF-8"
    case lineTooLong = "line too long"
    case malformedJSON = "malformed JSON"
    case wrongType = "wrong JSON type"
    case unknownKey = "unknown key"
    case unknownRole = "unknown role"
    case missingField = "missing field"
    case emptyContent = "empty content"
    case turnOrder = "turn order"
    case toolDefinition = "tool definition"
    case toolCall = "tool call"
    case responseFormat = "response format"
    case schema = "JSON schema"
    case transform = "data transform"
    case noTargetTokens = "no target tokens"
    /// A preference pair whose replies are the same.
    case preference = "preference pair"
    case chatTemplate = "chat template"

    public static func < (lhs: DataIssueKind, rhs: DataIssueKind) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// One problem in one line of a data file. `description` reads `train.jsonl:17: reason`.
public struct DataIssue: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    /// 1-based line number in the file.
    public var line: Int
    public var kind: DataIssueKind
    /// The reason, naming the turn (1-based, as lines are) where it applies.
    public var message: String

    public init(file: String, line: Int, kind: DataIssueKind, message: String) {
        self.file = file
        self.line = line
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(file):\(line): \(message)" }
}

public enum DataSchemaError: LocalizedError, Equatable {
    /// The file could not be opened or read.
    case unreadableFile(path: String, reason: String)
    /// The file holds no sample (empty, or only blank lines).
    case noSamples(path: String, blankLines: Int)
    /// Some lines are invalid and `skipInvalid` is off. `listed` holds the first issues,
    /// `totalIssues` counts them all.
    case invalidData(path: String, listed: [DataIssue], totalIssues: Int, rejected: Int, read: Int)
    /// Text that is not valid JSON (outside a JSONL file: tool arguments, a schema given in code).
    case malformedJSON(context: String, message: String)
    /// A JSON schema given in code or on the command line is not usable.
    case invalidSchema(context: String, message: String)
    /// A data transform was configured wrongly (applies to the whole run, not one line).
    case invalidTransform(String)
    /// Batching cannot proceed with these options or this cursor.
    case batching(String)
    /// An option value is out of range.
    case invalidOption(name: String, message: String)
    /// Writing an output file failed.
    case unwritableFile(path: String, reason: String)
    /// The chat template does not load, or refused a conversation (`raise_exception`) or could
    /// not render it; `origin` names the template, `message` says what and where.
    case chatTemplate(origin: String, message: String)

    public var errorDescription: String? {
        switch self {
        case let .unreadableFile(path, reason):
            return "\(path): cannot read the file (\(reason)); check the path and its permissions."
        case let .noSamples(path, blankLines):
            let blanks = blankLines > 0 ? " (\(blankLines) blank line\(blankLines == 1 ? "" : "s"))" : ""
            return "\(path): no samples in the file\(blanks); each line must hold one JSON sample as described in Schema.md."
        case let .invalidData(path, listed, total, rejected, read):
            var text = "\(path): \(rejected) of \(read) sample\(read == 1 ? " is" : "s are") invalid; fix "
                + "\(rejected == 1 ? "it" : "them"), or skip invalid samples (skipInvalid, --skip-invalid) to use the other \(read - rejected):"
            for issue in listed { text += "\n" + issue.description }
            if total > listed.count { text += "\n... and \(total - listed.count) more" }
            return text
        case let .malformedJSON(context, message):
            return "\(context): malformed JSON: \(message)"
        case let .invalidSchema(context, message):
            return "\(context): unusable JSON schema: \(message) (Schema.md lists the supported keywords)"
        case let .invalidTransform(message):
            return "data transform: \(message)"
        case let .batching(message):
            return "batching: \(message)"
        case let .invalidOption(name, message):
            return "\(name): \(message)"
        case let .unwritableFile(path, reason):
            return "\(path): cannot write the file (\(reason)); check that the folder exists and is writable."
        case let .chatTemplate(origin, message):
            return "chat template (\(origin)): \(message)"
        }
    }
}
