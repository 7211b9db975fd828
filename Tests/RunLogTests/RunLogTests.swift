// A run's log on its own: the header line, rows mirrored into TensorBoard events (read back and
// compared), another run never appended to, a resumed run continued without repeated steps (or
// rebuilt when its log is missing), folders from before run logs left alone and named.
import Foundation
@testable import RunLog
import XCTest

final class RunLogTests: XCTestCase {
    func tempDir(_ name: String = #function) -> String {
        let d = NSTemporaryDirectory() + "runlog-\(name.filter(\.isLetter))-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    let header = RunHeader(kind: "adapter", title: "adapter training on train.jsonl", lossLabel: "cross-entropy",
                           settings: ["training": ["learning_rate": 0.003], "train_data": "train.jsonl"])

    func trainRow(_ step: Int, epoch: Int = 1) -> [String: Any] {
        ["type": "train", "step": step, "epoch": epoch, "loss": 2.0 / Double(step), "smoothed_loss": 2.5 / Double(step),
         "learning_rate": 1e-3, "grad_norm": 0.5, "tokens": 100, "tokens_per_second": 250.5 + Double(step)]
    }

    func lines(_ path: String) throws -> [[String: Any]] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    /// Every scalar of the folder's event files, as (tag, step, value), against the rows' scalars.
    func assertEventsMatchRows(_ log: RunLog, file: StaticString = #filePath, line: UInt = #line) throws {
        let files = EventFileContents.files(in: log.folder)
        XCTAssertEqual(files.count, 1, "one event file", file: file, line: line)
        let events = try files.flatMap { try EventFileContents(path: $0).scalars }
        let logged = try lines(log.metricsPath).flatMap { row in
            MetricScalars.scalars(of: row).map { ($0.tag, MetricScalars.integer(row["step"])!, Float($0.value)) }
        }
        XCTAssertEqual(events.map(\.tag), logged.map(\.0), file: file, line: line)
        XCTAssertEqual(events.map(\.step), logged.map(\.1), file: file, line: line)
        XCTAssertEqual(events.map(\.value), logged.map(\.2), file: file, line: line)
    }

    func testHeaderRowsEventsAndCurve() throws {
        let root = tempDir()
        let log = try RunLog(root: root, runId: "adapter-1", header: header,
                             report: ReportSettings(commandLine: ["train-adapter", "--epochs", "2"]), resume: nil)
        XCTAssertEqual(log.folder, root + "/adapter")
        for s in 1...4 { try log.append(trainRow(s, epoch: s <= 2 ? 1 : 2)) }
        try log.append(["type": "eval", "step": 4, "epoch": 2, "loss": 0.75, "perplexity": exp(0.75), "tokens": 40])
        try log.append(["type": "eval", "step": 5, "epoch": 2, "loss": Double.nan, "tokens": 0])
        try log.writeCurve()
        let rows = try lines(log.metricsPath)
        XCTAssertEqual(rows[0]["type"] as? String, "run")
        XCTAssertEqual(rows[0]["run_id"] as? String, "adapter-1")
        XCTAssertEqual(rows[0]["kind"] as? String, "adapter")
        XCTAssertEqual(rows[0]["command_line"] as? [String], ["train-adapter", "--epochs", "2"])
        XCTAssertEqual((rows[0]["settings"] as? [String: Any])?["train_data"] as? String, "train.jsonl")
        XCTAssertEqual(rows.dropFirst().map { MetricScalars.integer($0["step"])! }, [1, 2, 3, 4, 4, 5])
        XCTAssert(rows.dropFirst().allSatisfy { MetricScalars.number($0["time"]) != nil })
        XCTAssert(rows.last!["loss"] is NSNull, "NaN is written as null")
        try assertEventsMatchRows(log)
        let tags = Set(try EventFileContents(path: EventFileContents.files(in: log.folder)[0]).scalars.map(\.tag))
        XCTAssertEqual(tags, ["train/loss", "train/smoothed_loss", "train/learning_rate", "train/grad_norm",
                              "train/tokens_per_second", "eval/loss", "eval/perplexity"])
        let svg = try String(contentsOfFile: log.curvePath, encoding: .utf8)
        XCTAssert(svg.contains("adapter training on train.jsonl") && svg.contains("run adapter-1") && svg.contains(">epoch 2</text>"))
        XCTAssertEqual(svg.components(separatedBy: "<circle").count - 1, 2, "one eval marker (NaN left out) and the legend's")
    }

    func testReportNoneWritesNoEvents() throws {
        let root = tempDir()
        let log = try RunLog(root: root, runId: "adapter-1", header: header, report: ReportSettings(target: .none), resume: nil)
        try log.append(trainRow(1))
        XCTAssertEqual(EventFileContents.files(in: log.folder), [])
        XCTAssertEqual(try lines(log.metricsPath).count, 2)
    }

    func testANewRunMovesTheOldLogAsideAndNeverAppendsToIt() throws {
        let root = tempDir()
        let first = try RunLog(root: root, runId: "adapter-1", header: header, report: ReportSettings(), resume: nil)
        for s in 1...3 { try first.append(trainRow(s)) }
        let second = try RunLog(root: root, runId: "adapter-2", header: header, report: ReportSettings(), resume: nil)
        try second.append(trainRow(1))
        XCTAssert(second.notes.contains { $0.contains("moved to \(root)/adapter-1/") }, "\(second.notes)")
        XCTAssertEqual(try lines(root + "/adapter-1/metrics.jsonl").count, 4, "the first run's log is whole and untouched")
        XCTAssertEqual(try lines(root + "/adapter/metrics.jsonl").map { $0["run_id"] as? String }.first, "adapter-2")
        XCTAssertEqual(try lines(root + "/adapter/metrics.jsonl").count, 2)
        // resuming a run whose log is not the current one does not append to the current one either
        let third = try RunLog(root: root, runId: "adapter-3", header: header, report: ReportSettings(),
                               resume: ResumePoint(step: 2, checkpoint: "ck", rebuiltRows: { [self.trainRow(1), self.trainRow(2)] }))
        XCTAssertEqual(try lines(root + "/adapter-2/metrics.jsonl").count, 2)
        let rows = try lines(third.metricsPath)
        XCTAssertEqual(rows.map { $0["type"] as? String }, ["run", "resume", "train", "train"])
        XCTAssert(rows.dropFirst(2).allSatisfy { $0["rebuilt"] as? Bool == true })
        try assertEventsMatchRows(third)
    }

    func testResumeContinuesItsOwnLogWithoutRepeatingSteps() throws {
        let root = tempDir()
        let log = try RunLog(root: root, runId: "adapter-1", header: header, report: ReportSettings(), resume: nil)
        for s in 1...5 { try log.append(trainRow(s)) }  // then killed; the newest checkpoint is at step 3
        let resumed = try RunLog(root: root, runId: "adapter-1", header: header, report: ReportSettings(),
                                 resume: ResumePoint(step: 3, checkpoint: "adapter-epoch1.safetensors", rebuiltRows: { XCTFail("not rebuilt"); return [] }))
        XCTAssertEqual(resumed.rows.count, 3)
        XCTAssert(resumed.notes.contains { $0.contains("2 rows logged after that checkpoint were dropped") }, "\(resumed.notes)")
        for s in 4...6 { try resumed.append(trainRow(s)) }
        let rows = try lines(resumed.metricsPath)
        XCTAssertEqual(rows.map { $0["type"] as? String }, ["run", "train", "train", "train", "resume", "train", "train", "train"])
        XCTAssertEqual(rows.compactMap { $0["type"] as? String == "train" ? MetricScalars.integer($0["step"]) : nil }, [1, 2, 3, 4, 5, 6])
        XCTAssertEqual(rows[4]["after_step"] as? Int, 3)
        // the first line is the original header, written once
        XCTAssertEqual(rows.filter { $0["type"] as? String == "run" }.count, 1)
        // the events were written again: one file, the rows' scalars, and a START record for readers holding the old file
        try assertEventsMatchRows(resumed)
        XCTAssertEqual(try EventFileContents(path: EventFileContents.files(in: resumed.folder)[0]).starts, [1])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root).sorted(), ["adapter"])
    }

    func testResumeFindsItsLogMovedAsideByANewerRun() throws {
        let root = tempDir()
        let a = try RunLog(root: root, runId: "adapter-a", header: header, report: ReportSettings(), resume: nil)
        for s in 1...2 { try a.append(trainRow(s)) }
        _ = try RunLog(root: root, runId: "adapter-b", header: header, report: ReportSettings(), resume: nil)
        let back = try RunLog(root: root, runId: "adapter-a", header: header, report: ReportSettings(),
                              resume: ResumePoint(step: 2, checkpoint: "ck", rebuiltRows: { XCTFail("not rebuilt"); return [] }))
        XCTAssertEqual(back.rows.count, 2)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root).sorted(), ["adapter", "adapter-b"])
        XCTAssertEqual(RunLog.header(inFolder: root + "/adapter")?["run_id"] as? String, "adapter-a")
    }

    func testAFolderFromBeforeRunLogsIsNamedAndLeftAlone() throws {
        let root = tempDir()
        let legacy = "{\"type\":\"train\",\"step\":1,\"loss\":1.5}\n{\"type\":\"train\",\"step\":1,\"loss\":0.9}\n"
        try legacy.write(toFile: root + "/metrics.jsonl", atomically: true, encoding: .utf8)
        try "<svg/>".write(toFile: root + "/loss-curve.svg", atomically: true, encoding: .utf8)
        let log = try RunLog(root: root, runId: "draft-1", header: RunHeader(kind: "draft", title: "t", settings: [:]),
                             report: ReportSettings(), resume: nil)
        XCTAssert(log.notes.contains { $0.contains("\(root)/metrics.jsonl was written before each run kept its own log") }, "\(log.notes)")
        XCTAssertEqual(try String(contentsOfFile: root + "/metrics.jsonl", encoding: .utf8), legacy)
        XCTAssertEqual(log.folder, root + "/draft")
    }

    func testEvaluationRowsGoToARunPerModel() throws {
        let root = tempDir()
        let log = try RunLog(root: root, runId: "evaluation-1", header: RunHeader(kind: "evaluation", title: "t", settings: [:]),
                             report: ReportSettings(), resume: nil)
        try log.append(["type": "evaluation", "label": "base", "step": 0, "events_folder": "base", "eval_loss": 1.5, "exact_match_rate": 0.0])
        try log.append(["type": "evaluation", "label": "adapter-final", "step": 125, "events_folder": "adapter-final",
                        "eval_loss": 0.02, "exact_match_rate": 0.84, "tool_name_accuracy": NSNull()])
        XCTAssertEqual(EventFileContents.files(in: log.folder), [])
        let final = try EventFileContents(path: EventFileContents.files(in: log.folder + "/adapter-final")[0]).scalars
        XCTAssertEqual(final.map(\.tag), ["evaluate/eval_loss", "evaluate/exact_match_rate"])
        XCTAssertEqual(final.map(\.step), [125, 125])
        XCTAssertEqual(final.map(\.value), [0.02, 0.84])
        XCTAssertEqual(EventFileContents.files(in: log.folder + "/base").count, 1)
    }

    func testDraftRowsBecomeOneTagPerGamma() {
        let row: [String: Any] = ["type": "draft_eval", "step": 60, "acceptance_rate": 0.69, "kl_forward": 0.4,
                                  "expected": [["gamma": 1, "speedup": 1.2, "tokens_per_target_call": 1.69],
                                               ["gamma": 2, "speedup": 1.3, "tokens_per_target_call": 2.1]],
                                  "expected_greedy": [["gamma": 1, "speedup": 1.25, "tokens_per_target_call": 1.7]]]
        let s = MetricScalars.scalars(of: row)
        XCTAssertEqual(s.map(\.tag), ["draft/kl_forward", "draft/acceptance_rate",
                                      "draft/expected_speedup/gamma_1", "draft/expected_speedup/gamma_2",
                                      "draft/tokens_per_target_call/gamma_1", "draft/tokens_per_target_call/gamma_2",
                                      "draft/greedy_speedup/gamma_1"])
        XCTAssertEqual(s.map(\.value), [0.4, 0.69, 1.2, 1.3, 1.69, 2.1, 1.25])
        XCTAssert(s.allSatisfy { MetricScalars.descriptions[$0.tag] != nil }, "every tag is described")
    }

    func testRunIdsAreNewAndNamedByKind() {
        let a = RunLog.newRunId(kind: "adapter", date: Date(timeIntervalSince1970: 1_800_000_000))
        XCTAssert(a.hasPrefix("adapter-20270115-080000-"), a)
        XCTAssertEqual(a.count, "adapter-20270115-080000-0000".count)
    }
}
