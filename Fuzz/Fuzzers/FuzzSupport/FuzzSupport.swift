// What every fuzzer shares: a scratch file path per process (for readers that take a path),
// the seed corpus each fuzzer writes from the toolkit's own writers when FUZZ_SEED_DIR is set
// (so seeds stay valid as formats evolve and no binary seeds are committed), and a tiny model.
// Leaves out the libFuzzer entry points (one per fuzzer target).
import Autograd
import DataSchema
import Export
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
import Training

public enum Fuzz {
    /// A folder private to this process for files a path-based reader needs.
    public static let scratch: String = {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        let dir = base + "/adapter-fuzz-\(getpid())"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }()

    /// Writes `bytes` to `name` in the scratch folder (plain write, no rename: speed) and returns the path.
    public static func scratchFile(_ name: String, _ bytes: UnsafeRawBufferPointer) -> String {
        let path = scratch + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        precondition(fd >= 0, "[fuzz] cannot write \(path)")
        var off = 0
        while off < bytes.count {
            let n = write(fd, bytes.baseAddress! + off, bytes.count - off)
            precondition(n > 0, "[fuzz] write failed")
            off += n
        }
        close(fd)
        return path
    }

    /// When FUZZ_SEED_DIR is set, writes `seeds()` there (file name -> bytes). Call from
    /// LLVMFuzzerInitialize.
    public static func writeSeedsIfAsked(_ seeds: () throws -> [String: Data]) {
        guard let dir = ProcessInfo.processInfo.environment["FUZZ_SEED_DIR"], !dir.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            for (name, data) in try seeds() { try data.write(to: URL(fileURLWithPath: dir + "/" + name)) }
        } catch {
            FileHandle.standardError.write(Data("fuzz: cannot write seeds into \(dir): \(error)\n".utf8))
            exit(2)
        }
    }

    // MARK: tiny assets for seeds

    /// A one-layer model (hidden 8) with TinyAssets' byte-level BPE tokenizer and ChatML template.
    public static func tinyModel(seed: UInt64 = 1) throws -> (config: ModelConfig, tensors: [String: HostTensor], tokenizer: TokenizerData) {
        let tok = TinyAssets.tokenizer()
        let cfg = try ModelConfig(architecture: .llama, hiddenSize: 8, intermediateSize: 16, numLayers: 1, numHeads: 2, numKVHeads: 1,
                                  headDim: 4, vocabSize: tok.tokens.count, ropeTheta: 10000, rmsNormEps: 1e-5, tieWordEmbeddings: true,
                                  attentionBias: false, maxPositionEmbeddings: 64)
        var rng = SeededRNG(seed: seed)
        var tensors: [String: HostTensor] = [:]
        for (name, shape) in TensorTable.shapes(for: cfg) {
            let n = shape.reduce(1, *)
            tensors[name] = HostTensor(shape: shape, data: (0..<n).map { _ in 0.2 * Float.random(in: -1...1, using: &rng) })
        }
        return (cfg, tensors, tok)
    }

    /// The LoRA parameters (rank 2, q and v) of `tinyModel`, as `tinyCheckpoint` stores them.
    public static func tinyLoRAParameters() throws -> [(name: String, tensor: Tensor)] {
        let m = try tinyModel()
        var rng = SeededRNG(seed: 7)
        return try LlamaModel(weights: try BaseWeights(config: m.config, tensors: m.tensors), lora: LoRAConfig(rank: 2, alpha: 4, targets: [.q, .v], dropout: 0),
                              rng: &rng).loraParameters
    }

    /// A small LoRA adapter checkpoint (rank 2, q and v) of `tinyModel`, with optimizer moments.
    public static func tinyCheckpoint(label: String = "epoch1") throws -> Data {
        let m = try tinyModel()
        let lora = LoRAConfig(rank: 2, alpha: 4, targets: [.q, .v], dropout: 0)
        var rng = SeededRNG(seed: 7)
        let model = try LlamaModel(weights: try BaseWeights(config: m.config, tensors: m.tensors), lora: lora, rng: &rng)
        let params = model.loraParameters
        for p in params { for i in 0..<p.tensor.count { p.tensor.data[i] = 0.01 * Float(i % 7) } }
        var opt = AdamW(parameterSizes: params.map(\.tensor.count), weightDecay: 0)
        for i in opt.m.indices { for j in opt.m[i].indices { opt.m[i][j] = 1e-3; opt.v[i][j] = 1e-6 } }
        var state = TrainerState(seed: 3)
        state.step = 5
        state.epoch = 1
        let header = CheckpointHeader(content: .adapter, baseSignature: String(repeating: "ab", count: 32), baseConfig: m.config,
                                      lora: lora, state: state, options: TrainingOptions(), dataFingerprint: "00ff", label: label)
        let path = scratch + "/seed-checkpoint.safetensors"
        try Checkpoint.write(to: path, header: header, params: params, optimizer: opt)
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// A valid .fmadapter package folder made from `tinyCheckpoint`; returns (metadata.json, adapter_weights.bin).
    public static func tinyPackage() throws -> (metadata: Data, weights: Data) {
        let ckPath = scratch + "/seed-ck.safetensors"
        try tinyCheckpoint().write(to: URL(fileURLWithPath: ckPath))
        let ck = try Checkpoint.load(ckPath)
        let out = scratch + "/seed-package"
        let pkg = try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "fuzz_seed", author: "fuzz"),
                                              outputDir: out)
        return (try Data(contentsOf: URL(fileURLWithPath: pkg + "/" + FMAdapterPackage.metadataFile)),
                try Data(contentsOf: URL(fileURLWithPath: pkg + "/" + FMAdapterPackage.adapterWeightsFile)))
    }

    /// Replaces the last 32 bytes with the SHA-256 of the rest, so mutations reach past the
    /// weights container's checksum check.
    public static func fixingChecksum(_ bytes: UnsafeRawBufferPointer) -> Data {
        var d = Data(bytes)
        guard d.count >= 48 else { return d }
        let body = d.prefix(d.count - 32)
        d.replaceSubrange((d.count - 32)..<d.count, with: Data(SHA256.hash(data: body)))
        return d
    }

    /// Test data lines: plain turns, a system prompt, tools with a parameter schema and a call,
    /// and a response_format schema.
    public static let jsonlSeeds: [String: String] = [
        "plain.jsonl": #"{"messages": [{"role": "user", "content": "say alpha"}, {"role": "assistant", "content": "ALPHA"}]}"# + "\n",
        "system.jsonl": #"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi\u00e9\ud83d\ude00"}, {"role": "assistant", "content": "hello"}]}"# + "\r\n\n",
        "tools.jsonl": #"{"messages": [{"role": "system", "content": "", "tools": [{"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string", "minLength": 1}, "days": {"type": "integer", "minimum": 1}}, "required": ["city"], "additionalProperties": false}}}]}, {"role": "user", "content": "weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, {"role": "assistant", "content": "It is sunny."}]}"# + "\n",
        "format.jsonl": ##"[{"role": "user", "content": "json please", "response_format": {"type": "json_schema", "json_schema": {"name": "r", "strict": true, "schema": {"$defs": {"n": {"type": "number"}}, "type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 3, "uniqueItems": true}, "b": {"type": "string", "pattern": "^[a-z]+$"}}, "anyOf": [{"required": ["a"]}, {"not": {"type": "null"}}]}}}}, {"role": "assistant", "content": "{\"a\": [1, 2.5e3], \"b\": \"x\"}"}]"## + "\n",
    ]
}
