// Statistics (characters without a tokenizer; tokens, targets and percentiles with the fake
// one) and the deterministic train/eval split.
import DataSchema
import Foundation
import ModelAssets
import XCTest

final class StatsSplitTests: XCTestCase {
    func testStats() throws {
        let text = [
            #"[{"role":"user","content":"ab"},{"role":"assistant","content":"cde"}]"#,
            #"[{"role":"system","content":"s"},{"role":"user","content":"é"},{"role":"assistant","content":"xyz"},{"role":"user","content":"q"},{"role":"assistant","content":"r"}]"#,
        ].joined(separator: "\n")
        let data = try TestData.read(text, skipInvalid: false)
        let plain = try DataStats.compute(data)
        XCTAssertEqual(plain.samples, 2)
        XCTAssertEqual(plain.turns, 7)
        XCTAssertEqual(plain.turnsByRole, [.user: 3, .assistant: 3, .system: 1])
        XCTAssertEqual(plain.characters, 12)
        XCTAssertEqual(plain.charactersByRole[.assistant], 7)
        XCTAssertNil(plain.tokens)

        let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), template: FakeChatML(), maxSequenceLength: 30)
        let stats = try XCTUnwrap(try DataStats.compute(data, encoder: encoder).tokens)
        // Sample 1: 6+2+2 + 11+3+1+1 = 26 tokens; sample 2: 8+1+2 + 6+2+2 + 11+3+2 + 6+1+2 + 11+1+2 = 60.
        XCTAssertEqual(stats.tokens, 26 + 60)
        XCTAssertEqual(stats.targetTokens, 4 + 4 + 2)
        XCTAssertEqual(stats.lengthPercentiles.map(\.tokens), [26, 60, 60, 60, 60])
        XCTAssertEqual(stats.exceeding, 1)
    }

    func testSplitIsDeterministic() throws {
        let dir = try TestData.temporaryDirectory()
        let input = dir.appendingPathComponent("all.jsonl")
        let lines = (0..<20).map { #"{"prompt":"q\#($0)","completion":"a\#($0)"}"# }
        try Data(("\u{FEFF}" + lines.joined(separator: "\r\n") + "\r\n\n").utf8).write(to: input)
        let out1 = dir.appendingPathComponent("one").path
        let out2 = dir.appendingPathComponent("two").path
        let r1 = try DataSplitter.split(path: input.path, evalFraction: 0.25, seed: 3, outputDirectory: out1)
        _ = try DataSplitter.split(path: input.path, evalFraction: 0.25, seed: 3, outputDirectory: out2)
        XCTAssertEqual(r1.trainCount, 15)
        XCTAssertEqual(r1.evalCount, 5)
        let train1 = try String(contentsOfFile: r1.trainPath, encoding: .utf8)
        let eval1 = try String(contentsOfFile: r1.evalPath, encoding: .utf8)
        XCTAssertEqual(train1, try String(contentsOfFile: out2 + "/train.jsonl", encoding: .utf8))
        XCTAssertEqual(eval1, try String(contentsOfFile: out2 + "/eval.jsonl", encoding: .utf8))
        let all = (train1 + eval1).split(separator: "\n").map(String.init)
        XCTAssertEqual(Set(all), Set(lines), "lines copied verbatim, none lost, BOM and CR gone")
        let r3 = try DataSplitter.split(path: input.path, evalFraction: 0.25, seed: 4, outputDirectory: dir.appendingPathComponent("three").path)
        XCTAssertNotEqual(try String(contentsOfFile: r3.evalPath, encoding: .utf8), eval1)
        XCTAssertThrowsError(try DataSplitter.split(path: input.path, evalFraction: 1, seed: 0, outputDirectory: out1))
    }
}
