// Fuzzes tokenizer.json loading (vocabulary, merges, added tokens, pre-tokenizer and
// normalizer pipelines) and then encodes and decodes with what loaded. Seeds: the committed
// tiny Llama-3 and Qwen2 tokenizer fixtures (copied by scripts/fuzz.sh).
import CFuzzerDriver
import Foundation
import FuzzSupport
import ModelAssets

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let path = Fuzz.scratchFile("tokenizer.json", UnsafeRawBufferPointer(start: data, count: size))
    guard let tok = try? BPETokenizer.load(tokenizerJSON: URL(fileURLWithPath: path)) else { return 0 }
    let ids = tok.encode("Hello wörld, it's 2024!\n\t  <|im_start|> \u{1F600}ab")
    _ = tok.decode(ids)
    _ = tok.decode(ids, skipSpecialTokens: true)
    _ = tok.decode([0, 1, tok.vocabularySize - 1, tok.vocabularySize, -1])
    return 0
}

/// The entry point SwiftPM links for this executable on Linux; libFuzzer runs from here.
@_cdecl("fuzz_tokenizer_json_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in data.map { fuzzOne($0, size) } ?? 0 }
}
