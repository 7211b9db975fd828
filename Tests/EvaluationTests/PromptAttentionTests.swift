// A prompt's blocked attention (scores and outputs as sgemm products per query head and block of
// rows) gives the logits of one row at a time to float rounding: whole prompts, prompts after a
// cached prefix, prompts in chunks that straddle the blocked-rows threshold, with float32 and
// float16 caches. Tiny model (4 query heads over 2 kv heads).
import Foundation
@testable import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class PromptAttentionTests: XCTestCase {
    func relative(_ a: [Float], _ b: [Float]) -> Float {
        precondition(a.count == b.count)
        var d: Float = 0, s: Float = 0
        for (x, y) in zip(a, b) { d = max(d, abs(x - y)); s = max(s, abs(y)) }
        return d / max(s, 1e-30)
    }

    func testBlockedAttentionGivesTheLogitsOfOneRowAtATime() throws {
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir(), seed: 3, context: 1024))
        let V = base.config.vocabSize
        let ids = (0..<300).map { ($0 * 53 + 11) % V }
        XCTAssertGreaterThan(ids.count, 4 * InferenceModel.Attention.blockRows, "several blocks of query rows")
        for kv in KVCachePrecision.allCases {
            let model = InferenceModel(base: base.weights, kvCache: kv)
            // every new row's logits: whole, then 37 cached positions and the rest, then chunks of 100
            func logits(_ path: InferenceModel.PromptAttention, pieces: [Int]) -> [Float] {
                InferenceModel.$promptAttention.withValue(path) {
                    let cache = model.makeCache()
                    var out: [Float] = [], start = 0
                    for n in pieces {
                        out += model.forward(Array(ids[start..<(start + n)]), cache: cache, allLogits: true)
                        start += n
                    }
                    return out
                }
            }
            for pieces in [[300], [37, 263], [100, 100, 100], [20, 280]] {
                let rows = logits(.rows, pieces: pieces), blocked = logits(.blocked, pieces: pieces), auto = logits(.auto, pieces: pieces)
                XCTAssertLessThan(relative(blocked, rows), 1e-5, "\(kv) cache, pieces \(pieces): blocked vs one row at a time")
                XCTAssertNotEqual(blocked, rows, "\(kv) cache, pieces \(pieces): the blocked path ran (another order of the sums)")
                // auto: pieces of 20 rows go one row at a time, 37 and more blocked
                let expectedAuto = pieces.allSatisfy { $0 >= InferenceModel.Attention.blockedRows } ? blocked : nil
                if let expectedAuto { XCTAssertEqual(auto, expectedAuto, "\(kv) cache, pieces \(pieces): auto takes the blocked path") }
                XCTAssertLessThan(relative(auto, rows), 1e-5, "\(kv) cache, pieces \(pieces): auto")
            }
        }
    }
}
