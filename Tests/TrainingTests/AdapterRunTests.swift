// train-adapter's library path end to end on a tiny GGUF model written by the test: exact
// resume after a mid-epoch stop (bit for bit), refusals (other base, other LoRA shape, other
// data, final checkpoint, draft-vs-adapter), the folder lock, NaN handling, metrics and the
// loss curve, and an eval file smaller than the batch.
import Autograd
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
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
            for f in ["adapter-epoch1.safetensors", "adapter-epoch2.safetensors", "adapter-final.safetensors", "metrics.jsonl", "loss-curve.svg"] {
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
        let svg = try String(contentsOfFile: env.dir + "/run/loss-curve.svg", encoding: .utf8)
        XCTAssert(svg.hasPrefix("<svg") && svg.contains("polyline"))
        let metrics = try String(contentsOfFile: env.dir + "/run/metrics.jsonl", encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(metrics.filter { $0.contains("\"type\":\"eval\"") }.count, 4)
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
}
