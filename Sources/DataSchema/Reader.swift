// Reading a JSONL data file into validated samples: streaming line splitting with a bounded
// line size, BOM/CRLF/blank-line handling, UTF-8 and JSON checks, decoding, transforms and
// validation, every rejected line kept as a `DataIssue` and counted in `DataSummary`.
// Leaves out rendering (Encoding.swift). Follows STYLE.md rule 7: nothing is dropped silently.
import Foundation
import ModelAssets

public struct ReadOptions: Sendable {
    /// 64 MiB: lines longer than this are rejected without being held in memory.
    public static let defaultMaxLineBytes = 64 << 20

    public var mode: DataMode
    /// Off (the default): any invalid sample makes `read` throw, listing the issues.
    /// On: invalid samples are left out, listed in `DataSet.issues` and counted.
    public var skipInvalid: Bool
    public var maxLineBytes: Int
    /// How many issues the thrown error lists before "... and N more".
    public var maxListedIssues: Int
    /// Applied in order to each decoded sample, before validation.
    public var transforms: [any DataTransform]

    public init(mode: DataMode = .train, skipInvalid: Bool = false, maxLineBytes: Int = ReadOptions.defaultMaxLineBytes,
                maxListedIssues: Int = 50, transforms: [any DataTransform] = []) {
        self.mode = mode
        self.skipInvalid = skipInvalid
        self.maxLineBytes = maxLineBytes
        self.maxListedIssues = maxListedIssues
        self.transforms = transforms
    }
}

/// What happened to a file's lines. `samplesRead == accepted + rejected`.
public struct DataSummary: Sendable, Equatable, Codable, CustomStringConvertible {
    /// Lines in the file, blank ones included.
    public var lines = 0
    public var blankLines = 0
    /// Non-blank lines, each one sample.
    public var samplesRead = 0
    public var accepted = 0
    public var rejected = 0
    /// Samples cut to the maximum sequence length when rendered (set by `TrainingEncoder`).
    public var truncated = 0
    /// Rejected samples by the kind of their first issue.
    public var rejectedByKind: [DataIssueKind: Int] = [:]
    /// The file started with a UTF-8 byte-order mark (accepted and skipped).
    public var hadByteOrderMark = false

    public init() {}

    public var description: String {
        var text = "read \(samplesRead) sample\(samplesRead == 1 ? "" : "s")"
        if blankLines > 0 { text += " (\(blankLines) blank line\(blankLines == 1 ? "" : "s") skipped)" }
        text += ": \(accepted) accepted, \(rejected) rejected"
        if rejected > 0 {
            let parts = rejectedByKind.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key.rawValue)" }
            text += " (" + parts.joined(separator: ", ") + ")"
        }
        text += ", \(truncated) truncated"
        return text
    }
}

/// The samples of one file, with every issue found and the counts.
public struct DataSet: Sendable {
    public var file: String
    public var samples: [Sample]
    /// Every issue, in line order (a rejected line may have several).
    public var issues: [DataIssue]
    public var summary: DataSummary

    public init(file: String, samples: [Sample], issues: [DataIssue], summary: DataSummary) {
        self.file = file
        self.samples = samples
        self.issues = issues
        self.summary = summary
    }
}

public enum DataReader {
    /// Reads and validates a JSONL file. Throws `.unreadableFile`, `.noSamples`, and, unless
    /// `options.skipInvalid`, `.invalidData` listing the issues when any sample is invalid.
    public static func read(path: String, options: ReadOptions = ReadOptions()) throws(DataSchemaError) -> DataSet {
        var collector = Collector(file: path, options: options)
        try LineSource.forEachLine(path: path, maxLineBytes: options.maxLineBytes) { number, line in
            collector.take(number: number, line: line)
        }
        return try collector.finish()
    }

    /// Reads and validates JSONL text held in memory; `file` names it in messages.
    public static func read(bytes: [UInt8], file: String, options: ReadOptions = ReadOptions()) throws(DataSchemaError) -> DataSet {
        var collector = Collector(file: file, options: options)
        LineSource.forEachLine(bytes: bytes, maxLineBytes: options.maxLineBytes) { number, line in
            collector.take(number: number, line: line)
        }
        return try collector.finish()
    }

    /// Decodes, transforms and validates one line's bytes (no line terminator). Returns the
    /// messages or the line's problems. Blank lines are the caller's business.
    enum LineOutcome {
        case accepted([Message])
        case rejected([LineProblem])
    }

    /// A line's JSON value, or the problem that it is not valid UTF-8 or not JSON (every JSONL
    /// reader's first step: samples and preference pairs).
    static func parseJSON(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, LineProblem> {
        if let bad = firstInvalidUTF8Offset(bytes) {
            let hex = String(bytes[bad], radix: 16, uppercase: true)
            return .failure(LineProblem(.invalidUTF8, "invalid UTF-8 at byte \(bad + 1) of the line (0x\(hex)); save the file as UTF-8"))
        }
        do throws(JSONParseFailure) {
            return .success(try JSONParser.parse(bytes))
        } catch {
            return .failure(LineProblem(.malformedJSON, "malformed JSON at column \(error.column(in: bytes)): \(error.message)"))
        }
    }

    /// A line as the collectors see it after `frame`: a record's bytes and its sample index,
    /// nothing (a blank line), or a refusal (over the byte limit).
    enum FramedLine {
        case record(index: Int, bytes: [UInt8])
        case blank
        case refused(LineProblem)
    }

    /// The framing every JSONL collector shares: counts the line and the records read, refuses a
    /// line over `options.maxLineBytes`, drops the first line's byte-order mark and a trailing CR,
    /// counts blank lines.
    static func frame(number: Int, _ line: LineSource.Line, options: ReadOptions, summary: inout DataSummary) -> FramedLine {
        summary.lines = number
        switch line {
        case let .tooLong(byteCount):
            summary.samplesRead += 1
            return .refused(LineProblem(.lineTooLong, "line is \(byteCount) bytes, more than the \(options.maxLineBytes)-byte limit (ReadOptions.maxLineBytes); split the sample or raise the limit"))
        case var .bytes(bytes):
            if number == 1, bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
                bytes.removeFirst(3)
                summary.hadByteOrderMark = true
            }
            if bytes.last == 0x0D { bytes.removeLast() }
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) {
                summary.blankLines += 1
                return .blank
            }
            let index = summary.samplesRead
            summary.samplesRead += 1
            return .record(index: index, bytes: bytes)
        }
    }

    /// The end of every JSONL read: no records at all, or problems without `skipInvalid`, throw.
    static func checkFinished(file: String, options: ReadOptions, summary: DataSummary, issues: [DataIssue]) throws(DataSchemaError) {
        if summary.samplesRead == 0 {
            throw DataSchemaError.noSamples(path: file, blankLines: summary.blankLines)
        }
        if !issues.isEmpty && !options.skipInvalid {
            throw DataSchemaError.invalidData(path: file, listed: Array(issues.prefix(options.maxListedIssues)),
                                              totalIssues: issues.count, rejected: summary.rejected, read: summary.samplesRead)
        }
    }

    static func parseLine(_ bytes: UnsafeBufferPointer<UInt8>, sampleIndex: Int, options: ReadOptions) -> LineOutcome {
        let value: JSONValue
        switch parseJSON(bytes) {
        case let .success(v): value = v
        case let .failure(problem): return .rejected([problem])
        }
        var messages: [Message]
        do throws(LineProblem) {
            messages = try Decoding.record(value)
        } catch {
            return .rejected([error])
        }
        for transform in options.transforms {
            do {
                messages = try transform.transform(messages, sampleIndex: sampleIndex)
            } catch {
                let reason = (error as? LocalizedError)?.errorDescription ?? "\(error)"
                return .rejected([LineProblem(.transform, reason.hasPrefix("data transform") ? reason : "data transform: \(reason)")])
            }
        }
        let problems = SampleValidator.check(messages, mode: options.mode)
        return problems.isEmpty ? .accepted(messages) : .rejected(problems)
    }

    struct Collector {
        let file: String
        let options: ReadOptions
        var samples: [Sample] = []
        var issues: [DataIssue] = []
        var summary = DataSummary()
        /// Raw bytes of accepted lines, kept only when asked (for `split`).
        var keepRaw = false
        var rawLines: [[UInt8]] = []

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
                let result = bytes.withUnsafeBufferPointer { DataReader.parseLine($0, sampleIndex: index, options: options) }
                switch result {
                case let .accepted(messages):
                    summary.accepted += 1
                    samples.append(Sample(messages: messages, index: index, file: file, line: number))
                    if keepRaw { rawLines.append(bytes) }
                case let .rejected(problems):
                    reject(line: number, problems)
                }
            }
        }

        func finish() throws(DataSchemaError) -> DataSet {
            try DataReader.checkFinished(file: file, options: options, summary: summary, issues: issues)
            return DataSet(file: file, samples: samples, issues: issues, summary: summary)
        }
    }
}

/// Splits a byte stream into lines at "\n" without ever holding more than `maxLineBytes` of
/// one line; longer lines come out as `.tooLong(byteCount)`.
enum LineSource {
    enum Line {
        case bytes([UInt8])
        case tooLong(Int)
    }

    struct Splitter {
        let maxLineBytes: Int
        var current: [UInt8] = []
        var currentCount = 0
        var number = 0

        mutating func feed(_ chunk: UnsafeBufferPointer<UInt8>, _ emit: (Int, Line) -> Void) {
            var start = 0
            while start < chunk.count {
                let rest = UnsafeBufferPointer(rebasing: chunk[start...])
                let newline = rest.firstIndex(of: 0x0A)
                let end = newline.map { start + $0 } ?? chunk.count
                let piece = UnsafeBufferPointer(rebasing: chunk[start..<end])
                currentCount += piece.count
                if currentCount <= maxLineBytes {
                    current.append(contentsOf: piece)
                } else if !current.isEmpty {
                    current = []  // over the limit: stop holding the line, keep counting
                }
                if newline != nil {
                    emitLine(emit)
                    start = end + 1
                } else {
                    start = end
                }
            }
        }

        mutating func emitLine(_ emit: (Int, Line) -> Void) {
            number += 1
            emit(number, currentCount <= maxLineBytes ? .bytes(current) : .tooLong(currentCount))
            current = []
            currentCount = 0
        }

        /// A last line without "\n" still counts.
        mutating func finish(_ emit: (Int, Line) -> Void) {
            if currentCount > 0 { emitLine(emit) }
        }
    }

    static func forEachLine(bytes: [UInt8], maxLineBytes: Int, _ body: (Int, Line) -> Void) {
        var splitter = Splitter(maxLineBytes: maxLineBytes)
        bytes.withUnsafeBufferPointer { splitter.feed($0, body) }
        splitter.finish(body)
    }

    static func forEachLine(path: String, maxLineBytes: Int, chunkSize: Int = 1 << 20,
                            _ body: (Int, Line) -> Void) throws(DataSchemaError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw DataSchemaError.unreadableFile(path: path, reason: "no such file")
        }
        if isDirectory.boolValue { throw DataSchemaError.unreadableFile(path: path, reason: "it is a folder") }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw DataSchemaError.unreadableFile(path: path, reason: "permission denied or not a regular file")
        }
        defer { try? handle.close() }
        var splitter = Splitter(maxLineBytes: maxLineBytes)
        while true {
            let chunk: Data?
            do {
                chunk = try handle.read(upToCount: chunkSize)
            } catch {
                throw DataSchemaError.unreadableFile(path: path, reason: error.localizedDescription)
            }
            guard let chunk, !chunk.isEmpty else { break }
            chunk.withUnsafeBytes { raw in splitter.feed(raw.bindMemory(to: UInt8.self), body) }
        }
        splitter.finish(body)
    }
}
