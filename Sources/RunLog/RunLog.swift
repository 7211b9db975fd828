// A run's log: a folder of its own (ROOT/KIND: runs/extraction/adapter, runs/extraction/draft,
// runs/extraction/evaluation) holding metrics.jsonl — a header line naming the run (run id, kind,
// command line, settings), then one JSON object per logged step, evaluation or measurement —
// TensorBoard event files that mirror those rows as scalars (MetricScalars), and for training runs
// loss-curve.svg. Two runs never share a log: a new run moves the previous run's folder aside
// (to ROOT/ITS-RUN-ID), and a resumed run continues the log whose header holds its run id,
// dropping the rows logged after the checkpoint it resumes from (they are computed again, the
// same). What the rows mean is left to the runs (Training, Distillation, Evaluation). Format:
// docs/run-logs.md.
import Foundation
import ModelAssets

/// Where metrics go besides metrics.jsonl.
public enum ReportTarget: String, CaseIterable, Sendable {
    /// TensorBoard event files beside metrics.jsonl (`tensorboard --logdir ROOT`).
    case tensorboard
    case none
}

/// How a run reports, as the command line chose.
public struct ReportSettings: Sendable {
    public var target: ReportTarget
    /// The command that started the run, recorded in the log's header (empty from library callers).
    public var commandLine: [String]
    public var curveScale: LossCurve.Scale

    public init(target: ReportTarget = .tensorboard, commandLine: [String] = [], curveScale: LossCurve.Scale = .log) {
        self.target = target
        self.commandLine = commandLine
        self.curveScale = curveScale
    }
}

/// What a log's header says about its run.
public struct RunHeader {
    /// "adapter", "draft", "evaluation": the log's folder name under the root.
    public var kind: String
    /// The curve's title: what ran on which data ("adapter training on train.jsonl").
    public var title: String
    /// The loss the curve's y axis shows.
    public var lossLabel: String
    /// The settings of the run (JSON values), as the library received them.
    public var settings: [String: Any]

    public init(kind: String, title: String, lossLabel: String = "loss", settings: [String: Any]) {
        self.kind = kind
        self.title = title
        self.lossLabel = lossLabel
        self.settings = settings
    }
}

/// Where a resumed run continues: the checkpoint's step, and the rows to start a log with when
/// the run's own log is not in the folder (rebuilt from the checkpoint's history).
public struct ResumePoint {
    public var step: Int
    public var checkpoint: String
    public var rebuiltRows: () -> [[String: Any]]

    public init(step: Int, checkpoint: String, rebuiltRows: @escaping () -> [[String: Any]]) {
        self.step = step
        self.checkpoint = checkpoint
        self.rebuiltRows = rebuiltRows
    }
}

/// A moving average divided by 1 − β^t, so that it starts at the first value's level instead of
/// at zero (Adam's bias correction; TensorBoard's smoothing slider does the same).
public struct BiasCorrectedEMA: Sendable, Equatable {
    public let beta: Double
    private var average = 0.0
    private var weight = 0.0  // 1 − β^t

    public init(beta: Double = 0.8) { self.beta = beta }

    /// Adds `x` and returns the corrected average of everything added so far.
    public mutating func add(_ x: Double) -> Double {
        average = beta * average + (1 - beta) * x
        weight = beta * weight + (1 - beta)
        return value
    }

    public var value: Double { weight > 0 ? average / weight : .nan }
}

public final class RunLog {
    public static let metricsName = "metrics.jsonl"
    public static let curveName = "loss-curve.svg"
    public static let formatName = "adapter-toolkit.run-log"
    public static let formatVersion = 1

    /// The folder the run writes its checkpoints into (TensorBoard's --logdir).
    public let root: String
    /// ROOT/KIND.
    public let folder: String
    public let runId: String
    public let header: RunHeader
    public let report: ReportSettings
    /// The metric rows of the log so far (not the header and resume lines), oldest first.
    public private(set) var rows: [[String: Any]] = []
    /// What opening the log did that a person should know (printed by the CLIs).
    public private(set) var notes: [String] = []

    private var metrics: FileHandle!  // opened once the file is written
    private var events: [String: EventFileWriter] = [:]  // by subfolder ("" = the log's folder)

    public var metricsPath: String { folder + "/" + Self.metricsName }
    public var curvePath: String { folder + "/" + Self.curveName }

    /// A new run id: KIND-YYYYMMDD-HHMMSS-XXXX (UTC time and four random hex digits).
    public static func newRunId(kind: String, date: Date = Date()) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd-HHmmss"
        return "\(kind)-\(f.string(from: date))-" + String(format: "%04x", UInt16.random(in: 0...UInt16.max))
    }

    /// Opens the log of run `runId` of `header.kind` in `root` (which must exist): continues it
    /// when `resume` is given and the run's log is there, else starts one (rebuilt up to the
    /// checkpoint's step when resuming). Any other run's log in ROOT/KIND is moved aside first.
    /// Throws `RunLogError.io` when the folder cannot be written.
    public init(root: String, runId: String, header: RunHeader, report: ReportSettings, resume: ResumePoint?) throws {
        self.root = root
        self.runId = runId
        self.header = header
        self.report = report
        folder = root + "/" + header.kind
        let fm = FileManager.default
        if fm.fileExists(atPath: root + "/" + Self.metricsName) {
            notes.append("\(root)/\(Self.metricsName) was written before each run kept its own log (its adapter and draft rows may be mixed); it is left as it is, and this run logs to \(folder)/")
        }

        // Find this run's own log (when resuming), and move any other run's log out of the way.
        var ownLines: [String]? = nil
        if fm.fileExists(atPath: folder) {
            let existing = Self.readLines(folder + "/" + Self.metricsName)
            if resume != nil, Self.runId(ofLines: existing) == runId {
                ownLines = existing
            } else {
                try moveAside(folder, runId: Self.runId(ofLines: existing))
            }
        }
        if ownLines == nil, resume != nil, fm.fileExists(atPath: root + "/" + runId) {
            let aside = Self.readLines(root + "/" + runId + "/" + Self.metricsName)
            if Self.runId(ofLines: aside) == runId {
                try move(root + "/" + runId, to: folder)
                notes.append("moved this run's log back from \(root)/\(runId)/ to \(folder)/")
                ownLines = aside
            }
        }
        do { try fm.createDirectory(atPath: folder, withIntermediateDirectories: true) } catch {
            throw RunLogError.io(path: folder, reason: "cannot create the run's log folder: \(error.localizedDescription)")
        }

        // The lines the log starts with.
        let now = Date().timeIntervalSince1970
        var lines: [String] = []
        if let resume, let own = ownLines {
            var dropped = 0
            for line in own {
                guard let row = Self.parse(line) else { dropped += 1; continue }
                let type = row["type"] as? String
                let step = MetricScalars.integer(row["step"]) ?? MetricScalars.integer(row["after_step"]) ?? 0
                if type == "run" || step <= resume.step {
                    lines.append(line)
                    if type != "run" && type != "resume" { rows.append(row) }
                } else {
                    dropped += 1
                }
            }
            lines.append(try Self.serialize(resumeRow(resume, rebuilt: false, time: now)))
            notes.append("continuing this run's log \(folder)/ after step \(resume.step)"
                         + (dropped > 0 ? "; \(dropped) rows logged after that checkpoint were dropped (they are computed again)" : ""))
        } else {
            lines.append(try Self.serialize(headerRow(time: now)))
            if let resume {
                lines.append(try Self.serialize(resumeRow(resume, rebuilt: true, time: now)))
                for var row in resume.rebuiltRows() {
                    row["rebuilt"] = true
                    if row["time"] == nil { row["time"] = now }
                    lines.append(try Self.serialize(row))
                    rows.append(Self.parse(lines.last!) ?? row)
                }
                notes.append("this run's log was not in \(root)/ (a checkpoint from before run logs, or another folder): \(folder)/ starts with steps 1-\(resume.step) rebuilt from \(resume.checkpoint) (without tokens/s)")
            }
        }
        do { try AtomicFile.write(Data(lines.map { $0 + "\n" }.joined().utf8), to: metricsPath) } catch {
            throw RunLogError.io(path: metricsPath, reason: "cannot write the run's metrics: \((error as? LocalizedError)?.errorDescription ?? "\(error)")")
        }
        guard let handle = FileHandle(forWritingAtPath: metricsPath) else {
            throw RunLogError.io(path: metricsPath, reason: "cannot open the run's metrics for appending")
        }
        metrics = handle
        metrics.seekToEndOfFile()

        // Event files always say what metrics.jsonl says: a continued log's are written again.
        removeEventFiles()
        if report.target == .tensorboard {
            if resume != nil { try eventWriter("").start(step: 1, wallTime: now) }
            for row in rows { try writeEvents(row) }
        }
    }

    deinit {
        try? metrics.close()
        for w in events.values { w.close() }
    }

    /// Appends a metric row (`type`, `step` and the values; `time` is added when absent) to
    /// metrics.jsonl and its scalars to the event file. A row with `events_folder` puts its
    /// scalars in that subfolder's event file (a TensorBoard run of its own). Values that are not
    /// finite are written as null and left out of the events.
    public func append(_ row: [String: Any]) throws {
        var row = row
        if row["time"] == nil { row["time"] = Date().timeIntervalSince1970 }
        let line = try Self.serialize(row)
        do { try metrics.write(contentsOf: Data((line + "\n").utf8)) } catch {
            throw RunLogError.io(path: metricsPath, reason: "cannot append to the run's metrics: \(error.localizedDescription)")
        }
        rows.append(row)
        if report.target == .tensorboard { try writeEvents(row) }
    }

    /// Rewrites loss-curve.svg from the train and eval rows.
    public func writeCurve() throws {
        var s = LossCurve.Series()
        var lastEpoch: Int? = nil
        for r in rows {
            guard let type = r["type"] as? String, let step = MetricScalars.integer(r["step"]),
                  let loss = MetricScalars.number(r["loss"]) else { continue }
            if type == "train" {
                s.train.append(.init(step: step, value: loss))
                if let m = MetricScalars.number(r["smoothed_loss"]) { s.smoothed.append(.init(step: step, value: m)) }
                if let e = MetricScalars.integer(r["epoch"]) {
                    if let l = lastEpoch, e > l { s.epochStarts.append((step - 1, e)) }
                    lastEpoch = e
                }
            } else if type == "eval" {
                s.eval.append(.init(step: step, value: loss))
            }
        }
        let svg = LossCurve.svg(s, title: header.title, subtitle: "run \(runId)", yLabel: header.lossLabel, scale: report.curveScale)
        do { try AtomicFile.write(Data(svg.utf8), to: curvePath) } catch {
            throw RunLogError.io(path: curvePath, reason: "cannot write the loss curve: \((error as? LocalizedError)?.errorDescription ?? "\(error)")")
        }
    }

    // MARK: - header, rows, files

    func headerRow(time: Double) -> [String: Any] {
        ["type": "run", "format": Self.formatName, "format_version": Self.formatVersion, "run_id": runId,
         "kind": header.kind, "title": header.title, "time": time, "started": Self.iso8601(time),
         "command_line": report.commandLine, "settings": header.settings]
    }

    func resumeRow(_ r: ResumePoint, rebuilt: Bool, time: Double) -> [String: Any] {
        var row: [String: Any] = ["type": "resume", "run_id": runId, "after_step": r.step, "checkpoint": r.checkpoint,
                                  "time": time, "started": Self.iso8601(time), "command_line": report.commandLine]
        if rebuilt { row["rebuilt_steps"] = "1-\(r.step)" }
        return row
    }

    func writeEvents(_ row: [String: Any]) throws {
        let scalars = MetricScalars.scalars(of: row)
        guard !scalars.isEmpty, let step = MetricScalars.integer(row["step"]) else { return }
        let time = MetricScalars.number(row["time"]) ?? Date().timeIntervalSince1970
        try eventWriter((row["events_folder"] as? String) ?? "").write(scalars: scalars, step: step, wallTime: time,
                                                                       descriptions: MetricScalars.descriptions)
    }

    func eventWriter(_ sub: String) throws -> EventFileWriter {
        if let w = events[sub] { return w }
        let w = try EventFileWriter(folder: sub.isEmpty ? folder : folder + "/" + sub)
        events[sub] = w
        return w
    }

    /// Event files of the folder and its subfolders (a continued log writes them again).
    func removeEventFiles() {
        let fm = FileManager.default
        var folders = [folder]
        for n in (try? fm.contentsOfDirectory(atPath: folder)) ?? [] {
            var isDir: ObjCBool = false
            if fm.fileExists(atPath: folder + "/" + n, isDirectory: &isDir), isDir.boolValue { folders.append(folder + "/" + n) }
        }
        for f in folders { for p in EventFileContents.files(in: f) { try? fm.removeItem(atPath: p) } }
    }

    /// Moves another run's log folder to ROOT/ITS-RUN-ID (or KIND-previous-N when unreadable).
    func moveAside(_ path: String, runId other: String?) throws {
        var target = root + "/" + (other.map(Self.safeName) ?? "\(header.kind)-previous")
        var n = 2
        let base = target
        while FileManager.default.fileExists(atPath: target) {
            target = base + "-\(n)"
            n += 1
        }
        try move(path, to: target)
        notes.append("the log of an earlier \(header.kind) run\(other.map { " (\($0))" } ?? "") was moved to \(target)/ (a new run never writes into another's log)")
    }

    func move(_ from: String, to: String) throws {
        do { try FileManager.default.moveItem(atPath: from, toPath: to) } catch {
            throw RunLogError.io(path: from, reason: "cannot move the folder to \(to): \(error.localizedDescription); move or remove it by hand")
        }
    }

    static func safeName(_ s: String) -> String {
        String(s.map { $0.isLetter || $0.isNumber || "-_.=".contains($0) ? $0 : "_" })
    }

    static func readLines(_ path: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// The run id in a log's header line (its first), if it is one.
    static func runId(ofLines lines: [String]) -> String? {
        guard let first = lines.first, let row = parse(first), row["type"] as? String == "run" else { return nil }
        return row["run_id"] as? String
    }

    /// The header of the log in `folder`, if it has one (for tools that list runs).
    public static func header(inFolder folder: String) -> [String: Any]? {
        guard let first = readLines(folder + "/" + metricsName).first, let row = parse(first),
              row["type"] as? String == "run" else { return nil }
        return row
    }

    static func parse(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// One JSON line, keys sorted; numbers that are not finite become null.
    static func serialize(_ row: [String: Any]) throws -> String {
        func clean(_ v: Any) -> Any {
            switch v {
            case let d as Double: return d.isFinite ? d : NSNull()
            case let f as Float: return f.isFinite ? Double(f) : NSNull()
            case let a as [Any]: return a.map(clean)
            case let o as [String: Any]: return o.mapValues(clean)
            default: return v
            }
        }
        do {
            let data = try JSONSerialization.data(withJSONObject: clean(row), options: [.sortedKeys, .withoutEscapingSlashes])
            return String(decoding: data, as: UTF8.self)
        } catch {
            throw RunLogError.io(path: "metrics.jsonl", reason: "a row could not be written as JSON (\(error)); this is a bug")
        }
    }

    static func iso8601(_ t: Double) -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: t))
    }
}
