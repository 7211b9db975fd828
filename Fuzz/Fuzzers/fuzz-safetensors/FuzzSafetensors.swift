// Fuzzes the safetensors reader: header JSON, dtypes, shapes, offsets, metadata, conversion
// to Float of every convertible tensor. Seeds: files from the toolkit's safetensors writer.
import CFuzzerDriver
import Foundation
import FuzzSupport
import ModelAssets

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    Fuzz.writeSeedsIfAsked {
        var seeds: [String: Data] = [:]
        var w = SafetensorsWriter(metadata: ["format": "pt", "note": "a \"quoted\" value\n"])
        try w.add("a", HostTensor(shape: [2, 3], data: [1, -2, 3, 4.5, 0, -0]), as: .f32)
        try w.add("b.weight", HostTensor(shape: [4], data: [1, 2, 65504, -1e-3]), as: .f16)
        try w.add("c", HostTensor(shape: [1, 2], data: [3.25, -7]), as: .bf16)
        try w.add("scalar", HostTensor(shape: [], data: [42]), as: .f32)
        seeds["mixed.safetensors"] = w.serialized()
        seeds["empty.safetensors"] = SafetensorsWriter().serialized()
        return seeds
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    guard let file = try? SafetensorsFile(data: Data(bytes), path: "fuzz.safetensors") else { return 0 }
    for t in file.tensors {
        _ = try? file.tensor(t.name)
        _ = try? file.rawBytes(of: t.name)
    }
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_safetensors_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
