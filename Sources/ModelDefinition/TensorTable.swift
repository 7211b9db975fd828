// The one tensor table: every base tensor a config implies (Hugging Face name, llama.cpp name,
// row-major shape, which projection or norm of which layer it is) for the config's architecture
// (its norms come from its description, ModelAssets' Architecture.swift), every LoRA tensor an
// adapter of a given shape has (a fused module's as PEFT has it: Phi-3's qkv_proj, gate_up_proj), how
// the files' fused tensors map to the seven projections, and the checks that a set of tensors is exactly that set. The
// loaders, both executors, adapters, packages and exports all read names and shapes from here.
// Names follow transformers' *ForCausalLM modules and llama.cpp's LLM_TENSOR table (convert_hf_to_gguf.py).
import ModelAssets

/// The projections LoRA can adapt, named as the reference toolkits name them.
public enum LoRATarget: String, CaseIterable, Codable, Sendable, Comparable {
    case q, k, v, o, gate, up, down

    /// The Hugging Face module name, as in PEFT's target_modules.
    public var moduleName: String {
        switch self {
        case .q: "q_proj"
        case .k: "k_proj"
        case .v: "v_proj"
        case .o: "o_proj"
        case .gate: "gate_proj"
        case .up: "up_proj"
        case .down: "down_proj"
        }
    }

    /// The parent module in Hugging Face's layer naming.
    public var parentName: String {
        switch self {
        case .q, .k, .v, .o: "self_attn"
        case .gate, .up, .down: "mlp"
        }
    }

    /// q, k and v may carry a bias (Qwen2); the others never do.
    public var mayHaveBias: Bool { self == .q || self == .k || self == .v }

    public static func < (a: LoRATarget, b: LoRATarget) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// How an adapter is shaped. Recorded in every checkpoint and package.
public struct LoRAConfig: Codable, Equatable, Sendable {
    public var rank: Int
    public var alpha: Float
    public var targets: [LoRATarget]
    public var dropout: Float

    public init(rank: Int = 32, alpha: Float? = nil, targets: [LoRATarget] = LoRATarget.allCases, dropout: Float = 0) {
        self.rank = rank
        self.alpha = alpha ?? Float(rank)
        self.targets = targets.sorted()
        self.dropout = dropout
    }

    public var scale: Float { alpha / Float(rank) }

    /// The one place an adapter's shape is validated (flags, checkpoints and packages alike).
    public func validate() throws {
        guard rank > 0 else { throw ModelError.invalidConfig("LoRA rank must be at least 1, got \(rank)") }
        guard alpha.isFinite, alpha > 0 else { throw ModelError.invalidConfig("LoRA alpha must be a positive number, got \(alpha)") }
        guard !targets.isEmpty else { throw ModelError.invalidConfig("LoRA needs at least one target (q,k,v,o,gate,up,down)") }
        guard (0..<1).contains(dropout) else { throw ModelError.invalidConfig("LoRA dropout must be in [0, 1), got \(dropout)") }
    }

    /// "rank 32, alpha 32.0, targets q,k,v, dropout 0.0", for messages.
    public var summary: String {
        "rank \(rank), alpha \(alpha), targets \(targets.map(\.rawValue).joined(separator: ",")), dropout \(dropout)"
    }
}

public enum TensorTable {
    public static let embedding = "model.embed_tokens.weight"
    public static let finalNorm = "model.norm.weight"
    public static let head = "lm_head.weight"

    /// `model.layers.{layer}.` — the prefix of every tensor of a layer.
    public static func layerPrefix(_ layer: Int) -> String { "model.layers.\(layer)." }

    /// The Hugging Face name of a layer norm (`model.layers.3.self_attn.q_norm.weight`).
    public static func norm(_ n: LayerNormName, layer: Int) -> String { layerPrefix(layer) + n.huggingFace + ".weight" }

    /// The Hugging Face name of the norm in `slot`, nil when the config's architecture has none there.
    public static func norm(_ slot: NormSlot, layer: Int, config: ModelConfig) -> String? {
        config.definition.norm(slot).map { norm($0, layer: layer) }
    }

    /// The length of a norm's weight: head_dim for per-head q/k norms, the projection's width for
    /// whole-projection ones, hidden size for the rest.
    public static func normSize(_ slot: NormSlot, config c: ModelConfig) -> Int {
        switch slot {
        case .query: c.definition.qkNorm == .perHead ? c.headDim : c.queryDim
        case .key: c.definition.qkNorm == .perHead ? c.headDim : c.keyValueDim
        case .attentionInput, .attentionOutput, .feedForwardInput, .feedForwardOutput: c.hiddenSize
        }
    }

    /// The module path of a projection (`model.layers.3.mlp.up_proj`).
    public static func module(layer: Int, target t: LoRATarget) -> String {
        layerPrefix(layer) + t.parentName + "." + t.moduleName
    }
    public static func weight(layer: Int, target t: LoRATarget) -> String { module(layer: layer, target: t) + ".weight" }
    public static func bias(layer: Int, target t: LoRATarget) -> String { module(layer: layer, target: t) + ".bias" }
    public static func loraA(layer: Int, target t: LoRATarget) -> String { module(layer: layer, target: t) + ".lora_A.weight" }
    public static func loraB(layer: Int, target t: LoRATarget) -> String { module(layer: layer, target: t) + ".lora_B.weight" }

    /// (in, out) of a projection.
    public static func dimensions(_ t: LoRATarget, config c: ModelConfig) -> (in: Int, out: Int) {
        switch t {
        case .q: (c.hiddenSize, c.queryDim)
        case .k, .v: (c.hiddenSize, c.keyValueDim)
        case .o: (c.queryDim, c.hiddenSize)
        case .gate, .up: (c.hiddenSize, c.intermediateSize)
        case .down: (c.intermediateSize, c.hiddenSize)
        }
    }

    /// Whether a config puts a bias on a projection.
    public static func hasBias(_ t: LoRATarget, config c: ModelConfig) -> Bool { c.attentionBias && t.mayHaveBias }

    /// Every base tensor the config implies, Hugging Face name -> row-major shape
    /// (`lm_head.weight` only when the head is untied).
    public static func shapes(for config: ModelConfig) -> [String: [Int]] {
        let d = config.hiddenSize, v = config.vocabSize
        var shapes: [String: [Int]] = [embedding: [v, d], finalNorm: [d]]
        if !config.tieWordEmbeddings { shapes[head] = [v, d] }
        for i in 0..<config.numLayers {
            for n in config.definition.norms { shapes[norm(n, layer: i)] = [normSize(n.slot, config: config)] }
            for t in LoRATarget.allCases {
                let (inDim, outDim) = dimensions(t, config: config)
                shapes[weight(layer: i, target: t)] = [outDim, inDim]
                if hasBias(t, config: config) { shapes[bias(layer: i, target: t)] = [outDim] }
            }
        }
        return shapes
    }

    /// Checks a set of (name, shape) against the config: nothing missing, nothing extra, every shape right.
    public static func check(_ found: [(name: String, shape: [Int])], config: ModelConfig, path: String,
                             pathForTensor: ((String) -> String)? = nil) throws {
        let expected = shapes(for: config)
        var seen = Set<String>()
        for (name, shape) in found {
            let where_ = pathForTensor?(name) ?? path
            guard let want = expected[name] else { throw ModelAssetsError.unexpectedTensor(path: where_, tensor: name) }
            guard want == shape else { throw ModelAssetsError.shapeMismatch(path: where_, tensor: name, expected: want, found: shape) }
            seen.insert(name)
        }
        if let missing = expected.keys.filter({ !seen.contains($0) }).sorted(by: order).first {
            throw ModelAssetsError.missingTensor(path: path, tensor: missing)
        }
    }

    /// Layer-aware order of names: embeddings, layers by number, then the rest (final norm, head).
    public static func order(_ a: String, _ b: String) -> Bool {
        func key(_ s: String) -> (Int, Int, String) {
            if s.hasPrefix("model.embed") { return (0, 0, s) }
            if s.hasPrefix("model.layers.") { return (1, Int(s.dropFirst(13).prefix { $0.isNumber }) ?? 0, s) }
            return (2, 0, s)
        }
        return key(a) < key(b)
    }

    // MARK: LoRA tensors

    /// Every tensor of an adapter: A [r, in] and B [out, r] per layer and module, in a fixed order
    /// (layer, then module in target order q k v o gate up down, then A before B), under the
    /// toolkit's names (`model.layers.{i}.self_attn.q_proj.lora_A.weight`, PEFT's names minus its
    /// prefix). A fused module (Phi-3's qkv_proj, gate_up_proj) has one A and one B, as PEFT has.
    public static func loraTensors(config: ModelConfig, lora: LoRAConfig) -> [(name: String, shape: [Int])] {
        var out: [(String, [Int])] = []
        let modules = loraModules(config: config, targets: lora.targets)
        for i in 0..<config.numLayers {
            for m in modules {
                out.append((layerPrefix(i) + m.module + ".lora_A.weight", [lora.rank, m.inDim]))
                out.append((layerPrefix(i) + m.module + ".lora_B.weight", [m.outDim, lora.rank]))
            }
        }
        return out
    }

    /// An adapter's tensors in `loraTensors` order. Throws `makeError(reason)` naming the first
    /// missing, extra or mis-shaped tensor.
    public static func orderedLoRA(_ tensors: [String: HostTensor], config: ModelConfig, lora: LoRAConfig,
                                   makeError: (String) -> Error) throws -> [(name: String, tensor: HostTensor)] {
        try checkTargets(lora.targets, config: config)
        let want = loraTensors(config: config, lora: lora)
        let names = Set(want.map(\.name))
        let what = "a rank-\(lora.rank) adapter on targets \(lora.targets.map(\.rawValue).joined(separator: ","))"
        if let extra = tensors.keys.filter({ !names.contains($0) }).sorted().first {
            throw makeError("holds tensor '\(extra)', which \(what) of this \(config.numLayers)-layer base does not have")
        }
        return try want.map { name, shape in
            guard let t = tensors[name] else { throw makeError("has no tensor '\(name)' (\(what) needs it)") }
            guard t.shape == shape else { throw makeError("tensor '\(name)' has shape \(t.shape), but this adapter and base need \(shape)") }
            return (name, t)
        }
    }

    // MARK: fused projections (Phi-3)

    /// A module of the files: its path under `model.layers.{i}.` (`self_attn.qkv_proj`), its
    /// llama.cpp name (`attn_qkv`), and the projections it holds stacked by rows, in order.
    public struct FileModule: Sendable {
        public let module: String
        public let gguf: String
        public let parts: [LoRATarget]
    }

    /// The projection modules an architecture's files hold: the seven, or Phi-3's four (qkv_proj
    /// [q; k; v], o_proj, gate_up_proj [gate; up] — llama.cpp's `ffn_up` holds both — down_proj).
    public static func fileModules(_ a: ModelArchitecture) -> [FileModule] {
        if a.definition.fusedProjections {
            return [FileModule(module: "self_attn.qkv_proj", gguf: "attn_qkv", parts: [.q, .k, .v]),
                    FileModule(module: "self_attn.o_proj", gguf: "attn_output", parts: [.o]),
                    FileModule(module: "mlp.gate_up_proj", gguf: "ffn_up", parts: [.gate, .up]),
                    FileModule(module: "mlp.down_proj", gguf: "ffn_down", parts: [.down])]
        }
        return zip(projectionNames, LoRATarget.allCases).map { names, t in FileModule(module: names.hf, gguf: String(names.gguf), parts: [t]) }
    }

    /// The projections a file tensor of a fused module holds: for `model.layers.3.self_attn.qkv_proj.weight`,
    /// q_proj's, k_proj's and v_proj's names with their rows in it. nil for any other name.
    public static func fusedParts(ofFileTensor name: String, config: ModelConfig) -> [(name: String, rows: Range<Int>)]? {
        guard config.definition.fusedProjections, name.hasPrefix("model.layers."), name.hasSuffix(".weight") else { return nil }
        let rest = name.dropFirst("model.layers.".count)
        guard let dot = rest.firstIndex(of: "."), let layer = Int(rest[..<dot]) else { return nil }
        let tail = String(rest[rest.index(after: dot)...].dropLast(".weight".count))
        guard let m = fileModules(config.architecture).first(where: { $0.module == tail && $0.parts.count > 1 }) else { return nil }
        var start = 0
        return m.parts.map { t in
            let rows = dimensions(t, config: config).out
            defer { start += rows }
            return (weight(layer: layer, target: t), start..<(start + rows))
        }
    }

    /// The file tensor a projection's weight lives in when the architecture fuses it
    /// (`...q_proj.weight` -> `...qkv_proj.weight`, rows 0..<q), nil when it is its own tensor.
    public static func fusedFileTensor(of name: String, config: ModelConfig) -> (file: String, rows: Range<Int>)? {
        guard config.definition.fusedProjections, name.hasPrefix("model.layers."), name.hasSuffix(".weight") else { return nil }
        let rest = name.dropFirst("model.layers.".count)
        guard let dot = rest.firstIndex(of: "."), let layer = Int(rest[..<dot]) else { return nil }
        for m in fileModules(config.architecture) where m.parts.count > 1 {
            let file = layerPrefix(layer) + m.module + ".weight"
            if let part = fusedParts(ofFileTensor: file, config: config)!.first(where: { $0.name == name }) { return (file, part.rows) }
        }
        return nil
    }

    /// The tensors as the architecture's files hold them: a fused module's projections stacked by
    /// rows under the module's name (Phi-3), everything else as it is. Exports write these.
    public static func fileTensors<T>(_ tensors: [(name: String, shape: [Int], value: T)], config: ModelConfig,
                                      stack: ([T]) -> T) -> [(name: String, shape: [Int], value: T)] {
        guard config.definition.fusedProjections else { return tensors }
        var out: [(name: String, shape: [Int], value: T)] = []
        var byName: [String: (shape: [Int], value: T)] = [:]
        for t in tensors { byName[t.name] = (t.shape, t.value) }
        var done = Set<String>()
        for t in tensors {
            guard let (file, _) = fusedFileTensor(of: t.name, config: config) else { out.append(t); continue }
            guard done.insert(file).inserted else { continue }
            let parts = fusedParts(ofFileTensor: file, config: config)!
            let held = parts.compactMap { byName[$0.name] }
            guard held.count == parts.count else { parts.filter { byName[$0.name] != nil }.forEach { out.append(($0.name, byName[$0.name]!.shape, byName[$0.name]!.value)) }; continue }
            out.append((file, [parts.last!.rows.upperBound, held[0].shape[1]], stack(held.map(\.value))))
        }
        return out
    }

    /// An adapter's modules for `targets`: each file module whose projections are all targeted
    /// (one A [r, in] and one B [out, r] over its whole output, PEFT's LoRA on that Linear), with
    /// (in, out). Targets that cover only part of a fused module are refused by `checkTargets`.
    public static func loraModules(config: ModelConfig, targets: [LoRATarget]) -> [(module: String, parts: [LoRATarget], inDim: Int, outDim: Int)] {
        fileModules(config.architecture).filter { m in m.parts.allSatisfy(targets.contains) }.map { m in
            (m.module, m.parts, dimensions(m.parts[0], config: config).in, m.parts.reduce(0) { $0 + dimensions($1, config: config).out })
        }
    }

    /// Throws unless `targets` cover each of the architecture's fused modules whole or not at all
    /// (Phi-3: q, k and v together, gate and up together).
    public static func checkTargets(_ targets: [LoRATarget], config: ModelConfig) throws {
        for m in fileModules(config.architecture) where m.parts.count > 1 {
            let hit = m.parts.filter(targets.contains)
            if !hit.isEmpty && hit.count != m.parts.count {
                throw ModelError.invalidConfig("\(config.architecture.rawValue) holds \(m.parts.map(\.rawValue).joined(separator: ",")) as one module (\(m.module)), which LoRA adapts whole: target all of \(m.parts.map(\.rawValue).joined(separator: ",")) or none (targets were \(targets.map(\.rawValue).joined(separator: ",")))")
            }
        }
    }

    // MARK: llama.cpp names

    /// Hugging Face name of a llama.cpp tensor name in a file of `architecture`, or nil if it is
    /// not one of its decoder weights.
    public static func huggingFaceName(forGGUF name: String, architecture: ModelArchitecture = .llama) -> String? {
        switch name {
        case "token_embd.weight": return embedding
        case "output_norm.weight": return finalNorm
        case "output.weight": return head
        default: break
        }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "blk", let layer = Int(parts[1]), layer >= 0, String(layer) == parts[1],
              let kind = layerNames(architecture).first(where: { $0.gguf == parts[2] }), parts[3] == "weight" || parts[3] == "bias"
        else { return nil }
        if parts[3] == "bias", !kind.mayHaveBias { return nil }
        return "model.layers.\(layer).\(kind.hf).\(parts[3])"
    }

    /// llama.cpp name of a Hugging Face tensor name of `architecture`, or nil if it is not one of
    /// its decoder weights.
    public static func ggufName(forHuggingFace name: String, architecture: ModelArchitecture = .llama) -> String? {
        switch name {
        case embedding: return "token_embd.weight"
        case finalNorm: return "output_norm.weight"
        case head: return "output.weight"
        default: break
        }
        guard name.hasPrefix("model.layers.") else { return nil }
        let rest = name.dropFirst("model.layers.".count)
        guard let dot = rest.firstIndex(of: "."), let layer = Int(rest[..<dot]), String(layer) == rest[..<dot] else { return nil }
        let tail = rest[rest.index(after: dot)...]
        for kind in layerNames(architecture) {
            if tail == kind.hf + ".weight" { return "blk.\(layer).\(kind.gguf).weight" }
            if kind.mayHaveBias, tail == kind.hf + ".bias" { return "blk.\(layer).\(kind.gguf).bias" }
        }
        return nil
    }

    /// A layer's tensors in both namings: the architecture's norms, then the projection modules its
    /// files hold (the seven, or Phi-3's fused four).
    private static func layerNames(_ a: ModelArchitecture) -> [(gguf: Substring, hf: String, mayHaveBias: Bool)] {
        let projections = a.definition.fusedProjections
            ? fileModules(a).map { (Substring($0.gguf), $0.module, false) } : projectionNames
        return a.definition.norms.map { (Substring($0.gguf), $0.huggingFace, false) } + projections
    }

    private static let projectionNames: [(gguf: Substring, hf: String, mayHaveBias: Bool)] = [
        ("attn_q", "self_attn.q_proj", true), ("attn_k", "self_attn.k_proj", true), ("attn_v", "self_attn.v_proj", true),
        ("attn_output", "self_attn.o_proj", false),
        ("ffn_gate", "mlp.gate_proj", false), ("ffn_up", "mlp.up_proj", false), ("ffn_down", "mlp.down_proj", false),
    ]

    /// Heads to (un)permute by for q and k projections (weights and biases); nil for other tensors.
    public static func ropeHeads(forHuggingFace name: String, config: ModelConfig) -> Int? {
        if name.hasSuffix(".self_attn.q_proj.weight") || name.hasSuffix(".self_attn.q_proj.bias") { return config.numHeads }
        if name.hasSuffix(".self_attn.k_proj.weight") || name.hasSuffix(".self_attn.k_proj.bias") { return config.numKVHeads }
        return nil
    }

    /// What llama.cpp's converter adds to this tensor's values in a GGUF (Gemma 3's `*norm.weight`:
    /// stored as 1 + w), nil for tensors stored as they are.
    public static func ggufValueShift(forHuggingFace name: String, config: ModelConfig) -> Float? {
        let offset = config.definition.normWeightOffset
        return offset != 0 && name.hasSuffix("norm.weight") ? offset : nil
    }

    /// Heads whose rows llama.cpp's converter permutes in a GGUF of this config's architecture
    /// (`ropeHeads` where the description says its GGUF rows are permuted, else nil).
    public static func ggufRopeHeads(forHuggingFace name: String, config: ModelConfig) -> Int? {
        config.definition.ggufRowsPermuted ? ropeHeads(forHuggingFace: name, config: config) : nil
    }
}
