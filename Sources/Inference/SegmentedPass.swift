// Several conversations' new tokens in one pass over the weights, each conversation's tokens a
// segment of rows appended to its own cache with its own adapter: a server's batched step where a
// row may carry more than one token (the tokens a grammar forced, a draft's proposals to verify).
// Only the logit rows each segment asks for go through the output head. Leaves out choosing tokens
// (SpeculativeReply, the scheduler).
import Autograd
import Foundation

extension InferenceModel {
    /// One conversation's part of a segmented pass.
    public struct PassSegment {
        public var tokens: [Int]
        public var cache: KVCache
        public var adapter: RowAdapter?
        /// Increasing indices into `tokens` whose next-token logits the pass returns.
        public var logitRows: [Int]

        public init(tokens: [Int], cache: KVCache, adapter: RowAdapter?, logitRows: [Int]) {
            self.tokens = tokens
            self.cache = cache
            self.adapter = adapter
            self.logitRows = logitRows
        }
    }

    /// Runs every segment's tokens after what its cache holds; `logits` becomes [Σ logitRows, V],
    /// segment by segment. Segments are packed whole into groups of up to `streamingRows` rows (one
    /// longer goes alone), each group one stream of the weights; each row's arithmetic is its own,
    /// so over stored weights a segment gets the bits it gets alone (`forward(_:cache:adapter:)`),
    /// as long as no segment reaches `blockedAttentionRows` (prompt attention by blocks).
    public func forward(segments: [PassSegment], into logits: inout [Float]) {
        precondition(!segments.isEmpty && segments.allSatisfy { s in
            !s.tokens.isEmpty && !s.logitRows.isEmpty && zip(s.logitRows, s.logitRows.dropFirst()).allSatisfy { $0 < $1 }
                && s.logitRows.first! >= 0 && s.logitRows.last! < s.tokens.count
        }, "[InferenceModel.forward(segments:)] a segment without tokens or with logit rows outside them")
        precondition(Set(segments.map { ObjectIdentifier($0.cache) }).count == segments.count, "[InferenceModel.forward(segments:)] a cache appears twice")
        let V = config.vocabSize, D = config.hiddenSize
        let total = segments.reduce(0) { $0 + $1.logitRows.count }
        if logits.count != total * V { logits = [Float](repeating: 0, count: total * V) }
        var first = 0, outRow = 0
        while first < segments.count {
            var end = first + 1, rows = segments[first].tokens.count
            while end < segments.count && rows + segments[end].tokens.count <= Self.streamingRows {
                rows += segments[end].tokens.count
                end += 1
            }
            let group = segments[first..<end]
            var tokens: [Int] = [], parts: [Segment] = [], adapters: [RowAdapter?] = [], wanted: [Int] = []
            for s in group {
                wanted += s.logitRows.map { tokens.count + $0 }
                parts.append(Segment(cache: s.cache, firstRow: tokens.count, rows: s.tokens.count, undoable: true))
                adapters += [RowAdapter?](repeating: s.adapter, count: s.tokens.count)
                tokens += s.tokens
            }
            let ws = group.first!.cache.workspace
            let x = runBlocks(tokens, parts, ws, rowAdapters: adapters.contains { $0 != nil } ? adapters : nil, outputRows: wanted)  // [wanted, D]
            let hn = ws.hn.ensure(wanted.count * D)
            finalNormRows(x, rows: wanted.count, into: hn)  // [wanted, D]
            logits.withUnsafeMutableBufferPointer { lp in
                head.matmulNT(hn, m: wanted.count, n: V, k: D, lp.baseAddress! + outRow * V, activations)  // [wanted, V]
            }
            outRow += wanted.count
            first = end
        }
    }
}
