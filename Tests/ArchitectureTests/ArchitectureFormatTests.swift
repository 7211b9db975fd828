// Each described architecture through both file formats: the tiny models as Hugging Face folders
// (the config.json transformers wrote, safetensors) and as GGUF. The toolkit's GGUF must hold
// what llama.cpp's own converter wrote for the same weights (gguf_manifest.json: tensor bytes,
// names, shapes, the architecture's and the tokenizer's keys), and both formats must load to the
// same weights, signature and logits.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition
import Training
import XCTest

final class ArchitectureFormatTests: XCTestCase {
    func testHuggingFaceFoldersLoadTheWeightsAndTheConfigTransformersWrote() throws {
        for f in try ArchitectureFixture.all {
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let weights = f.weights()
            try f.writeFolder(dir)
            for configFile in ["toolkit's", "transformers'"] {
                if configFile == "transformers'" {
                    try FileManager.default.removeItem(atPath: dir + "/config.json")
                    try FileManager.default.copyItem(atPath: ArchitectureFixture.root.appendingPathComponent(f.name + "/config.json").path,
                                                     toPath: dir + "/config.json")
                }
                for storage in BaseWeightStorage.allCases {
                    let file = try ModelLoader.load(path: dir, storage: storage)
                    XCTAssertEqual(file.config, f.config, "\(f.name), \(configFile) config.json")
                    let loaded = try BaseWeights(file: file).tensorDictionary
                    XCTAssertEqual(loaded, weights, "\(f.name) \(storage)")
                }
            }
        }
    }

    /// The toolkit's GGUF against the converter's manifest: every tensor byte for byte (names, ggml
    /// shapes, types, q/k rows permuted or not as llama.cpp's converter does for the architecture),
    /// and every key of the architecture and the tokenizer with the converter's value.
    func testGGUFHoldsWhatLlamaCppsConverterWrote() throws {
        for f in try ArchitectureFixture.all {
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            try f.writeGGUF(dir + "/m.gguf")
            let file = try GGUFFile(path: dir + "/m.gguf")
            let manifest = try JSONSerialization.jsonObject(
                with: Data(contentsOf: ArchitectureFixture.root.appendingPathComponent(f.name + "/gguf_manifest.json"))) as! [String: Any]
            let theirs = manifest["tensors"] as! [[String: Any]]
            XCTAssertEqual(Set(file.tensors.map(\.name)), Set(theirs.map { $0["name"] as! String }), "\(f.name): tensor names")
            for t in theirs {
                let name = t["name"] as! String
                guard let info = file.tensorInfo(named: name) else { continue }
                XCTAssertEqual(info.dimensions, (t["ne"] as! [NSNumber]).map(\.intValue), "\(f.name) \(name) ne")
                XCTAssertEqual(info.type.name, t["type"] as? String, "\(f.name) \(name) type")
                let stored = try file.stored(name)
                let digest = SHA256.hash(data: UnsafeRawBufferPointer(start: stored.bytes, count: stored.byteCount))
                XCTAssertEqual(digest.map { String(format: "%02x", $0) }.joined(), t["sha256"] as? String, "\(f.name) \(name) bytes")
            }
            // Keys: everything of the architecture and the tokenizer, plus general.architecture.
            // The converter's general.name/size_label/type/quantization_version describe the source
            // folder and the conversion, not the model; tokenizer.ggml.add_space_prefix false is the reader's default.
            let meta = manifest["metadata"] as! [String: Any]
            let checked = meta.keys.filter { k in
                (k.hasPrefix(f.config.definition.ggufName + ".") || k.hasPrefix("tokenizer.") || k == "general.architecture" || k == "general.file_type")
                    && k != "tokenizer.ggml.add_space_prefix"
            }
            XCTAssertGreaterThan(checked.count, 15)
            for key in checked.sorted() {
                guard let ours = file.metadata[key] else { XCTFail("\(f.name): the toolkit's GGUF has no '\(key)'"); continue }
                XCTAssertTrue(Self.matches(ours, meta[key]!), "\(f.name) '\(key)': ours \(ours), the converter's \(meta[key]!)")
            }
            let p = f.config.definition.ggufName + "."
            for key in file.metadataKeys where key.hasPrefix(p) && meta[key] == nil {
                // Keys the converter writes only for some architectures (its Llama class adds the
                // rope dimension and the vocabulary size) or configs, each holding the value
                // llama.cpp takes without it (head_dim, the token count).
                let implied: [String: Int] = [
                    p + "attention.key_length": f.config.headDim, p + "attention.value_length": f.config.headDim,
                    p + "rope.dimension_count": f.config.headDim, p + "vocab_size": (meta["tokenizer.ggml.tokens"] as! [String: Any])["array_length"] as! Int,
                ]
                XCTAssertTrue(implied[key] != nil && file.metadata[key]?.intValue == implied[key],
                              "\(f.name): the toolkit writes '\(key)' = \(file.metadata[key]!), the converter does not")
            }
        }
    }

    /// Both formats, both storages: the same weights, the same signature, the same logits.
    func testGGUFAndFolderLoadToTheSameModel() throws {
        for f in try ArchitectureFixture.all {
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            try f.writeFolder(dir + "/hf")
            try f.writeGGUF(dir + "/m.gguf")
            let ids = f.ints("input_ids")
            let want = try f.floats("logits")
            var signatures: Set<String> = []
            for path in [dir + "/hf", dir + "/m.gguf"] {
                for storage in BaseWeightStorage.allCases {
                    let file = try ModelLoader.load(path: path, storage: storage)
                    // GGUF stores the epsilon and the multipliers as float32
                    XCTAssertEqual(file.config, path.hasSuffix(".gguf") ? Self.float32Rounded(f.config) : f.config, "\(f.name) \(path)")
                    signatures.insert(file.signature())
                    let model = try LlamaModel(base: BaseWeights(file: file), adapter: nil)
                    assertClose(ArchitectureFixture.logits(model, ids), want, "\(f.name) \(path) \(storage)")
                }
            }
            XCTAssertEqual(signatures.count, 1, "\(f.name): one signature whatever the file")
        }
    }

    /// The signature covers what the tensors do not show: NoPE layers and the multipliers.
    func testSignatureCoversNoPELayersAndMultipliers() throws {
        let f = try ArchitectureFixture("smollm3"), g = try ArchitectureFixture("granite")
        let smol = f.weights(), gran = g.weights()
        var noNoPE = f.config
        noNoPE.noRopeLayers = []
        XCTAssertNotEqual(BaseModelSignature.compute(config: f.config, tensors: smol), BaseModelSignature.compute(config: noNoPE, tensors: smol))
        var other = g.config
        other.multipliers!.residual = 0.5
        XCTAssertNotEqual(BaseModelSignature.compute(config: g.config, tensors: gran), BaseModelSignature.compute(config: other, tensors: gran))
        // Gemma 3's window and which layers slide
        let gm = try ArchitectureFixture("gemma3"), gw = gm.weights()
        var wider = gm.config
        wider.slidingWindow = 8
        XCTAssertNotEqual(BaseModelSignature.compute(config: gm.config, tensors: gw), BaseModelSignature.compute(config: wider, tensors: gw))
        var allSliding = gm.config
        allSliding.slidingWindowLayers = Array(0..<7)
        XCTAssertNotEqual(BaseModelSignature.compute(config: gm.config, tensors: gw), BaseModelSignature.compute(config: allSliding, tensors: gw))
    }

    /// `config` with the reals GGUF stores as float32 rounded so.
    static func float32Rounded(_ config: ModelConfig) -> ModelConfig {
        var c = config
        c.rmsNormEps = Double(Float(c.rmsNormEps))
        c.ropeTheta = Double(Float(c.ropeTheta))
        if var s = c.ropeScaling, s.kind == .longrope {  // LongRoPE's lists are F32 tensors, its attention factor an F32 key
            s.shortFactors = s.shortFactors?.map { Double(Float($0)) }
            s.longFactors = s.longFactors?.map { Double(Float($0)) }
            s.attentionFactor = s.attentionFactor.map { Double(Float($0)) }
            c.ropeScaling = s
        }
        c.localRopeTheta = c.localRopeTheta.map { Double(Float($0)) }
        if let m = c.multipliers {
            c.multipliers = Multipliers(embedding: Double(Float(m.embedding)), residual: Double(Float(m.residual)),
                                        attention: Double(Float(m.attention)), logits: Double(Float(m.logits)))
        }
        return c
    }

    /// A GGUF value against the manifest's: scalars equal, floats as float32, arrays by the SHA-256
    /// of their JSON as Python's json.dumps(list, ensure_ascii=False) spells it.
    static func matches(_ ours: GGUFValue, _ theirs: Any) -> Bool {
        if let d = theirs as? [String: Any] {
            if let f = d["float32"] as? NSNumber { return ours.doubleValue.map { Float($0) == f.floatValue } ?? false }
            guard case .array(_, let values) = ours, let n = (d["array_length"] as? NSNumber)?.intValue, values.count == n else { return false }
            let items = values.map { v -> String in
                if case .string(let s) = v { return pythonJSONString(s) }
                return v.intValue.map(String.init) ?? "?"
            }
            let json = "[" + items.joined(separator: ", ") + "]"
            return SHA256.hash(data: Data(json.utf8)).map { String(format: "%02x", $0) }.joined() == d["sha256"] as? String
        }
        if let s = theirs as? String {
            if case .string(let o) = ours { return o == s }
            return false
        }
        if let n = theirs as? NSNumber {
            if String(cString: n.objCType) == "c" {
                if case .bool(let b) = ours { return b == n.boolValue }
                return false
            }
            return ours.intValue == n.intValue
        }
        return false
    }

    /// A string as Python's json.dumps(s, ensure_ascii=False) writes it.
    static func pythonJSONString(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }
}
