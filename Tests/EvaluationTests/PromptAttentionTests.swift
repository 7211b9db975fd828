// A prompt's blocked attention (scores and outputs as sgemm products per query head and block of
// rows) gives the logits of one row at a time to float rounding: whole prompts, prompts after a
// cached prefix, prompts in chunks that straddle the blocked-rows threshold, with float32 and
// float16 caches, on one and two layers. Tiny model (4 query heads over 2 kv heads). With a float16
// cache and more than one layer the paths may store a few keys and values as neighbouring halves;
// the test bounds what that does (below) and checks that it is all the paths differ in. Which
// path ran is counted (Attention.blockedRuns), not read from the logits: on AVX-512 (bk_gemm's
// chains, bk_softmax) this model's head dim of 8 gives the blocked path exactly the bits of one
// row at a time.
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

    /// Why a float16 cache over several layers is held to another bound than float rounding.
    /// Layer 0's keys and values are computed from the embeddings alone: the same bits on both
    /// paths, stored as the same halves (asserted below), so on a one-layer model the paths differ
    /// only in the order attention sums (1e-5, as float32). Every later layer's keys and values
    /// come from the layer before's attention, which the paths sum in another order, so they
    /// differ in the last float32 bits; where such a value lies that close to the midpoint between
    /// two halves, the paths round it to neighbouring halves. On the two-layer model here about 20
    /// of layer 1's 9,600 stored values do so, which ones depending on OpenBLAS's kernels (its Haswell
    /// sgemm, which Zen 3 and Zen 5 CPUs get: 3.0e-5 in the logits; SkylakeX's: 2.9e-6). No
    /// order of the sums removes this: any two float32 results a rounding apart can straddle a
    /// midpoint. Either half is within one half-precision step of either path's float32 value,
    /// so the blocked path's logits are those of a float16 cache with a few values rounded the
    /// other way: a perturbation of the kind, and a small part of the size, of rounding every
    /// value to half, which is what the float16 cache does to the float32 cache's logits. That
    /// effect, measured in the same test (4.1e-4 here), is the bound.
    func testBlockedAttentionGivesTheLogitsOfOneRowAtATime() throws {
        for layers in [1, 2] {
            let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir(), seed: 3, layers: layers, context: 1024))
            let V = base.config.vocabSize
            let ids = (0..<300).map { ($0 * 53 + 11) % V }
            XCTAssertGreaterThan(ids.count, 4 * InferenceModel.Attention.blockRows, "several blocks of query rows")
            var float32Rows: [[Int]: [Float]] = [:]
            for kv in KVCachePrecision.allCases {
                let model = InferenceModel(base: base.weights, kvCache: kv)
                // every new row's logits: whole, then 37 cached positions and the rest, then chunks of 100
                func logits(_ path: InferenceModel.PromptAttention, pieces: [Int]) -> (logits: [Float], cache: KVCache) {
                    let before = InferenceModel.Attention.blockedRuns.load(ordering: .relaxed)
                    defer {
                        // which path ran: the blocked one once per layer and piece (auto: pieces of 32 rows and more)
                        let runs = InferenceModel.Attention.blockedRuns.load(ordering: .relaxed) - before
                        let blockedPieces = pieces.filter { path.isBlocked(rows: $0) }.count
                        XCTAssertEqual(runs, layers * blockedPieces, "\(path) attention over pieces \(pieces)")
                    }
                    return InferenceModel.$promptAttention.withValue(path) {
                        let cache = model.makeCache()
                        var out: [Float] = [], start = 0
                        for n in pieces {
                            out += model.forward(Array(ids[start..<(start + n)]), cache: cache, allLogits: true)
                            start += n
                        }
                        return (out, cache)
                    }
                }
                for pieces in [[300], [37, 263], [100, 100, 100], [20, 280]] {
                    let (rows, rowsCache) = logits(.rows, pieces: pieces), (blocked, blockedCache) = logits(.blocked, pieces: pieces)
                    let auto = logits(.auto, pieces: pieces).logits
                    let what = "\(layers) layers, \(kv) cache, pieces \(pieces)"
                    if kv == .float32 { float32Rows[pieces] = rows }
                    var bound: Float = 1e-5
                    if kv == .float16 {
                        let layer0 = (rowsCache.rowBytes * ids.count)
                        XCTAssertEqual(memcmp(rowsCache.keys[0], blockedCache.keys[0], layer0), 0, "\(what): layer 0's keys, the same halves")
                        XCTAssertEqual(memcmp(rowsCache.values[0], blockedCache.values[0], layer0), 0, "\(what): layer 0's values, the same halves")
                        if layers > 1 {
                            // see above: the float16 cache's own effect on the logits
                            bound = relative(rows, float32Rows[pieces]!)
                            XCTAssertGreaterThan(bound, 1e-5, "\(what): the float16 cache moves the logits by more than float rounding")
                        }
                    }
                    XCTAssertLessThan(relative(blocked, rows), bound, "\(what): blocked vs one row at a time")
                    // auto: pieces of 20 rows go one row at a time, 37 and more blocked
                    if pieces.allSatisfy({ $0 >= InferenceModel.Attention.blockedRows }) { XCTAssertEqual(auto, blocked, "\(what): auto takes the blocked path") }
                    XCTAssertLessThan(relative(auto, rows), bound, "\(what): auto")
                }
            }
        }
    }
}
