// A tiny base model on disk with a briefly trained adapter (and a hand-made draft), built on
// TestSupport's TinyAssets, so train → export → load runs in milliseconds without the network.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

/// A tiny base model on disk with a briefly trained adapter (and optionally a draft).
struct TinyRun {
    var dir: String
    var base: BaseModel
    var adapterPath: String

    /// Writes the base model and data into a fresh temp folder and trains a rank-4 adapter for
    /// a few steps (B moves away from zero, so the adapter changes the logits).
    static func make(_ name: String = #function, seed: UInt64 = 1, targets: [LoRATarget] = LoRATarget.allCases) throws -> TinyRun {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: seed))
        try TinyAssets.writeData(dir + "/train.jsonl", count: 8)
        let settings = AdapterRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8, targets: targets, dropout: 0),
            checkpoints: CheckpointSettings(directory: dir + "/run", frequency: 1, resumeFrom: nil, resume: false, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 2
                o.learningRate = 2e-2
                o.warmupSteps = 1
                o.seed = 11
                return o
            })
        let outcome = try AdapterRun.run(settings, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { _ in })
        guard case .finished(let path) = outcome else { throw XCTSkip("tiny training did not finish: \(outcome)") }
        return TinyRun(dir: dir, base: base, adapterPath: path)
    }

    /// A hand-made draft checkpoint: the base's layer 1 as a 1-layer draft, slightly perturbed.
    /// With `omitShared`, the embedding and final norm are left out (as a draft trained with
    /// frozen embeddings would), so packaging needs the base.
    func writeDraft(omitShared: Bool = false, baseSignature: String? = nil, teacher: String? = nil, vocabulary: [Int]? = nil,
                    name: String = "draft-model-final.safetensors") throws -> String {
        var cfg = base.config
        cfg.numLayers = 1
        var params: [(name: String, tensor: Tensor)] = []
        var rng = SeededRNG(seed: 5)
        for (n, shape) in TensorTable.shapes(for: cfg).sorted(by: { $0.key < $1.key }) {
            let shared = !n.hasPrefix("model.layers.")
            if omitShared && shared { continue }
            let source = n.replacingOccurrences(of: "model.layers.0.", with: "model.layers.1.")
            var values = base.file.tensors[source]!.data
            if !shared { for i in values.indices { values[i] += 0.01 * Float.random(in: -1...1, using: &rng) } }
            params.append((n, Tensor(shape: shape, data: values)))
        }
        if let vocabulary {
            params.append((DraftWeights.vocabularyTensorName, Tensor(shape: [vocabulary.count], data: vocabulary.map(Float.init))))
        }
        let header = CheckpointHeader(content: .draft, baseSignature: baseSignature ?? base.signature, baseConfig: base.config,
                                      lora: nil, draftConfig: cfg, draftLayers: [1], teacherAdapterSignature: teacher,
                                      state: TrainerState(seed: 1), options: TrainingOptions(), dataFingerprint: "test", label: "final")
        let path = dir + "/run/" + name
        try Checkpoint.write(to: path, header: header, params: params, optimizer: nil)
        return path
    }
}
