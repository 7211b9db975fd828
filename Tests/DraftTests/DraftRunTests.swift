// train-draft's library path end to end on a tiny GGUF model: distillation from base + adapter
// lowers the divergence and writes draft-model checkpoints and per-epoch metrics; exact resume
// after a mid-epoch stop is bit for bit (and so is its log); every kind of wrong file is refused
// saying what it is; the adapter's and the draft's logs stay apart in one folder; and the α /
// speed-up arithmetic and the layer choice.
import Autograd
import DataSchema
import Distillation
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import RunLog
@testable import Training
import TestSupport
import XCTest

final class DraftRunTests: XCTestCase {
    struct Env {
        var dir: String
        var base: BaseModel
        var train: String
        var eval: String
        var adapter: String
    }

    /// A tiny base, data, and a quickly trained adapter for the teacher.
    func makeEnv(_ name: String = #function, seed: UInt64 = 1) throws -> Env {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: seed))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 10)
        try TinyAssets.writeData(dir + "/eval.jsonl", count: 4, offset: 5)
        let s = AdapterRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8), checkpoints: CheckpointSettings(directory: dir + "/adapter", frequency: 1, resumeFrom: nil, resume: false, keepBest: nil), makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 2
                o.learningRate = 2e-2
                return o
            })
        guard case .finished(let adapter) = try AdapterRun.run(s, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { _ in }) else {
            throw XCTSkip("adapter training did not finish")
        }
        return Env(dir: dir, base: base, train: dir + "/train.jsonl", eval: dir + "/eval.jsonl", adapter: adapter)
    }

    func settings(_ env: Env, runDir: String, epochs: Int = 2, lr: Float = 1e-2, source: DraftSource = .baseLayers(1),
                  teacher: String?? = .none, divergence: Divergence = .reverse, vocabulary: DraftVocabularyMode = .task,
                  freezeEmbeddings: Bool = false, pack: Bool = false, eval: Bool = true,
                  resumeFrom: String? = nil, resume: Bool = false) -> DraftRunSettings {
        var s = DraftRunSettings(
            data: DataSettings(trainData: env.train, evalData: eval ? env.eval : nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: pack, skipInvalid: false, batchSize: 2, seed: 3),
            teacherAdapter: teacher ?? env.adapter, source: source, freezeEmbeddings: freezeEmbeddings, divergence: divergence,
            vocabulary: vocabulary, checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: resumeFrom, resume: resume,
            keepBest: nil), makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = epochs
                o.learningRate = lr
                o.warmupSteps = 1
                o.seed = 11
                return o
            })
        // the KV-cache teacher with whatever prefix the samples share, however short
        s.teacherPrefixMinimum = 1
        return s
    }

    func run(_ s: DraftRunSettings, base: BaseModel, stopAfter: Int? = nil) throws -> (TrainingOutcome, [TrainingEvent], [DraftEpochMetrics]) {
        var events: [TrainingEvent] = []
        var metrics: [DraftEpochMetrics] = []
        var steps = 0
        let outcome = try DraftRun.run(s, base: base, shouldStop: { stopAfter.map { steps >= $0 } ?? false },
                                       notice: { if case .metrics(let m) = $0 { metrics.append(m) } },
                                       onEvent: { e in
                                           if case .step = e { steps += 1 }
                                           events.append(e)
                                       })
        return (outcome, events, metrics)
    }

    func message(_ e: Error) -> String { (e as? LocalizedError)?.errorDescription ?? "\(e)" }

    func testDistillationLowersDivergenceAndWritesCheckpointsAndMetrics() throws {
        let env = try makeEnv()
        for (divergence, vocabulary) in [(Divergence.reverse, DraftVocabularyMode.task), (.forward, .full), (.tvd, .task)] {
            let runDir = env.dir + "/draft-\(divergence.rawValue)"
            let (outcome, events, metrics) = try run(settings(env, runDir: runDir, epochs: 4, lr: 2e-2, divergence: divergence,
                                                              vocabulary: vocabulary), base: env.base)
            guard case .finished(let final) = outcome else { return XCTFail("did not finish") }
            let evals = events.compactMap { e -> EvalRecord? in if case .evaluated(let r) = e { return r } else { return nil } }
            XCTAssertEqual(evals.count, 4)
            XCTAssertLessThan(evals.last!.loss, evals.first!.loss, "\(divergence): eval divergence should fall: \(evals.map(\.loss))")
            XCTAssertEqual(metrics.count, 4, "metrics after every epoch")
            XCTAssertGreaterThan(metrics.last!.eval.acceptance, metrics.first!.eval.acceptance - 1e-3, "\(divergence): α \(metrics.map(\.eval.acceptance))")
            for m in metrics {
                XCTAssert((0...1).contains(m.eval.acceptance) && (0...1).contains(m.eval.greedyAgreement))
                XCTAssertEqual(m.eval.totalVariation, 1 - m.eval.acceptance, accuracy: 1e-4)
                XCTAssert(m.cost.ratio > 0 && m.cost.ratio.isFinite)
                XCTAssertEqual(m.estimates.map(\.gamma), Array(1...8))
            }
            for f in ["draft-model-epoch1.safetensors", "draft-model-epoch4.safetensors", "draft-model-final.safetensors", "draft/metrics.jsonl", "draft/loss-curve.svg"] {
                XCTAssert(FileManager.default.fileExists(atPath: runDir + "/" + f), "missing \(f)")
            }
            let lines = try String(contentsOfFile: runDir + "/draft/metrics.jsonl", encoding: .utf8).split(separator: "\n")
            let draftLines = lines.filter { $0.contains("\"type\":\"draft_eval\"") }
            XCTAssertEqual(draftLines.count, 4)
            XCTAssert(draftLines.allSatisfy { $0.contains("\"acceptance_rate\"") && $0.contains("\"cost_ratio\"") && $0.contains("\"best_gamma\"") })
            // the checkpoint is a draft for this base and this adapter, and it loads for inference
            let c = try Checkpoint.load(final)
            XCTAssertEqual(c.header.content, .draft)
            XCTAssertEqual(c.header.draftLayers, [1])
            XCTAssertEqual(c.header.teacherAdapterSignature, try Checkpoint.load(env.adapter).adapterSignature)
            let engine = try DraftEngine.load(path: final, base: env.base)
            XCTAssertEqual(engine.vocabulary == nil, vocabulary == .full)
            // the engine computes what the training model computes
            let draft = try DraftModel.load(checkpoint: c, base: env.base)
            let ids = env.base.tokenizer.encode("<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n")
            var rng = SeededRNG(seed: 0)
            let h = withNoGrad { draft.model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false) }
            let trainLogits = withNoGrad { draft.logits(hidden: h, rows: [ids.count - 1]) }.data
            let engineLogits = engine.nextLogits(ids, cache: engine.makeCache())
            XCTAssertEqual(engineLogits.count, trainLogits.count)
            for (a, b) in zip(engineLogits, trainLogits) { XCTAssertEqual(a, b, accuracy: 1e-3) }
        }
    }

    func testExactResumeAfterMidEpochStopIsBitIdentical() throws {
        let env = try makeEnv()
        for pack in [false, true] {
            let (full, _, _) = try run(settings(env, runDir: env.dir + "/full\(pack)", pack: pack), base: env.base)
            guard case .finished(let fullPath) = full else { return XCTFail("uninterrupted run did not finish") }
            let (first, _, _) = try run(settings(env, runDir: env.dir + "/split\(pack)", pack: pack), base: env.base, stopAfter: 3)
            guard case .interrupted(let stopPath) = first else { return XCTFail("run was not interrupted") }
            XCTAssertEqual(try Checkpoint.load(stopPath).header.state.step, 3)
            let (second, _, _) = try run(settings(env, runDir: env.dir + "/split\(pack)", pack: pack, resume: true), base: env.base)
            guard case .finished(let resumedPath) = second else { return XCTFail("resumed run did not finish") }
            let a = try Checkpoint.load(fullPath), b = try Checkpoint.load(resumedPath)
            XCTAssertEqual(Set(a.tensors.keys), Set(b.tensors.keys))
            for (name, t) in a.tensors {
                XCTAssertEqual(t.data, b.tensors[name]!.data, "pack=\(pack): \(name) differs after resume")
            }
            for (name, m) in a.optimizerMoments.v { XCTAssertEqual(m.data, b.optimizerMoments.v[name]!.data, "AdamW v of \(name)") }
            XCTAssertEqual(a.header.state.history.map(\.loss), b.header.state.history.map(\.loss))
            XCTAssertEqual(a.header.state.evals, b.header.state.evals)
            // the log: every step once with the same losses, the draft measurements of both epochs once
            let fullLog = try logRows(env.dir + "/full\(pack)/draft/metrics.jsonl"), splitLog = try logRows(env.dir + "/split\(pack)/draft/metrics.jsonl")
            for type in ["train", "eval"] {
                XCTAssertEqual(rows(splitLog, type).map { $0["step"] as? Int }, rows(fullLog, type).map { $0["step"] as? Int }, type)
                XCTAssertEqual(rows(splitLog, type).map { $0["loss"] as? Double }, rows(fullLog, type).map { $0["loss"] as? Double }, type)
            }
            XCTAssertEqual(rows(splitLog, "draft_eval").map { $0["step"] as? Int }, rows(fullLog, "draft_eval").map { $0["step"] as? Int })
            XCTAssertEqual(rows(splitLog, "draft_eval").map { $0["acceptance_rate"] as? Double },
                           rows(fullLog, "draft_eval").map { $0["acceptance_rate"] as? Double })
            XCTAssertEqual(rows(splitLog, "resume").count, 1)
        }
    }

    func logRows(_ path: String) throws -> [[String: Any]] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    func rows(_ all: [[String: Any]], _ type: String) -> [[String: Any]] { all.filter { $0["type"] as? String == type } }

    /// The main job's order in one folder: an adapter, then a draft distilled from it. Each keeps
    /// its own log, curve and event files (a TensorBoard run each), and the draft's run leaves the
    /// adapter's log as it was.
    func testAdapterAndDraftInOneFolderKeepSeparateLogs() throws {
        let env = try makeEnv()
        let folder = URL(fileURLWithPath: env.adapter).deletingLastPathComponent().path
        let adapterLog = try String(contentsOfFile: folder + "/adapter/metrics.jsonl", encoding: .utf8)
        let adapterEvents = EventFileContents.files(in: folder + "/adapter")
        let (outcome, _, _) = try run(settings(env, runDir: folder, epochs: 2), base: env.base)
        guard case .finished = outcome else { return XCTFail("did not finish") }
        XCTAssertEqual(try String(contentsOfFile: folder + "/adapter/metrics.jsonl", encoding: .utf8), adapterLog, "the adapter's log is untouched")
        XCTAssertEqual(EventFileContents.files(in: folder + "/adapter"), adapterEvents)
        let draft = try logRows(folder + "/draft/metrics.jsonl")
        XCTAssertEqual(draft[0]["kind"] as? String, "draft")
        XCTAssertNotEqual(draft[0]["run_id"] as? String, try logRows(folder + "/adapter/metrics.jsonl")[0]["run_id"] as? String)
        XCTAssertEqual(rows(draft, "train").map { $0["step"] as? Int }, Array(1...10))
        XCTAssertEqual(rows(draft, "draft_eval").count, 2)
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder + "/metrics.jsonl"))
        XCTAssert(try String(contentsOfFile: folder + "/draft/loss-curve.svg", encoding: .utf8).contains("draft distillation (reverse divergence) on train.jsonl"))
        XCTAssert(try String(contentsOfFile: folder + "/adapter/loss-curve.svg", encoding: .utf8).contains("adapter training on train.jsonl"))
        // the draft's event file holds its rows' scalars: the γ table included
        let files = EventFileContents.files(in: folder + "/draft")
        XCTAssertEqual(files.count, 1)
        let events = try EventFileContents(path: files[0]).scalars
        let expected = draft.flatMap { row in MetricScalars.scalars(of: row).map { "\($0.tag)@\(row["step"] as? Int ?? -1)=\(Float($0.value))" } }
        XCTAssertEqual(events.map { "\($0.tag)@\($0.step)=\($0.value)" }, expected)
        XCTAssert(events.contains { $0.tag == "draft/expected_speedup/gamma_3" } && events.contains { $0.tag == "draft/acceptance_rate" })
    }

    func testWrongFilesAreRefusedSayingWhatTheyAre() throws {
        let env = try makeEnv()
        let (outcome, _, _) = try run(settings(env, runDir: env.dir + "/draft", epochs: 1, eval: false), base: env.base, stopAfter: 2)
        guard case .interrupted(let draftPath) = outcome else { return XCTFail() }

        // a draft checkpoint where an adapter is expected: as the teacher, and for generation
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/a", teacher: draftPath), base: env.base)) { e in
            XCTAssert(message(e).contains("is a draft-model checkpoint") && message(e).contains("adapter checkpoint"), message(e))
        }
        XCTAssertThrowsError(try LoadedModel.load(base: env.base, adapter: draftPath)) { e in
            XCTAssert(message(e).contains("is a draft-model checkpoint"), message(e))
        }
        // an adapter checkpoint where a draft is expected: for generation, and to resume a draft run
        XCTAssertThrowsError(try DraftEngine.load(path: env.adapter, base: env.base)) { e in
            XCTAssert(message(e).contains("is an adapter checkpoint") && message(e).contains("draft-model checkpoint"), message(e))
        }
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/b", resumeFrom: env.adapter), base: env.base)) { e in
            XCTAssert(message(e).contains("is an adapter checkpoint"), message(e))
        }
        // a teacher adapter, and a draft, for another base
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("other"), seed: 99))
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/c"), base: other)) { e in
            XCTAssert(message(e).contains(env.base.signature) && message(e).contains(other.signature), message(e))
        }
        XCTAssertThrowsError(try DraftEngine.load(path: draftPath, base: other)) { e in
            XCTAssert(message(e).contains(env.base.signature) && message(e).contains(other.signature), message(e))
        }
        // a draft model with another vocabulary
        let foreign = try TinyAssets.writeModel(in: env.dir, seed: 3, name: "foreign", layers: 1, extraMerges: ["Ġ b"])
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/d", source: .model(path: foreign)), base: env.base)) { e in
            XCTAssert(message(e).contains(foreign) && message(e).contains("vocabulary"), message(e))
        }
        // the same vocabulary is accepted
        let small = try TinyAssets.writeModel(in: env.dir, seed: 4, name: "small", layers: 1)
        XCTAssertNoThrow(try run(settings(env, runDir: env.dir + "/e", epochs: 1, source: .model(path: small), eval: false), base: env.base))
        // resuming as another kind of draft, or from another teacher
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/f", divergence: .tvd, eval: false, resumeFrom: draftPath), base: env.base)) { e in
            XCTAssert(message(e).contains("different draft"), message(e))
        }
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/g", teacher: .some(nil), eval: false, resumeFrom: draftPath), base: env.base)) { e in
            XCTAssert(message(e).contains("bare base model"), message(e))
        }
        // --draft-layers beyond the base
        XCTAssertThrowsError(try run(settings(env, runDir: env.dir + "/h", source: .baseLayers(3)), base: env.base)) { e in
            XCTAssert(message(e).contains("--draft-layers"), message(e))
        }
    }

    func testMetricsOfADraftEqualToItsTeacher() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 6)
        let data = try DataPreparation.prepare(DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64,
                                                            fixedSizedSequences: false, packSequences: false, skipInvalid: false,
                                                            batchSize: 2, seed: 0), base: base)
        let teacher = TrainingPathTeacher(try LlamaModel(base: base.weights, adapter: nil))
        let same = try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: nil)
        let m = DraftEvaluation.measure(DraftObjective(draft: same, teacher: teacher, head: base.weights.head, divergence: .reverse), data.train)
        XCTAssertEqual(m.positions, data.trainTargetTokens)
        XCTAssertEqual(m.acceptance, 1, accuracy: 1e-4)
        XCTAssertEqual(m.greedyAgreement, 1)
        XCTAssertEqual(m.klReverse, 0, accuracy: 1e-4)
        XCTAssertEqual(m.klForward, 0, accuracy: 1e-4)
        // a restricted head loses exactly the teacher mass outside it
        let vocab = DraftModel.taskVocabulary(examples: data.train.examples.map(\.inputs), extra: base.stopTokenIds, vocabSize: base.config.vocabSize)
        let restricted = try DraftModel.fromBase(base, layers: 2, freezeEmbeddings: false, vocabulary: vocab)
        let r = DraftEvaluation.measure(DraftObjective(draft: restricted, teacher: teacher, head: base.weights.head, divergence: .reverse), data.train)
        XCTAssertGreaterThan(r.teacherMassOutsideHead, 0)
        XCTAssertLessThan(r.acceptance, 1)
        XCTAssertEqual(r.acceptance + r.teacherMassOutsideHead, 1, accuracy: 1e-3)
    }

    /// The teacher sees each sample whole (shared prompt prefix + its rest), so the draft's loss on a
    /// shared-prefix batch is the padded batch's.
    func testDraftLossIsTheSameWithSharedPrefixes() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
        let lines = words.map { #"{"messages": [{"role": "system", "content": "Repeat the word in upper case, please, and nothing else at all."}, {"role": "user", "content": "say \#($0)"}, {"role": "assistant", "content": "\#($0.uppercased())"}]}"# }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/train.jsonl", atomically: true, encoding: .utf8)
        let teacher = TrainingPathTeacher(try LlamaModel(base: base.weights, adapter: nil))
        let draft = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: nil)
        var losses: [[Float]] = []
        var sharedBatches = 0
        for share in [false, true] {
            let data = try DataPreparation.prepare(DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 128,
                                                                fixedSizedSequences: false, packSequences: false, skipInvalid: false,
                                                                batchSize: 3, seed: 0, sharePrefix: share), base: base)
            let objective = DraftObjective(draft: draft, teacher: teacher, head: base.weights.head, divergence: .reverse)
            var rng = SeededRNG(seed: 0)
            losses.append((0..<data.train.batchCount(epoch: 0)).map { i in
                let batch = data.train.batch(epoch: 0, index: i)
                if batch.segmentIds.contains(Batch.sharedSegment) { sharedBatches += 1 }
                return withNoGrad { objective.loss(batch, rng: &rng, training: false).data[0] }
            })
        }
        XCTAssertEqual(sharedBatches, 2, "both batches of 3 share the system prompt")
        XCTAssertEqual(losses[0].count, losses[1].count)
        for (a, b) in zip(losses[0], losses[1]) { XCTAssertEqual(a, b, accuracy: 1e-5 * max(1, abs(a))) }
    }

    /// The KV-cache teacher with the data's shared prefix computed once gives the training
    /// model's hidden states and the same draft loss, and a sample without the prefix runs whole.
    func testPrefixTeacherMatchesTheTrainingModelsTeacher() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        let words = ["alpha", "bravo", "charlie", "delta"]
        let lines = words.map { #"{"messages": [{"role": "system", "content": "Repeat the word in upper case, please, and nothing else at all."}, {"role": "user", "content": "say \#($0)"}, {"role": "assistant", "content": "\#($0.uppercased())"}]}"# }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/train.jsonl", atomically: true, encoding: .utf8)
        let data = try DataPreparation.prepare(DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 128,
                                                            fixedSizedSequences: false, packSequences: false, skipInvalid: false,
                                                            batchSize: 2, seed: 0, sharePrefix: true), base: base)
        let ex = data.train.examples
        let shared = Array(ex[0].inputs.prefix(Batcher.commonPrefix(ex)))
        XCTAssertGreaterThanOrEqual(shared.count, 16, "the samples share their system message")
        let teacher = TrainingPathTeacher(try LlamaModel(base: base.weights, adapter: nil))
        let fast = PrefixTeacher(base: base.weights, adapter: nil, sharedPrefix: shared)
        XCTAssertEqual(fast.prefix, shared)
        let D = base.config.hiddenSize
        for ids in ex.map(\.inputs) + [Array(ex[0].inputs.suffix(5))] {
            var rng = SeededRNG(seed: 0)
            let reference = withNoGrad { teacher.model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false) }.data
            let got = fast.hiddenStates(ids)
            XCTAssertEqual(got.count, ids.count * D)
            let scale = reference.map { abs($0) }.max()!
            for i in reference.indices { XCTAssertEqual(got[i], reference[i], accuracy: 1e-5 * scale, "\(ids.count) tokens, element \(i)") }
        }
        let draft = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: false, vocabulary: nil)
        var losses: [[Float]] = []
        for useFast in [false, true] {
            let objective = DraftObjective(draft: draft, teacher: useFast ? fast : teacher, head: base.weights.head, divergence: .reverse)
            var rng = SeededRNG(seed: 0)
            losses.append((0..<data.train.batchCount(epoch: 0)).map { i in
                withNoGrad { objective.loss(data.train.batch(epoch: 0, index: i), rng: &rng, training: false).data[0] }
            })
        }
        for (a, b) in zip(losses[0], losses[1]) { XCTAssertEqual(a, b, accuracy: 1e-4 * max(1, abs(a))) }
    }

    func testSpeedupArithmeticAndLayerChoice() {
        XCTAssertEqual(SpeculativeMath.tokensPerTargetCall(alpha: 0.5, gamma: 1), 1.5, accuracy: 1e-12)
        XCTAssertEqual(SpeculativeMath.tokensPerTargetCall(alpha: 0.8, gamma: 4), (1 - pow(0.8, 5)) / 0.2, accuracy: 1e-12)
        XCTAssertEqual(SpeculativeMath.tokensPerTargetCall(alpha: 1, gamma: 5), 6)
        XCTAssertEqual(SpeculativeMath.tokensPerTargetCall(alpha: 0, gamma: 5), 1)
        XCTAssertEqual(SpeculativeMath.speedup(alpha: 0.8, gamma: 4, costRatio: 0.1), (1 - pow(0.8, 5)) / 0.2 / 1.4, accuracy: 1e-12)
        // α = 0.8: best γ 8 at c = 0.05 (speed-up 3.09), 6 at c = 0.1 (2.47); c = 1 never pays
        XCTAssertEqual(SpeculativeMath.best(SpeculativeMath.table(alpha: 0.8, costRatio: 0.05))!.gamma, 8)
        XCTAssertEqual(SpeculativeMath.best(SpeculativeMath.table(alpha: 0.8, costRatio: 0.1))!.gamma, 6)
        XCTAssertEqual(SpeculativeMath.best(SpeculativeMath.table(alpha: 0.8, costRatio: 0.1))!.speedup, 3.9514 / 1.6, accuracy: 1e-3)
        XCTAssertLessThan(SpeculativeMath.best(SpeculativeMath.table(alpha: 0.6, costRatio: 1))!.speedup, 1)
        XCTAssertEqual(DraftModel.evenlySpacedLayers(4, of: 30), [0, 10, 19, 29])
        XCTAssertEqual(DraftModel.evenlySpacedLayers(2, of: 30), [0, 29])
        XCTAssertEqual(DraftModel.evenlySpacedLayers(1, of: 30), [29])
        XCTAssertEqual(DraftModel.evenlySpacedLayers(3, of: 3), [0, 1, 2])
    }
}
