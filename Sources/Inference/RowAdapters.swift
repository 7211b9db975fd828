// Several adapters in one batch: each row of a pass may carry its own adapter (or none), whose
// low-rank terms scale·(x·Aᵀ)·Bᵀ are added to that row after the shared base product, so the
// base weights stream once for every row whatever adapter it uses (as vLLM's and LoRAX's
// multi-adapter batches do on GPUs). A row's arithmetic is the single-adapter path's
// (`addLowRank`, row by row), so a mixed batch gives each row the bits it gets alone with an
// `InferenceModel(base:adapter:)` over stored weights. Float32 bases merge an adapter at load
// instead; over them a row adapter is added unmerged (equal to rounding, not bit for bit).
//
// Dimensions: B rows, V vocab, r rank, in/out a projection's input and output widths.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition

/// An adapter's low-rank terms laid out for one base's passes: made once per adapter, shared
/// by every row (and every thread) that uses it. Immutable.
public final class RowAdapter: @unchecked Sendable {
    /// Per layer, the terms fed by each projection input (see `InferenceModel.LowRank`).
    let layers: [[InferenceModel.LowRank]]
    /// The adapter's digest, to tell adapters apart.
    public let signature: String
    public let rank: Int
    /// The factors' precision: float32 as trained (the reference numbers), or float16 (half the
    /// bytes every row that uses the adapter streams per token; the logits move by about the
    /// rounding of the factors, see `RowAdapterTests`).
    public let precision: InferenceModel.WeightPrecision

    /// `adapter`'s factors for a base of shape `config` (the adapter already checked against
    /// that base: `Adapter.requireBase`). Every targeted projection gets its term, whether the
    /// base weights are stored or float32 (a row adapter is never merged).
    public init(_ adapter: Adapter, config c: ModelConfig, precision: InferenceModel.WeightPrecision = .float32) {
        let qw = c.queryDim, kw = c.keyValueDim
        // which pass input feeds each target, and where its outputs start in the stacked product
        let place: [LoRATarget: (input: Int, offset: Int)] = [
            .q: (0, 0), .k: (0, qw), .v: (0, qw + kw), .o: (1, 0), .gate: (2, 0), .up: (2, c.intermediateSize), .down: (3, 0)]
        layers = (0..<c.numLayers).map { i in
            adapter.lora.targets.compactMap { t -> InferenceModel.LowRank? in
                guard let (a, b) = adapter.factors(layer: i, target: t), let p = place[t] else { return nil }
                return InferenceModel.LowRank(input: p.input, offset: p.offset, a: a.data, b: b.data, rank: adapter.lora.rank, scale: adapter.scale,
                                              precision: precision)
            }
        }
        signature = adapter.signature
        rank = adapter.lora.rank
        self.precision = precision
    }
}

extension InferenceModel {
    /// `forward(batch:caches:into:)` where row b also adds `adapters[b]`'s low-rank terms (nil:
    /// the model alone). One weight stream for every row; row b's logits are the bits that
    /// `InferenceModel(base:adapter: adapters[b]'s adapter).forward([tokens[b]], cache: caches[b])`
    /// gives over stored weights. Use it on a model built without an adapter.
    public func forward(batch tokens: [Int], caches: [KVCache], adapters: [RowAdapter?], into logits: inout [Float]) {
        forwardBatch(tokens, caches: caches, adapters: adapters, into: &logits)
    }

    /// `forward(_:cache:allLogits:into:)` with `adapter`'s terms added to every new row: a
    /// conversation's prompt prefilled with its own adapter over a shared base.
    public func forward(_ tokens: [Int], cache: KVCache, adapter: RowAdapter?, allLogits: Bool = false, into logits: inout [Float]) {
        precondition(!tokens.isEmpty, "[InferenceModel.forward(adapter:)] no tokens")
        let ws = cache.workspace
        let rowAdapters = [RowAdapter?](repeating: adapter, count: tokens.count)
        let x = runBlocks(tokens, [Segment(cache: cache, firstRow: 0, rows: tokens.count)], ws,
                          rowAdapters: adapter == nil ? nil : rowAdapters, outputRows: allLogits ? nil : [tokens.count - 1])  // [rows, D]
        outputHead(x, rows: allLogits ? tokens.count : 1, ws: ws, into: &logits)  // [rows, V]
    }

    /// y[:, offset..<offset+out] += scale·(x·Aᵀ)·Bᵀ for each row's own adapter terms of layer `li`
    /// fed by `input` (x [n, in], y [n, width]): the arithmetic of `addLowRank`. Rows that share
    /// an adapter are taken together, a term at a time, in one product per factor, so each A and
    /// B is read once for all of them (row by row, every row streamed its adapter's factors
    /// again: 41 MB per row per token for SmolLM2 at rank 32 on seven targets).
    /// The (adapter, term, rows) items run on every core: distinct terms write distinct columns,
    /// distinct adapters distinct rows, so each row's bits are its own whatever the split.
    func addRowLowRank(_ adapters: [RowAdapter?], layer li: Int, input: Int, _ x: UnsafePointer<Float>, rows n: Int,
                       into y: UnsafeMutablePointer<Float>, width: Int) {
        precondition(adapters.count == n, "[InferenceModel.addRowLowRank] \(adapters.count) adapters for \(n) rows")
        var groups: [(adapter: RowAdapter, rows: [Int])] = []  // in order of first appearance
        for row in 0..<n {
            guard let a = adapters[row] else { continue }
            if let g = groups.firstIndex(where: { $0.adapter === a }) { groups[g].rows.append(row) } else { groups.append((a, [row])) }
        }
        if groups.isEmpty { return }
        var items: [(term: InferenceModel.LowRank, rows: ArraySlice<Int>)] = []
        for g in groups {
            for t in g.adapter.layers[li] where t.input == input { items.append((t, g.rows[...])) }
        }
        if !items.isEmpty { InferenceModel.addLowRank(items, x, into: y, width: width) }
    }
}
