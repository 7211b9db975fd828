// train-adapter's library path end to end on a tiny GGUF model written by the test: exact
// resume after a mid-epoch stop (bit for bit), refusals (other base, other LoRA shape, other
// data, final checkpoint, draft-vs-adapter), the folder lock, NaN handling, the run's log (its
// own folder, continued on resume without repeated steps, rebuilt for a checkpoint without one,
// another run's never appended to) and the loss curve, and an eval file smaller than the batch.
import Autograd
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import RunLog
@testable import Training
import TestSupport
import XCTest

final class AdapterRunTests: XCTestCase {
    struct Env {
        var dir: String
        var base: BaseModel
        var train: String
        var eval: String
    }

    func makeEnv(_ name: String = #function, seed: UInt64 = 1) throws -> Env {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: seed))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 10)
        try TinyAssets.writeData(dir + "/eval.jsonl", count: 4, offset: 5)
        return Env(dir: dir, base: base, train: dir + "/train.jsonl", eval: dir + "/eval.jsonl")
    }

    func settings(_ env: Env, runDir: String, epochs: Int = 2, lr: Float = 5e-3, rank: Int = 4, resumeFrom: String? = nil,
                  resume: Bool = false, batch: Int = 2, pack: Bool = false, dropout: Float = 0.1) -> AdapterRunSettings {
        AdapterRunSettings(
            data: DataSettings(trainData: env.train, evalData: env.eval, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: pack, skipInvalid: false, batchSize: batch, seed: 3),
            lora: LoRAConfig(rank: rank, alpha: 8, targets: LoRATarget.allCases, dropout: dropout),
            checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: resumeFrom, resume: resume, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = epochs
                o.learningRate = lr
                o.warmupSteps = 2
                o.gradientAccumulationSteps = 1
                o.seed = 11
                return o
            })
    }

    func run(_ s: AdapterRunSettings, base: BaseModel, stopAfter: Int? = nil) throws -> (TrainingOutcome, [TrainingEvent]) {
        var events: [TrainingEvent] = []
        var steps = 0
        let outcome = try AdapterRun.run(s, base: base, shouldStop: { stopAfter.map { steps >= $0 } ?? false },
                                         notice: { _ in }, onEvent: { e in
                                             if case .step = e { steps += 1 }
                                             events.append(e)
                                         })
        return (outcome, events)
    }

    /// The data fingerprint is read in 1 MiB pieces (a large training file is never held in
    /// memory for it) and equals the in-memory digest, so earlier checkpoints still resume.
    func testStreamedFingerprintEqualsTheInMemoryOne() throws {
        let path = TinyAssets.tempDir() + "/train.jsonl"
        let data = Data((0..<((3 << 20) + 17)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try data.write(to: URL(fileURLWithPath: path))
        let extra = Data("maxSequenceLength=1024".utf8)
        XCTAssertEqual(try Fingerprint.sha256(file: path, then: extra), Fingerprint.sha256([data, extra]))
        XCTAssertThrowsError(try Fingerprint.sha256(file: path + ".missing", then: extra))
    }

    func testExactResumeAfterMidEpochStopIsBitIdentical() throws {
        for pack in [false, true] {
            let env = try makeEnv("resume\(pack)")
            let (full, _) = try run(settings(env, runDir: env.dir + "/full", pack: pack), base: env.base)
            guard case .finished(let fullPath) = full else { return XCTFail("uninterrupted run did not finish") }
            // stop after 3 optimizer steps: mid-epoch 1 (5 batches per epoch), dropout RNG in use
            let (first, _) = try run(settings(env, runDir: env.dir + "/split", pack: pack), base: env.base, stopAfter: 3)
            guard case .interrupted(let stopPath) = first else { return XCTFail("run was not interrupted") }
            XCTAssertEqual(try Checkpoint.load(stopPath).header.state.step, 3)
            let (second, _) = try run(settings(env, runDir: env.dir + "/split", resume: true, pack: pack), base: env.base)
            guard case .finished(let resumedPath) = second else { return XCTFail("resumed run did not finish") }
            let a = try Checkpoint.load(fullPath), b = try Checkpoint.load(resumedPath)
            XCTAssertEqual(Set(a.tensors.keys), Set(b.tensors.keys))
            for (name, t) in a.tensors {
                XCTAssertEqual(t.data, b.tensors[name]!.data, "pack=\(pack): \(name) differs after resume")
                XCTAssertEqual(a.optimizerMoments.v[name]!.data, b.optimizerMoments.v[name]!.data, "pack=\(pack): AdamW v of \(name)")
            }
            XCTAssertEqual(a.header.state.history.map { $0.loss }, b.header.state.history.map { $0.loss })
            XCTAssertEqual(a.header.state.evals, b.header.state.evals)
            // the adapter learned something: eval loss went down
            let evals = a.header.state.evals
            XCTAssertEqual(evals.count, 2)
            XCTAssertLessThan(evals.last!.loss, evals.first!.loss + 1e-3)
            for f in ["adapter-epoch1.safetensors", "adapter-epoch2.safetensors", "adapter-final.safetensors", "adapter/metrics.jsonl", "adapter/loss-curve.svg"] {
                XCTAssert(FileManager.default.fileExists(atPath: env.dir + "/full/" + f), "missing \(f)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: env.dir + "/full/.train.lock"), "lock left behind")
        }
    }

    func testTrainingLowersLossAndGenerationUsesTheAdapter() throws {
        let env = try makeEnv()
        var eval: [EvalRecord] = []
        let (outcome, events) = try run(settings(env, runDir: env.dir + "/run", epochs: 4, lr: 2e-2, dropout: 0), base: env.base)
        for case .evaluated(let e) in events { eval.append(e) }
        guard case .finished(let path) = outcome else { return XCTFail() }
        XCTAssertLessThan(eval.last!.loss, eval.first!.loss, "eval loss should fall over 4 epochs: \(eval.map(\.loss))")
        let ck = try Checkpoint.load(path)
        let adapted = InferenceModel(base: env.base.weights, adapter: try Adapter.fromCheckpoint(ck.file))
        let plain = InferenceModel(base: env.base.weights)
        let ids = env.base.tokenizer.encode("<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n")
        XCTAssertNotEqual(adapted.forward(ids, cache: adapted.makeCache()), plain.forward(ids, cache: plain.makeCache()))
        let svg = try String(contentsOfFile: env.dir + "/run/adapter/loss-curve.svg", encoding: .utf8)
        XCTAssert(svg.hasPrefix("<svg") && svg.contains("polyline") && svg.contains("adapter training on train.jsonl"))
        XCTAssertEqual(svg.components(separatedBy: "<circle").count - 1, 4 + 1, "an eval marker per epoch, and the legend's")
        let metrics = try String(contentsOfFile: env.dir + "/run/adapter/metrics.jsonl", encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(metrics.filter { $0.contains("\"type\":\"eval\"") }.count, 4)
        try assertEventsEqualLog(env.dir + "/run/adapter")
    }

    func testResumeRefusesOtherBaseLoRAAndData() throws {
        let env = try makeEnv()
        let (outcome, _) = try run(settings(env, runDir: env.dir + "/a"), base: env.base, stopAfter: 2)
        guard case .interrupted(let path) = outcome else { return XCTFail() }
        // another base model
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("other"), seed: 99))
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/b", resumeFrom: path), base: other)) { e in
            let msg = (e as? LocalizedError)?.errorDescription ?? ""
            XCTAssert(msg.contains(env.base.signature) && msg.contains(other.signature), msg)
        }
        // another rank
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/c", rank: 8, resumeFrom: path), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("rank 4"), "\(e)")
        }
        // other data
        try TinyAssets.writeData(env.train, count: 10, offset: 1)
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/d", resumeFrom: path), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("different data"), "\(e)")
        }
        // not a checkpoint at all
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/e", resumeFrom: env.train), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("not a usable checkpoint"), "\(e)")
        }
    }

    func testKeepBestPrunesEpochCheckpointsByEvalLoss() throws {
        let env = try makeEnv()
        var s = settings(env, runDir: env.dir + "/run", epochs: 3, lr: 2e-2, dropout: 0)
        s.checkpoints.keepBest = 1
        let (_, events) = try run(s, base: env.base)
        var evals: [EvalRecord] = []
        for case .evaluated(let e) in events { evals.append(e) }
        let best = evals.min { $0.loss < $1.loss }!.epoch
        let left = try FileManager.default.contentsOfDirectory(atPath: env.dir + "/run").filter { $0.hasSuffix(".safetensors") }.sorted()
        XCTAssertEqual(left, ["adapter-epoch\(best).safetensors", "adapter-final.safetensors"].sorted())
    }

    func testSecondTrainingOnSameFolderIsRefused() throws {
        let env = try makeEnv()
        let first = try RunFolder(env.dir + "/run")
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/run"), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("another training"), "\(e)")
        }
        first.releaseLock()
        XCTAssertNoThrow(try run(settings(env, runDir: env.dir + "/run", epochs: 1), base: env.base))
    }

    func testStaleLockFromDeadProcessIsTakenOver() throws {
        let env = try makeEnv()
        try FileManager.default.createDirectory(atPath: env.dir + "/run", withIntermediateDirectories: true)
        try "999999\n".write(toFile: env.dir + "/run/.train.lock", atomically: true, encoding: .utf8)
        XCTAssertNoThrow(try RunFolder(env.dir + "/run"))
    }

    func testDivergingLossStopsWithMessageAndKeepsEarlierCheckpoint() throws {
        let env = try makeEnv()
        var s = settings(env, runDir: env.dir + "/run", epochs: 30, lr: 1e12)
        s.makeOptions = { _ in
            var o = TrainingOptions()
            o.epochs = 30
            o.learningRate = 1e12
            o.clipGradNorm = nil
            o.schedule = .constant
            return o
        }
        XCTAssertThrowsError(try run(s, base: env.base)) { e in
            guard case TrainingError.nonFiniteLoss = e else { return XCTFail("expected nonFiniteLoss, got \(e)") }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: env.dir + "/run").filter { $0.hasSuffix(".safetensors") }
        for f in files { XCTAssertNoThrow(try Checkpoint.load(env.dir + "/run/" + f), "\(f) must stay valid") }
    }

    func testEvalSmallerThanBatchAndEmptyTrainFileAreClearErrors() throws {
        let env = try makeEnv()
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/run", batch: 8), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("fewer than --batch-size"), "\(e)")
        }
        try "".write(toFile: env.train, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/run2"), base: env.base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains(env.train), "\(e)")
        }
    }

    // MARK: the run's log

    func logRows(_ path: String) throws -> [[String: Any]] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    func trainRows(_ rows: [[String: Any]]) -> [[String: Any]] { rows.filter { $0["type"] as? String == "train" } }

    /// The folder's event files hold exactly the scalars of its metrics.jsonl rows.
    func assertEventsEqualLog(_ folder: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let files = EventFileContents.files(in: folder)
        XCTAssertEqual(files.count, 1, file: file, line: line)
        let events = try files.flatMap { try EventFileContents(path: $0).scalars }
        let expected = try logRows(folder + "/metrics.jsonl").flatMap { row in
            MetricScalars.scalars(of: row).map { "\($0.tag)@\(MetricScalars.integer(row["step"])!)=\(Float($0.value))" }
        }
        XCTAssertFalse(expected.isEmpty, file: file, line: line)
        XCTAssertEqual(events.map { "\($0.tag)@\($0.step)=\($0.value)" }, expected, file: file, line: line)
    }

    /// A run stopped mid-epoch and resumed logs what an uninterrupted run logs: every step once,
    /// the same losses and moving average, one run id in the header, the resume line, and both
    /// checkpoints; its event files say the same.
    func testResumedRunContinuesItsOwnLog() throws {
        let env = try makeEnv()
        _ = try run(settings(env, runDir: env.dir + "/full"), base: env.base)
        let (first, _) = try run(settings(env, runDir: env.dir + "/split"), base: env.base, stopAfter: 3)
        guard case .interrupted(let stopPath) = first else { return XCTFail("not interrupted") }
        let (second, _) = try run(settings(env, runDir: env.dir + "/split", resume: true), base: env.base)
        guard case .finished(let finalPath) = second else { return XCTFail("not finished") }
        let full = try logRows(env.dir + "/full/adapter/metrics.jsonl"), split = try logRows(env.dir + "/split/adapter/metrics.jsonl")
        XCTAssertEqual(trainRows(split).map { $0["step"] as? Int }, Array(1...10))
        for key in ["loss", "smoothed_loss", "learning_rate", "grad_norm"] {
            XCTAssertEqual(trainRows(split).map { $0[key] as? Double }, trainRows(full).map { $0[key] as? Double }, key)
        }
        XCTAssertEqual(split.filter { $0["type"] as? String == "eval" }.map { $0["loss"] as? Double },
                       full.filter { $0["type"] as? String == "eval" }.map { $0["loss"] as? Double })
        XCTAssertEqual(split.compactMap { $0["type"] as? String }.filter { (t: String) in t == "run" || t == "resume" }, ["run", "resume"])
        let runId = try XCTUnwrap(split[0]["run_id"] as? String)
        XCTAssertNotEqual(runId, full[0]["run_id"] as? String)
        XCTAssertEqual(try Checkpoint.load(stopPath).header.runId, runId)
        XCTAssertEqual(try Checkpoint.load(finalPath).header.runId, runId)
        try assertEventsEqualLog(env.dir + "/split/adapter")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: env.dir + "/split").filter { !$0.hasSuffix(".safetensors") }, ["adapter"])
    }

    /// A checkpoint whose run has no log in the folder (written before run logs, or moved) resumes
    /// with a log rebuilt from its history; a folder's old top-level metrics.jsonl is named and kept.
    func testResumingWithoutTheRunsLogRebuildsIt() throws {
        let env = try makeEnv()
        _ = try run(settings(env, runDir: env.dir + "/full"), base: env.base)
        _ = try run(settings(env, runDir: env.dir + "/old"), base: env.base, stopAfter: 4)
        try FileManager.default.removeItem(atPath: env.dir + "/old/adapter")
        let legacy = "{\"loss\":1.5,\"step\":1,\"type\":\"train\"}\n"
        try legacy.write(toFile: env.dir + "/old/metrics.jsonl", atomically: true, encoding: .utf8)
        var notes: [String] = []
        _ = try AdapterRun.run(settings(env, runDir: env.dir + "/old", resume: true), base: env.base, shouldStop: { false },
                               notice: { if case .log(let n) = $0 { notes.append(n) } }, onEvent: { _ in })
        XCTAssert(notes.contains { $0.contains("was written before each run kept its own log") }, "\(notes)")
        XCTAssert(notes.contains { $0.contains("rebuilt") }, "\(notes)")
        XCTAssertEqual(try String(contentsOfFile: env.dir + "/old/metrics.jsonl", encoding: .utf8), legacy)
        let rebuilt = try logRows(env.dir + "/old/adapter/metrics.jsonl"), full = try logRows(env.dir + "/full/adapter/metrics.jsonl")
        XCTAssertEqual(trainRows(rebuilt).map { $0["loss"] as? Double }, trainRows(full).map { $0["loss"] as? Double })
        XCTAssertEqual(trainRows(rebuilt).map { $0["smoothed_loss"] as? Double }, trainRows(full).map { $0["smoothed_loss"] as? Double })
        XCTAssertEqual(trainRows(rebuilt).prefix(4).map { $0["rebuilt"] as? Bool }, [true, true, true, true])
        XCTAssertNil(trainRows(rebuilt)[4]["rebuilt"])
        try assertEventsEqualLog(env.dir + "/old/adapter")
    }

    /// A new run in a folder that holds another run's log moves that log aside, whole.
    func testANewRunNeverAppendsToAnotherRunsLog() throws {
        let env = try makeEnv()
        _ = try run(settings(env, runDir: env.dir + "/run", epochs: 1), base: env.base)
        let before = try logRows(env.dir + "/run/adapter/metrics.jsonl")
        let firstId = try XCTUnwrap(before[0]["run_id"] as? String)
        _ = try run(settings(env, runDir: env.dir + "/run", epochs: 1), base: env.base)
        let moved = try logRows(env.dir + "/run/\(firstId)/metrics.jsonl")
        XCTAssertEqual(moved.count, before.count)
        XCTAssertEqual(moved.map { $0["step"] as? Int }, before.map { $0["step"] as? Int })
        let now = try logRows(env.dir + "/run/adapter/metrics.jsonl")
        XCTAssertNotEqual(now[0]["run_id"] as? String, firstId)
        XCTAssertEqual(now.filter { $0["type"] as? String == "run" }.count, 1)
        XCTAssertEqual(trainRows(now).map { $0["step"] as? Int }, Array(1...5))
    }
}
