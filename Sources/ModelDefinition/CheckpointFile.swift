// What a checkpoint file (adapter-*.safetensors, draft-model-*.safetensors) says about the model:
// the format marker and version, what it holds (adapter or draft), the base it was trained on
// (signature and config), the LoRA or draft shape, and the tensors. Training's Checkpoint adds
// the trainer state it needs to resume; everything that only loads an adapter or a draft reads this.
import Foundation
import ModelAssets

public enum CheckpointContent: String, Codable, Sendable {
    case adapter
    case draft
}

/// The model part of a checkpoint's header metadata (all values are strings in safetensors; JSON inside).
public struct CheckpointModelHeader: Sendable, Equatable {
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

    public init(content: CheckpointContent, baseSignature: String, baseConfig: ModelConfig, lora: LoRAConfig?,
                draftConfig: ModelConfig? = nil, draftLayers: [Int]? = nil, teacherAdapterSignature: String? = nil) {
        self.content = content
        self.baseSignature = baseSignature
        self.baseConfig = baseConfig
        self.lora = lora
        self.draftConfig = draftConfig
        self.draftLayers = draftLayers
        self.teacherAdapterSignature = teacherAdapterSignature
    }

    /// The keys this part writes, with the format marker and version.
    public func metadata() throws -> [String: String] {
        var m: [String: String] = [
            "format": Self.format,
            "format_version": String(Self.formatVersion),
            "content": content.rawValue,
            "base_signature": baseSignature,
            "base_config": try Self.json(baseConfig),
        ]
        if let lora { m["lora"] = try Self.json(lora) }
        if let draftConfig { m["draft_config"] = try Self.json(draftConfig) }
        if let draftLayers { m["draft_layers"] = try Self.json(draftLayers) }
        if let teacherAdapterSignature { m["teacher_adapter_signature"] = teacherAdapterSignature }
        return m
    }

    /// Reads the model part, refusing a file this toolkit did not write or a newer format.
    public init(metadata m: [String: String], path: String) throws {
        guard m["format"] == Self.format else {
            throw ModelError.checkpoint(path: path, reason: "it is a safetensors file but not one written by this toolkit (no format '\(Self.format)' in its header); pass an adapter-*.safetensors or draft-model-*.safetensors checkpoint")
        }
        guard let v = Int(try Self.need(m, "format_version", path)), v <= Self.formatVersion else {
            throw ModelError.checkpoint(path: path, reason: "checkpoint format version \(m["format_version"] ?? "?") is newer than this toolkit reads (\(Self.formatVersion)); update the toolkit")
        }
        guard let content = CheckpointContent(rawValue: try Self.need(m, "content", path)) else {
            throw ModelError.checkpoint(path: path, reason: "unknown content '\(m["content"]!)' (expected adapter or draft)")
        }
        self.content = content
        baseSignature = try Self.need(m, "base_signature", path)
        baseConfig = try Self.decode(ModelConfig.self, m, "base_config", path)
        lora = m["lora"] == nil ? nil : try Self.decode(LoRAConfig.self, m, "lora", path)
        if let lora {
            do { try lora.validate() } catch {
                throw ModelError.checkpoint(path: path, reason: "header key 'lora' is not valid: \(error.localizedDescription)")
            }
        }
        draftConfig = m["draft_config"] == nil ? nil : try Self.decode(ModelConfig.self, m, "draft_config", path)
        draftLayers = m["draft_layers"] == nil ? nil : try Self.decode([Int].self, m, "draft_layers", path)
        teacherAdapterSignature = m["teacher_adapter_signature"]
    }

    public static func need(_ m: [String: String], _ key: String, _ path: String) throws -> String {
        guard let v = m[key] else { throw ModelError.checkpoint(path: path, reason: "its header has no '\(key)'") }
        return v
    }

    public static func decode<T: Decodable>(_ t: T.Type, _ m: [String: String], _ key: String, _ path: String) throws -> T {
        let text = try need(m, key, path)
        do { return try JSONDecoder().decode(T.self, from: Data(text.utf8)) } catch {
            throw ModelError.checkpoint(path: path, reason: "header key '\(key)' is not valid: \(error)")
        }
    }

    public static func json<T: Encodable>(_ v: T) throws -> String {
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        return String(decoding: try enc.encode(v), as: UTF8.self)
    }
}

/// A checkpoint file read back: its header metadata, the model part of it, the trained (and
/// frozen) tensors by name, and the optimizer moments.
public struct CheckpointFile {
    public var path: String
    public var metadata: [String: String]
    public var model: CheckpointModelHeader
    public var tensors: [String: HostTensor]
    public var optimizerMoments: (m: [String: HostTensor], v: [String: HostTensor])

    public static let mPrefix = "optimizer.exp_avg."
    public static let vPrefix = "optimizer.exp_avg_sq."

    /// Reads a checkpoint. Without `moments` (inference, export) the optimizer moments, twice
    /// the trained tensors' size, are neither read nor checked and `optimizerMoments` is empty.
    public static func load(_ path: String, moments: Bool = true) throws -> CheckpointFile {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ModelError.checkpoint(path: path, reason: "no such file")
        }
        let file: SafetensorsFile
        do { file = try SafetensorsFile(path: path) } catch {
            throw ModelError.checkpoint(path: path, reason: "cannot be read as safetensors (\(error.localizedDescription))")
        }
        let model = try CheckpointModelHeader(metadata: file.metadata, path: path)
        var tensors: [String: HostTensor] = [:], m: [String: HostTensor] = [:], v: [String: HostTensor] = [:]
        for info in file.tensors {
            let isMoment = info.name.hasPrefix(mPrefix) || info.name.hasPrefix(vPrefix)
            if isMoment && !moments { continue }
            let t = try file.tensor(info.name)
            for x in t.data where !x.isFinite {
                throw ModelError.checkpoint(path: path, reason: "tensor '\(info.name)' holds a non-finite value")
            }
            if info.name.hasPrefix(mPrefix) { m[String(info.name.dropFirst(mPrefix.count))] = t }
            else if info.name.hasPrefix(vPrefix) { v[String(info.name.dropFirst(vPrefix.count))] = t }
            else { tensors[info.name] = t }
        }
        return CheckpointFile(path: path, metadata: file.metadata, model: model, tensors: tensors, optimizerMoments: (m, v))
    }

    /// Throws unless this is an adapter checkpoint trained on exactly `base`.
    public func requireAdapter(for base: BaseModel) throws {
        guard model.content == .adapter else {
            throw ModelError.incompatible(path: path, reason: "is a draft-model checkpoint, but an adapter checkpoint (adapter-*.safetensors) is expected here; pass a draft with --draft-checkpoint")
        }
        guard model.lora != nil else {
            throw ModelError.checkpoint(path: path, reason: "an adapter checkpoint without its LoRA configuration")
        }
        try requireBase(base)
    }

    /// Throws unless this is a draft-model checkpoint trained for exactly `base`.
    public func requireDraft(for base: BaseModel) throws {
        guard model.content == .draft else {
            throw ModelError.incompatible(path: path, reason: "is an adapter checkpoint, but a draft-model checkpoint (draft-model-*.safetensors, written by train-draft) is expected here; pass the adapter with --checkpoint")
        }
        try requireBase(base)
        guard let cfg = model.draftConfig, cfg.vocabSize == base.config.vocabSize else {
            throw ModelError.incompatible(path: path, reason: "is a draft whose vocabulary (\(model.draftConfig?.vocabSize ?? 0) tokens) differs from the base model's \(base.config.vocabSize); retrain the draft for this base")
        }
    }

    /// Throws unless the checkpoint was trained on the base model with `base`'s signature.
    public func requireBase(_ base: BaseModel) throws {
        guard base.recognizes(model.baseSignature) else {
            throw ModelError.incompatible(path: path, reason: "was trained on base model \(model.baseSignature), but the loaded base model \(base.path) is \(base.signature); load the base model it was trained on, or retrain")
        }
    }

    /// The adapter digest (`Adapter.signature`) of an adapter checkpoint's trained tensors.
    public var adapterSignature: String { Adapter.signature(lora: model.lora, tensors: tensors) }
}
