// Exports other tools load: PEFT (re-read gives the same tensors; the committed PEFT fixture
// survives read → write → read), llama.cpp LoRA GGUF (keys, names, ggml shapes, q/k lora_b row
// permutation), `fuse` (GGUF F32 and safetensors give the adapter model's logits exactly, F16
// within fp16 rounding) and package housekeeping (compatible identifiers, removing obsolete ones).
import Autograd
import Export
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class PortableExportTests: XCTestCase {
    func testPEFTExportReadsBackToTheSameTensors() throws {
        let run = try TinyRun.make(targets: [.q, .v, .down])
        let weights = try Adapter.load(run.adapterPath)
        let folder = run.dir + "/peft"
        try PEFTAdapter.write(weights, to: folder)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder).sorted(), ["adapter_config.json", "adapter_model.safetensors"])
        let (lora, tensors, _, _) = try PEFTFormat.read(folder: folder)
        XCTAssertEqual(lora.rank, weights.lora.rank)
        XCTAssertEqual(lora.alpha, weights.lora.alpha)
        XCTAssertEqual(lora.targets, [.q, .v, .down])
        XCTAssertEqual(tensors.count, weights.tensors.count)
        for (name, t) in weights.tensors { XCTAssertEqual(tensors[name], t, name) }
        // names exactly as PEFT saves them
        let file = try SafetensorsFile(path: folder + "/adapter_model.safetensors")
        XCTAssert(file.tensors.map(\.name).contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"))
        XCTAssert(file.tensors.allSatisfy { $0.dtype == .f32 })
        let cfg = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: folder + "/adapter_config.json"))) as! [String: Any]
        XCTAssertEqual(cfg["peft_type"] as? String, "LORA")
        XCTAssertEqual(cfg["r"] as? Int, 4)
        XCTAssertEqual(cfg["target_modules"] as? [String], ["down_proj", "q_proj", "v_proj"])
        // a package exports to PEFT too (its fp16 values)
        let pkg = try FMAdapterPackage.export(adapter: try Checkpoint.load(run.adapterPath), draft: nil, options: PackageOptions(name: "pp"), outputDir: run.dir + "/o")
        let fromPackage = try Adapter.load(pkg)
        for (name, t) in fromPackage.tensors { XCTAssertEqual(t, fp16Rounded(weights.tensors.first { $0.name == name }!.tensor)) }
    }

    /// A PEFT folder written by the toolkit records its base and is refused on another one; a
    /// folder written by PEFT itself records none and is checked against the given base's shapes.
    func testPEFTFoldersLoadOnTheirBaseOnly() throws {
        let run = try TinyRun.make(targets: [.q, .v])
        let folder = run.dir + "/peft"
        try PEFTAdapter.write(try Adapter.load(run.adapterPath), to: folder)
        let ours = try Adapter.load(folder)
        XCTAssertEqual(ours.baseSignature, run.base.signature)
        XCTAssertEqual(ours.baseConfig, run.base.config)
        XCTAssertNoThrow(try LoadedModel.load(base: run.base, adapter: folder))
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("peft-other"), seed: 9))
        XCTAssertThrowsError(try LoadedModel.load(base: other, adapter: folder)) { e in
            XCTAssert(message(e).contains(run.base.signature) && message(e).contains(other.signature), message(e))
        }

        // as PEFT itself writes it: the same tensors, no record of the base
        let foreignFolder = run.dir + "/peft-foreign"
        try FileManager.default.createDirectory(atPath: foreignFolder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: folder + "/" + PEFTFormat.configFile, toPath: foreignFolder + "/" + PEFTFormat.configFile)
        let stored = try SafetensorsFile(path: folder + "/" + PEFTFormat.weightsFile)
        var plain = SafetensorsWriter(metadata: ["format": "pt"])
        for info in stored.tensors { try plain.add(info.name, try stored.tensor(info.name), as: .f32) }
        try plain.write(to: foreignFolder + "/" + PEFTFormat.weightsFile)
        XCTAssertThrowsError(try Adapter.load(foreignFolder)) { e in
            XCTAssert(message(e).contains("does not record its base model") && message(e).contains("--base-model"), message(e))
        }
        let foreign = try LoadedModel.load(base: run.base, adapter: foreignFolder)
        XCTAssertNil(foreign.adapter?.baseSignature)
        XCTAssertEqual(foreign.adapter?.tensors.map(\.tensor), ours.tensors.map(\.tensor))
        let deeper = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("peft-deeper"), layers: 3))
        XCTAssertThrowsError(try LoadedModel.load(base: deeper, adapter: foreignFolder)) { e in
            XCTAssert(message(e).contains("does not fit the base model"), message(e))
        }
    }

    func testCommittedPEFTFixtureSurvivesReadWriteRead() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("TrainingTests/Fixtures/tiny-llama").path
        guard FileManager.default.fileExists(atPath: fixture + "/lora/adapter_config.json") else {
            throw XCTSkip("PEFT fixture not found at \(fixture)")
        }
        let (lora, tensors, _, _) = try PEFTFormat.read(folder: fixture + "/lora")
        let config = try ModelConfig.fromHuggingFace(path: fixture + "/config.json")
        let ordered = try TensorTable.orderedLoRA(tensors, config: config, lora: lora) { ExportError.unsupported($0) }
        let w = Adapter(source: fixture, lora: lora, baseConfig: config, baseSignature: "00", tensors: ordered)
        let out = TinyAssets.tempDir() + "/peft"
        try PEFTAdapter.write(w, to: out)
        let (lora2, tensors2, _, _) = try PEFTFormat.read(folder: out)
        XCTAssertEqual(lora2, lora)
        XCTAssertEqual(tensors2, tensors)
        // byte-identical tensor data to what PEFT itself saved
        let a = try SafetensorsFile(path: fixture + "/lora/adapter_model.safetensors")
        let b = try SafetensorsFile(path: out + "/adapter_model.safetensors")
        for info in a.tensors { XCTAssertEqual(try a.rawBytes(of: info.name), try b.rawBytes(of: info.name), info.name) }
    }

    func testGGUFLoRAHasLlamaCppNamesShapesAndPermutation() throws {
        let run = try TinyRun.make()
        let weights = try Adapter.load(run.adapterPath)
        let path = run.dir + "/lora.gguf"
        try GGUFLoRAAdapter.write(weights, to: path)
        let g = try GGUFFile(path: path)
        XCTAssertEqual(try g.string("general.type"), "adapter")
        XCTAssertEqual(try g.string("adapter.type"), "lora")
        XCTAssertEqual(try g.double("adapter.lora.alpha"), 8)
        XCTAssertEqual(try g.string("general.architecture"), "llama")
        XCTAssertEqual(g.tensors.count, weights.tensors.count)
        let c = run.base.config
        let q = try XCTUnwrap(g.tensorInfo(named: "blk.1.attn_q.weight.lora_a"))
        XCTAssertEqual(q.dimensions, [c.hiddenSize, 4], "lora_a ne = [in, r]")
        let qb = try XCTUnwrap(g.tensorInfo(named: "blk.1.attn_q.weight.lora_b"))
        XCTAssertEqual(qb.dimensions, [4, c.numHeads * c.headDim], "lora_b ne = [r, out]")
        XCTAssertEqual(g.tensorInfo(named: "blk.0.ffn_down.weight.lora_b")?.dimensions, [4, c.hiddenSize])
        let byName = Dictionary(uniqueKeysWithValues: weights.tensors.map { ($0.name, $0.tensor) })
        // q and k lora_b rows are in llama.cpp's RoPE order; un-permuting gives ours back
        for (gguf, hf, heads) in [("blk.1.attn_q.weight.lora_b", "model.layers.1.self_attn.q_proj.lora_B.weight", c.numHeads),
                                  ("blk.0.attn_k.weight.lora_b", "model.layers.0.self_attn.k_proj.lora_B.weight", c.numKVHeads)] {
            let stored = try g.dequantize(gguf)
            XCTAssertNotEqual(stored, byName[hf]!, "\(gguf) should be permuted")
            XCTAssertEqual(RoPELayout.unpermuteFromGGUF(stored, heads: heads), byName[hf]!, gguf)
        }
        XCTAssertEqual(try g.dequantize("blk.0.attn_v.weight.lora_b"), byName["model.layers.0.self_attn.v_proj.lora_B.weight"]!)
        XCTAssertEqual(try g.dequantize("blk.0.attn_q.weight.lora_a"), byName["model.layers.0.self_attn.q_proj.lora_A.weight"]!)
        // merging the GGUF LoRA into the GGUF base's stored (permuted) q gives the permuted fused q,
        // which is what llama.cpp computes: W_gguf + s·B_gguf·A
        let fused = try Fuse.mergedTensors(base: run.base, adapter: weights)["model.layers.1.self_attn.q_proj.weight"]!
        let wq = RoPELayout.permuteForGGUF(run.base.file.tensors["model.layers.1.self_attn.q_proj.weight"]!, heads: c.numHeads)
        let a = try g.dequantize("blk.1.attn_q.weight.lora_a"), b = try g.dequantize("blk.1.attn_q.weight.lora_b")
        let outDim = wq.shape[0], inDim = wq.shape[1]
        var merged = wq.data
        for o in 0..<outDim { for i in 0..<inDim { for r in 0..<4 { merged[o * inDim + i] += 2 * b.data[o * 4 + r] * a.data[r * inDim + i] } } }
        let expected = RoPELayout.permuteForGGUF(fused, heads: c.numHeads).data
        XCTAssertLessThan(relativeDifference(expected, merged), 1e-5)
    }

    func testFusedModelsGiveTheAdaptersLogits() throws {
        let run = try TinyRun.make()
        let weights = try Adapter.load(run.adapterPath)
        let ids = run.base.tokenizer.encode(promptText)
        let adapted = logits(try LlamaModel(base: run.base.weights, adapter: try Adapter.load(run.adapterPath)), ids)
        for format in FusedFormat.allCases {
            let out = run.dir + "/fused-" + format.rawValue + (format == .safetensors ? "" : ".gguf")
            try Fuse.write(base: run.base, adapter: weights, format: format, to: out)
            let fusedBase = try BaseModel.load(path: out)
            XCTAssertEqual(fusedBase.config, run.base.config)
            let got = logits(try LlamaModel(base: fusedBase.weights, adapter: nil), ids)
            if format == .ggufF16 {
                XCTAssertLessThan(relativeDifference(adapted, got), 2e-2, format.rawValue)
            } else {
                XCTAssertEqual(got, adapted, "\(format.rawValue): fused fp32 weights are the merged weights, so logits are identical")
            }
            // tokenizer and template travel with the model
            XCTAssertEqual(fusedBase.tokenizer.encode(promptText + " the 12 things"), run.base.tokenizer.encode(promptText + " the 12 things"))
            XCTAssertEqual(fusedBase.stopTokenIds, run.base.stopTokenIds)
        }
        // fusing a package works as well (its fp16 adapter)
        let pkg = try FMAdapterPackage.export(adapter: try Checkpoint.load(run.adapterPath), draft: nil, options: PackageOptions(name: "f"), outputDir: run.dir + "/o")
        try Fuse.write(base: run.base, adapter: try Adapter.load(pkg), format: .ggufF32, to: run.dir + "/from-package.gguf")
        let fromPackage = logits(try LlamaModel(base: try BaseModel.load(path: run.dir + "/from-package.gguf").weights, adapter: nil), ids)
        XCTAssertEqual(fromPackage, logits(try LoadedModel.load(base: run.base, adapter: pkg), ids))
    }

    func testHousekeepingListsAndRemovesByBaseSignature() throws {
        let run = try TinyRun.make()
        let otherRun = try TinyRun.make("otherRun", seed: 9)
        let folder = run.dir + "/adapters"
        let ck = try Checkpoint.load(run.adapterPath), otherCk = try Checkpoint.load(otherRun.adapterPath)
        try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "mine_a"), outputDir: folder)
        try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "mine_b"), outputDir: folder)
        try FMAdapterPackage.export(adapter: otherCk, draft: nil, options: PackageOptions(name: "theirs"), outputDir: folder)
        try FileManager.default.createDirectory(atPath: folder + "/broken.fmadapter", withIntermediateDirectories: true)
        let sig = run.base.signature
        XCTAssertEqual(try PackageCatalog.compatibleAdapterIdentifiers(in: folder, signature: sig),
                       ["fmadapter-mine_a-\(sig.prefix(7))", "fmadapter-mine_b-\(sig.prefix(7))"])
        let scan = try PackageCatalog.scan(folder)
        XCTAssertEqual(scan.count, 4)
        XCTAssertNotNil(scan.first { $0.path.hasSuffix("broken.fmadapter") }?.problem)
        let removed = try PackageCatalog.removeObsoleteAdapters(in: folder, signature: sig)
        XCTAssertEqual(removed.map { URL(fileURLWithPath: $0).lastPathComponent }, ["theirs.fmadapter"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder).sorted(),
                       ["broken.fmadapter", "mine_a.fmadapter", "mine_b.fmadapter"], "unreadable packages are left alone")
    }

    func testEverythingSignedInTheV1EncodingStillMatchesItsBase() throws {
        // Checkpoints, packages and adapters made before 2026-11-26 record the v1 signature.
        let run = try TinyRun.make()
        let otherRun = try TinyRun.make("otherRun", seed: 9)
        let v1 = run.base.file.signature(encoding: .v1)
        XCTAssertNotEqual(v1, run.base.signature)
        XCTAssertTrue(run.base.recognizes(run.base.signature))
        XCTAssertTrue(run.base.recognizes(v1))
        XCTAssertFalse(run.base.recognizes(otherRun.base.file.signature(encoding: .v1)))
        XCTAssertFalse(run.base.recognizes(otherRun.base.signature))
        XCTAssertFalse(run.base.recognizes(String(repeating: "0", count: 64)))

        // an adapter checkpoint signed v1: loads, packages with a v2 draft, and is refused by another base
        let ck = try Checkpoint.load(run.adapterPath)
        var header = ck.header
        header.model.baseSignature = v1
        let oldPath = run.dir + "/run/old-adapter.safetensors"
        try Checkpoint.write(to: oldPath, header: header, params: ck.tensors.sorted { $0.key < $1.key }.map { ($0.key, Tensor(shape: $0.value.shape, data: $0.value.data)) },
                             optimizer: nil)
        let old = try Checkpoint.load(oldPath)
        XCTAssertNoThrow(try old.requireBase(run.base))
        XCTAssertNoThrow(try Adapter.fromCheckpoint(old.file).requireBase(run.base))
        XCTAssertThrowsError(try old.requireBase(otherRun.base)) { XCTAssert(message($0).contains(v1), message($0)) }
        let draft = try Checkpoint.load(try run.writeDraft())
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: old, draft: draft, options: PackageOptions(name: "mixed"), outputDir: run.dir + "/o"),
                             "without a base, two different signatures cannot be told to be one base's")
        let mixed = try FMAdapterPackage.export(adapter: old, draft: draft, base: run.base, options: PackageOptions(name: "mixed"), outputDir: run.dir + "/o")
        let package = try FMAdapterPackage.load(mixed)
        XCTAssertEqual(package.baseSignature, v1)
        XCTAssertTrue(package.isCompatible(with: run.base))
        XCTAssertFalse(package.isCompatible(with: otherRun.base))
        XCTAssertNoThrow(try LoadedModel.load(base: run.base, adapter: mixed))

        // housekeeping keeps this base's v1 packages and removes another base's
        let folder = run.dir + "/adapters"
        try FMAdapterPackage.export(adapter: old, draft: nil, options: PackageOptions(name: "old"), outputDir: folder)
        try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "new"), outputDir: folder)
        try FMAdapterPackage.export(adapter: try Checkpoint.load(otherRun.adapterPath), draft: nil, options: PackageOptions(name: "theirs"), outputDir: folder)
        XCTAssertEqual(try PackageCatalog.compatibleAdapterIdentifiers(in: folder, recognizedBy: run.base.recognizes),
                       ["fmadapter-new-\(run.base.signature.prefix(7))", "fmadapter-old-\(v1.prefix(7))"])
        XCTAssertEqual(try PackageCatalog.compatibleAdapterIdentifiers(in: folder, signature: run.base.signature),
                       ["fmadapter-new-\(run.base.signature.prefix(7))"], "an exact signature matches exactly")
        let removed = try PackageCatalog.removeObsoleteAdapters(in: folder, recognizedBy: run.base.recognizes)
        XCTAssertEqual(removed.map { URL(fileURLWithPath: $0).lastPathComponent }, ["theirs.fmadapter"])
    }

    func testWeightsContainerRejectsHostileHeaders() throws {
        let cfg = try TinyAssets.config(vocab: 10)
        let t = HostTensor(shape: [2, 3], data: [1, 2, 3, 4, 5, 6])
        let good = try WeightsContainer.serialize(content: .draft, baseSignature: "ab", config: cfg, lora: nil, tensors: [("x", t)], file: "t")
        XCTAssertEqual(try WeightsContainer.parse(good, path: "t").tensors["x"], t)
        // an absurd header length
        var b = [UInt8](good)
        b[12] = 0xff; b[13] = 0xff; b[14] = 0xff; b[15] = 0x7f
        XCTAssertThrowsError(try WeightsContainer.parse(Data(b), path: "t")) { XCTAssert(message($0).contains("declares a header"), message($0)) }
        // values fp16 cannot hold are refused at export, naming the tensor
        XCTAssertThrowsError(try WeightsContainer.serialize(content: .draft, baseSignature: "ab", config: cfg, lora: nil,
                                                            tensors: [("big", HostTensor(shape: [1], data: [1e6]))], file: "ck")) {
            XCTAssert(message($0).contains("'big'") && message($0).contains("fp16"), message($0))
        }
    }
}
