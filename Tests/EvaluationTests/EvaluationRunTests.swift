// evaluate-adapter's library path end to end on a tiny GGUF model: base and adapter
// checkpoints side by side from a run folder (final deduplicated against the last epoch), the
// eval loss equal to the one train-adapter recorded, per-sample JSONL, the table and JSON
// summary, repeatable greedy output, every adapter form (checkpoint, .fmadapter package, PEFT
// folder) evaluated alike, and refusals (empty folder, other base).
import DataSchema
@testable import Evaluation
import Export
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import Autograd
import XCTest

final class EvaluationRunTests: XCTestCase {
    struct Env {
        var dir: String
        var base: BaseModel
        var train: String
        var eval: String
        var runDir: String
    }

    /// A tiny base, data, and a 2-epoch adapter run in `runDir`.
    func makeEnv(_ name: String = #function) throws -> Env {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 10)
        try TinyAssets.writeData(dir + "/eval.jsonl", count: 4, offset: 5)
        let runDir = dir + "/run"
        let settings = AdapterRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: dir + "/eval.jsonl", maxSequenceLength: 64,
                               fixedSizedSequences: false, packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases, dropout: 0),
            checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: nil, resume: false, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 2
                o.learningRate = 1e-2
                o.seed = 5
                return o
            })
        _ = try AdapterRun.run(settings, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { _ in })
        return Env(dir: dir, base: base, train: dir + "/train.jsonl", eval: dir + "/eval.jsonl", runDir: runDir)
    }

    func testCheckpointDirSideBySideWithBase() throws {
        let env = try makeEnv()
        XCTAssertEqual(try EvaluationRun.checkpoints(in: env.runDir).map { ($0 as NSString).lastPathComponent },
                       ["adapter-epoch1.safetensors", "adapter-epoch2.safetensors", "adapter-final.safetensors"])
        var s = EvaluationSettings(evalData: env.eval)
        s.checkpointDir = env.runDir
        s.includeBase = true
        s.outputPath = env.dir + "/results.jsonl"
        s.batchSize = 2
        var events: [String] = []
        let report = try EvaluationRun.run(s, base: env.base) { e in
            if case .modelStarted(let label, _, _) = e { events.append(label) }
        }
        // the final checkpoint is the last epoch's weights: evaluated once
        XCTAssertEqual(report.models.map(\.label), ["base", "adapter-epoch1", "adapter-epoch2=final"])
        XCTAssertEqual(events, report.models.map(\.label))
        XCTAssertEqual(report.notes.count, 1)
        XCTAssertEqual(report.samples, 4)
        XCTAssertEqual(report.targets, 4)
        for m in report.models {
            XCTAssertEqual(m.targets, 4)
            XCTAssertNotNil(m.evalLoss)
            XCTAssertTrue(m.evalLoss!.isFinite)
            XCTAssertEqual(m.perplexity!, Foundation.exp(m.evalLoss!), accuracy: 1e-9)
            XCTAssertEqual(m.jsonTargets, 0)
            XCTAssertNil(m.toolNameAccuracy)
            // every reply was generated: tokens came out, or the model ended its turn at once
            // (the tiny random model may; the CPU level changes its rounding) — never a silent skip
            XCTAssert(m.generatedTokens > 0 || m.hitTokenLimit == 0, "\(m.label): no tokens, yet the token limit was hit")
        }
        XCTAssertNil(report.models[0].step)
        XCTAssertNotNil(report.models[1].step)

        // the eval loss is train-adapter's: the checkpoint's recorded eval after each epoch
        let final = try Checkpoint.load(env.runDir + "/adapter-final.safetensors")
        let recorded = final.header.state.evals.map { Double($0.loss) }
        XCTAssertEqual(recorded.count, 2)
        XCTAssertEqual(report.models[1].evalLoss!, recorded[0], accuracy: 1e-5)
        XCTAssertEqual(report.models[2].evalLoss!, recorded[1], accuracy: 1e-5)
        XCTAssertEqual(report.models[1].evalTokens, final.header.state.evals[0].tokens)

        // one JSONL line per model and target, with the scores
        let lines = try String(contentsOfFile: s.outputPath!, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.count, 12)
        let first = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as! [String: Any]
        XCTAssertEqual(first["model"] as? String, "base")
        XCTAssertEqual(first["line"] as? Int, 1)
        XCTAssertEqual(first["turn"] as? Int, 2)
        XCTAssertEqual(first["reference"] as? String, "FOXTROT0")
        XCTAssertNotNil(first["exact_match"] as? Bool)
        XCTAssertNotNil(first["output"] as? String)

        let table = EvaluationTable.render(report)
        for label in ["base", "adapter-epoch1", "adapter-epoch2=final", "exact match", "eval loss", "tok/s"] {
            XCTAssertTrue(table.contains(label), "table lacks \(label):\n\(table)")
        }
        XCTAssertFalse(table.contains("JSON valid"), "no response_format in this file:\n\(table)")
        let json = try JSONSerialization.jsonObject(with: Data(try EvaluationTable.json(report).utf8)) as! [String: Any]
        XCTAssertEqual((json["models"] as? [[String: Any]])?.count, 3)
        XCTAssertNotNil((json["models"] as? [[String: Any]])?.first?["exact_match_rate"])

        // greedy generation repeats exactly
        var again = s
        again.outputPath = nil
        again.checkpointDir = nil
        again.checkpoints = [env.runDir + "/adapter-epoch1.safetensors"]
        again.includeBase = false
        again.computeLoss = false
        let second = try EvaluationRun.run(again, base: env.base)
        XCTAssertEqual(second.models.map(\.label), ["adapter-epoch1"])
        XCTAssertEqual(second.models[0].exactMatches, report.models[1].exactMatches)
        XCTAssertEqual(second.models[0].generatedTokens, report.models[1].generatedTokens)
        XCTAssertNil(second.models[0].evalLoss)
    }

    /// --preference-data: every model's preference accuracy, margin and reward accuracy (against
    /// the base) over the pairs, checked against sequence log-probabilities taken another way (the
    /// fused cross-entropy of each sequence alone, times its reply tokens).
    func testPreferenceScoresOnAPreferenceEvalSet() throws {
        let env = try makeEnv()
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
        let lines = words.enumerated().map { i, w in
            #"{"prompt": "say \#(w)", "chosen": "\#(w.uppercased())\#(i)", "rejected": "\#(i % 2 == 0 ? w : "no")"}"#
        }
        let pairsPath = env.dir + "/pairs.jsonl"
        try lines.joined(separator: "\n").write(toFile: pairsPath, atomically: true, encoding: .utf8)
        var s = EvaluationSettings(evalData: env.eval)
        s.checkpoints = [env.runDir + "/adapter-final.safetensors"]
        s.includeBase = true
        s.generate = false
        s.batchSize = 4
        s.preferenceData = pairsPath
        let report = try EvaluationRun.run(s, base: env.base)
        let encoder = try TrainingEncoder(tokenizer: env.base.tokenizer, template: env.base.template, maxSequenceLength: s.maxSequenceLength)
        let pairs = try encoder.encode(try DataReader.readPreferences(path: pairsPath)).examples
        /// log p(reply) of one sequence alone: −(mean cross-entropy over its reply tokens) × their count.
        func logProb(_ model: LlamaModel, _ x: TrainingExample) -> Double {
            var rng = SeededRNG(seed: 0)
            let ce = withNoGrad {
                model.loss(inputs: x.inputs, targets: x.targets, lossMask: x.targetMask, layout: .rows(batch: 1, length: x.count), rng: &rng, training: false)
            }
            return -Double(ce.data[0]) * Double(x.targetTokenCount)
        }
        let baseModel = try LlamaModel(base: env.base.weights, adapter: nil)
        let adapted = try LlamaModel(base: env.base.weights, adapter: try Adapter.load(s.checkpoints[0]))
        let baseLP = pairs.map { (logProb(baseModel, $0.chosen), logProb(baseModel, $0.rejected)) }
        for (m, model) in zip(report.models, [baseModel, adapted]) {
            let lp = pairs.map { (logProb(model, $0.chosen), logProb(model, $0.rejected)) }
            XCTAssertEqual(m.preferencePairs, 6)
            XCTAssertEqual(m.preferenceAccuracy!, Double(lp.filter { $0.0 > $0.1 }.count) / 6, accuracy: 1e-12, m.label)
            XCTAssertEqual(m.preferenceMargin!, lp.reduce(0) { $0 + $1.0 - $1.1 } / 6, accuracy: 1e-3, m.label)
            let rewarded = zip(lp, baseLP).filter { ($0.0.0 - $0.1.0) > ($0.0.1 - $0.1.1) }.count
            if m.label != "base" { XCTAssertEqual(m.rewardAccuracy!, Double(rewarded) / 6, accuracy: 1e-12, m.label) }
        }
        let table = EvaluationTable.render(report)
        for column in ["pref acc", "pref margin", "reward acc"] { XCTAssert(table.contains(column), table) }
    }

    func testMaxSamplesAndTokenBudget() throws {
        let env = try makeEnv()
        var s = EvaluationSettings(evalData: env.eval)
        s.maxSamples = 2
        s.maxNewTokens = 3
        s.computeLoss = false
        let report = try EvaluationRun.run(s, base: env.base)
        XCTAssertEqual(report.models.map(\.label), ["base"], "no checkpoint: the base alone")
        XCTAssertEqual(report.samples, 2)
        XCTAssertEqual(report.maxNewTokens, 3)
        XCTAssertLessThanOrEqual(report.models[0].generatedTokens, 6)
    }

    func testRefusesAnEmptyFolderAndAnotherBase() throws {
        let env = try makeEnv()
        let empty = env.dir + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        var s = EvaluationSettings(evalData: env.eval)
        s.checkpointDir = empty
        XCTAssertThrowsError(try EvaluationRun.run(s, base: env.base)) { error in
            XCTAssertTrue("\(error.localizedDescription)".contains("no adapter-epoch"), "\(error)")
        }
        let otherDir = env.dir + "/other"
        try FileManager.default.createDirectory(atPath: otherDir, withIntermediateDirectories: true)
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: otherDir, seed: 2))
        var t = EvaluationSettings(evalData: env.eval)
        t.checkpoints = [env.runDir + "/adapter-final.safetensors"]
        XCTAssertThrowsError(try EvaluationRun.run(t, base: other)) { error in
            XCTAssertTrue(error.localizedDescription.contains(other.signature), "\(error.localizedDescription)")
        }
    }

    /// evaluate-adapter takes every adapter form generate takes: the checkpoint, its PEFT export
    /// (fp32: the same numbers) and its .fmadapter package (fp16: within rounding), and refuses
    /// each on another base naming both signatures.
    func testEveryAdapterFormEvaluatesAlike() throws {
        let env = try makeEnv()
        let checkpoint = env.runDir + "/adapter-final.safetensors"
        let adapter = try Adapter.load(checkpoint)
        let peft = env.dir + "/peft"
        try PEFTAdapter.write(adapter, to: peft)
        let package = try FMAdapterPackage.export(adapter: try Checkpoint.load(checkpoint), draft: nil,
                                                  options: PackageOptions(name: "forms"), outputDir: env.dir + "/packages")
        var s = EvaluationSettings(evalData: env.eval)
        s.checkpoints = [checkpoint, peft, package, peft + "/" + PEFTFormat.weightsFile]
        s.batchSize = 2
        let report = try EvaluationRun.run(s, base: env.base)
        XCTAssertEqual(report.models.count, 4)
        let (ck, fromPEFT, fromPackage, fromPEFTFile) = (report.models[0], report.models[1], report.models[2], report.models[3])
        XCTAssertEqual(fromPEFT.evalLoss, ck.evalLoss, "the PEFT export holds the checkpoint's fp32 tensors")
        XCTAssertEqual(fromPEFTFile.evalLoss, ck.evalLoss)
        XCTAssertEqual(fromPEFT.exactMatches, ck.exactMatches)
        XCTAssertEqual(fromPEFT.generatedTokens, ck.generatedTokens)
        XCTAssertEqual(fromPackage.evalLoss!, ck.evalLoss!, accuracy: 1e-3 * abs(ck.evalLoss!), "fp16 rounding only")
        XCTAssertNotNil(ck.step)
        XCTAssertNil(fromPEFT.step, "only checkpoints record a step")

        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("forms-other"), seed: 2))
        for path in [peft, package] {
            var t = EvaluationSettings(evalData: env.eval)
            t.checkpoints = [path]
            XCTAssertThrowsError(try EvaluationRun.run(t, base: other)) { error in
                let text = error.localizedDescription
                XCTAssertTrue(text.contains(other.signature) && text.contains(env.base.signature), "\(path): \(text)")
            }
        }
    }
}
