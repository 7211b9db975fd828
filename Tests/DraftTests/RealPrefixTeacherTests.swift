// The KV-cache teacher on the real base model: for extraction samples that share their system
// message and schema, the hidden states with the prefix computed once match the training
// model's forward of each whole sample. Needs ADAPTER_BASE_MODEL (scripts/fetch-model.sh).
import Autograd
import DataSchema
import Distillation
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import Training
import XCTest

final class RealPrefixTeacherTests: XCTestCase {
    func testPrefixTeacherMatchesTheTrainingForwardOnSmolLM2() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let lines = try String(contentsOf: root.appendingPathComponent("examples/extraction/train.jsonl"), encoding: .utf8)
            .split(separator: "\n").prefix(3).joined(separator: "\n") + "\n"
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("real-prefix-teacher-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try lines.write(toFile: dir + "/train.jsonl", atomically: true, encoding: .utf8)
        let base = try BaseModel.load(path: path)
        let data = try DataPreparation.prepare(DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 320,
                                                            fixedSizedSequences: false, packSequences: false, skipInvalid: false,
                                                            batchSize: 3, seed: 0), base: base)
        let ex = data.train.examples
        let shared = Array(ex[0].inputs.prefix(Batcher.commonPrefix(ex)))
        XCTAssertGreaterThan(shared.count, 100, "extraction samples share the system message and schema")
        let teacher = TrainingPathTeacher(try LlamaModel(base: base.weights, adapter: nil))
        let fast = PrefixTeacher(base: base.weights, adapter: nil, sharedPrefix: shared)
        var worst = 0.0
        for ids in ex.map(\.inputs) {
            var rng = SeededRNG(seed: 0)
            let reference = withNoGrad { teacher.model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false) }.data
            let got = fast.hiddenStates(ids)
            XCTAssertEqual(got.count, reference.count)
            let scale = Double(reference.map { abs($0) }.max()!)
            for i in reference.indices { worst = max(worst, Double(abs(got[i] - reference[i])) / scale) }
        }
        print("PrefixTeacher vs the training forward on SmolLM2: largest difference \(worst) of the largest |hidden|")
        XCTAssertLessThan(worst, 1e-4)
        // and the distillation loss of a 4-layer draft on the batch, either way
        let draft = try DraftModel.fromBase(base, layers: 4, freezeEmbeddings: false, vocabulary: nil)
        var losses: [Float] = []
        for useFast in [false, true] {
            let objective = DraftObjective(draft: draft, teacher: useFast ? fast : teacher, head: base.weights.head, divergence: .forward)
            var rng = SeededRNG(seed: 0)
            losses.append(withNoGrad { objective.loss(data.train.batch(epoch: 0, index: 0), rng: &rng, training: false).data[0] })
        }
        print("draft loss with the training forward's teacher \(losses[0]), with PrefixTeacher \(losses[1])")
        XCTAssertEqual(losses[1], losses[0], accuracy: 1e-4 * abs(losses[0]))
    }
}
