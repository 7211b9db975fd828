// The .fmadapter package end to end on a tiny model: train → export → load gives the
// checkpoint's logits (exactly, for the fp16-rounded adapter), metadata.json's form, atomic
// replacement, the draft, and every refusal the issue lists (bad name, missing file, wrong
// checksum, truncated weights, metadata missing a key, another base, a draft without its adapter).
import Autograd
import Export
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

func message(_ e: Error) -> String { (e as? LocalizedError)?.errorDescription ?? "\(e)" }

func logits(_ engine: InferenceModel, _ ids: [Int]) -> [Float] { engine.forward(ids, cache: engine.makeCache(capacity: ids.count + 1), allLogits: true) }
func logits(_ model: LlamaModel, _ ids: [Int]) -> [Float] { logits(try! InferenceModel(model), ids) }
func logits(_ model: LoadedModel, _ ids: [Int]) -> [Float] { LogitsDump.logits(model, ids: ids) }

/// max |a - b| / max |a|
func relativeDifference(_ a: [Float], _ b: [Float]) -> Float {
    precondition(a.count == b.count)
    var d: Float = 0, m: Float = 0
    for i in a.indices {
        d = max(d, abs(a[i] - b[i]))
        m = max(m, abs(a[i]))
    }
    return d / max(m, 1e-12)
}

func fp16Rounded(_ t: HostTensor) -> HostTensor {
    HostTensor(shape: t.shape, data: t.data.map { Float(Float16($0)) })
}

let promptText = "<|im_start|>user\nsay alpha0<|im_end|>\n<|im_start|>assistant\n"

final class PackageTests: XCTestCase {
    func testRoundTripGivesTheCheckpointsLogits() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        let out = run.dir + "/out"
        let path = try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "tiny_1", author: "me", description: "d", license: "MIT"), outputDir: out)
        XCTAssertEqual(path, out + "/tiny_1.fmadapter")
        let files = try FileManager.default.contentsOfDirectory(atPath: path).sorted()
        XCTAssertEqual(files, ["adapter_weights.bin", "metadata.json"], "no draft files without a draft")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), ["tiny_1.fmadapter"], "no temporary folders left")

        let package = try FMAdapterPackage.load(path)
        XCTAssertEqual(package.metadata.adapterIdentifier, "fmadapter-tiny_1-" + run.base.signature.prefix(7))
        XCTAssertEqual(package.metadata.baseModelSignature, run.base.signature)
        XCTAssertEqual(package.metadata.loraRank, 4)
        XCTAssertEqual(package.metadata.speculativeDecodingDraftTokenCount, 0)
        XCTAssertEqual(package.lora, ck.header.lora)
        XCTAssertEqual(package.name, "tiny_1")
        // the package holds exactly the fp16 rounding of every checkpoint tensor
        XCTAssertEqual(Set(package.adapterTensors.keys), Set(ck.tensors.keys))
        var movedB = false
        for (name, t) in ck.tensors {
            XCTAssertEqual(package.adapterTensors[name], fp16Rounded(t), name)
            if name.hasSuffix("lora_B.weight") && t.data.contains(where: { $0 != 0 }) { movedB = true }
        }
        XCTAssert(movedB, "training should have moved B away from zero")

        let ids = run.base.tokenizer.encode(promptText)
        let fromCheckpoint = logits(try LlamaModel(base: run.base.weights, adapter: try Adapter.fromCheckpoint(ck.file)), ids)
        let fromPackage = logits(LoadedModel(base: run.base, adapter: package.adapter), ids)
        let plain = logits(try LlamaModel(base: run.base.weights, adapter: nil), ids)
        // exact against the same adapter rounded to fp16 in memory
        let rounded = try LlamaModel(base: run.base.weights, adapter: try Adapter.fromCheckpoint(ck.file))
        for (_, t) in rounded.loraParameters { t.data = t.data.map { Float(Float16($0)) } }
        XCTAssertEqual(fromPackage, logits(rounded, ids), "package logits must equal the fp16-rounded checkpoint's exactly")
        // and within fp16 rounding of the fp32 checkpoint, while clearly not the bare base
        let drift = relativeDifference(fromCheckpoint, fromPackage)
        XCTAssertLessThan(drift, 1e-3, "fp16 storage moved the logits by \(drift) relative")
        XCTAssertGreaterThan(relativeDifference(fromCheckpoint, plain), 10 * drift)
        // generate's loader takes the package and the checkpoint alike
        XCTAssertEqual(logits(try LoadedModel.load(base: run.base, adapter: path), ids), fromPackage)
        XCTAssertEqual(logits(try LoadedModel.load(base: run.base, adapter: run.adapterPath), ids), fromCheckpoint)
        XCTAssertNil(try LoadedModel.load(base: run.base, adapter: path).draft)
    }

    func testMetadataIsSortedCamelCasePrettyJSON() throws {
        let run = try TinyRun.make()
        let creator = try MetadataValue.parseObject(#"{"version": "1.0", "steps": 12, "tags": ["a", "b"], "ok": true}"#, what: "test")
        let path = try FMAdapterPackage.export(adapter: try Checkpoint.load(run.adapterPath), draft: nil,
                                               options: PackageOptions(name: "Meta", author: "A. Person", description: "says things",
                                                                       license: "Apache-2.0", creatorDefined: creator),
                                               outputDir: run.dir + "/out")
        let text = try String(contentsOfFile: path + "/metadata.json", encoding: .utf8)
        let keys = text.split(separator: "\n").filter { $0.hasPrefix("  \"") }.map { $0.dropFirst(3).prefix { $0 != "\"" } }.map(String.init)
        XCTAssertEqual(keys, ["adapterIdentifier", "author", "baseModelSignature", "creatorDefined", "description", "license",
                              "loraRank", "speculativeDecodingDraftTokenCount"])
        XCTAssert(text.contains("\"license\" : \"Apache-2.0\""), text)
        XCTAssert(text.contains("\"steps\" : 12"), "integers stay integers: \(text)")
        XCTAssertEqual(try PackageMetadata.read(path: path + "/metadata.json").creatorDefined, creator)
        XCTAssertThrowsError(try MetadataValue.parseObject("[1]", what: "--creator-defined")) {
            XCTAssert(message($0).contains("must be a JSON object"), message($0))
        }
        XCTAssertThrowsError(try MetadataValue.parseObject("{oops", what: "--creator-defined")) {
            XCTAssert(message($0).contains("--creator-defined is not valid JSON"), message($0))
        }
    }

    func testBadNamesAreRefusedWithTheRule() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        for bad in ["my-adapter", "", "a b", "café", "x.y", "../escape"] {
            XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: bad), outputDir: run.dir + "/out")) { e in
                XCTAssertEqual(e as? ExportError, .invalidName(bad))
                XCTAssert(message(e).contains("letters A-Z and a-z, the digits 0-9 and underscores"), message(e))
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: run.dir + "/out/my-adapter.fmadapter"))
        for good in ["a", "A_1", "_", "Tiny2024"] { XCTAssert(AdapterName.isValid(good), good) }
    }

    func testReexportReplacesTheOldPackageOnlyWhenTheNewOneIsComplete() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        let out = run.dir + "/out"
        let path = try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "p", description: "first"), outputDir: out)
        try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "p", description: "second"), outputDir: out)
        XCTAssertEqual(try FMAdapterPackage.load(path).metadata.description, "second")
        // a failing export (a draft for another base) leaves the old package as it was
        let otherDraft = try run.writeDraft(baseSignature: String(repeating: "ab", count: 32))
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: try Checkpoint.load(otherDraft),
                                                         options: PackageOptions(name: "p", description: "third"), outputDir: out))
        XCTAssertEqual(try FMAdapterPackage.load(path).metadata.description, "second")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), ["p.fmadapter"], "no partial or old folders left")
        // a folder of the same name that is not a package is not deleted
        let stranger = out + "/q.fmadapter"
        try FileManager.default.createDirectory(atPath: stranger, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: stranger + "/notes.txt"))
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: nil, options: PackageOptions(name: "q"), outputDir: out)) {
            XCTAssert(message($0).contains("is not an .fmadapter package; it was left alone"), message($0))
        }
        XCTAssert(FileManager.default.fileExists(atPath: stranger + "/notes.txt"))
    }

    // MARK: corrupted packages

    func makePackage(_ run: TinyRun, name: String = "bad", draft: Bool = false) throws -> String {
        let ck = try Checkpoint.load(run.adapterPath)
        let d = draft ? try Checkpoint.load(try run.writeDraft()) : nil
        return try FMAdapterPackage.export(adapter: ck, draft: d, options: PackageOptions(name: name), outputDir: run.dir + "/pk-" + name)
    }

    func assertLoadFails(_ path: String, _ fragments: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try FMAdapterPackage.load(path), file: file, line: line) { e in
            for f in fragments { XCTAssert(message(e).contains(f), "expected '\(f)' in: \(message(e))", file: file, line: line) }
        }
    }

    func testMissingFilesAreNamed() throws {
        let run = try TinyRun.make()
        let fm = FileManager.default
        var p = try makePackage(run, name: "m1")
        try fm.removeItem(atPath: p + "/metadata.json")
        assertLoadFails(p, [p + "/metadata.json", "the file is missing"])
        p = try makePackage(run, name: "m2")
        try fm.removeItem(atPath: p + "/adapter_weights.bin")
        assertLoadFails(p, [p + "/adapter_weights.bin", "the file is missing"])
        p = try makePackage(run, name: "m3", draft: true)
        try fm.removeItem(atPath: p + "/draft_weights.bin")
        assertLoadFails(p, [p + "/draft_weights.bin", "the file is missing"])
        p = try makePackage(run, name: "m4", draft: true)
        try fm.removeItem(atPath: p + "/draft_config.json")
        assertLoadFails(p, [p + "/draft_config.json", "the file is missing"])
        assertLoadFails(run.dir + "/nowhere.fmadapter", ["no such folder"])
    }

    func testDraftWithoutItsAdapterIsRefused() throws {
        let run = try TinyRun.make()
        // in a package: draft files present, adapter weights gone
        let p = try makePackage(run, name: "d1", draft: true)
        try FileManager.default.removeItem(atPath: p + "/adapter_weights.bin")
        assertLoadFails(p, [p + "/adapter_weights.bin", "holds a draft but not the adapter"])
        // at export: a draft checkpoint given as the adapter
        let draft = try Checkpoint.load(try run.writeDraft())
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: draft, draft: nil, options: PackageOptions(name: "d2"), outputDir: run.dir + "/o")) {
            XCTAssert(message($0).contains(draft.path) && message($0).contains("is a draft-model checkpoint, not an adapter"), message($0))
        }
        // an adapter checkpoint given as the draft
        let ck = try Checkpoint.load(run.adapterPath)
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: ck, options: PackageOptions(name: "d3"), outputDir: run.dir + "/o")) {
            XCTAssert(message($0).contains("is an adapter checkpoint, not a draft model"), message($0))
        }
    }

    func testWrongChecksumAndTruncationAreToldApart() throws {
        let run = try TinyRun.make()
        var p = try makePackage(run, name: "c1")
        let w = p + "/adapter_weights.bin"
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: w)))
        bytes[bytes.count - 100] ^= 0x40  // one bit in the tensor data
        try Data(bytes).write(to: URL(fileURLWithPath: w))
        assertLoadFails(p, [w, "checksum mismatch"])

        p = try makePackage(run, name: "c2")
        let w2 = p + "/adapter_weights.bin"
        let full = try Data(contentsOf: URL(fileURLWithPath: w2))
        try full.prefix(full.count - 1000).write(to: URL(fileURLWithPath: w2))
        assertLoadFails(p, [w2, "truncated"])
        try full.prefix(10).write(to: URL(fileURLWithPath: w2))
        assertLoadFails(p, [w2, "truncated"])
        try (full + Data([0])).write(to: URL(fileURLWithPath: w2))
        assertLoadFails(p, [w2, "after its declared end"])
        try Data("not weights at all, just text".utf8).write(to: URL(fileURLWithPath: w2))
        assertLoadFails(p, [w2, "magic"])

        // a damaged draft is caught the same way
        p = try makePackage(run, name: "c3", draft: true)
        let d = p + "/draft_weights.bin"
        var db = [UInt8](try Data(contentsOf: URL(fileURLWithPath: d)))
        db[db.count - 40] ^= 1  // tensor data, past the header
        try Data(db).write(to: URL(fileURLWithPath: d))
        assertLoadFails(p, [d, "checksum mismatch"])
    }

    func testMetadataMissingOrBadKeysAreNamed() throws {
        let run = try TinyRun.make()
        for key in PackageMetadata.requiredKeys {
            let p = try makePackage(run, name: "k_" + key)
            let m = p + "/metadata.json"
            var obj = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: m))) as! [String: Any]
            obj[key] = nil
            try JSONSerialization.data(withJSONObject: obj).write(to: URL(fileURLWithPath: m))
            assertLoadFails(p, [m, "metadata has no key '\(key)'"])
        }
        let p = try makePackage(run, name: "types")
        let m = p + "/metadata.json"
        var obj = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: m))) as! [String: Any]
        obj["loraRank"] = "four"
        try JSONSerialization.data(withJSONObject: obj).write(to: URL(fileURLWithPath: m))
        assertLoadFails(p, [m, "loraRank"])
        obj["loraRank"] = 8
        try JSONSerialization.data(withJSONObject: obj).write(to: URL(fileURLWithPath: m))
        assertLoadFails(p, ["adapter_weights.bin", "rank-4", "loraRank 8"])
        obj["loraRank"] = 4
        obj["adapterIdentifier"] = "fmadapter-types-0000000"
        try JSONSerialization.data(withJSONObject: obj).write(to: URL(fileURLWithPath: m))
        assertLoadFails(p, [m, "adapterIdentifier"])
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: m))
        assertLoadFails(p, [m, "not valid JSON"])
    }

    func testAnotherBaseIsRefusedNamingBothSignatures() throws {
        let run = try TinyRun.make()
        let other = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir("otherbase"), seed: 77))
        XCTAssertNotEqual(other.signature, run.base.signature)
        let p = try makePackage(run, name: "sig")
        for source in [p, run.adapterPath] {
            XCTAssertThrowsError(try LoadedModel.load(base: other, adapter: source)) { e in
                XCTAssert(message(e).contains(run.base.signature) && message(e).contains(other.signature), message(e))
            }
        }
        XCTAssertFalse(try FMAdapterPackage.load(p).isCompatible(with: other))
        XCTAssertTrue(try FMAdapterPackage.load(p).isCompatible(with: run.base))
        // export checks against a given base, and fuse refuses the wrong base
        let ck = try Checkpoint.load(run.adapterPath)
        let draft = try Checkpoint.load(try run.writeDraft(omitShared: true))
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: draft, base: other, options: PackageOptions(name: "x"), outputDir: run.dir + "/o")) { e in
            XCTAssert(message(e).contains(run.base.signature) && message(e).contains(other.signature), message(e))
        }
        XCTAssertThrowsError(try Fuse.mergedTensors(base: other, adapter: try Adapter.load(run.adapterPath))) { e in
            XCTAssert(message(e).contains(run.base.signature) && message(e).contains(other.signature), message(e))
        }
    }

    // MARK: draft

    func testDraftIsPackagedAndLoaded() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        let draftCk = try Checkpoint.load(try run.writeDraft())
        let p = try FMAdapterPackage.export(adapter: ck, draft: draftCk, options: PackageOptions(name: "with_draft", draftTokenCount: 4), outputDir: run.dir + "/o")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: p).sorted(),
                       ["adapter_weights.bin", "draft_config.json", "draft_weights.bin", "metadata.json"])
        let pkg = try FMAdapterPackage.load(p)
        XCTAssertEqual(pkg.metadata.speculativeDecodingDraftTokenCount, 4)
        let draft = try XCTUnwrap(pkg.draft)
        XCTAssertEqual(draft.config.config.numLayers, 1)
        XCTAssertEqual(draft.config.draftLayers, [1])
        for (name, t) in draftCk.tensors { XCTAssertEqual(draft.tensors[name], fp16Rounded(t), name) }
        let loaded = try LoadedModel.load(base: run.base, adapter: p)
        XCTAssertEqual(loaded.draftTokenCount, 4)
        let draftModel = InferenceModel(base: try XCTUnwrap(loaded.draft).weights)
        let ids = run.base.tokenizer.encode(promptText)
        var rng = SeededRNG(seed: 0)
        let reference = try LlamaModel(weights: try BaseWeights(config: draftCk.header.draftConfig!, tensors: draftCk.tensors.mapValues(fp16Rounded)), lora: nil, rng: &rng)
        // the packaged draft's matrices stay fp16 in the mapped file (multiplied from them, not
        // from float32 copies): the float32 path's logits within 1e-5 relative
        XCTAssertTrue(try XCTUnwrap(loaded.draft).weights.embedding.isStored)
        let (got, expected) = (logits(draftModel, ids), logits(reference, ids))
        XCTAssertEqual(got.count, expected.count)
        let scale = expected.map { abs($0) }.max()!
        for (a, b) in zip(got, expected) { XCTAssertEqual(a, b, accuracy: 1e-5 * scale) }
        XCTAssertNil(draft.config.vocabulary)
        // the packaged draft drives speculative decoding: same greedy tokens as plain decoding
        let target = InferenceModel(loaded)
        let request = GenerationRequest(prompt: ids, maxNewTokens: 12, stopTokens: [])
        let plainTokens = Generator.generate(target, request).tokens
        let spec = SpeculativeDecoder(target: target, draft: DraftEngine(try XCTUnwrap(loaded.draft)), draftTokens: loaded.draftTokenCount!).generate(request)
        XCTAssertEqual(spec.tokens, plainTokens)
        XCTAssertGreaterThan(spec.stats.generation.draftTokensProposed, 0)
        // a restricted head's token ids survive exactly (they are not stored as fp16)
        let ids2 = [0, 2, 5, 300, 2049, 2051].filter { $0 < run.base.config.vocabSize }
        let withVocab = try Checkpoint.load(try run.writeDraft(vocabulary: ids2, name: "draft-vocab.safetensors"))
        let p2 = try FMAdapterPackage.export(adapter: ck, draft: withVocab, options: PackageOptions(name: "vocab"), outputDir: run.dir + "/o")
        XCTAssertEqual(try FMAdapterPackage.load(p2).draft?.config.vocabulary, ids2)
        XCTAssertEqual(try LoadedModel.load(base: run.base, adapter: p2).draft?.vocabulary, ids2)
    }

    func testDraftDistilledFromAnotherAdapterIsRefused() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        let foreign = try Checkpoint.load(try run.writeDraft(teacher: String(repeating: "7", count: 64), name: "draft-foreign.safetensors"))
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: foreign, options: PackageOptions(name: "f"), outputDir: run.dir + "/o")) {
            XCTAssert(message($0).contains(foreign.path) && message($0).contains("distilled from another adapter"), message($0))
        }
        let own = try Checkpoint.load(try run.writeDraft(teacher: ck.adapterSignature, name: "draft-own.safetensors"))
        XCTAssertNoThrow(try FMAdapterPackage.export(adapter: ck, draft: own, options: PackageOptions(name: "f"), outputDir: run.dir + "/o"))
    }

    func testDraftLeavingOutSharedWeightsNeedsTheBase() throws {
        let run = try TinyRun.make()
        let ck = try Checkpoint.load(run.adapterPath)
        let partial = try Checkpoint.load(try run.writeDraft(omitShared: true))
        XCTAssertThrowsError(try FMAdapterPackage.export(adapter: ck, draft: partial, options: PackageOptions(name: "part"), outputDir: run.dir + "/o")) {
            XCTAssert(message($0).contains("pass the base model with --base-model") && message($0).contains("model.embed_tokens.weight"), message($0))
        }
        let p = try FMAdapterPackage.export(adapter: ck, draft: partial, base: run.base, options: PackageOptions(name: "part"), outputDir: run.dir + "/o")
        let draft = try XCTUnwrap(try FMAdapterPackage.load(p).draft)
        XCTAssertEqual(draft.tensors["model.embed_tokens.weight"], fp16Rounded(run.base.file.tensors["model.embed_tokens.weight"]!))
        XCTAssertEqual(draft.tensors["model.norm.weight"], fp16Rounded(run.base.file.tensors["model.norm.weight"]!))
    }
}
