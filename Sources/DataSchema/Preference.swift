// Preference pairs for DPO/IPO/ORPO training: one prompt and two replies to it, the preferred
// (`chosen`) and the dispreferred (`rejected`), in TRL's conversational preference form
// ({"prompt": [messages], "chosen": [messages], "rejected": [messages]}; "messages" as a synonym
// of "prompt"; TRL's implicit-prompt form with whole conversations). Decoding, validation (each
// of prompt + chosen and prompt + rejected is a valid training sample; the replies are the
// assistant's) and reading a JSONL file of them with `file:line` issues. Leaves out rendering
// (PreferenceEncoding.swift) and batching (PreferenceBatching.swift). Schema.md "Preference pairs".
import Foundation
import ModelAssets

/// One accepted preference record: the shared prompt and the two replies that follow it.
public struct PreferenceSample: Sendable, Equatable {
    /// The conversation so far; its last turn is a user (or tool) turn.
    public var prompt: [Message]
    /// The preferred reply: an assistant turn (or several, with tool turns between them).
    public var chosen: [Message]
    /// The dispreferred reply to the same prompt.
    public var rejected: [Message]
    /// 0-based position among the file's samples (non-blank lines, valid or not).
    public var index: Int
    public var file: String
    /// 1-based line.
    public var line: Int

    public init(prompt: [Message], chosen: [Message], rejected: [Message], index: Int, file: String = "<memory>", line: Int = 0) {
        self.prompt = prompt
        self.chosen = chosen
        self.rejected = rejected
        self.index = index
        self.file = file
        self.line = line
    }

    /// The prompt followed by the chosen reply: a training sample.
    public var chosenConversation: [Message] { prompt + chosen }
    public var rejectedConversation: [Message] { prompt + rejected }
}

/// The pairs of a file, with every issue found and the counts (as `DataSet`).
public struct PreferenceDataSet: Sendable {
    public var file: String
    public var samples: [PreferenceSample]
    public var issues: [DataIssue]
    public var summary: DataSummary

    public init(file: String, samples: [PreferenceSample], issues: [DataIssue], summary: DataSummary) {
        self.file = file
        self.samples = samples
        self.issues = issues
        self.summary = summary
    }
}

enum PreferenceDecoding {
    static let shape = "a preference pair is an object with \"chosen\" and \"rejected\" (arrays of messages) and \"prompt\" or \"messages\" (the conversation they answer)"

    /// Decodes one record into (prompt, chosen, rejected).
    static func record(_ value: JSONValue) throws(LineProblem) -> (prompt: [Message], chosen: [Message], rejected: [Message]) {
        guard let members = value.objectMembers else {
            throw LineProblem(.wrongType, "\(shape), got \(value.typeName)")
        }
        try Decoding.allowOnly(members, ["prompt", "messages", "chosen", "rejected", "metadata"], in: "a preference pair",
                               hint: { $0 == "tools" ? "; put \"tools\" on the system message of the prompt" : "" })
        if value["prompt"] != nil && value["messages"] != nil {
            throw LineProblem(.unknownKey, "both \"prompt\" and \"messages\" are given; they are synonyms for the shared conversation, keep one")
        }
        for key in ["chosen", "rejected"] where value[key] == nil {
            throw LineProblem(.missingField, "the preference pair has no \"\(key)\"; \(shape)")
        }
        let chosen = try reply(value["chosen"]!, key: "chosen")
        let rejected = try reply(value["rejected"]!, key: "rejected")
        let promptKey = value["prompt"] != nil ? "prompt" : "messages"
        if let p = value[promptKey] {
            let prompt: [Message]
            if let text = p.stringValue {
                prompt = [Message(role: .user, content: text)]
            } else if let items = p.arrayValue {
                prompt = try labelled(promptKey) { () throws(LineProblem) in try Decoding.messages(items) }
            } else {
                throw LineProblem(.wrongType, "\"\(promptKey)\" must be an array of messages (or a string, one user turn), got \(p.typeName)")
            }
            return (prompt, chosen, rejected)
        }
        // TRL's implicit prompt: whole conversations whose common first turns are the prompt.
        var n = 0
        while n < min(chosen.count, rejected.count) - 1 && chosen[n] == rejected[n] { n += 1 }
        guard n > 0 else {
            throw LineProblem(.missingField, "the preference pair has no \"prompt\" (or \"messages\"), and \"chosen\" and \"rejected\" do not begin with the same turns to take it from; \(shape)")
        }
        return (Array(chosen[0..<n]), Array(chosen[n...]), Array(rejected[n...]))
    }

    /// A reply: an array of messages, one message object, or a string (one assistant turn).
    static func reply(_ value: JSONValue, key: String) throws(LineProblem) -> [Message] {
        if let text = value.stringValue { return [Message(role: .assistant, content: text)] }
        if value.objectMembers != nil {
            return try labelled(key) { () throws(LineProblem) in [try Decoding.message(value, turn: 1)] }
        }
        guard let items = value.arrayValue else {
            throw LineProblem(.wrongType, "\"\(key)\" must be an array of messages (or a string, one assistant turn), got \(value.typeName)")
        }
        return try labelled(key) { () throws(LineProblem) in try Decoding.messages(items) }
    }

    /// Runs `body`, naming `key` in its problem.
    static func labelled<T>(_ key: String, _ body: () throws(LineProblem) -> T) throws(LineProblem) -> T {
        do throws(LineProblem) {
            return try body()
        } catch {
            throw LineProblem(error.kind, "in \"\(key)\": \(error.message)")
        }
    }
}

public enum PreferenceValidator {
    /// Every problem with a pair: each of prompt + chosen and prompt + rejected must be a valid
    /// training sample (turns numbered through the prompt and on into the reply), each reply
    /// must begin with an assistant turn and hold no user or system turn, and the replies must differ.
    static func check(prompt: [Message], chosen: [Message], rejected: [Message]) -> [LineProblem] {
        var out: [LineProblem] = []
        if prompt.isEmpty { out.append(LineProblem(.missingField, "the prompt has no messages")) }
        for (key, reply) in [("chosen", chosen), ("rejected", rejected)] {
            if reply.isEmpty {
                out.append(LineProblem(.missingField, "\"\(key)\" has no messages; give the assistant's reply"))
            } else if reply[0].role != .assistant {
                out.append(LineProblem(.turnOrder, "\"\(key)\" begins with a \(reply[0].role.rawValue) turn; a reply begins with an assistant turn"))
            }
            if let bad = reply.firstIndex(where: { $0.role == .user || $0.role == .system }) {
                out.append(LineProblem(.turnOrder, "\"\(key)\" holds a \(reply[bad].role.rawValue) turn (turn \(prompt.count + bad + 1)); a reply holds only assistant turns (and tool results between them)"))
            }
        }
        if !out.isEmpty { return out }
        let c = SampleValidator.check(prompt + chosen, mode: .train)
        let r = SampleValidator.check(prompt + rejected, mode: .train)
        let cText = Set(c.map(\.message)), rText = Set(r.map(\.message))
        // A problem of the prompt shows in both; say it once.
        for p in c { out.append(rText.contains(p.message) ? p : LineProblem(p.kind, "prompt + \"chosen\": \(p.message)")) }
        for p in r where !cText.contains(p.message) { out.append(LineProblem(p.kind, "prompt + \"rejected\": \(p.message)")) }
        if out.isEmpty && chosen == rejected {
            out.append(LineProblem(.preference, "\"chosen\" and \"rejected\" are the same reply; a pair teaches nothing unless they differ"))
        }
        return out
    }

    /// Every problem with a pair, as (kind, message); empty when the pair is valid.
    public static func problems(prompt: [Message], chosen: [Message], rejected: [Message]) -> [(kind: DataIssueKind, message: String)] {
        check(prompt: prompt, chosen: chosen, rejected: rejected).map { ($0.kind, $0.message) }
    }
}

extension DataReader {
    /// Reads and validates a JSONL file of preference pairs. Throws as `read`: `.unreadableFile`,
    /// `.noSamples`, and unless `options.skipInvalid`, `.invalidData` listing the issues.
    /// `options.mode` and `options.transforms` do not apply (a pair is always training data).
    public static func readPreferences(path: String, options: ReadOptions = ReadOptions()) throws(DataSchemaError) -> PreferenceDataSet {
        var collector = PreferenceCollector(file: path, options: options)
        try LineSource.forEachLine(path: path, maxLineBytes: options.maxLineBytes) { collector.take(number: $0, line: $1) }
        return try collector.finish()
    }

    /// Reads and validates preference pairs held in memory; `file` names them in messages.
    public static func readPreferences(bytes: [UInt8], file: String, options: ReadOptions = ReadOptions()) throws(DataSchemaError) -> PreferenceDataSet {
        var collector = PreferenceCollector(file: file, options: options)
        LineSource.forEachLine(bytes: bytes, maxLineBytes: options.maxLineBytes) { collector.take(number: $0, line: $1) }
        return try collector.finish()
    }

    /// Whether the file holds preference pairs: its first line that parses as a JSON object has
    /// a "chosen" or "rejected" key. False for a file with no such line.
    public static func holdsPreferences(path: String) throws(DataSchemaError) -> Bool {
        var found: Bool? = nil
        try LineSource.forEachLine(path: path, maxLineBytes: ReadOptions.defaultMaxLineBytes) { _, line in
            guard found == nil, case let .bytes(bytes) = line else { return }
            var body = bytes
            if body.starts(with: [0xEF, 0xBB, 0xBF]) { body.removeFirst(3) }
            let value: JSONValue? = body.withUnsafeBufferPointer { p in
                do throws(JSONParseFailure) { return try JSONParser.parse(p) } catch { return nil }
            }
            if let members = value?.objectMembers { found = members.contains { $0.key == "chosen" || $0.key == "rejected" } }
        }
        return found ?? false
    }
}

/// The lines of a preference file into pairs and issues (the preference side of `DataReader.Collector`).
struct PreferenceCollector {
    let file: String
    let options: ReadOptions
    var samples: [PreferenceSample] = []
    var issues: [DataIssue] = []
    var summary = DataSummary()

    init(file: String, options: ReadOptions) {
        self.file = file
        self.options = options
    }

    mutating func reject(line: Int, _ problems: [LineProblem]) {
        summary.rejected += 1
        summary.rejectedByKind[problems[0].kind, default: 0] += 1
        for p in problems { issues.append(DataIssue(file: file, line: line, kind: p.kind, message: p.message)) }
    }

    mutating func take(number: Int, line: LineSource.Line) {
        switch DataReader.frame(number: number, line, options: options, summary: &summary) {
        case .blank: break
        case let .refused(problem): reject(line: number, [problem])
        case let .record(index, bytes):
            let outcome: Result<(prompt: [Message], chosen: [Message], rejected: [Message]), LinesProblems> = bytes.withUnsafeBufferPointer { p in
                let value: JSONValue
                switch DataReader.parseJSON(p) {
                case let .success(v): value = v
                case let .failure(problem): return .failure(LinesProblems([problem]))
                }
                do throws(LineProblem) {
                    let pair = try PreferenceDecoding.record(value)
                    let problems = PreferenceValidator.check(prompt: pair.prompt, chosen: pair.chosen, rejected: pair.rejected)
                    return problems.isEmpty ? .success(pair) : .failure(LinesProblems(problems))
                } catch {
                    return .failure(LinesProblems([error]))
                }
            }
            switch outcome {
            case let .success(pair):
                summary.accepted += 1
                samples.append(PreferenceSample(prompt: pair.prompt, chosen: pair.chosen, rejected: pair.rejected,
                                                index: index, file: file, line: number))
            case let .failure(problems):
                reject(line: number, problems.problems)
            }
        }
    }

    func finish() throws(DataSchemaError) -> PreferenceDataSet {
        try DataReader.checkFinished(file: file, options: options, summary: summary, issues: issues)
        return PreferenceDataSet(file: file, samples: samples, issues: issues, summary: summary)
    }
}

struct LinesProblems: Error {
    var problems: [LineProblem]
    init(_ problems: [LineProblem]) { self.problems = problems }
}
