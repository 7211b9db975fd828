// Adapters in the formats the rest of the ecosystem loads: Hugging Face PEFT
// (adapter_model.safetensors + adapter_config.json, read back as well) and llama.cpp's LoRA
// adapter GGUF. Each keeps its own layout: PEFT uses Hugging Face rows; the GGUF applies
// llama.cpp's q/k RoPE row permutation to lora_b (Llama/Mistral, not Qwen2) as
// convert_lora_to_gguf.py does. Both are fp32. DoRA, rsLoRA and modules_to_save are left out.
import Foundation
import ModelAssets
import Training

/// An adapter's weights, from a checkpoint or a package, ready to be written in another format.
public struct AdapterWeights: Sendable {
    public var source: String
    public var lora: LoRAConfig
    public var baseConfig: ModelConfig
    public var baseSignature: String
    /// In `LoRALayout.expected` order.
    public var tensors: [(name: String, tensor: HostTensor)]

    public init(source: String, lora: LoRAConfig, baseConfig: ModelConfig, baseSignature: String,
                tensors: [(name: String, tensor: HostTensor)]) {
        self.source = source
        self.lora = lora
        self.baseConfig = baseConfig
        self.baseSignature = baseSignature
        self.tensors = tensors
    }

    /// Reads an adapter checkpoint file or an .fmadapter package folder.
    public static func load(_ path: String) throws -> AdapterWeights {
        if FMAdapterPackage.looksLikePackage(path) {
            let p = try FMAdapterPackage.load(path)
            let ordered = try LoRALayout.ordered(p.adapterTensors, config: p.baseConfig, lora: p.lora) {
                ExportError.package(path: path, reason: $0)
            }
            return AdapterWeights(source: path, lora: p.lora, baseConfig: p.baseConfig, baseSignature: p.baseSignature, tensors: ordered)
        }
        let ck = try Checkpoint.load(path)
        let (lora, tensors) = try FMAdapterPackage.adapterContents(of: ck)
        return AdapterWeights(source: path, lora: lora, baseConfig: ck.header.baseConfig, baseSignature: ck.header.baseSignature, tensors: tensors)
    }

    /// Throws naming both signatures unless these weights were trained on `base`.
    public func requireBase(_ base: BaseModel) throws {
        guard baseSignature == base.signature else {
            throw ExportError.incompatible(path: source, reason: "was trained on base model \(baseSignature), but the loaded base model \(base.path) is \(base.signature); give the base model it was trained on")
        }
    }
}

public enum PEFTAdapter {
    public static let configFile = "adapter_config.json"
    public static let weightsFile = "adapter_model.safetensors"
    /// PEFT's prefix in front of the model's own module names.
    public static let prefix = "base_model.model."

    /// adapter_config.json as PEFT 0.x writes it for a plain LoRA (keys sorted).
    public static func configJSON(_ lora: LoRAConfig, baseModelName: String?) throws -> Data {
        var c: [String: JSONValue] = [
            "peft_type": .string("LORA"), "task_type": .string("CAUSAL_LM"),
            "r": .int(lora.rank), "lora_alpha": lora.alpha == lora.alpha.rounded() ? .int(Int(lora.alpha)) : .double(Double(lora.alpha)),
            "lora_dropout": .double(Double(lora.dropout)),
            "target_modules": .array(lora.targets.map(\.moduleName).sorted().map { .string($0) }),
            "bias": .string("none"), "fan_in_fan_out": .bool(false), "inference_mode": .bool(true),
            "init_lora_weights": .bool(true), "use_rslora": .bool(false), "use_dora": .bool(false),
            "modules_to_save": .null, "layers_to_transform": .null, "layers_pattern": .null,
            "rank_pattern": .object([:]), "alpha_pattern": .object([:]), "revision": .null,
        ]
        c["base_model_name_or_path"] = baseModelName.map { .string($0) } ?? .null
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try enc.encode(c) + Data("\n".utf8)
    }

    /// Writes `folder` (adapter_config.json + adapter_model.safetensors, fp32) atomically.
    public static func write(_ w: AdapterWeights, to folder: String, baseModelName: String? = nil) throws {
        var st = SafetensorsWriter(metadata: ["format": "pt"])
        for (name, t) in w.tensors { try st.add(prefix + name, t, as: .f32) }
        let config = try configJSON(w.lora, baseModelName: baseModelName)
        let weights = st.serialized()
        try FolderPublisher.publish(to: folder, what: "a PEFT adapter folder",
                                    isReplaceable: { FileManager.default.fileExists(atPath: $0 + "/" + configFile) }) { dir in
            try AtomicFile.write(weights, to: dir + "/" + weightsFile)
            try AtomicFile.write(config, to: dir + "/" + configFile)
        }
    }

    /// Reads a PEFT LoRA folder back: its LoRA config and tensors under the toolkit's names.
    /// Refuses what the toolkit cannot represent (DoRA, rsLoRA, per-module ranks, biases, other targets).
    public static func read(folder: String) throws -> (lora: LoRAConfig, tensors: [String: HostTensor]) {
        let configPath = folder + "/" + configFile
        guard let data = FileManager.default.contents(atPath: configPath) else {
            throw ExportError.io(path: configPath, reason: "no such file; a PEFT adapter folder holds \(configFile) and \(weightsFile)")
        }
        let cfg: [String: JSONValue]
        do { cfg = try JSONValue.parseObject(String(decoding: data, as: UTF8.self), what: configPath) } catch {
            throw ExportError.io(path: configPath, reason: "is not a JSON object")
        }
        func bad(_ reason: String) -> ExportError { .incompatible(path: configPath, reason: reason) }
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
            guard case .string(let s) = m, let t = LoRATarget.allCases.first(where: { $0.moduleName == s }) else {
                throw bad("target module \(m) is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj")
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
                throw ExportError.incompatible(path: weightsPath, reason: "tensor '\(info.name)' does not start with '\(prefix)'")
            }
            tensors[String(info.name.dropFirst(prefix.count))] = try file.tensor(info.name)
        }
        return (LoRAConfig(rank: r, alpha: alpha, targets: targets, dropout: dropout), tensors)
    }
}

public enum GGUFLoRAAdapter {
    /// llama.cpp's names: `blk.N.attn_q.weight.lora_a` [r, in] (ggml ne = [in, r]) and
    /// `.lora_b` [out, r] (ne = [r, out]); Llama/Mistral q and k lora_b rows permuted per head.
    public static func writer(_ w: AdapterWeights) throws -> GGUFWriter {
        var g = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: w.baseConfig) { try g.set(k, v) }
        try g.set("general.type", .string("adapter"))
        try g.set("general.file_type", .uint32(0))
        try g.set("adapter.type", .string("lora"))
        try g.set("adapter.lora.alpha", .float32(w.lora.alpha))
        let permute = w.baseConfig.architecture != .qwen2
        for (name, t) in w.tensors {
            let isA = name.hasSuffix(".lora_A.weight")
            let module = String(name.dropLast(isA ? ".lora_A.weight".count : ".lora_B.weight".count))
            guard let base = ModelLoader.ggufName(forHuggingFace: module + ".weight") else {
                throw ExportError.unsupported("\(w.source): tensor '\(name)' has no llama.cpp name")
            }
            var tensor = t
            if !isA, permute, let heads = ModelLoader.ropeHeads(forHuggingFace: module + ".weight", config: w.baseConfig) {
                tensor = RoPELayout.permuteForGGUF(t, heads: heads)
            }
            try g.addTensor(base + (isA ? ".lora_a" : ".lora_b"), tensor, as: .f32)
        }
        return g
    }

    /// Writes the adapter GGUF atomically.
    public static func write(_ w: AdapterWeights, to path: String) throws {
        try writer(w).write(to: path)
    }
}
