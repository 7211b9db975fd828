// Checkpoints: safetensors files holding the trained tensors, the AdamW moments, and in the
// header metadata everything needed to resume exactly (trainer state with the data position and
// RNG, options; the run id that names the run's log) besides the model part the model definition reads (CheckpointFile: base
// signature, LoRA shape, kind). Written atomically.
// File names: adapter-epoch{N}.safetensors, adapter-final.safetensors, adapter-interrupted.safetensors
// (and draft-model-* for drafts).
import Autograd
import Foundation
import ModelAssets
import ModelDefinition

/// The header metadata of a checkpoint: the model part (`CheckpointModelHeader`: what it holds,
/// for which base) and what resuming needs (trainer state, options, data fingerprint, label).
public struct CheckpointHeader: Sendable, Equatable {
    public var model: CheckpointModelHeader
    public var state: TrainerState
    public var options: TrainingOptions
    public var dataFingerprint: String
    public var label: String  // "epoch3", "final", "interrupted"
    /// The run that wrote it (its log's id, RunLog); nil in checkpoints from before run logs.
    public var runId: String?

    public var content: CheckpointContent { model.content }
    public var baseSignature: String { model.baseSignature }
    public var baseConfig: ModelConfig { model.baseConfig }
    public var lora: LoRAConfig? { model.lora }
    public var draftConfig: ModelConfig? { model.draftConfig }
    public var draftLayers: [Int]? { model.draftLayers }
    public var teacherAdapterSignature: String? { model.teacherAdapterSignature }

    public init(content: CheckpointContent, baseSignature: String, baseConfig: ModelConfig, lora: LoRAConfig?,
                draftConfig: ModelConfig? = nil, draftLayers: [Int]? = nil, teacherAdapterSignature: String? = nil,
                state: TrainerState, options: TrainingOptions, dataFingerprint: String, label: String, runId: String? = nil) {
        model = CheckpointModelHeader(content: content, baseSignature: baseSignature, baseConfig: baseConfig, lora: lora,
                                      draftConfig: draftConfig, draftLayers: draftLayers, teacherAdapterSignature: teacherAdapterSignature)
        self.state = state
        self.options = options
        self.dataFingerprint = dataFingerprint
        self.label = label
        self.runId = runId
    }

    public func metadata() throws -> [String: String] {
        var m = try model.metadata()
        m["trainer_state"] = try CheckpointModelHeader.json(state)
        m["training_options"] = try CheckpointModelHeader.json(options)
        m["data_fingerprint"] = dataFingerprint
        m["label"] = label
        if let runId { m["run_id"] = runId }
        return m
    }

    init(metadata m: [String: String], path: String) throws {
        model = try CheckpointModelHeader(metadata: m, path: path)
        state = try CheckpointModelHeader.decode(TrainerState.self, m, "trainer_state", path)
        options = try CheckpointModelHeader.decode(TrainingOptions.self, m, "training_options", path)
        dataFingerprint = try CheckpointModelHeader.need(m, "data_fingerprint", path)
        label = try CheckpointModelHeader.need(m, "label", path)
        runId = m["run_id"]
        // A resumed loop indexes batches and schedules with these: refuse values no run writes.
        for (key, v) in [("step", state.step), ("epoch", state.epoch), ("batchIndex", state.batchIndex),
                         ("optimizerStep", state.optimizerStep), ("epochs", options.epochs),
                         ("warmupSteps", options.warmupSteps), ("maxSteps", options.maxSteps ?? 0)] where v < 0 {
            throw TrainingError.checkpoint(path: path, reason: "header value '\(key)' is \(v); it must not be negative (the file is damaged)")
        }
    }
}

/// A checkpoint read back for training: the file (model part, tensors, optimizer moments) and
/// the trainer's header.
public struct Checkpoint {
    public var file: CheckpointFile
    public var header: CheckpointHeader

    public var path: String { file.path }
    public var tensors: [String: HostTensor] {
        get { file.tensors }
        set { file.tensors = newValue }
    }
    public var optimizerMoments: (m: [String: HostTensor], v: [String: HostTensor]) { file.optimizerMoments }

    public static let mPrefix = CheckpointFile.mPrefix
    public static let vPrefix = CheckpointFile.vPrefix

    /// Reads a checkpoint; `moments: false` skips the optimizer moments (see CheckpointFile.load).
    public static func load(_ path: String, moments: Bool = true) throws -> Checkpoint {
        let file = try CheckpointFile.load(path, moments: moments)
        return Checkpoint(file: file, header: try CheckpointHeader(metadata: file.metadata, path: path))
    }

    /// Throws unless this is an adapter checkpoint trained on exactly `base`.
    public func requireAdapter(for base: BaseModel) throws { try file.requireAdapter(for: base) }
    /// Throws unless this is a draft-model checkpoint trained for exactly `base`.
    public func requireDraft(for base: BaseModel) throws { try file.requireDraft(for: base) }
    /// Throws unless the checkpoint was trained on the base model with `base`'s signature.
    public func requireBase(_ base: BaseModel) throws { try file.requireBase(base) }
    /// The adapter digest of an adapter checkpoint's trained tensors (`Adapter.signature`).
    public var adapterSignature: String { file.adapterSignature }

    /// Writes `params` (and, when given, the optimizer's moments in the same order) atomically.
    public static func write(to path: String, header: CheckpointHeader, params: [(name: String, tensor: Tensor)],
                             optimizer: AdamW?) throws {
        var w = SafetensorsWriter(metadata: try header.metadata())
        for (i, p) in params.enumerated() {
            try w.add(p.name, HostTensor(shape: p.tensor.shape, data: p.tensor.data))
            if let optimizer {
                try w.add(mPrefix + p.name, HostTensor(shape: p.tensor.shape, data: optimizer.m[i]))
                try w.add(vPrefix + p.name, HostTensor(shape: p.tensor.shape, data: optimizer.v[i]))
            }
        }
        try AtomicFile.write(w.serialized(), to: path)
    }

    /// Copies the stored tensors into `params` (names and shapes must match exactly) and
    /// rebuilds the optimizer. Throws naming the first tensor that differs.
    public func restore(into params: [(name: String, tensor: Tensor)], weightDecay: Float) throws -> AdamW {
        var opt = AdamW(parameterSizes: params.map(\.tensor.count), weightDecay: weightDecay)
        let expected = Set(params.map(\.name)), stored = Set(tensors.keys)
        if let extra = stored.subtracting(expected).sorted().first {
            throw TrainingError.incompatible(path: path, reason: "holds tensor '\(extra)' that this model does not have (different LoRA targets or layer count?)")
        }
        for (i, p) in params.enumerated() {
            guard let t = tensors[p.name] else {
                throw TrainingError.incompatible(path: path, reason: "has no tensor '\(p.name)' (different LoRA targets or layer count?)")
            }
            guard t.shape == p.tensor.shape else {
                throw TrainingError.incompatible(path: path, reason: "tensor '\(p.name)' has shape \(t.shape), this model needs \(p.tensor.shape) (different rank?)")
            }
            p.tensor.data = t.data
            let mm = optimizerMoments.m[p.name], vv = optimizerMoments.v[p.name]
            guard (mm == nil) == (vv == nil) else {
                throw TrainingError.checkpoint(path: path, reason: "holds only one of the two AdamW moments of '\(p.name)' (the file is damaged)")
            }
            if let mm, let vv {
                guard mm.shape == t.shape, vv.shape == t.shape else {
                    throw TrainingError.checkpoint(path: path, reason: "the AdamW moments of '\(p.name)' have shapes \(mm.shape) and \(vv.shape), the tensor \(t.shape) (the file is damaged)")
                }
                opt.m[i] = mm.data
                opt.v[i] = vv.data
            }
        }
        opt.step = header.state.optimizerStep
        return opt
    }
}

/// Writes a run's checkpoints into its folder under the toolkit's names, and prunes by eval loss.
public final class FolderCheckpointer: Checkpointer {
    public let directory: String
    public let prefix: String  // "adapter" or "draft-model"
    let params: [(name: String, tensor: Tensor)]
    let makeHeader: (_ state: TrainerState, _ options: TrainingOptions, _ label: String) -> CheckpointHeader

    public init(directory: String, prefix: String, params: [(name: String, tensor: Tensor)],
                makeHeader: @escaping (TrainerState, TrainingOptions, String) -> CheckpointHeader) {
        self.directory = directory
        self.prefix = prefix
        self.params = params
        self.makeHeader = makeHeader
    }

    public func path(_ kind: CheckpointKind) -> String {
        switch kind {
        case .epoch(let n): "\(directory)/\(prefix)-epoch\(n).safetensors"
        case .final: "\(directory)/\(prefix)-final.safetensors"
        case .interrupted: "\(directory)/\(prefix)-interrupted.safetensors"
        }
    }

    public func save(_ kind: CheckpointKind, state: TrainerState, optimizer: AdamW, options: TrainingOptions) throws -> String {
        let label: String
        switch kind {
        case .epoch(let n): label = "epoch\(n)"
        case .final: label = "final"
        case .interrupted: label = "interrupted"
        }
        let p = path(kind)
        try Checkpoint.write(to: p, header: makeHeader(state, options, label), params: params, optimizer: optimizer)
        return p
    }

    public func prune(evals: [EvalRecord], keep: Int?) throws -> [String] {
        guard let keep, keep >= 0 else { return [] }
        let ranked = evals.filter { $0.loss.isFinite }.sorted { ($0.loss, $0.epoch) < ($1.loss, $1.epoch) }
        let kept = Set(ranked.prefix(keep).map(\.epoch))
        var removed: [String] = []
        for e in evals where !kept.contains(e.epoch) {
            let p = path(.epoch(e.epoch))
            if FileManager.default.fileExists(atPath: p) {
                do { try FileManager.default.removeItem(atPath: p) } catch {
                    throw TrainingError.io(path: p, reason: "cannot remove a pruned checkpoint: \(error.localizedDescription)")
                }
                removed.append(p)
            }
        }
        return removed
    }
}
