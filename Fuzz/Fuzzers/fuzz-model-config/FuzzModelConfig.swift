// Fuzzes config.json reading (Hugging Face llama / mistral / qwen2 configs, rope scaling,
// validation) and the shapes the loader derives from a config that passes.
// Seeds: the config the toolkit writes for a tiny model, and the committed tiny-llama fixture.
import CFuzzerDriver
import Foundation
import FuzzSupport
import ModelAssets
import ModelDefinition

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    Fuzz.writeSeedsIfAsked {
        let m = try Fuzz.tinyModel()
        return ["tiny-config.json": m.config.huggingFaceConfigJSON()]
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard let config = try? ModelConfig.fromHuggingFace(json: Data(bytes: data, count: size), path: "config.json") else { return 0 }
    // Shapes of a config that validated must be computable without traps.
    if config.numLayers <= 64 {
        _ = TensorTable.shapes(for: config)
    }
    _ = config.huggingFaceConfigJSON()
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_model_config_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
