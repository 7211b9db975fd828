// `fuse` streams the merged model one tensor at a time: on a base kept as stored blocks its GGUF
// and safetensors output are byte for byte what the whole-model writers make from the float32
// merged tensors, and the only full float32 copies made are the adapted projections, each merged
// once when written (FrozenMatrix.fullCopies). A packaged draft's draft_weights.bin, streamed from
// held weights, is byte for byte the whole-container serializer's, with no full copy. Tiny
// block-type models only.
import Autograd
import Export
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class StreamedFuseTests: XCTestCase {
    func randomAdapter(_ base: BaseModel, targets: [LoRATarget]) -> Adapter {
        TestSupport.randomAdapter(base, targets: targets, scale: 0.1, seed: 11, source: "random")
    }

    func testStreamedFuseOfAStoredBaseEqualsTheWholeModelWriters() throws {
        let dir = TinyAssets.tempDir()
        for (type, tied) in [(GGMLType.q4_K, true), (.q8_0, false)] {
            let path = try TinyAssets.writeBlockModel(type, in: dir, tied: tied)
            let stored = try BaseModel.load(path: path, storage: .stored), f32 = try BaseModel.load(path: path, storage: .float32)
            let targets: [LoRATarget] = [.q, .k, .down]
            let adapter = randomAdapter(stored, targets: targets)
            let merged = try Fuse.mergedTensors(base: f32, adapter: adapter)  // the reference: the whole model as float32
            guard let tokenizer = try f32.file.tokenizer.ggufData() else { return XCTFail("a GGUF base") }
            for format in FusedFormat.allCases {
                let out = dir + "/fused-\(type.name)-\(tied)-" + format.rawValue + (format == .safetensors ? "" : ".gguf")
                let copies = FrozenMatrix.fullCopies.value
                try Fuse.write(base: stored, adapter: adapter, format: format, to: out)
                XCTAssertEqual(FrozenMatrix.fullCopies.value - copies, stored.config.numLayers * targets.count,
                               "\(type) \(format.rawValue): only the adapted projections are made whole, once each")
                let expected: Data
                let got: Data
                switch format {
                case .ggufF32, .ggufF16:
                    expected = try ModelExport.ggufWriter(config: f32.config, tensors: merged, tokenizer: tokenizer,
                                                          matrixType: format == .ggufF32 ? .f32 : .f16).serialized()
                    got = try Data(contentsOf: URL(fileURLWithPath: out))
                case .safetensors:
                    var w = SafetensorsWriter(metadata: ["format": "pt"])
                    for name in merged.keys.sorted(by: TensorTable.order) { try w.add(name, merged[name]!) }
                    expected = w.serialized()
                    got = try Data(contentsOf: URL(fileURLWithPath: out + "/model.safetensors"))
                }
                XCTAssertEqual(got.count, expected.count, "\(type) \(format.rawValue)")
                XCTAssertTrue(got == expected, "\(type) \(format.rawValue): streamed bytes equal the whole-model writer's")
            }
        }
    }

    /// A GGUF base's tokenizer is read again from its file when the fused output is written: a file
    /// replaced on disk since loading (another tokenizer) is refused, not mixed with the loaded weights.
    func testFusingRefusesABaseFileReplacedWithAnotherTokenizer() throws {
        let dir = TinyAssets.tempDir()
        let path = try TinyAssets.writeBlockModel(.q8_0, in: dir, tied: true)
        let base = try BaseModel.load(path: path, storage: .stored)
        let adapter = randomAdapter(base, targets: [.q])
        try Fuse.write(base: base, adapter: adapter, format: .ggufF16, to: dir + "/before.gguf")
        guard var other = try base.ggufTokenizerData() else { return XCTFail("a GGUF base") }
        other.tokens[other.tokens.count - 1] += "x"
        // the same weights under another tokenizer, put in the base's place (a new file, as a download would)
        let replacement = dir + "/replacement.gguf"
        let f32 = try BaseModel.load(path: path, storage: .float32)
        try ModelExport.ggufWriter(config: f32.config, tensors: f32.file.tensors, tokenizer: other).serialized()
            .write(to: URL(fileURLWithPath: replacement))
        XCTAssertEqual(rename(replacement, path), 0)
        for format in FusedFormat.allCases {
            XCTAssertThrowsError(try Fuse.write(base: base, adapter: adapter, format: format, to: dir + "/after-" + format.rawValue)) { error in
                XCTAssertTrue("\(error)".contains("changed on disk after it was loaded"), "\(format.rawValue): \(error)")
            }
        }
    }

    func testStreamedWeightsContainerEqualsTheSerializerWithoutAFullCopy() throws {
        let dir = TinyAssets.tempDir()
        for (type, tied) in [(GGMLType.q4_K, true), (.q8_0, false)] {
            let path = try TinyAssets.writeBlockModel(type, in: dir, tied: tied)
            let stored = try BaseModel.load(path: path, storage: .stored), f32 = try BaseModel.load(path: path, storage: .float32)
            let named = stored.weights.namedWeights.sorted { TensorTable.order($0.name, $1.name) }
            let reference = f32.weights.namedWeights.sorted { TensorTable.order($0.name, $1.name) }.map { ($0.name, $0.weight.tensor) }
            let expected = try WeightsContainer.serialize(content: .draft, baseSignature: stored.signature, config: stored.config, lora: nil,
                                                          tensors: reference, file: path)
            let out = dir + "/draft-\(type.name).bin"
            let copies = FrozenMatrix.fullCopies.value
            try WeightsContainer.write(to: out, content: .draft, baseSignature: stored.signature, config: stored.config, lora: nil,
                                       tensors: named, file: path)
            XCTAssertEqual(FrozenMatrix.fullCopies.value - copies, 0, "\(type): stored matrices are written a slice at a time")
            let got = try Data(contentsOf: URL(fileURLWithPath: out))
            XCTAssertEqual(got.count, expected.count, "\(type)")
            XCTAssertTrue(got == expected, "\(type): streamed bytes equal the serializer's")
            XCTAssertEqual(try WeightsContainer.parse(got, path: out).tensors.count, named.count)
        }
        // an empty container (header, padding, checksum) is the same both ways too
        let cfg = try TinyAssets.config(vocab: 10)
        let out = dir + "/empty.bin"
        try WeightsContainer.write(to: out, content: .draft, baseSignature: "ab", config: cfg, lora: nil, tensors: [], file: "t")
        XCTAssertTrue(try Data(contentsOf: URL(fileURLWithPath: out))
            == WeightsContainer.serialize(content: .draft, baseSignature: "ab", config: cfg, lora: nil, tensors: [], file: "t"))
    }

    func testSafetensorsStreamWriterRefusesShortAndLongWrites() throws {
        let dir = TinyAssets.tempDir()
        let path = dir + "/s.safetensors"
        let w = try SafetensorsStreamWriter(path: path, metadata: [:], tensors: [.init(name: "a", dtype: .f16, shape: [2, 3]), .init(name: "b", dtype: .f32, shape: [2])])
        try w.write([1, 2, 3])
        try w.write([4, 5, 6])
        XCTAssertThrowsError(try w.write([1, 2, 3])) { XCTAssert("\($0)".contains("b"), "\($0)") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "nothing appears after a failed write")
        let v = try SafetensorsStreamWriter(path: path, metadata: ["k": "v"], tensors: [.init(name: "a", dtype: .bf16, shape: [2])])
        try v.write([1])
        XCTAssertThrowsError(try v.finish())
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }
}
