// The tiny models of scripts/fixtures/make_architecture_fixtures.py, rebuilt here: their config
// as transformers wrote it, their weights from SeededNormal (the script's generator, so no weight
// file is committed), their LoRA factors, and the reference numbers transformers, PEFT and
// llama.cpp's converter gave (Fixtures/README.md). Also the helpers the tests share.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

struct ArchitectureFixture {
    /// The architectures the script makes (its ARCHS), each a folder under Fixtures/.
    static let names = ["qwen3", "olmo2", "granite", "smollm3", "phi3", "phi4", "gemma3"]
    static let seed: UInt64 = 36
    static let lora = LoRAConfig(rank: 2, alpha: 4, targets: LoRATarget.allCases)  // on Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj
    static var root: URL { Bundle.module.resourceURL!.appendingPathComponent("Fixtures") }

    let name: String
    let config: ModelConfig
    let reference: [String: Any]
    let tensors: SafetensorsFile

    init(_ name: String) throws {
        self.name = name
        let dir = Self.root.appendingPathComponent(name)
        config = try ModelConfig.fromHuggingFace(path: dir.appendingPathComponent("config.json").path)
        reference = try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("reference.json"))) as! [String: Any]
        tensors = try SafetensorsFile(path: dir.appendingPathComponent("reference.safetensors").path)
    }

    static var all: [ArchitectureFixture] { get throws { try names.map(ArchitectureFixture.init) } }

    /// Every base tensor: norms 1 + 0.1·N (Gemma 3's (1 + w) norms 0.1·N), the rest 0.15·N,
    /// N = SeededNormal(seed, Hugging Face name as the files name it: a Phi-3 projection is rows of
    /// its fused qkv_proj / gate_up_proj).
    func weights() -> [String: HostTensor] {
        var out: [String: HostTensor] = [:]
        for (name, shape) in TensorTable.shapes(for: config) {
            if let (file, rows) = TensorTable.fusedFileTensor(of: name, config: config) {
                let parts = TensorTable.fusedParts(ofFileTensor: file, config: config)!
                let whole = Self.seeded(file, shape: [parts.last!.rows.upperBound, shape[1]], std: 0.15)
                out[name] = HostTensor(shape: shape, data: Array(whole.data[(rows.lowerBound * shape[1])..<(rows.upperBound * shape[1])]))
                continue
            }
            let isNorm = name.hasSuffix("norm.weight")
            var t = Self.seeded(name, shape: shape, std: isNorm ? 0.1 : 0.15)
            if isNorm && config.definition.normWeightOffset == 0 { t.data = t.data.map { 1 + $0 } }
            out[name] = t
        }
        return out
    }

    /// `weights()` under the files' names (Phi-3's fused modules stacked), as the script summed them.
    func fileWeights() -> [String: HostTensor] {
        let listed = TensorTable.fileTensors(weights().map { ($0.key, $0.value.shape, $0.value) }, config: config) { parts in
            HostTensor(shape: [parts.reduce(0) { $0 + $1.shape[0] }, parts[0].shape[1]], data: parts.flatMap(\.data))
        }
        return Dictionary(uniqueKeysWithValues: listed.map { ($0.name, $0.value) })
    }

    static func seeded(_ name: String, shape: [Int], std: Float) -> HostTensor {
        let rows = shape.count == 1 ? 1 : shape[0], cols = shape.last!
        var values = [Float](repeating: 0, count: rows * cols)
        values.withUnsafeMutableBufferPointer { buf in
            for r in 0..<rows { SeededNormal.fillRow(seed: seed, tensor: name, row: r, std: std, count: cols, into: buf.baseAddress! + r * cols) }
        }
        return HostTensor(shape: shape, data: values)
    }

    func baseWeights() throws -> BaseWeights { try BaseWeights(config: config, tensors: weights()) }

    /// The training model, with the fixture's LoRA factors (0.1·N under toolkit names) when `withLoRA`.
    func model(withLoRA: Bool) throws -> LlamaModel {
        var rng = SeededRNG(seed: 7)
        let model = try LlamaModel(weights: try baseWeights(), lora: withLoRA ? Self.lora : nil, rng: &rng)
        for (name, t) in model.loraParameters { t.data = Self.seeded(name, shape: t.shape, std: 0.1).data }
        return model
    }

    func ints(_ key: String) -> [[Int]] { (reference[key] as! [[NSNumber]]).map { $0.map(\.intValue) } }
    func double(_ key: String) -> Double { (reference[key] as! NSNumber).doubleValue }
    func floats(_ tensor: String) throws -> [Float] { try tensors.tensor(tensor).data }

    /// Logits [B·T, V] of the training pass on rows of ids.
    static func logits(_ model: LlamaModel, _ ids: [[Int]]) -> [Float] {
        var rng = SeededRNG(seed: 0)
        return withNoGrad {
            let h = model.hiddenStates(ids: ids.flatMap { $0 }, layout: .rows(batch: ids.count, length: ids[0].count), rng: &rng, training: false)
            return model.logits(hidden: h).data
        }
    }

    /// tokenizer.json's vocabulary as GGUF tokenizer metadata, the way convert_hf_to_gguf.py
    /// writes a byte-level BPE (specials as control tokens), for files the tests write.
    static func tokenizerData() throws -> TokenizerData {
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: root.appendingPathComponent("tokenizer.json"))) as! [String: Any]
        let model = json["model"] as! [String: Any]
        var byId: [Int: String] = [:]
        for (token, id) in model["vocab"] as! [String: NSNumber] { byId[id.intValue] = token }
        var types: [Int: Int32] = [:]
        for added in json["added_tokens"] as! [[String: Any]] {
            let id = (added["id"] as! NSNumber).intValue
            byId[id] = added["content"] as? String
            types[id] = (added["special"] as? Bool) == true ? 3 : 4
        }
        let tokens = (0..<byId.count).map { byId[$0]! }
        let merges = (model["merges"] as! [Any]).map { m -> String in
            if let s = m as? String { return s }
            return (m as! [String]).joined(separator: " ")
        }
        let config = try JSONSerialization.jsonObject(with: Data(contentsOf: root.appendingPathComponent("tokenizer_config.json"))) as! [String: Any]
        return TokenizerData(tokens: tokens, merges: merges, tokenTypes: tokens.indices.map { types[$0] ?? 1 }, preTokenizer: "qwen2",
                             bosTokenId: nil, eosTokenId: tokens.firstIndex(of: "<|im_end|>"), padTokenId: tokens.firstIndex(of: "<|endoftext|>"),
                             chatTemplate: config["chat_template"] as? String)
    }

    /// A complete Hugging Face folder of the tiny model (config.json as written by the toolkit,
    /// model.safetensors, the fixture's tokenizer files) in `dir`.
    func writeFolder(_ dir: String, tensors: [String: HostTensor]? = nil) throws {
        try ModelExport.writeHuggingFaceFolder(config: config, tensors: tensors ?? weights(), to: dir)
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            try FileManager.default.copyItem(atPath: Self.root.appendingPathComponent(f).path, toPath: dir + "/" + f)
        }
    }

    /// The tiny model as a GGUF file written by the toolkit (llama.cpp's names and layout).
    func writeGGUF(_ path: String, matrixType: GGMLType = .f32) throws {
        try ModelExport.writeGGUF(config: config, tensors: weights(), tokenizer: Self.tokenizerData(), to: path, matrixType: matrixType)
    }
}

/// max |a - b| / max(|b|_inf, tiny): one relative error for a whole tensor.
func relativeError(_ a: [Float], _ b: [Float]) -> Float {
    precondition(a.count == b.count, "compared arrays differ in length: \(a.count) vs \(b.count)")
    var maxDiff: Float = 0, scale: Float = 1e-6
    for i in a.indices {
        maxDiff = max(maxDiff, abs(a[i] - b[i]))
        scale = max(scale, abs(b[i]))
    }
    return maxDiff / scale
}

func assertClose(_ a: [Float], _ b: [Float], rel: Float = 1e-4, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    let e = relativeError(a, b)
    XCTAssert(e <= rel, "\(what): relative error \(e) > \(rel)", file: file, line: line)
}

func temporaryDirectory(_ name: String = #function) -> String { TinyAssets.tempDir(name) }
