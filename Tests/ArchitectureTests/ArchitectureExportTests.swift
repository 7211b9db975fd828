// Adapters and fused models of each described architecture in the formats other tools load: the
// PEFT folder under PEFT's own tensor names (the names PEFT saved for the tiny model, so
// PeftModel.from_pretrained gives the LoRA logits the fixtures hold), the llama.cpp LoRA GGUF
// byte for byte what llama.cpp's convert_lora_to_gguf.py wrote for the same adapter (q/k lora_b
// rows permuted for Granite and SmolLM3, not for Qwen3 and OLMo 2), and `fuse` to GGUF and to a
// Hugging Face folder giving the adapted model's logits.
import Autograd
import Export
import Foundation
import ModelAssets
import ModelDefinition
import Training
import XCTest

final class ArchitectureExportTests: XCTestCase {
    func testPEFTFolderHasPEFTsNamesAndGivesTheLoRALogits() throws {
        for f in try ArchitectureFixture.all {
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let adapter = try XCTUnwrap(try f.model(withLoRA: true).adapter(baseSignature: nil))
            try PEFTAdapter.write(adapter, to: dir + "/peft")
            let st = try SafetensorsFile(path: dir + "/peft/" + PEFTAdapter.weightsFile)
            XCTAssertEqual(st.tensors.map(\.name).sorted(), (f.reference["peft_tensor_names"] as! [String]).sorted(), f.name)
            let config = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/peft/" + PEFTAdapter.configFile))) as! [String: Any]
            XCTAssertEqual((config["target_modules"] as! [String]).sorted(), (f.reference["lora"] as! [String: Any])["targets"].map { ($0 as! [String]).sorted() })
            XCTAssertEqual(config["r"] as? Int, 2)
            XCTAssertEqual(config["lora_alpha"] as? Int, 4)
            // read back, on the base: the fixture's LoRA logits
            let back = try Adapter.loadPEFT(folder: dir + "/peft")
            let model = try LlamaModel(base: f.baseWeights(), adapter: back)
            assertClose(ArchitectureFixture.logits(model, f.ints("input_ids")), try f.floats("lora_logits"), "\(f.name) PEFT folder read back")
        }
    }

    func testGGUFLoRAIsWhatLlamaCppsConverterWrote() throws {
        for f in try ArchitectureFixture.all {
            let adapter = try XCTUnwrap(try f.model(withLoRA: true).adapter(baseSignature: nil))
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            try GGUFLoRAAdapter.write(adapter, to: dir + "/lora.gguf")
            let file = try GGUFFile(path: dir + "/lora.gguf")
            let manifest = try JSONSerialization.jsonObject(
                with: Data(contentsOf: ArchitectureFixture.root.appendingPathComponent(f.name + "/lora_gguf_manifest.json"))) as! [String: Any]
            let theirs = manifest["tensors"] as! [[String: Any]]
            XCTAssertEqual(Set(file.tensors.map(\.name)), Set(theirs.map { $0["name"] as! String }), f.name)
            for t in theirs {
                let name = t["name"] as! String
                guard let info = file.tensorInfo(named: name) else { continue }
                XCTAssertEqual(info.dimensions, (t["ne"] as! [NSNumber]).map(\.intValue), "\(f.name) \(name)")
                let stored = try file.stored(name)
                let digest = SHA256.hash(data: UnsafeRawBufferPointer(start: stored.bytes, count: stored.byteCount))
                XCTAssertEqual(digest.map { String(format: "%02x", $0) }.joined(), t["sha256"] as? String, "\(f.name) \(name) bytes")
            }
            let meta = manifest["metadata"] as! [String: Any]
            for key in ["general.architecture", "general.type", "adapter.type", "adapter.lora.alpha"] {
                XCTAssertTrue(ArchitectureFormatTests.matches(try XCTUnwrap(file.metadata[key], key), meta[key]!), "\(f.name) \(key)")
            }
        }
    }

    /// `fuse` of a GGUF base to GGUF (f32) and of either base to a Hugging Face folder: the files
    /// load to the adapted model (the fixture's LoRA logits).
    func testFusedModelsGiveTheAdaptedLogits() throws {
        for f in try ArchitectureFixture.all {
            let dir = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: dir) }
            try f.writeGGUF(dir + "/base.gguf")
            try f.writeFolder(dir + "/base-hf")
            let adapter = try XCTUnwrap(try f.model(withLoRA: true).adapter(baseSignature: nil))
            let want = try f.floats("lora_logits")
            for (basePath, format, out) in [(dir + "/base.gguf", FusedFormat.ggufF32, dir + "/fused.gguf"),
                                            (dir + "/base.gguf", .safetensors, dir + "/fused-from-gguf"),
                                            (dir + "/base-hf", .safetensors, dir + "/fused-from-hf")] {
                let base = try BaseModel.load(path: basePath)
                let signed = Adapter(source: adapter.source, lora: adapter.lora, baseConfig: base.config, baseSignature: base.signature,
                                     tensors: adapter.tensors)
                try Fuse.write(base: base, adapter: signed, format: format, to: out)
                let fused = try BaseModel.load(path: out)
                XCTAssertEqual(fused.config.architecture, f.config.architecture)
                let model = try LlamaModel(base: fused.weights, adapter: nil)
                assertClose(ArchitectureFixture.logits(model, f.ints("input_ids")), want, "\(f.name) fused \(basePath) -> \(format)")
            }
        }
    }
}
