// Tokenizer files written for a GGUF base (fuse) put around text what llama.cpp puts around it
// for that GGUF (BOS, EOS): the post_processor transformers 5 goes by, read back here. Fixtures:
// Tests/TokenizerTests/Fixtures/bos (make_bos_fixtures.py), whose tokenizer keys llama.cpp's
// converter wrote.
import Foundation
import ModelAssets
import XCTest
@testable import Export

final class TextBOSTokenizerFilesTests: XCTestCase {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("TokenizerTests/Fixtures/bos")

    func testWrittenFilesAddWhatTheGGUFAdds() throws {
        let texts = ["Hello world", " leading space", "x<bos>y", ""]
        var sawBOS = false, sawEOS = false, sawNothing = false
        for name in ["gemma", "llama2_eos", "llama3", "llama3_off", "qwen2"] {
            let data = try TokenizerData(gguf: GGUFFile(path: Self.fixtures.appendingPathComponent("\(name).gguf").path))
            let gguf = try BPETokenizer(data: data)
            let files = try TokenizerFiles.make(from: data, preTokenizer: gguf.preTokenizer)
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bos-files-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            try files.tokenizerJSON.write(to: dir.appendingPathComponent("tokenizer.json"))
            try files.tokenizerConfigJSON.write(to: dir.appendingPathComponent("tokenizer_config.json"))
            let written = try BPETokenizer.load(tokenizerJSON: dir.appendingPathComponent("tokenizer.json"))
            XCTAssertEqual(written.textPrefix, gguf.textPrefix, name)
            XCTAssertEqual(written.textSuffix, gguf.textSuffix, name)
            for t in texts { XCTAssertEqual(written.encodeText(t), gguf.encodeText(t), "\(name): \(t.debugDescription)") }
            sawBOS = sawBOS || !gguf.textPrefix.isEmpty
            sawEOS = sawEOS || !gguf.textSuffix.isEmpty
            sawNothing = sawNothing || (gguf.textPrefix.isEmpty && gguf.textSuffix.isEmpty)
            let config = try XCTUnwrap(JSONSerialization.jsonObject(with: files.tokenizerConfigJSON) as? [String: Any])
            XCTAssertEqual(config["add_bos_token"] as? Bool, !gguf.textPrefix.isEmpty, name)
        }
        XCTAssertTrue(sawBOS && sawEOS && sawNothing)
    }
}
