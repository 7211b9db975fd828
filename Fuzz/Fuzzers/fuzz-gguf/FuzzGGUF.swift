// Fuzzes the GGUF reader and everything a base model load does with its result: config,
// tensor names and shapes, dequantization of every type, tokenizer and chat template.
// Seeds: a one-layer model written by the toolkit's GGUF writer, and one tensor of each quant type.
import CFuzzerDriver
import Foundation
import FuzzSupport
import ModelAssets
import ModelDefinition
import Training

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    Fuzz.writeSeedsIfAsked {
        let m = try Fuzz.tinyModel()
        var seeds: [String: Data] = [:]
        seeds["tiny-f32.gguf"] = try ModelExport.ggufWriter(config: m.config, tensors: m.tensors, tokenizer: m.tokenizer).serialized()
        var w = GGUFWriter(alignment: 64)
        try w.set("general.architecture", .string("llama"))
        try w.set("nested", .array(elementType: .array, values: [.array(elementType: .int16, values: [.int16(-3), .int16(4)])]))
        var rng = SystemRandomNumberGenerator()
        for type in GGMLType.dequantizable {
            let (block, size) = type.blockGeometry
            let encoded = (0..<(2 * size)).map { _ in UInt8.random(in: 0...255, using: &rng) & 0x3F }
            try w.addTensor("t.\(type.name)", shape: [1, 2 * block], type: type, encoded: encoded)
        }
        seeds["quants.gguf"] = w.serialized()
        return seeds
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    // The data-based reader, every tensor dequantized.
    if let file = try? GGUFFile(data: Data(bytes), path: "fuzz.gguf") {
        for t in file.tensors where t.type.isDequantizable && t.elementCount <= 1 << 20 {
            _ = try? file.dequantize(t.name)
        }
        _ = try? ModelConfig.fromGGUF(file, hasOutputTensor: file.tensorInfo(named: "output.weight") != nil)
        if let tok = try? TokenizerData(gguf: file), let bpe = try? BPETokenizer(data: tok) {
            let ids = bpe.encode("Hello wörld <|im_start|>user\n 12 \u{1F600}")
            _ = bpe.decode(ids)
        }
    }
    // The whole base-model load from a file path, as train-adapter does it.
    let path = Fuzz.scratchFile("model.gguf", bytes)
    if let base = try? BaseModel.load(path: path) {
        _ = base.tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
        _ = base.stopTokenIds
    }
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_gguf_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
