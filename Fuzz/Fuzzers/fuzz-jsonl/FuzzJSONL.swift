// Fuzzes the JSONL sample reader and validator (line splitting, UTF-8 and JSON checks,
// messages, tools and their JSON schemas, tool calls, response_format) in train and prompt
// mode, then renders accepted samples to token ids and loss masks with a tiny tokenizer.
import DataSchema
import CFuzzerDriver
import Foundation
import FuzzSupport
import ModelAssets
import TestSupport

nonisolated(unsafe) var encoder: TrainingEncoder? = nil

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    Fuzz.writeSeedsIfAsked { Fuzz.jsonlSeeds.mapValues { Data($0.utf8) } }
    let tok = try! BPETokenizer(data: TinyAssets.tokenizer())
    encoder = TrainingEncoder(tokenizer: tok, template: ChatTemplate.detect(from: tok.chatTemplate), maxSequenceLength: 48)
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    for mode in DataMode.allCases {
        let options = ReadOptions(mode: mode, skipInvalid: true, maxLineBytes: 1 << 16)
        guard let set = try? DataReader.read(bytes: bytes, file: "fuzz.jsonl", options: options) else { continue }
        _ = set.summary.description
        for issue in set.issues { _ = issue.description }
        if mode == .train, let encoder {
            _ = try? encoder.encode(set, skipInvalid: true)
        }
    }
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_jsonl_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
