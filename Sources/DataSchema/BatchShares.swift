// One process's share of a batch in data-parallel training: the rows (or, for a batch whose
// samples share a prompt prefix, the samples after the prefix) are cut into `size` contiguous
// runs, the same cut on every process, so the shares together hold each sample exactly once.
// Leaves out balancing by tokens: the cut depends on counts only, so every process computes it
// alone. Follows the row split of PyTorch's DistributedSampler, applied per batch.

extension Batch {
    /// The half-open range of `count` items that part `rank` of `size` takes: contiguous runs
    /// whose lengths differ by at most one, the longer ones first.
    public static func shareRange(count: Int, rank: Int, of size: Int) -> Range<Int> {
        precondition(size >= 1 && rank >= 0 && rank < size, "[Batch.shareRange] rank \(rank) of \(size)")
        let base = count / size, extra = count % size
        let start = rank * base + min(rank, extra)
        return start..<(start + base + (rank < extra ? 1 : 0))
    }

    /// Whether this batch is one row with a shared prompt prefix (`BatchOptions.Layout.sharePrefix`).
    var isSharedPrefixRow: Bool { batchSize == 1 && length > 0 && segmentIds[0] == Batch.sharedSegment }

    /// Part `rank` of `size` of this batch, or nil when that part is empty (fewer rows or
    /// samples than parts). Rows keep their order and contents and are trimmed to the longest
    /// kept row; a shared-prefix row keeps its prefix and the samples of this part (segments
    /// renumbered 1, 2, ...). The loss of each sample, and so the sum of its gradients, is the
    /// same as in the whole batch; `targetTokenCount` counts this part's loss positions.
    public func share(rank: Int, of size: Int) -> Batch? {
        if size == 1 { return self }
        if isSharedPrefixRow { return sharedPrefixShare(rank: rank, of: size) }
        return wholeRowsShare(rank: rank, of: size)
    }

    /// Part `rank` of `size` as whole rows in their order, trimmed to the longest kept row; nil
    /// when the part is empty (`share` for rows of their own, and a preference batch's pairs).
    func wholeRowsShare(rank: Int, of size: Int) -> Batch? {
        let rows = Batch.shareRange(count: batchSize, rank: rank, of: size)
        guard !rows.isEmpty else { return nil }
        // The kept rows' longest used length (padding is segment 0 at the end of a row).
        var used = 0
        for r in rows {
            var end = length
            while end > 0 && segmentIds[r * length + end - 1] == 0 { end -= 1 }
            used = max(used, end)
        }
        let t = max(used, 1)
        func take<T>(_ a: [T]) -> [T] {
            var out: [T] = []
            out.reserveCapacity(rows.count * t)
            for r in rows { out += a[(r * length)..<(r * length + t)] }
            return out
        }
        let mask = take(lossMask)
        return Batch(batchSize: rows.count, length: t, inputIds: take(inputIds), targets: take(targets), lossMask: mask,
                     segmentIds: take(segmentIds), positions: take(positions),
                     targetTokenCount: mask.reduce(0) { $0 + ($1 ? 1 : 0) },
                     rowSamples: Array(rowSamples[rows]), epoch: epoch)
    }

    /// The prefix once, then this part's samples (runs of segments 1, 2, ... in order).
    private func sharedPrefixShare(rank: Int, of size: Int) -> Batch? {
        var prefix = 0
        while prefix < length && segmentIds[prefix] == Batch.sharedSegment { prefix += 1 }
        // Each sample's positions after the prefix: [start, end) per segment, in row order.
        var spans: [Range<Int>] = []
        var i = prefix
        while i < length {
            let seg = segmentIds[i]
            var end = i
            while end < length && segmentIds[end] == seg { end += 1 }
            if seg != 0 { spans.append(i..<end) }
            i = end
        }
        let mine = Batch.shareRange(count: spans.count, rank: rank, of: size)
        guard !mine.isEmpty else { return nil }
        var inputIds = Array(inputIds[0..<prefix]), targets = Array(targets[0..<prefix])
        var lossMask = Array(lossMask[0..<prefix]), positions = Array(positions[0..<prefix])
        var segmentIds = Array(segmentIds[0..<prefix])
        for (k, s) in spans[mine].enumerated() {
            inputIds += self.inputIds[s]
            targets += self.targets[s]
            lossMask += self.lossMask[s]
            positions += self.positions[s]
            segmentIds += [Int32](repeating: Int32(k + 1), count: s.count)
        }
        let samples = rowSamples.first.map { Array($0[Batch.shareRange(count: $0.count, rank: rank, of: size)]) } ?? []
        return Batch(batchSize: 1, length: inputIds.count, inputIds: inputIds, targets: targets, lossMask: lossMask,
                     segmentIds: segmentIds, positions: positions,
                     targetTokenCount: lossMask.reduce(0) { $0 + ($1 ? 1 : 0) },
                     rowSamples: [samples], epoch: epoch)
    }
}
