// Fuzzes the .fmadapter package reader: the first input byte picks the file that gets the
// rest of the input (even: adapter_weights.bin, with its SHA-256 trailer recomputed so that
// mutations reach the header and tensor checks; odd: metadata.json); the other file is the
// valid one of a package exported from a tiny checkpoint. Then FMAdapterPackage.load.
import CFuzzerDriver
import Export
import Foundation
import FuzzSupport
import ModelDefinition

nonisolated(unsafe) var validPackage: (metadata: Data, weights: Data)? = nil

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    validPackage = try! Fuzz.tinyPackage()
    Fuzz.writeSeedsIfAsked {
        let p = validPackage!
        return ["weights.bin": Data([0]) + p.weights, "metadata.json": Data([1]) + p.metadata]
    }
    try? FileManager.default.createDirectory(atPath: Fuzz.scratch + "/fuzz.fmadapter", withIntermediateDirectories: true)
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1, let valid = validPackage else { return 0 }
    let rest = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let dir = Fuzz.scratch + "/fuzz.fmadapter"
    if data[0] % 2 == 0 {
        let weights = Fuzz.fixingChecksum(rest)
        _ = weights.withUnsafeBytes { Fuzz.scratchFile("fuzz.fmadapter/adapter_weights.bin", $0) }
        _ = valid.metadata.withUnsafeBytes { Fuzz.scratchFile("fuzz.fmadapter/metadata.json", $0) }
        _ = try? WeightsContainer.parse(weights, path: "adapter_weights.bin")
    } else {
        _ = valid.weights.withUnsafeBytes { Fuzz.scratchFile("fuzz.fmadapter/adapter_weights.bin", $0) }
        _ = Fuzz.scratchFile("fuzz.fmadapter/metadata.json", rest)
    }
    _ = try? FMAdapterPackage.load(dir)
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_fmadapter_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
