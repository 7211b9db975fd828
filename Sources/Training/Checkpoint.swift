// Checkpoints: safetensors files holding the trained tensors, the AdamW moments, and in the
// header metadata everything needed to resume exactly (trainer state with the data position and
// RNG, options) and to refuse a mismatch (base signature, LoRA shape, kind). Written atomically.
// File names: adapter-epoch{N}.safetensors, adapter-final.safetensors, adapter-interrupted.safetensors
// (and draft-model-* for drafts).
import Autograd
import Foundation
import ModelAssets

public enum CheckpointContent: String, Codable, Sendable {
    case adapter
    case draft
}

/// The header metadata of a checkpoint (all values are strings in safetensors; JSON inside).
public struct CheckpointHeader: Sendable, Equatable {
    public static let format = "adapter-toolkit-checkpoint"
    public static let formatVersion = 1

    public var content: CheckpointContent
    public var baseSignature: String
    public var baseConfig: ModelConfig
    public var lora: LoRAConfig?
    /// Draft checkpoints: the draft's own config (and, for a draft made from the base, its layer map).
    public var draftConfig: ModelConfig?
    public var draftLayers: [Int]?
    public var teacherAdapterSignature: String?
    public var state: TrainerState
    public var options: TrainingOptions
    public var dataFingerprint: String
    public var label: String  // "epoch3", "final", "interrupted"

    public init(content: CheckpointContent, baseSignature: String, baseConfig: ModelConfig, lora: LoRAConfig?,
                draftConfig: ModelConfig? = nil, draftLayers: [Int]? = nil, teacherAdapterSignature: String? = nil,
                state: TrainerState, options: TrainingOptions, dataFingerprint: String, label: String) {
        self.content = content
        self.baseSignature = baseSignature
        self.baseConfig = baseConfig
        self.lora = lora
        self.draftConfig = draftConfig
        self.draftLayers = draftLayers
        self.teacherAdapterSignature = teacherAdapterSignature
        self.state = state
        self.options = options
        self.dataFingerprint = dataFingerprint
        self.label = label
    }

    func metadata() throws -> [String: String] {
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        func json<T: Encodable>(_ v: T) throws -> String { String(decoding: try enc.encode(v), as: UTF8.self) }
        var m: [String: String] = [
            "format": Self.format,
            "format_version": String(Self.formatVersion),
            "content": content.rawValue,
            "base_signature": baseSignature,
            "base_config": try json(baseConfig),
            "trainer_state": try json(state),
            "training_options": try json(options),
            "data_fingerprint": dataFingerprint,
            "label": label,
        ]
        if let lora { m["lora"] = try json(lora) }
        if let draftConfig { m["draft_config"] = try json(draftConfig) }
        if let draftLayers { m["draft_layers"] = try json(draftLayers) }
        if let teacherAdapterSignature { m["teacher_adapter_signature"] = teacherAdapterSignature }
        return m
    }

    init(metadata m: [String: String], path: String) throws {
        func need(_ key: String) throws -> String {
            guard let v = m[key] else { throw TrainingError.checkpoint(path: path, reason: "its header has no '\(key)'") }
            return v
        }
        guard m["format"] == Self.format else {
            throw TrainingError.checkpoint(path: path, reason: "it is a safetensors file but not one written by this toolkit (no format '\(Self.format)' in its header); pass an adapter-*.safetensors or draft-model-*.safetensors checkpoint")
        }
        guard let v = Int(try need("format_version")), v <= Self.formatVersion else {
            throw TrainingError.checkpoint(path: path, reason: "checkpoint format version \(m["format_version"] ?? "?") is newer than this toolkit reads (\(Self.formatVersion)); update the toolkit")
        }
        let dec = JSONDecoder()
        func decode<T: Decodable>(_ t: T.Type, _ key: String) throws -> T {
            let text = try need(key)
            do { return try dec.decode(T.self, from: Data(text.utf8)) } catch {
                throw TrainingError.checkpoint(path: path, reason: "header key '\(key)' is not valid: \(error)")
            }
        }
        guard let content = CheckpointContent(rawValue: try need("content")) else {
            throw TrainingError.checkpoint(path: path, reason: "unknown content '\(m["content"]!)' (expected adapter or draft)")
        }
        self.content = content
        baseSignature = try need("base_signature")
        baseConfig = try decode(ModelConfig.self, "base_config")
        lora = m["lora"] == nil ? nil : try decode(LoRAConfig.self, "lora")
        draftConfig = m["draft_config"] == nil ? nil : try decode(ModelConfig.self, "draft_config")
        draftLayers = m["draft_layers"] == nil ? nil : try decode([Int].self, "draft_layers")
        teacherAdapterSignature = m["teacher_adapter_signature"]
        state = try decode(TrainerState.self, "trainer_state")
        options = try decode(TrainingOptions.self, "training_options")
        dataFingerprint = try need("data_fingerprint")
        label = try need("label")
        // A resumed loop indexes batches and schedules with these: refuse values no run writes.
        for (key, v) in [("step", state.step), ("epoch", state.epoch), ("batchIndex", state.batchIndex),
                         ("optimizerStep", state.optimizerStep), ("epochs", options.epochs),
                         ("warmupSteps", options.warmupSteps), ("maxSteps", options.maxSteps ?? 0)] where v < 0 {
            throw TrainingError.checkpoint(path: path, reason: "header value '\(key)' is \(v); it must not be negative (the file is damaged)")
        }
    }
}

/// A checkpoint read back: header, trained tensors by name, optimizer moments.
public struct Checkpoint {
    public var path: String
    public var header: CheckpointHeader
    public var tensors: [String: HostTensor]
    public var optimizerMoments: (m: [String: HostTensor], v: [String: HostTensor])

    static let mPrefix = "optimizer.exp_avg."
    static let vPrefix = "optimizer.exp_avg_sq."

    public static func load(_ path: String) throws -> Checkpoint {
        guard FileManager.default.fileExists(atPath: path) else {
            throw TrainingError.checkpoint(path: path, reason: "no such file")
        }
        let file: SafetensorsFile
        do { file = try SafetensorsFile(path: path) } catch {
            throw TrainingError.checkpoint(path: path, reason: "cannot be read as safetensors (\(error.localizedDescription))")
        }
        let header = try CheckpointHeader(metadata: file.metadata, path: path)
        var tensors: [String: HostTensor] = [:], m: [String: HostTensor] = [:], v: [String: HostTensor] = [:]
        for info in file.tensors {
            let t = try file.tensor(info.name)
            for x in t.data where !x.isFinite {
                throw TrainingError.checkpoint(path: path, reason: "tensor '\(info.name)' holds a non-finite value")
            }
            if info.name.hasPrefix(mPrefix) { m[String(info.name.dropFirst(mPrefix.count))] = t }
            else if info.name.hasPrefix(vPrefix) { v[String(info.name.dropFirst(vPrefix.count))] = t }
            else { tensors[info.name] = t }
        }
        return Checkpoint(path: path, header: header, tensors: tensors, optimizerMoments: (m, v))
    }

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
