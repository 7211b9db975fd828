// A pass whose caller reads some rows only (a prompt's last row, a verify pass's rows, a draft's
// last hidden states) runs its last layer past the attention for those rows alone
// (InferenceModel.runBlocks's outputRows). What it must not change: the keys and values every row
// leaves in the cache (the same bits), and the rows it returns (the logits of the pass that runs
// every row, to float rounding: one row's products take another kernel than a prompt's). Stored
// Q4_K weights (the kernels a user's model takes), float32 and q8 activations, prompts on the
// many-rows path (300 rows) and on the streaming one (12).
import Foundation
@testable import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class OutputRowsTests: XCTestCase {
    func relative(_ a: ArraySlice<Float>, _ b: ArraySlice<Float>) -> Float {
        precondition(a.count == b.count)
        var d: Float = 0, s: Float = 0
        for (x, y) in zip(a, b) { d = max(d, abs(x - y)); s = max(s, abs(y)) }
        return d / max(s, 1e-30)
    }

    func sameCache(_ a: KVCache, _ b: KVCache, rows: Int, layers: Int, _ what: String) {
        XCTAssertEqual(a.count, b.count, "\(what): cached positions")
        for l in 0..<layers {
            XCTAssertEqual(memcmp(a.keys[l], b.keys[l], a.rowBytes * rows), 0, "\(what): layer \(l)'s keys, the same bits")
            XCTAssertEqual(memcmp(a.values[l], b.values[l], a.rowBytes * rows), 0, "\(what): layer \(l)'s values, the same bits")
        }
    }

    func testPassesThatReadSomeRowsGiveTheRowsAndCacheOfTheFullPass() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeBlockModel(.q4_K, in: dir), storage: .stored)
        let V = base.config.vocabSize, D = base.config.hiddenSize, L = base.config.numLayers
        for activations in [ActivationPrecision.float32, .q8] {
            let model = InferenceModel(base: base.weights, activations: activations)
            // q8 through the block kernels at every row count: beyond ManyRowsPath.blockRowsLimit
            // (256 rows on AVX2, 0 on the portable level) `auto` runs a prompt's products in
            // float32, where one row keeps q8, and the two passes would differ by q8's rounding
            FrozenMatrix.$manyRows.withValue(activations == .q8 ? .blocks : .auto) {
                for n in [12, 300] {
                    let ids = (0..<n).map { ($0 * 37 + 5) % V }
                    let what = "\(activations), \(n) tokens"
                    // every row through every layer: the reference
                    let fullCache = model.makeCache()
                    let all = model.forward(ids, cache: fullCache, allLogits: true)  // [n, V]
                    // the last row only
                    let lastCache = model.makeCache()
                    let last = model.forward(ids, cache: lastCache)  // [1, V]
                    XCTAssertEqual(last.count, V)
                    XCTAssertLessThan(relative(last[...], all[((n - 1) * V)...]), 1e-5, "\(what): the last row's logits")
                    sameCache(lastCache, fullCache, rows: n, layers: L, what)
                    // rows of a verify pass
                    let rows = [1, n / 2, n - 2]
                    var picked: [Float] = []
                    let pickedCache = model.makeCache()
                    model.forward(ids, cache: pickedCache, logitsAt: rows, into: &picked)
                    for (k, r) in rows.enumerated() {
                        XCTAssertLessThan(relative(picked[(k * V)..<((k + 1) * V)], all[(r * V)..<((r + 1) * V)]), 1e-5, "\(what): row \(r) of a verify pass")
                    }
                    sameCache(pickedCache, fullCache, rows: n, layers: L, "\(what), verify rows")
                    // the next step after either prefill: the same caches give the same bits
                    XCTAssertEqual(model.forward([7], cache: lastCache), model.forward([7], cache: fullCache), "\(what): the step after the prompt")
                    // a draft's last hidden states
                    let allHidden = model.hiddenStates(ids, cache: model.makeCache())  // [n, D]
                    let lastHidden = model.hiddenStates(ids, cache: model.makeCache(), lastRows: 3)  // [3, D]
                    XCTAssertLessThan(relative(lastHidden[...], allHidden[((n - 3) * D)...]), 1e-5, "\(what): the last hidden states")
                }
            }
        }
    }
}
