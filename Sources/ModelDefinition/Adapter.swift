// A trained LoRA adapter as a value, whatever form it came in: an adapter checkpoint
// (adapter-*.safetensors), an .fmadapter package, or a PEFT folder (adapter_config.json +
// adapter_model.safetensors, or that .safetensors file itself). Checked against the tensor table
// when loaded, refused on the wrong base naming both signatures, and merged into a frozen weight
// (W + scale·B·A) for exports and the float32 executors; on a fused module (Phi-3) each projection's
// factors are the module's A and its rows of B. Follows PEFT's LoraLayer for the update.
import Autograd
import Foundation
import ModelAssets

public struct Adapter: Sendable {
    /// Where it was read from (for messages).
    public var source: String
    public var lora: LoRAConfig
    /// The config of the base it was trained on.
    public var baseConfig: ModelConfig
    /// The base model signature it was trained on; nil for a PEFT folder written elsewhere,
    /// which records none (then only the shapes can be checked).
    public var baseSignature: String?
    /// In `TensorTable.loraTensors` order.
    public var tensors: [(name: String, tensor: HostTensor)]

    public init(source: String, lora: LoRAConfig, baseConfig: ModelConfig, baseSignature: String?,
                tensors: [(name: String, tensor: HostTensor)]) {
        self.source = source
        self.lora = lora
        self.baseConfig = baseConfig
        self.baseSignature = baseSignature
        self.tensors = tensors
    }

    public var scale: Float { lora.scale }

    /// A [r, in] and B [out, r] of one projection; nil when the adapter does not target it. On a
    /// fused module (Phi-3's qkv_proj, gate_up_proj: one A, one B over the whole output) the
    /// projection's term is the module's A and the rows of B that make its outputs.
    public func factors(layer: Int, target: LoRATarget) -> (a: HostTensor, b: HostTensor)? {
        guard lora.targets.contains(target) else { return nil }
        let modules = TensorTable.loraModules(config: baseConfig, targets: lora.targets)
        guard let mi = modules.firstIndex(where: { $0.parts.contains(target) }) else { return nil }
        let i = (layer * modules.count + mi) * 2
        let a = tensors[i].tensor, b = tensors[i + 1].tensor
        guard modules[mi].parts.count > 1 else { return (a, b) }
        var start = 0
        for t in modules[mi].parts where t != target { if t < target { start += TensorTable.dimensions(t, config: baseConfig).out } }
        let rows = TensorTable.dimensions(target, config: baseConfig).out, r = lora.rank
        return (a, HostTensor(shape: [rows, r], data: Array(b.data[(start * r)..<((start + rows) * r)])))
    }

    /// `weight` [out, in] with this adapter's update added: W + scale·B·A (the weight itself when
    /// the projection is not targeted).
    public func merged(_ weight: FrozenMatrix, layer: Int, target: LoRATarget) -> [Float] {
        var w = weight.values
        guard let (a, b) = factors(layer: layer, target: target) else { return w }
        a.data.withUnsafeBufferPointer { ap in
            b.data.withUnsafeBufferPointer { bp in
                w.withUnsafeMutableBufferPointer { wp in
                    BLAS.sgemm(transA: false, transB: false, m: weight.rows, n: weight.columns, k: lora.rank, alpha: scale,
                               a: bp.baseAddress!, lda: lora.rank, b: ap.baseAddress!, ldb: weight.columns, beta: 1,
                               c: wp.baseAddress!, ldc: weight.columns)
                }
            }
        }
        return w
    }

    /// The base's weights with this adapter merged into every targeted projection.
    public func merged(into base: BaseWeights) throws -> BaseWeights {
        var named = base.tensorDictionary
        for (i, layer) in base.layers.enumerated() {
            for t in lora.targets {
                let p = layer.projection(t)
                named[TensorTable.weight(layer: i, target: t)] = HostTensor(shape: p.shape, data: merged(p, layer: i, target: t))
            }
        }
        return try BaseWeights(config: base.config, tensors: named)
    }

    /// Throws naming both signatures unless these weights were trained on `base`; for a PEFT
    /// folder that records no signature, unless its shapes fit `base`.
    public func requireBase(_ base: BaseModel) throws {
        guard let baseSignature else {
            guard TensorTable.loraTensors(config: base.config, lora: lora).map(\.shape) == tensors.map(\.tensor.shape) else {
                throw ModelError.incompatible(path: source, reason: "its tensors do not fit the loaded base model \(base.path) (\(base.config.numLayers) layers, hidden \(base.config.hiddenSize)); load the base model it was trained on")
            }
            return
        }
        guard base.recognizes(baseSignature) else {
            throw ModelError.incompatible(path: source, reason: "was trained on base model \(baseSignature), but the loaded base model \(base.path) is \(base.signature); load the base model it was trained on, or retrain")
        }
    }

    /// A stable digest of an adapter's trained tensors and LoRA shape: recorded in a draft's
    /// header so that a draft can say which adapter it was distilled from.
    public static func signature(lora: LoRAConfig?, tensors: [String: HostTensor]) -> String {
        var parts: [Data] = []
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        if let lora, let json = try? enc.encode(lora) { parts.append(json) }
        for name in tensors.keys.sorted() {
            parts.append(Data(name.utf8))
            tensors[name]!.data.withUnsafeBytes { parts.append(Data($0)) }
        }
        var hasher = SHA256()
        for p in parts {  // each part length-prefixed (the same digest as Training's Fingerprint.sha256)
            var n = UInt64(p.count).littleEndian
            hasher.update(data: Data(bytes: &n, count: 8))
            hasher.update(data: p)
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// This adapter's digest (see `signature(lora:tensors:)`).
    public var signature: String {
        Adapter.signature(lora: lora, tensors: Dictionary(uniqueKeysWithValues: tensors.map { ($0.name, $0.tensor) }))
    }

    // MARK: loading

    /// Reads an adapter in any form: an adapter checkpoint file, an .fmadapter package folder, a
    /// PEFT folder, or a PEFT adapter_model.safetensors file (its adapter_config.json beside it).
    /// `base` is needed only for a PEFT folder written by another tool (it records no base).
    public static func load(_ path: String, base: BaseModel? = nil) throws -> Adapter {
        switch form(of: path) {
        case .peft(let folder): return try loadPEFT(folder: folder, base: base)
        case .package: return try FMAdapterPackage.load(path).adapter
        case .checkpoint:
            guard FileManager.default.fileExists(atPath: path) else {
                throw ModelError.io(path: path, reason: "no such file or folder; an adapter is \(acceptedForms)")
            }
            return try fromCheckpoint(CheckpointFile.load(path, moments: false))
        }
    }

    /// The forms `load` reads, in the words the tools' `--help` and the loader's errors use: one
    /// list, so a tool's help cannot fall behind the loader (Tests/CLISupportTests holds every
    /// adapter option's help to it).
    public static let formDescriptions = [
        "an adapter checkpoint (adapter-*.safetensors)",
        "an .fmadapter package",
        "a PEFT folder (adapter_config.json + adapter_model.safetensors, or that .safetensors file)",
    ]

    /// `formDescriptions` as one phrase: "a, b or c".
    public static var acceptedForms: String {
        formDescriptions.dropLast().joined(separator: ", ") + " or " + formDescriptions.last!
    }

    /// The forms an adapter is stored in.
    public enum Form: Equatable {
        /// A PEFT folder (the folder, when `path` names it or its adapter_model.safetensors).
        case peft(folder: String)
        case package
        case checkpoint
    }

    /// Which form `path` names: a PEFT folder, else an .fmadapter package, else a checkpoint file.
    public static func form(of path: String) -> Form {
        if let folder = PEFTFormat.folder(of: path) { return .peft(folder: folder) }
        return FMAdapterPackage.looksLikePackage(path) ? .package : .checkpoint
    }

    /// The adapter of a checkpoint, refusing a draft checkpoint or one whose tensors do not match
    /// its own LoRA config.
    public static func fromCheckpoint(_ ck: CheckpointFile) throws -> Adapter {
        guard ck.model.content == .adapter else {
            throw ModelError.incompatible(path: ck.path, reason: "is a draft-model checkpoint, but an adapter checkpoint (adapter-*.safetensors) is expected here; pass a draft with --draft-checkpoint")
        }
        guard let lora = ck.model.lora else {
            throw ModelError.incompatible(path: ck.path, reason: "is an adapter checkpoint without its LoRA configuration in the header; it was not written by this toolkit's trainer")
        }
        let tensors = try TensorTable.orderedLoRA(ck.tensors, config: ck.model.baseConfig, lora: lora) {
            ModelError.incompatible(path: ck.path, reason: $0)
        }
        return Adapter(source: ck.path, lora: lora, baseConfig: ck.model.baseConfig, baseSignature: ck.model.baseSignature, tensors: tensors)
    }

    /// Reads a PEFT LoRA folder: its LoRA config and tensors under the toolkit's names, checked
    /// against the base config the toolkit records beside them, or, for a folder written by
    /// another tool (no record), against `base`'s config. Refuses what the toolkit cannot
    /// represent (DoRA, rsLoRA, per-module ranks, other targets).
    public static func loadPEFT(folder: String, base: BaseModel? = nil) throws -> Adapter {
        let (lora, tensors, signature, recorded) = try PEFTFormat.read(folder: folder)
        let weightsPath = folder + "/" + PEFTFormat.weightsFile
        guard let config = recorded ?? base?.config else {
            throw ModelError.incompatible(path: folder, reason: "is a PEFT adapter that does not record its base model; give the base model it was trained on (--base-model) so its shapes can be checked")
        }
        let ordered = try TensorTable.orderedLoRA(tensors, config: config, lora: lora) {
            ModelError.incompatible(path: weightsPath, reason: recorded == nil ? "does not fit the base model \(base!.path): \($0)" : $0)
        }
        return Adapter(source: folder, lora: lora, baseConfig: config, baseSignature: signature, tensors: ordered)
    }
}

/// PEFT's adapter folder: names, and reading it back (writing lives in Export).
public enum PEFTFormat {
    public static let configFile = "adapter_config.json"
    public static let weightsFile = "adapter_model.safetensors"
    /// PEFT's prefix in front of the model's own module names.
    public static let prefix = "base_model.model."
    /// Safetensors metadata keys the toolkit adds (PEFT ignores them): the base it was trained on.
    public static let signatureKey = "adapter_toolkit.base_signature"
    public static let configKey = "adapter_toolkit.base_config"

    /// The PEFT folder `path` names (the folder, or its adapter_model.safetensors), or nil.
    public static func folder(of path: String) -> String? {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else { return nil }
        let folder = isDir.boolValue ? path : URL(fileURLWithPath: path).deletingLastPathComponent().path
        if !isDir.boolValue && URL(fileURLWithPath: path).lastPathComponent != weightsFile { return nil }
        return FileManager.default.fileExists(atPath: folder + "/" + configFile) ? folder : nil
    }

    /// The folder's LoRA config, tensors under the toolkit's names, and, when the toolkit wrote
    /// it, the base signature and config.
    public static func read(folder: String) throws -> (lora: LoRAConfig, tensors: [String: HostTensor], signature: String?, config: ModelConfig?) {
        let configPath = folder + "/" + configFile
        guard let data = FileManager.default.contents(atPath: configPath) else {
            throw ModelError.io(path: configPath, reason: "no such file; a PEFT adapter folder holds \(configFile) and \(weightsFile)")
        }
        let cfg: [String: MetadataValue]
        do { cfg = try MetadataValue.parseObject(String(decoding: data, as: UTF8.self), what: configPath) } catch {
            throw ModelError.io(path: configPath, reason: "is not a JSON object")
        }
        func bad(_ reason: String) -> ModelError { .incompatible(path: configPath, reason: reason) }
        guard case .string("LORA") = cfg["peft_type"] ?? .null else { throw bad("peft_type is not LORA") }
        guard case .int(let r) = cfg["r"] ?? .null, r >= 1 else { throw bad("'r' is missing or not a positive integer") }
        let alpha: Float
        switch cfg["lora_alpha"] ?? .null {
        case .int(let a): alpha = Float(a)
        case .double(let a): alpha = Float(a)
        default: throw bad("'lora_alpha' is missing or not a number")
        }
        for key in ["use_dora", "use_rslora", "fan_in_fan_out"] where cfg[key] == .bool(true) {
            throw bad("'\(key)' is true; the toolkit reads plain LoRA adapters only")
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if case .object(let o) = cfg[key] ?? .null, !o.isEmpty { throw bad("'\(key)' is not empty; per-module ranks are not supported") }
        }
        guard case .array(let mods) = cfg["target_modules"] ?? .null else { throw bad("'target_modules' must be a list of module names") }
        var targets: [LoRATarget] = []
        for m in mods {
            // Phi-3's fused modules stand for the projections they hold.
            if case .string("qkv_proj") = m { targets += [.q, .k, .v]; continue }
            if case .string("gate_up_proj") = m { targets += [.gate, .up]; continue }
            guard case .string(let s) = m, let t = LoRATarget.allCases.first(where: { $0.moduleName == s }) else {
                throw bad("target module \(m) is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (qkv_proj, gate_up_proj on Phi-3)")
            }
            targets.append(t)
        }
        var dropout: Float = 0
        if case .double(let d) = cfg["lora_dropout"] ?? .null { dropout = Float(d) }
        let weightsPath = folder + "/" + weightsFile
        let file = try SafetensorsFile(path: weightsPath)
        var tensors: [String: HostTensor] = [:]
        for info in file.tensors {
            guard info.name.hasPrefix(prefix) else {
                throw ModelError.incompatible(path: weightsPath, reason: "tensor '\(info.name)' does not start with '\(prefix)'")
            }
            tensors[String(info.name.dropFirst(prefix.count))] = try file.tensor(info.name)
        }
        var config: ModelConfig? = nil
        if let text = file.metadata[configKey] {
            do { config = try JSONDecoder().decode(ModelConfig.self, from: Data(text.utf8)) } catch {
                throw ModelError.incompatible(path: weightsPath, reason: "metadata '\(configKey)' is not a valid model config: \(error)")
            }
        }
        return (LoRAConfig(rank: r, alpha: alpha, targets: targets, dropout: dropout), tensors, file.metadata[signatureKey], config)
    }
}
