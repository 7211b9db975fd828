// Draft distillation on a base kept as its file stores it: the teacher's head is multiplied from
// the blocks (only a restricted head's rows unpacked), a draft with frozen embeddings keeps them
// stored, and the only float32 copies made are the blocks the draft trains (FrozenMatrix.fullCopies); the
// losses and metrics equal the float32 base's; the checkpoint leaves the base's embedding out and
// loads (engine, training model) by taking it from the base. Tiny block-type models only.
import Autograd
import DataSchema
@testable import Distillation
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class StoredBaseDraftTests: XCTestCase {
    /// A one-layer draft trains its block's seven projections: float32 copies of the base's
    /// blocks by nature (they change), the only ones a frozen-embedding draft makes.
    let trainedProjections = LoRATarget.allCases.count

    func prepare(_ base: BaseModel, _ path: String) throws -> PreparedData {
        try DataPreparation.prepare(DataSettings(trainData: path, evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                                                 packSequences: false, skipInvalid: false, batchSize: 3, seed: 0), base: base)
    }

    func testDraftObjectiveOnAStoredBaseEqualsFloat32WithoutCopies() throws {
        let dir = TinyAssets.tempDir()
        try TinyAssets.writeData(dir + "/train.jsonl", count: 6)
        for type in [GGMLType.q4_K, .q8_0] {
            let path = try TinyAssets.writeBlockModel(type, in: dir)
            let f32 = try BaseModel.load(path: path, storage: .float32), stored = try BaseModel.load(path: path, storage: .stored)
            let data = try prepare(f32, dir + "/train.jsonl")
            let vocab = DraftModel.taskVocabulary(examples: data.train.examples.map(\.inputs), extra: f32.stopTokenIds, vocabSize: f32.config.vocabSize)
            for vocabulary in [nil, vocab] {
                var losses: [[Float]] = [], metrics: [DraftEvalMetrics] = []
                for base in [f32, stored] {
                    let copies = FrozenMatrix.fullCopies.value
                    let draft = try DraftModel.fromBase(base, layers: 1, freezeEmbeddings: true, vocabulary: vocabulary)
                    let teacher = PrefixTeacher(base: base.weights, adapter: nil, sharedPrefix: [])
                    let objective = DraftObjective(draft: draft, teacher: teacher, head: base.weights.head, divergence: .reverse)
                    if base.weights.embedding.isStored {
                        XCTAssertNil(draft.model.embedTokens, "\(type): a frozen stored embedding stays stored")
                        XCTAssertTrue(objective.teacherFullHead.isStored)
                        XCTAssertFalse(draft.trainableParameters.contains { $0.name == TensorTable.embedding })
                        XCTAssertEqual(draft.baseEmbeddings.map(\.name), [TensorTable.embedding])
                    }
                    var rng = SeededRNG(seed: 0)
                    losses.append((0..<data.train.batchCount(epoch: 0)).map { i in
                        let l = objective.loss(data.train.batch(epoch: 0, index: i), rng: &rng, training: true)
                        l.backward()  // the draft's trained blocks get gradients; the stored embedding none
                        return l.data[0]
                    })
                    metrics.append(DraftEvaluation.measure(objective, data.train))
                    XCTAssertEqual(FrozenMatrix.fullCopies.value - copies, base.weights.embedding.isStored ? trainedProjections : 0,
                                   "\(type): the draft's trained projections are its only float32 copies (not the teacher's head, not the embedding)")
                }
                for (a, b) in zip(losses[0], losses[1]) { XCTAssertEqual(b, a, accuracy: 1e-4 * max(1, abs(a)), "\(type) vocabulary \(vocabulary?.count ?? 0)") }
                XCTAssertEqual(metrics[1].acceptance, metrics[0].acceptance, accuracy: 1e-4)
                XCTAssertEqual(metrics[1].klForward, metrics[0].klForward, accuracy: 1e-4)
                XCTAssertEqual(metrics[1].greedyAgreement, metrics[0].greedyAgreement, accuracy: 1e-9)
            }
        }
    }

    /// train-draft's library run with --freeze-embeddings on a stored base: the checkpoint leaves
    /// out the embedding (the base's), DraftEngine and DraftModel load it with the base's stored
    /// matrix and agree, and no stored matrix was copied while training or loading.
    func testFrozenEmbeddingDraftCheckpointOnAStoredBase() throws {
        let dir = TinyAssets.tempDir()
        try TinyAssets.writeData(dir + "/train.jsonl", count: 6)
        for tied in [true, false] {
            let base = try BaseModel.load(path: try TinyAssets.writeBlockModel(.q4_K, in: dir, tied: tied), storage: .stored)
            let runDir = dir + "/draft-\(tied)"
            let settings = DraftRunSettings(
                data: DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                                   packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
                teacherAdapter: nil, source: .baseLayers(1), freezeEmbeddings: true, divergence: .reverse, vocabulary: .task,
                checkpoints: CheckpointSettings(directory: runDir, frequency: 1, resumeFrom: nil, resume: false, keepBest: nil),
                makeOptions: { _ in
                    var o = TrainingOptions()
                    o.epochs = 4
                    o.learningRate = 1e-2
                    return o
                })
            let copies = FrozenMatrix.fullCopies.value
            var losses: [Float] = []
            let outcome = try DraftRun.run(settings, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { e in
                if case .step(let r, _, _, _) = e { losses.append(r.loss) }
            })
            XCTAssertEqual(FrozenMatrix.fullCopies.value - copies, trainedProjections, "training a frozen-embedding draft copies only the blocks it trains")
            guard case .finished(let final) = outcome else { return XCTFail("did not finish") }
            // per-batch losses differ a lot (3 batches an epoch): the last epoch's mean against the first's
            let perEpoch = losses.count / 4
            XCTAssertLessThan(losses.suffix(perEpoch).reduce(0, +), losses.prefix(perEpoch).reduce(0, +), "the divergence falls: \(losses)")
            let file = try CheckpointFile.load(final)
            let light = try CheckpointFile.load(final, moments: false)  // what inference and export read
            XCTAssertFalse(file.optimizerMoments.m.isEmpty)
            XCTAssertTrue(light.optimizerMoments.m.isEmpty && light.optimizerMoments.v.isEmpty)
            XCTAssertEqual(light.tensors, file.tensors)
            XCTAssertNil(file.tensors[TensorTable.embedding], "the base's embedding is not written into the draft")
            XCTAssertNil(file.tensors[TensorTable.head])
            XCTAssertNotNil(file.tensors[TensorTable.weight(layer: 0, target: .q)], "the trained blocks are")
            let weights = try DraftWeights.load(path: final, base: base)
            XCTAssertTrue(weights.weights.embedding.isStored)
            XCTAssertEqual(weights.weights.untiedHead?.isStored, tied ? nil : true)
            let engine = DraftEngine(weights)
            let draft = try DraftModel.load(checkpoint: try Checkpoint.load(final), base: base)
            let ids = base.tokenizer.encode("<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n")
            var rng = SeededRNG(seed: 0)
            let h = withNoGrad { draft.model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false) }
            let trainLogits = withNoGrad { draft.logits(hidden: h, rows: [ids.count - 1]) }.data
            let engineLogits = engine.nextLogits(ids, cache: engine.makeCache())
            XCTAssertEqual(engineLogits.count, trainLogits.count)
            for (a, b) in zip(engineLogits, trainLogits) { XCTAssertEqual(a, b, accuracy: 1e-3) }
            XCTAssertEqual(FrozenMatrix.fullCopies.value - copies, trainedProjections, "loading and running the draft copies no stored matrix")
            // (a package's draft is self-contained: export takes left-out tensors from the base,
            // ExportTests' testDraftLeavingOutSharedWeightsNeedsTheBase)
        }
    }
}
