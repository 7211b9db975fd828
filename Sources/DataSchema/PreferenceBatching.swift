// Batching preference pairs: a pair is never split. `.sharePrefix` puts one pair in a row, its
// prompt once (segment `Batch.sharedSegment`) and then the chosen and the rejected remainder
// (segments 1 and 2, positions continuing after the prompt): the prompt is computed once per
// pair. The other layouts put chosen and rejected one after the other as their own segments,
// each with its prompt (one pair per row padded, or whole pairs packed: the attention's shared
// segment is one per row, so packed pairs cannot share their prompts). In every layout, segments
// 2k+1 and 2k+2 of a row (after a shared prompt, if any) are pair k's chosen and rejected reply.
// The epoch order is Batcher's (`Batcher.epochOrder`), so a resumed run sees the same batches.

/// Where one sequence of a preference batch lies: its row, the positions of its segment, and
/// how many shared-prompt positions lead the row (0 when packed).
public struct PreferenceSequence: Sendable, Equatable {
    public var row: Int
    public var positions: Range<Int>  // within the row: 0..<T
    public var sharedPrompt: Int
    public var sampleIndex: Int
}

extension Batch {
    /// The (chosen, rejected) sequences of a preference batch, pair by pair in row order.
    public var preferencePairs: [(chosen: PreferenceSequence, rejected: PreferenceSequence)] {
        var out: [(PreferenceSequence, PreferenceSequence)] = []
        for r in 0..<batchSize {
            var shared = 0
            while shared < length && segmentIds[r * length + shared] == Batch.sharedSegment { shared += 1 }
            var spans: [Range<Int>] = []
            var j = shared
            while j < length {
                let seg = segmentIds[r * length + j]
                var end = j
                while end < length && segmentIds[r * length + end] == seg { end += 1 }
                if seg != 0 { spans.append(j..<end) }
                j = end
            }
            precondition(spans.count % 2 == 0, "[Batch.preferencePairs] row \(r) holds \(spans.count) segments, not whole pairs")
            let samples = r < rowSamples.count ? rowSamples[r] : []
            for k in stride(from: 0, to: spans.count, by: 2) {
                let sample = k < samples.count ? samples[k] : -1
                out.append((PreferenceSequence(row: r, positions: spans[k], sharedPrompt: shared, sampleIndex: sample),
                            PreferenceSequence(row: r, positions: spans[k + 1], sharedPrompt: shared, sampleIndex: sample)))
            }
        }
        return out
    }

    /// Pairs in a preference batch.
    public var preferencePairCount: Int { preferencePairs.count }

    /// Part `rank` of `size` of a preference batch: whole rows (pairs are never split), trimmed to
    /// the longest kept row; nil when the part is empty.
    public func rowShare(rank: Int, of size: Int) -> Batch? {
        if size == 1 { return self }
        return wholeRowsShare(rank: rank, of: size)
    }
}

public struct PreferenceBatcher: Sendable {
    public let examples: [PreferenceExample]
    /// `batchSize` counts pairs (rows when packing). `.sharePrefix`: one pair per row with its
    /// prompt once, T the batch's longest; `.padToLongest`: one pair per row, chosen then
    /// rejected, each whole; `.padToFixed(T)` the same padded to T; `.pack(T)` whole pairs one
    /// after another while they fit in T positions.
    public let options: BatchOptions

    /// Throws when a pair does not fit the layout's row.
    public init(examples: [PreferenceExample], options: BatchOptions) throws(DataSchemaError) {
        guard !examples.isEmpty else { throw DataSchemaError.batching("no preference pairs to batch") }
        guard options.batchSize >= 1 else { throw DataSchemaError.batching("batch size \(options.batchSize) must be at least 1") }
        for e in examples {
            let need: Int
            switch options.layout {
            case .padToLongest, .sharePrefix: continue
            case let .padToFixed(t), let .pack(t):
                need = e.chosen.count + e.rejected.count
                if need > t { throw DataSchemaError.batching("the pair of sample \(e.sampleIndex) (line \(e.line)) has \(need) positions (chosen and rejected), more than the row length \(t)") }
            }
        }
        self.examples = examples
        self.options = options
    }

    public func order(epoch: Int) -> [Int] {
        Batcher.epochOrder(count: examples.count, seed: options.seed, epoch: epoch, shuffle: options.shuffle)
    }

    /// The rows of each batch of `epoch`, as pair indices.
    func plan(epoch: Int) -> [[[Int]]] {
        let order = order(epoch: epoch)
        var batches: [[[Int]]] = []
        var i = 0
        while i < order.count {
            var rows: [[Int]] = []
            switch options.layout {
            case .padToLongest, .sharePrefix, .padToFixed:
                while rows.count < options.batchSize && i < order.count { rows.append([order[i]]); i += 1 }
            case let .pack(t):
                while rows.count < options.batchSize && i < order.count {
                    var row: [Int] = []
                    var used = 0
                    while i < order.count, used + examples[order[i]].chosen.count + examples[order[i]].rejected.count <= t {
                        used += examples[order[i]].chosen.count + examples[order[i]].rejected.count
                        row.append(order[i])
                        i += 1
                    }
                    rows.append(row)
                }
            }
            batches.append(rows)
        }
        return batches
    }

    public func batchCount(epoch: Int) -> Int { plan(epoch: epoch).count }

    /// Every batch of `epoch`, in order.
    public func batches(epoch: Int) -> [Batch] { plan(epoch: epoch).map { assemble($0, epoch: epoch) } }

    /// One row's tokens: shared prompt then the pairs' sequences.
    private func row(_ pairs: [Int]) -> (ids: [Int], targets: [Int], mask: [Bool], segments: [Int32], positions: [Int], samples: [Int]) {
        var ids: [Int] = [], targets: [Int] = [], mask: [Bool] = [], segments: [Int32] = [], positions: [Int] = [], samples: [Int] = []
        let share = options.layout == .sharePrefix
        var segment: Int32 = 0
        for p in pairs {
            let e = examples[p]
            let l = share ? e.sharedPositions : 0
            if l > 0 {
                ids += e.chosen.inputs[0..<l]
                targets += e.chosen.targets[0..<l]
                mask += [Bool](repeating: false, count: l)
                segments += [Int32](repeating: Batch.sharedSegment, count: l)
                positions += 0..<l
            }
            for x in [e.chosen, e.rejected] {
                segment += 1
                ids += x.inputs[l...]
                targets += x.targets[l...]
                mask += x.targetMask[l...]
                segments += [Int32](repeating: segment, count: x.count - l)
                positions += l..<x.count
                samples.append(e.sampleIndex)
            }
        }
        return (ids, targets, mask, segments, positions, samples)
    }

    private func assemble(_ rows: [[Int]], epoch: Int) -> Batch {
        let built = rows.map(row)
        let t: Int
        if case let .padToFixed(fixed) = options.layout {
            t = fixed
        } else if case let .pack(fixed) = options.layout {
            t = fixed
        } else {
            t = built.map(\.ids.count).max()!
        }
        let b = rows.count, pad = options.padTokenId
        var inputIds = [Int](repeating: pad, count: b * t), targets = inputIds
        var lossMask = [Bool](repeating: false, count: b * t)
        var segmentIds = [Int32](repeating: 0, count: b * t)
        var positions = [Int](repeating: 0, count: b * t)
        for (r, x) in built.enumerated() {
            let o = r * t
            for p in 0..<x.ids.count {
                inputIds[o + p] = x.ids[p]
                targets[o + p] = x.targets[p]
                lossMask[o + p] = x.mask[p]
                segmentIds[o + p] = x.segments[p]
                positions[o + p] = x.positions[p]
            }
        }
        return Batch(batchSize: b, length: t, inputIds: inputIds, targets: targets, lossMask: lossMask, segmentIds: segmentIds,
                     positions: positions, targetTokenCount: lossMask.reduce(0) { $0 + ($1 ? 1 : 0) },
                     rowSamples: built.map(\.samples), epoch: epoch)
    }
}
