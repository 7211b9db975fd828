// Fuzzes the checkpoint reader: safetensors container, the header metadata (format, version,
// JSON-encoded config, LoRA, trainer state, options), finite values and optimizer moments.
// Seeds: a real adapter checkpoint of a one-layer model written by Checkpoint.write.
import CFuzzerDriver
import Autograd
import Foundation
import FuzzSupport
import Training

/// The LoRA parameters of the seeds' model: a checkpoint that loads is also restored into them.
nonisolated(unsafe) var params: [(name: String, tensor: Tensor)] = []

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    params = try! Fuzz.tinyLoRAParameters()
    Fuzz.writeSeedsIfAsked {
        ["adapter-epoch1.safetensors": try Fuzz.tinyCheckpoint(), "adapter-interrupted.safetensors": try Fuzz.tinyCheckpoint(label: "interrupted")]
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let path = Fuzz.scratchFile("adapter-epoch1.safetensors", UnsafeRawBufferPointer(start: data, count: size))
    guard let ck = try? Checkpoint.load(path) else { return 0 }
    _ = ck.header.state.step
    _ = ck.tensors.count + ck.optimizerMoments.m.count
    if let optimizer = try? ck.restore(into: params, weightDecay: 0) {
        // The restored moments must fit the parameters an AdamW update walks.
        precondition(zip(optimizer.m, params).allSatisfy { $0.count == $1.tensor.count }, "restored moments do not fit")
        precondition(zip(optimizer.v, params).allSatisfy { $0.count == $1.tensor.count }, "restored moments do not fit")
    }
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_checkpoint_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
