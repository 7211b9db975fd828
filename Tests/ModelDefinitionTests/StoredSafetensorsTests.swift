// A Hugging Face folder base kept as stored: F16 and BF16 matrices stay 16-bit in the mapped
// safetensors file (F32 ones stay mapped too), give the float32 path's logits within 1e-5
// relative in both executors, and hold fewer bytes; a tied model's redundant lm_head is checked
// against the embedding without a copy. Tiny models only.
import Autograd
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import Training
import XCTest

final class StoredSafetensorsTests: XCTestCase {
    func relative(_ a: [Float], _ b: [Float]) -> Float {
        var d: Float = 0, m: Float = 0
        for i in a.indices { d = max(d, abs(a[i] - b[i])); m = max(m, abs(b[i])) }
        return d / max(m, 1e-12)
    }

    func testHuggingFaceFolderKeepsSixteenBitMatricesStored() throws {
        let dir = TinyAssets.tempDir()
        let source = try ModelLoader.load(path: try TinyAssets.writeBlockModel(.f32, in: dir, tied: false))
        for dtype in [SafetensorsDType.f16, .bf16, .f32] {
            let folder = dir + "/hf-" + dtype.rawValue
            try ModelExport.writeHuggingFaceFolder(config: source.config, tensors: source.tensors, to: folder, dtype: dtype)
            let f32 = try BaseWeights(file: try ModelLoader.load(path: folder, storage: .float32))
            let file = try ModelLoader.load(path: folder, storage: .stored)
            let stored = try BaseWeights(file: file)
            XCTAssertTrue(stored.embedding.isStored && stored.untiedHead!.isStored && stored.layers[1].projection(.down).isStored, "\(dtype.rawValue)")
            XCTAssertTrue(file.tensors.values.allSatisfy { $0.shape.count == 1 }, "only vectors are read as float32")
            let copies = FrozenMatrix.fullCopies.value
            let ids = [1, 5, 9, 40, 41, 42, 7, 3]
            let a = InferenceModel(base: f32), b = InferenceModel(base: stored)
            XCTAssertLessThan(relative(b.forward(ids, cache: b.makeCache(), allLogits: true), a.forward(ids, cache: a.makeCache(), allLogits: true)), 1e-5, "\(dtype.rawValue) prefill")
            let ca = a.makeCache(), cb = b.makeCache()
            for t in ids { XCTAssertLessThan(relative(b.forward([t], cache: cb), a.forward([t], cache: ca)), 1e-5, "\(dtype.rawValue) decode") }
            let ta = try LlamaModel(base: f32, adapter: nil), tb = try LlamaModel(base: stored, adapter: nil)
            var r1 = SeededRNG(seed: 0), r2 = SeededRNG(seed: 0)
            let la = withNoGrad { ta.logits(hidden: ta.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &r1, training: false)) }.data
            let lb = withNoGrad { tb.logits(hidden: tb.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &r2, training: false)) }.data
            XCTAssertLessThan(relative(lb, la), 1e-5, "\(dtype.rawValue) training pass")
            XCTAssertEqual(FrozenMatrix.fullCopies.value, copies, "\(dtype.rawValue): no float32 copy of a stored matrix")
            if dtype != .f32 { XCTAssertLessThanOrEqual(b.weightBytes * 2, a.weightBytes, "\(dtype.rawValue) holds half the bytes") }
            XCTAssertEqual(stored.parameterCount, f32.parameterCount)
            XCTAssertEqual(file.signature(), try ModelLoader.load(path: folder, storage: .float32).signature(), "one signature whatever the storage")
        }
    }

    func testTiedFolderWithARedundantHeadIsCheckedWhenStored() throws {
        let dir = TinyAssets.tempDir()
        let source = try ModelLoader.load(path: try TinyAssets.writeBlockModel(.f32, in: dir, tied: true))
        var tensors = source.tensors
        tensors[TensorTable.head] = tensors[TensorTable.embedding]
        var w = SafetensorsWriter(metadata: ["format": "pt"])
        for name in tensors.keys.sorted() { try w.add(name, tensors[name]!, as: .f16) }
        try FileManager.default.createDirectory(atPath: dir + "/hf", withIntermediateDirectories: true)
        try w.write(to: dir + "/hf/model.safetensors")
        try AtomicFile.write(source.config.huggingFaceConfigJSON(), to: dir + "/hf/config.json")
        XCTAssertTrue(try BaseWeights(file: try ModelLoader.load(path: dir + "/hf", storage: .stored)).embedding.isStored)
        var other = SafetensorsWriter(metadata: ["format": "pt"])
        for name in tensors.keys.sorted() {
            var t = tensors[name]!
            if name == TensorTable.head { t.data[7] += 0.5 }
            try other.add(name, t, as: .f16)
        }
        try other.write(to: dir + "/hf/model.safetensors")
        XCTAssertThrowsError(try ModelLoader.load(path: dir + "/hf", storage: .stored)) { e in
            XCTAssert("\(e.localizedDescription)".contains("lm_head.weight differs"), e.localizedDescription)
        }
    }
}
