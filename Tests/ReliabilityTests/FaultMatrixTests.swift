// The fault matrix of issue #10, each case ending in a clear message and no loss of earlier
// valid checkpoints: kill -9 then --resume, SIGINT during a checkpoint write (once: a clean
// stop; twice: an immediate exit mid-write), a disk that fills during a save (RLIMIT_FSIZE in a
// child; a small tmpfs where mounting is allowed), a read-only checkpoint folder, a base model
// file changed after training, a truncated checkpoint, and two trainings on one folder. Child
// processes run the real train-adapter binary on a tiny GGUF model. Cases already covered in
// TrainingTests (lock within one process, stale lock, another base via --resume-from, NaN loss)
// are not repeated.
import Autograd
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
@testable import Training
import TestSupport
import XCTest
#if canImport(Glibc)
import Glibc
#endif

final class FaultMatrixTests: XCTestCase {
    struct Env {
        var dir: String
        var model: String
        var train: String
    }

    func makeEnv(_ name: String = #function, samples: Int = 10) throws -> Env {
        let dir = TinyAssets.tempDir(name)
        let model = try TinyAssets.writeModel(in: dir)
        try TinyAssets.writeData(dir + "/train.jsonl", count: samples)
        return Env(dir: dir, model: model, train: dir + "/train.jsonl")
    }

    /// train-adapter flags: 10 samples, batch 2 = 5 optimizer steps per epoch.
    func cliArgs(_ env: Env, runDir: String, epochs: Int, rank: Int = 4, extra: [String] = []) -> [String] {
        ["--base-model", env.model, "--train-data", env.train, "--checkpoint-dir", runDir, "--epochs", "\(epochs)",
         "--batch-size", "2", "--rank", "\(rank)", "--max-sequence-length", "64", "--learning-rate", "5e-3",
         "--warmup-steps", "2", "--seed", "3"] + extra
    }

    /// Every adapter-*.safetensors in `dir` must load; returns their names.
    @discardableResult
    func assertAllCheckpointsLoad(_ dir: String, file: StaticString = #filePath, line: UInt = #line) -> [String] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".safetensors") && !$0.hasPrefix(".") }.sorted()
        for n in names {
            XCTAssertNoThrow(try Checkpoint.load(dir + "/" + n), "\(n) must stay a valid checkpoint", file: file, line: line)
        }
        return names
    }

    func temporaries(_ dir: String) -> [String] {
        RunFolder.hiddenNames(in: dir).filter { $0.contains(".tmp-") }  // FileManager does not list dot files
    }

    func assertSameAdapter(_ a: String, _ b: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let x = try Checkpoint.load(a), y = try Checkpoint.load(b)
        XCTAssertEqual(Set(x.tensors.keys), Set(y.tensors.keys), file: file, line: line)
        for (name, t) in x.tensors {
            XCTAssertEqual(t.data, y.tensors[name]?.data, "\(name) differs between \(a) and \(b)", file: file, line: line)
        }
        XCTAssertEqual(x.header.state.step, y.header.state.step, file: file, line: line)
    }

    func reference(_ env: Env, trainer: String, epochs: Int, rank: Int = 4) -> String {
        let dir = env.dir + "/reference-r\(rank)-e\(epochs)"
        let r = ChildProcess.run(trainer, cliArgs(env, runDir: dir, epochs: epochs, rank: rank), logPath: env.dir + "/reference.log")
        XCTAssertEqual(r.status, 0, "reference run failed:\n\(r.output)")
        return dir
    }

    // MARK: kill -9, --resume, and a second training on the same folder

    func testKillDashNineThenResumeAndASecondTrainingIsRefused() throws {
        let trainer = try ChildProcess.tool("train-adapter")
        let env = try makeEnv()
        let epochs = 200  // long enough that a second process starts while the first still trains
        let ref = reference(env, trainer: trainer, epochs: epochs)
        let run = env.dir + "/run"
        let victim = ChildProcess.start(trainer, cliArgs(env, runDir: run, epochs: epochs), logPath: env.dir + "/victim.log")
        XCTAssert(waitUntil(timeout: 120) { FileManager.default.fileExists(atPath: run + "/adapter-epoch2.safetensors") || !victim.isRunning },
                  "no epoch checkpoint appeared")
        // A second training on the same folder while the first runs: refused, naming the first.
        let second = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: epochs), logPath: env.dir + "/second.log")
        let stillRunning = victim.isRunning
        victim.send(SIGKILL)
        let killed = victim.wait()
        guard stillRunning, killed.signaled, killed.status == 128 + SIGKILL else {
            return XCTFail("the training finished before it could be killed; raise `epochs` (exit \(killed.status)):\n\(killed.output)")
        }
        XCTAssertNotEqual(second.status, 0, second.output)
        XCTAssert(second.output.contains("another training (process \(victim.pid))"), second.output)
        let left = assertAllCheckpointsLoad(run)
        XCTAssert(left.contains("adapter-epoch1.safetensors"), "\(left)")
        XCTAssertFalse(left.contains("adapter-final.safetensors"))

        // --resume continues from the newest checkpoint (the kill left its lock file behind) and
        // ends exactly where an uninterrupted run ends.
        let resumed = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: epochs, extra: ["--resume"]), logPath: env.dir + "/resume.log")
        XCTAssertEqual(resumed.status, 0, resumed.output)
        XCTAssert(resumed.output.contains("resuming from \(run)/adapter-"), resumed.output)
        try assertSameAdapter(ref + "/adapter-final.safetensors", run + "/adapter-final.safetensors")
        XCTAssertEqual(temporaries(run), [], "temporary files of the killed run are cleaned up")
        XCTAssertFalse(FileManager.default.fileExists(atPath: run + "/.train.lock"))
        assertAllCheckpointsLoad(run)
        // The run's log: the steps the kill logged after the newest checkpoint were dropped, so
        // every step is there once, with the uninterrupted run's losses, under one run id.
        let (log, refLog) = (try logRows(run + "/adapter/metrics.jsonl"), try logRows(ref + "/adapter/metrics.jsonl"))
        let steps = log.filter { $0["type"] as? String == "train" }.map { $0["step"] as? Int ?? -1 }
        XCTAssertEqual(steps, Array(1...steps.count), "each step once, in order")
        XCTAssertEqual(log.filter { $0["type"] as? String == "train" }.map { $0["loss"] as? Double },
                       refLog.filter { $0["type"] as? String == "train" }.map { $0["loss"] as? Double })
        XCTAssertEqual(Set(log.compactMap { $0["run_id"] as? String }).count, 1, "the header and the resume line name one run")
        XCTAssertEqual(log.filter { $0["type"] as? String == "resume" }.count, 1)
    }

    func logRows(_ path: String) throws -> [[String: Any]] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any], "\(path): \($0)")
        }
    }

    // MARK: SIGINT during a checkpoint write

    /// Starts a training, waits until a checkpoint's temporary file exists, then sends SIGINT
    /// `signals` times. Returns the exit and whether the temporary was still there (the signal
    /// landed during the write).
    func interruptDuringWrite(_ env: Env, trainer: String, run: String, epochs: Int, rank: Int, signals: Int) -> (ChildProcess.Exit, Bool) {
        let child = ChildProcess.start(trainer, cliArgs(env, runDir: run, epochs: epochs, rank: rank), logPath: run + ".log")
        var hit = false
        let seen = waitUntil(timeout: 120, interval: 0) {
            // A later epoch's write, so that an earlier checkpoint exists and must survive.
            guard temporaries(run).contains(where: { $0.hasPrefix(".adapter-epoch") && !$0.hasPrefix(".adapter-epoch1.") })
            else { return !child.isRunning }
            for i in 0..<signals {
                // Signals sent together merge into one: let the first be delivered before the next.
                if i > 0 { _ = waitUntil(timeout: 1, interval: 0) { !child.hasPending(SIGINT) } }
                child.send(SIGINT)
            }
            hit = !temporaries(run).isEmpty
            return true
        }
        XCTAssert(seen, "no checkpoint write was seen")
        return (child.wait(), hit)
    }

    func testSIGINTDuringACheckpointWriteStopsCleanlyOrExitsWithoutTearingAFile() throws {
        let trainer = try ChildProcess.tool("train-adapter")
        let env = try makeEnv()
        // rank 64 makes each checkpoint about 0.7 MB, so a write lasts long enough to be hit.
        let epochs = 30, rank = 64
        let ref = reference(env, trainer: trainer, epochs: epochs, rank: rank)

        // Once: the handler asks for a stop; the write finishes, then an interrupted checkpoint.
        let once = env.dir + "/once"
        let (a, hitA) = interruptDuringWrite(env, trainer: trainer, run: once, epochs: epochs, rank: rank, signals: 1)
        print("SIGINT x1 landed during a checkpoint write: \(hitA)")
        XCTAssertEqual(a.status, 130, a.output)
        XCTAssert(a.output.contains("interrupted; resume with"), a.output)
        let keptOnce = assertAllCheckpointsLoad(once)
        XCTAssert(keptOnce.contains("adapter-interrupted.safetensors") && keptOnce.contains("adapter-epoch1.safetensors"), "\(keptOnce)")

        // Twice: the second signal exits at once, possibly mid-write; only a hidden temporary may be torn.
        let twice = env.dir + "/twice"
        let (b, hitB) = interruptDuringWrite(env, trainer: trainer, run: twice, epochs: epochs, rank: rank, signals: 2)
        let immediate = !b.output.contains("interrupted; resume with")
        print("SIGINT x2 landed during a checkpoint write: \(hitB); exited at once: \(immediate); temporaries left: \(temporaries(twice))")
        XCTAssertEqual(b.status, 130, b.output)
        XCTAssert(assertAllCheckpointsLoad(twice).contains("adapter-epoch1.safetensors"))

        for run in [once, twice] {
            let r = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: epochs, rank: rank, extra: ["--resume"]), logPath: run + "-resume.log")
            XCTAssertEqual(r.status, 0, r.output)
            try assertSameAdapter(ref + "/adapter-final.safetensors", run + "/adapter-final.safetensors")
            XCTAssertEqual(temporaries(run), [])
            assertAllCheckpointsLoad(run)
        }
    }

    // MARK: a disk that fills during a save

    func testFileSizeLimitDuringASaveKeepsEarlierCheckpointsAndResumes() throws {
        let trainer = try ChildProcess.tool("train-adapter")
        let env = try makeEnv()
        let ref = reference(env, trainer: trainer, epochs: 3)
        func size(_ n: String) throws -> Int { (try FileManager.default.attributesOfItem(atPath: ref + "/" + n)[.size] as! NSNumber).intValue }
        let s1 = try size("adapter-epoch1.safetensors"), s2 = try size("adapter-epoch2.safetensors")
        XCTAssertGreaterThan(s2, s1 + 64, "epoch 2's checkpoint holds more history than epoch 1's")
        let limit = s1 + (s2 - s1) / 2  // epoch 1's checkpoint fits, epoch 2's does not

        let run = env.dir + "/run"
        let full = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: 3), logPath: env.dir + "/full.log", fileSizeLimit: limit)
        XCTAssertNotEqual(full.status, 0, full.output)
        XCTAssert(full.output.contains("adapter-epoch2.safetensors") && full.output.contains("File too large")
                  && full.output.contains("unchanged"), full.output)
        XCTAssertEqual(assertAllCheckpointsLoad(run), ["adapter-epoch1.safetensors"])
        XCTAssertEqual(temporaries(run), [], "a failed save removes its temporary file")

        let resumed = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: 3, extra: ["--resume"]), logPath: env.dir + "/resume.log")
        XCTAssertEqual(resumed.status, 0, resumed.output)
        try assertSameAdapter(ref + "/adapter-final.safetensors", run + "/adapter-final.safetensors")
    }

    /// Mounts a tmpfs of `bytes` at `dir`, or skips saying why.
    func mountTmpfs(_ dir: String, bytes: Int) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let r = ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(bytes)", "tmpfs", dir], logPath: dir + ".mount.log")
        if r.status != 0 {
            throw XCTSkip("cannot mount a tmpfs here (\(r.output.trimmingCharacters(in: .whitespacesAndNewlines))); a real ENOSPC is not tested, the RLIMIT_FSIZE case covers a failing save")
        }
        addTeardownBlock { _ = ChildProcess.run("/bin/umount", ["-l", dir], logPath: dir + ".umount.log") }
    }

    func testFullTmpfsDuringASaveKeepsEarlierCheckpoints() throws {
        let env = try makeEnv()
        let base = try BaseModel.load(path: env.model)
        let probe = env.dir + "/probe"
        _ = try InProcess.run(InProcess.settings(env, runDir: probe, epochs: 1), base: base)
        let s1 = (try FileManager.default.attributesOfItem(atPath: probe + "/adapter-epoch1.safetensors")[.size] as! NSNumber).intValue
        let page = 4096
        func pages(_ n: Int) -> Int { (n + page - 1) / page * page }
        // room for epoch 1's checkpoint, the lock and metrics, and half of another checkpoint
        let disk = env.dir + "/disk"
        try mountTmpfs(disk, bytes: pages(s1) + 4 * page + pages(s1 / 2))

        // AtomicFile on its own: the old file survives, no temporary is left.
        try AtomicFile.write(Data("old".utf8), to: disk + "/note.txt")
        XCTAssertThrowsError(try AtomicFile.write(Data(count: 4 * s1), to: disk + "/note.txt")) { e in
            XCTAssert((e as? LocalizedError)?.errorDescription?.contains("No space left on device") ?? false, "\(e)")
        }
        XCTAssertEqual(try String(contentsOfFile: disk + "/note.txt", encoding: .utf8), "old")
        try FileManager.default.removeItem(atPath: disk + "/note.txt")

        // A training whose second epoch checkpoint does not fit.
        XCTAssertThrowsError(try InProcess.run(InProcess.settings(env, runDir: disk + "/run", epochs: 3), base: base)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains("No space left on device") && text.contains("adapter-epoch2.safetensors"), text)
        }
        XCTAssertEqual(assertAllCheckpointsLoad(disk + "/run"), ["adapter-epoch1.safetensors"])
        XCTAssertEqual(temporaries(disk + "/run"), [])
    }

    // MARK: a read-only checkpoint folder

    func testReadOnlyCheckpointFolderIsRefusedAndKeepsItsCheckpoints() throws {
        let env = try makeEnv()
        let base = try BaseModel.load(path: env.model)
        let run = env.dir + "/run"
        let (outcome, _) = try InProcess.run(InProcess.settings(env, runDir: run, epochs: 2), base: base, stopAfter: 2)
        guard case .interrupted(let saved) = outcome else { return XCTFail("\(outcome)") }
        let before = try Data(contentsOf: URL(fileURLWithPath: saved))
        if getuid() == 0 {
            // Root ignores permission bits: make the folder a read-only bind mount of itself.
            let bind = ChildProcess.run("/bin/mount", ["--bind", run, run], logPath: env.dir + "/bind.log")
            if bind.status != 0 { throw XCTSkip("running as root and cannot bind-mount (\(bind.output)); a read-only folder cannot be made here") }
            addTeardownBlock { _ = ChildProcess.run("/bin/umount", ["-l", run], logPath: env.dir + "/umount.log") }
            let ro = ChildProcess.run("/bin/mount", ["-o", "remount,bind,ro", run], logPath: env.dir + "/ro.log")
            if ro.status != 0 { throw XCTSkip("running as root and cannot remount read-only (\(ro.output))") }
        } else {
            XCTAssertEqual(chmod(run, 0o555), 0)
            addTeardownBlock { chmod(run, 0o755) }
        }
        for resume in [true, false] {
            XCTAssertThrowsError(try InProcess.run(InProcess.settings(env, runDir: run, epochs: 2, resume: resume), base: base)) { e in
                let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
                XCTAssert(text.contains(run) && text.contains("not writable") && text.contains("--checkpoint-dir"), text)
            }
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: saved)), before)
        XCTAssertNoThrow(try Checkpoint.load(saved))
    }

    // MARK: the base model file changed after training

    func testBaseModelFileChangedAfterTrainingIsRefusedNamingBothSignatures() throws {
        let env = try makeEnv()
        let base = try BaseModel.load(path: env.model)
        let run = env.dir + "/run"
        let (outcome, _) = try InProcess.run(InProcess.settings(env, runDir: run, epochs: 2), base: base, stopAfter: 2)
        guard case .interrupted(let saved) = outcome else { return XCTFail("\(outcome)") }
        _ = try TinyAssets.writeModel(in: env.dir, seed: 2)  // same path, other weights
        let changed = try BaseModel.load(path: env.model)
        XCTAssertNotEqual(changed.signature, base.signature)
        XCTAssertThrowsError(try InProcess.run(InProcess.settings(env, runDir: run, epochs: 2, resume: true), base: changed)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(base.signature) && text.contains(changed.signature) && text.contains(saved), text)
        }
        XCTAssertThrowsError(try LoadedModel.load(base: changed, adapter: saved)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(base.signature) && text.contains(changed.signature), text)
        }
        XCTAssertEqual(assertAllCheckpointsLoad(run), ["adapter-interrupted.safetensors"])
    }

    // MARK: a truncated checkpoint

    func testTruncatedCheckpointIsNamedAndResumeUsesTheNewestValidOne() throws {
        let env = try makeEnv()
        let base = try BaseModel.load(path: env.model)
        let (full, _) = try InProcess.run(InProcess.settings(env, runDir: env.dir + "/full", epochs: 3), base: base)
        guard case .finished(let fullFinal) = full else { return XCTFail("\(full)") }
        let run = env.dir + "/run"
        let (outcome, _) = try InProcess.run(InProcess.settings(env, runDir: run, epochs: 3), base: base, stopAfter: 12)
        guard case .interrupted(let newest) = outcome else { return XCTFail("\(outcome)") }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: newest))
        try bytes.prefix(bytes.count / 2).write(to: URL(fileURLWithPath: newest))

        XCTAssertThrowsError(try Checkpoint.load(newest)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(newest) && text.contains("truncated"), text)
        }
        XCTAssertThrowsError(try InProcess.run(InProcess.settings(env, runDir: env.dir + "/other", epochs: 3, resumeFrom: newest), base: base)) { e in
            XCTAssert(((e as? LocalizedError)?.errorDescription ?? "").contains("truncated"), "\(e)")
        }
        let scan = RunFolder.scanCheckpoints(in: run, prefix: "adapter")
        XCTAssertEqual(scan.damaged.map(\.path), [newest])
        XCTAssertEqual(scan.newest, run + "/adapter-epoch2.safetensors")

        let (resumed, _) = try InProcess.run(InProcess.settings(env, runDir: run, epochs: 3, resume: true), base: base)
        guard case .finished(let final) = resumed else { return XCTFail("\(resumed)") }
        try assertSameAdapter(fullFinal, final)
        XCTAssert(FileManager.default.fileExists(atPath: newest), "the damaged file is left for the user, not deleted")
    }

    func testResumeCLIWarnsAboutADamagedCheckpoint() throws {
        let trainer = try ChildProcess.tool("train-adapter")
        let env = try makeEnv()
        let run = env.dir + "/run"
        let base = try BaseModel.load(path: env.model)
        _ = try InProcess.run(InProcess.settings(env, runDir: run, epochs: 3), base: base, stopAfter: 7)
        let damaged = run + "/adapter-epoch1.safetensors"
        try Data("not a checkpoint".utf8).write(to: URL(fileURLWithPath: damaged))
        let r = ChildProcess.run(trainer, cliArgs(env, runDir: run, epochs: 3, extra: ["--resume", "--alpha", "8"]), logPath: env.dir + "/resume.log")
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssert(r.output.contains("warning: skipping damaged checkpoint \(damaged)"), r.output)
        XCTAssert(r.output.contains("resuming from \(run)/adapter-interrupted.safetensors"), r.output)
    }
}

/// The library path of train-adapter, in this process, with the tiny data of `FaultMatrixTests.Env`.
enum InProcess {
    static func settings(_ env: FaultMatrixTests.Env, runDir: String, epochs: Int, resume: Bool = false,
                         resumeFrom: String? = nil) -> AdapterRunSettings {
        AdapterRunSettings(
            data: DataSettings(trainData: env.train, evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases, dropout: 0),
            checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: resumeFrom, resume: resume, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = epochs
                o.learningRate = 5e-3
                o.warmupSteps = 2
                o.seed = 11
                return o
            })
    }

    static func run(_ s: AdapterRunSettings, base: BaseModel, stopAfter: Int? = nil) throws -> (TrainingOutcome, [TrainingEvent]) {
        var events: [TrainingEvent] = []
        var steps = 0
        let outcome = try AdapterRun.run(s, base: base, shouldStop: { stopAfter.map { steps >= $0 } ?? false },
                                         notice: { _ in }, onEvent: { e in
                                             if case .step = e { steps += 1 }
                                             events.append(e)
                                         })
        return (outcome, events)
    }
}
