// Adapters in the formats the rest of the ecosystem loads: Hugging Face PEFT
// (adapter_model.safetensors + adapter_config.json; read back by the model definition's
// Adapter.load) and llama.cpp's LoRA adapter GGUF. Each keeps its own layout: PEFT uses Hugging Face rows; the GGUF applies
// llama.cpp's q/k RoPE row permutation to lora_b (where the architecture's GGUF rows are permuted) as
// convert_lora_to_gguf.py does. Both are fp32. DoRA, rsLoRA and modules_to_save are left out.
import Foundation
import ModelAssets
import ModelDefinition

public enum PEFTAdapter {
    public static let configFile = PEFTFormat.configFile
    public static let weightsFile = PEFTFormat.weightsFile
    public static let prefix = PEFTFormat.prefix

    /// adapter_config.json as PEFT 0.x writes it for a plain LoRA (keys sorted).
    /// Target modules are named as `config`'s files name them (Phi-3: qkv_proj, gate_up_proj).
    public static func configJSON(_ lora: LoRAConfig, baseModelName: String?, config: ModelConfig? = nil) throws -> Data {
        let modules = config.map { c in TensorTable.loraModules(config: c, targets: lora.targets).map { String($0.module.split(separator: ".").last!) } }
            ?? lora.targets.map(\.moduleName)
        var c: [String: MetadataValue] = [
            "peft_type": .string("LORA"), "task_type": .string("CAUSAL_LM"),
            "r": .int(lora.rank), "lora_alpha": lora.alpha == lora.alpha.rounded() ? .int(Int(lora.alpha)) : .double(Double(lora.alpha)),
            "lora_dropout": .double(Double(lora.dropout)),
            "target_modules": .array(modules.sorted().map { .string($0) }),
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

    /// Writes `folder` (adapter_config.json + adapter_model.safetensors, fp32) atomically. The
    /// safetensors metadata also records the base's signature and config (PEFT ignores them), so
    /// the toolkit can refuse the folder on the wrong base.
    public static func write(_ w: Adapter, to folder: String, baseModelName: String? = nil) throws {
        var metadata = ["format": "pt", PEFTFormat.configKey: try CheckpointModelHeader.json(w.baseConfig)]
        if let sig = w.baseSignature { metadata[PEFTFormat.signatureKey] = sig }
        var st = SafetensorsWriter(metadata: metadata)
        for (name, t) in w.tensors { try st.add(prefix + name, t, as: .f32) }
        let config = try configJSON(w.lora, baseModelName: baseModelName, config: w.baseConfig)
        let weights = st.serialized()
        try FolderPublisher.publish(to: folder, what: "a PEFT adapter folder",
                                    isReplaceable: { FileManager.default.fileExists(atPath: $0 + "/" + configFile) }) { dir in
            try AtomicFile.write(weights, to: dir + "/" + weightsFile)
            try AtomicFile.write(config, to: dir + "/" + configFile)
        }
    }
}

public enum GGUFLoRAAdapter {
    /// llama.cpp's names: `blk.N.attn_q.weight.lora_a` [r, in] (ggml ne = [in, r]) and
    /// `.lora_b` [out, r] (ne = [r, out]); q and k lora_b rows permuted per head where the
    /// architecture's GGUF rows are (Llama, Mistral, Granite, SmolLM3).
    public static func writer(_ w: Adapter) throws -> GGUFWriter {
        try ModelExport.checkGGUFExpressible(w.baseConfig)
        var g = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: w.baseConfig) { try g.set(k, v) }
        try g.set("general.type", .string("adapter"))
        try g.set("general.file_type", .uint32(0))
        try g.set("adapter.type", .string("lora"))
        try g.set("adapter.lora.alpha", .float32(w.lora.alpha))
        for (name, t) in w.tensors {
            let isA = name.hasSuffix(".lora_A.weight")
            let module = String(name.dropLast(isA ? ".lora_A.weight".count : ".lora_B.weight".count))
            guard let base = TensorTable.ggufName(forHuggingFace: module + ".weight", architecture: w.baseConfig.architecture) else {
                throw ExportError.unsupported("\(w.source): tensor '\(name)' has no llama.cpp name")
            }
            var tensor = t
            if !isA, let heads = TensorTable.ggufRopeHeads(forHuggingFace: module + ".weight", config: w.baseConfig) {
                tensor = RoPELayout.permuteForGGUF(t, heads: heads)
            }
            try g.addTensor(base + (isA ? ".lora_a" : ".lora_b"), tensor, as: .f32)
        }
        return g
    }

    /// Writes the adapter GGUF atomically.
    public static func write(_ w: Adapter, to path: String) throws {
        try writer(w).write(to: path)
    }
}
