// train-adapter's preference path end to end on a tiny GGUF model written by the test: DPO
// resumes bit for bit after a mid-epoch stop (the reference log-probabilities recomputed alike),
// the run's log holds TRL's metrics per step and per evaluation, DPO from a supervised adapter
// starts at zero rewards (the reference is that adapter) and raises the reward accuracy, ORPO
// trains without a reference, and wrong files and flags are clear errors.
import Autograd
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import RunLog
@testable import Training
import TestSupport
import XCTest

final class PreferenceRunTests: XCTestCase {
    struct Env {
        var dir: String
        var base: BaseModel
        var pairs: String
        var evalPairs: String
        var sft: String
    }

    /// Pairs that ask for a word in upper case: chosen in upper case, rejected in lower case.
    static func writePairs(_ path: String, count: Int, offset: Int = 0) throws {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
        let lines = (0..<count).map { i -> String in
            let w = words[(i + offset) % words.count]
            return #"{"prompt": [{"role": "system", "content": "Repeat the word in upper case."}, {"role": "user", "content": "say \#(w)"}], "chosen": [{"role": "assistant", "content": "\#(w.uppercased())"}], "rejected": [{"role": "assistant", "content": "\#(w)"}]}"#
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    func makeEnv(_ name: String = #function) throws -> Env {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        try Self.writePairs(dir + "/pairs.jsonl", count: 10)
        try Self.writePairs(dir + "/eval-pairs.jsonl", count: 4, offset: 8)
        try TinyAssets.writeData(dir + "/sft.jsonl", count: 10)
        return Env(dir: dir, base: base, pairs: dir + "/pairs.jsonl", evalPairs: dir + "/eval-pairs.jsonl", sft: dir + "/sft.jsonl")
    }

    func settings(_ env: Env, runDir: String, objective: PreferenceSettings.Objective? = .dpo, train: String? = nil, epochs: Int = 2,
                  lr: Float = 5e-3, resume: Bool = false, pack: Bool = false, accumulation: Int = 1, dropout: Float = 0.1) -> AdapterRunSettings {
        var s = AdapterRunSettings(
            data: DataSettings(trainData: train ?? env.pairs, evalData: objective == nil ? nil : env.evalPairs, maxSequenceLength: 64,
                               fixedSizedSequences: false, packSequences: pack, skipInvalid: false, batchSize: 2, seed: 3, sharePrefix: true),
            lora: LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases, dropout: dropout),
            checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: nil, resume: resume, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = epochs
                o.learningRate = lr
                o.warmupSteps = 1
                o.gradientAccumulationSteps = accumulation
                o.seed = 11
                return o
            })
        s.preference = objective.map { PreferenceSettings(objective: $0, beta: 0.5) }
        return s
    }

    func run(_ s: AdapterRunSettings, base: BaseModel, stopAfter: Int? = nil) throws -> (TrainingOutcome, [TrainingEvent]) {
        var events: [TrainingEvent] = []
        var steps = 0
        let outcome = try AdapterRun.run(s, base: base, shouldStop: { stopAfter.map { steps >= $0 } ?? false }, notice: { _ in },
                                         onEvent: { e in
                                             if case .step = e { steps += 1 }
                                             events.append(e)
                                         })
        return (outcome, events)
    }

    func testDPOExactResumeAfterMidEpochStopIsBitIdentical() throws {
        for (pack, accumulation) in [(false, 1), (true, 2)] {
            let env = try makeEnv("dpo-resume\(pack)")
            let (full, _) = try run(settings(env, runDir: env.dir + "/full", pack: pack, accumulation: accumulation), base: env.base)
            guard case .finished(let fullPath) = full else { return XCTFail("uninterrupted run did not finish") }
            let (first, _) = try run(settings(env, runDir: env.dir + "/split", pack: pack, accumulation: accumulation), base: env.base, stopAfter: 1)
            guard case .interrupted = first else { return XCTFail("run was not interrupted") }
            let (second, _) = try run(settings(env, runDir: env.dir + "/split", resume: true, pack: pack, accumulation: accumulation), base: env.base)
            guard case .finished(let resumedPath) = second else { return XCTFail("resumed run did not finish") }
            let a = try Checkpoint.load(fullPath), b = try Checkpoint.load(resumedPath)
            for (name, t) in a.tensors {
                XCTAssertEqual(t.data, b.tensors[name]!.data, "pack=\(pack): \(name) differs after resume")
            }
            XCTAssertEqual(a.header.state.history.map(\.loss), b.header.state.history.map(\.loss))
            XCTAssertEqual(a.header.state.history.map(\.metrics), b.header.state.history.map(\.metrics))
            XCTAssertEqual(a.header.state.evals, b.header.state.evals)
        }
    }

    func testTheLogHoldsTRLsMetricsAndDPOFromASupervisedAdapterStartsAtZeroReward() throws {
        let env = try makeEnv()
        // a supervised adapter first, then DPO from it with it as the reference (the usual order);
        // no LoRA dropout, so that the policy is exactly the reference before the first update
        let (sft, _) = try run(settings(env, runDir: env.dir + "/sft", objective: nil, train: env.sft, dropout: 0), base: env.base)
        guard case .finished(let sftPath) = sft else { return XCTFail("the supervised run did not finish") }
        var s = settings(env, runDir: env.dir + "/dpo", epochs: 3, lr: 2e-2)
        s.initCheckpoint = sftPath
        let (outcome, events) = try run(s, base: env.base)
        guard case .finished(let path) = outcome else { return XCTFail("the DPO run did not finish") }
        let steps = events.compactMap { e -> StepRecord? in if case .step(let r, _, _, _) = e { return r } else { return nil } }
        let first = try XCTUnwrap(steps.first?.metrics)
        // step 1 sees the policy before any update: it is the reference, so every reward is 0 (up
        // to float order: the reference ran on each pair alone, the policy on a batch of two)
        XCTAssertEqual(try XCTUnwrap(first["rewards/chosen"]), 0, accuracy: 1e-5)
        XCTAssertEqual(try XCTUnwrap(first["rewards/margins"]), 0, accuracy: 1e-5)
        XCTAssertEqual(steps.first!.loss, Float(log(2.0)), accuracy: 1e-6)
        let evals = try Checkpoint.load(path).header.state.evals
        XCTAssertEqual(evals.count, 3)
        XCTAssertGreaterThan(evals.last!.metrics!["rewards/margins"]!, 0, "DPO did not move the held-out margins up: \(evals)")
        XCTAssertLessThan(evals.last!.loss, Float(log(2.0)))
        // metrics.jsonl: every train and eval row carries TRL's names; TensorBoard tags from the same table
        let rows = try String(contentsOfFile: env.dir + "/dpo/adapter/metrics.jsonl", encoding: .utf8).split(separator: "\n").dropFirst()
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        for r in rows where ["train", "eval"].contains(r["type"] as? String) {
            for key in ["rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen", "logps/rejected"] {
                XCTAssertNotNil(r[key], "a \(r["type"]!) row has no \(key): \(r)")
            }
            XCTAssertNil(r["perplexity"])
            XCTAssert(MetricScalars.scalars(of: r).contains { $0.tag.hasSuffix("/rewards/margins") })
        }
    }

    func testORPOTrainsWithoutAReferenceAndLogsItsTerms() throws {
        let env = try makeEnv()
        let (outcome, _) = try run(settings(env, runDir: env.dir + "/orpo", objective: .orpo, lr: 2e-2), base: env.base)
        guard case .finished(let path) = outcome else { return XCTFail("the ORPO run did not finish") }
        let state = try Checkpoint.load(path).header.state
        for key in ["nll_loss", "log_odds_ratio", "log_odds_chosen", "rewards/accuracies"] {
            XCTAssertNotNil(state.history.last?.metrics?[key], key)
            XCTAssertNotNil(state.evals.last?.metrics?[key], key)
        }
        XCTAssertLessThan(state.history.last!.metrics!["nll_loss"]!, state.history.first!.metrics!["nll_loss"]!)
    }

    func testWrongFilesAndSettingsAreClearErrors() throws {
        let env = try makeEnv()
        // conversations given to DPO, and pairs given to supervised training
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/a", train: env.sft), base: env.base)) { error in
            XCTAssert(error.localizedDescription.contains("holds no preference pairs"), error.localizedDescription)
        }
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/b", objective: nil), base: env.base)) { error in
            XCTAssert(error.localizedDescription.contains("--objective dpo, ipo or orpo"), error.localizedDescription)
        }
        var orpo = settings(env, runDir: env.dir + "/c", objective: .orpo)
        orpo.referenceCheckpoint = env.dir + "/none.safetensors"
        XCTAssertThrowsError(try run(orpo, base: env.base)) { error in
            XCTAssert(error.localizedDescription.contains("--reference-checkpoint applies to --objective dpo or ipo"), error.localizedDescription)
        }
        var bad = settings(env, runDir: env.dir + "/d", objective: .ipo)
        bad.preference?.labelSmoothing = 0.1
        XCTAssertThrowsError(try run(bad, base: env.base)) { error in
            XCTAssert(error.localizedDescription.contains("--label-smoothing applies to --objective dpo only"), error.localizedDescription)
        }
        // a run resumed with another objective is refused (the fingerprint holds it)
        _ = try run(settings(env, runDir: env.dir + "/e", epochs: 1), base: env.base, stopAfter: 1)
        var other = settings(env, runDir: env.dir + "/e", objective: .ipo, epochs: 1, resume: true)
        other.preference?.beta = 0.5
        XCTAssertThrowsError(try run(other, base: env.base)) { error in
            XCTAssert(error.localizedDescription.contains("different data or data settings"), error.localizedDescription)
        }
    }
}
