// Batching training examples: padding to the batch's longest row or to a fixed length, or
// packing several examples per row with segment ids and restarting positions; a seeded
// per-epoch shuffle (SplitMix64, no global state) and a Codable `DataCursor` that restores
// the order mid-epoch. Shapes: B rows, T positions; arrays are row-major [B*T].

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny deterministic generator, identical on every
/// platform and Swift version, used for shuffling and splitting.
public struct SplitMix64: RandomNumberGenerator, Sendable, Equatable, Codable {
    public var state: UInt64

    public init(seed: UInt64) {
        self.state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in 0..<bound (Lemire's multiply-shift with rejection); our own so that the
    /// sequence never depends on the standard library's `random(in:using:)`.
    public mutating func next(below bound: Int) -> Int {
        precondition(bound > 0, "[SplitMix64] bound \(bound) must be positive")
        let b = UInt64(bound)
        var product = next().multipliedFullWidth(by: b)
        if product.low < b {
            let threshold = (0 &- b) % b
            while product.low < threshold { product = next().multipliedFullWidth(by: b) }
        }
        return Int(product.high)
    }

    /// A Fisher-Yates permutation of 0..<count.
    public static func permutation(count: Int, seed: UInt64) -> [Int] {
        var rng = SplitMix64(seed: seed)
        var order = Array(0..<count)
        var i = count - 1
        while i > 0 {
            let j = rng.next(below: i + 1)
            order.swapAt(i, j)
            i -= 1
        }
        return order
    }
}

/// Where the batcher is in the data: epoch, how many examples of that epoch's order were
/// consumed, and the seed of the order. Store it in checkpoints to resume exactly.
public struct DataCursor: Sendable, Equatable, Codable {
    public var epoch: Int
    /// Index into the epoch's permutation of the next example to batch.
    public var index: Int
    public var seed: UInt64
    /// The number of examples the order was made for; a resume with other data is refused.
    public var exampleCount: Int

    public init(epoch: Int = 0, index: Int = 0, seed: UInt64, exampleCount: Int) {
        self.epoch = epoch
        self.index = index
        self.seed = seed
        self.exampleCount = exampleCount
    }
}

public struct BatchOptions: Sendable, Equatable, Codable {
    public enum Layout: Sendable, Equatable, Codable {
        /// One example per row, padded to the batch's longest example.
        case padToLongest
        /// One example per row, padded to this length.
        case padToFixed(Int)
        /// Consecutive examples share a row until the next one would not fit this length.
        case pack(Int)
        /// Like `padToLongest`, except when the batch's examples begin with the same prompt
        /// tokens (no loss on them) and sharing saves at least a quarter of the batch's tokens:
        /// then the batch is one row, the common prefix once (segment `Batch.sharedSegment`,
        /// seen by every later token of the row) followed by each example's remainder (segments
        /// 1, 2, ..., positions continuing after the prefix). The loss and its gradients are those
        /// of the padded rows; the common prompt is computed once instead of B times.
        case sharePrefix
    }

    /// Rows per batch (the last batch of an epoch may have fewer; none is dropped).
    public var batchSize: Int
    public var layout: Layout
    /// Off: every epoch is in file order.
    public var shuffle: Bool
    public var seed: UInt64
    /// Written into padded input and target positions (always masked out).
    public var padTokenId: Int

    public init(batchSize: Int, layout: Layout = .padToLongest, shuffle: Bool = true, seed: UInt64 = 0, padTokenId: Int = 0) {
        self.batchSize = batchSize
        self.layout = layout
        self.shuffle = shuffle
        self.seed = seed
        self.padTokenId = padTokenId
    }
}

/// B rows of T positions. Token i may attend to token j of the same row only when
/// `segmentIds` match and j <= i; positions restart at 0 for each packed example.
public struct Batch: Sendable, Equatable {
    /// B
    public var batchSize: Int
    /// T
    public var length: Int
    public var inputIds: [Int]        // [B*T]
    public var targets: [Int]         // [B*T]
    public var lossMask: [Bool]       // [B*T]
    /// 1, 2, ... for the examples of a row in order; 0 for padding; `sharedSegment` for a
    /// prefix common to the row's examples (`.sharePrefix`).
    public var segmentIds: [Int32]    // [B*T]
    public var positions: [Int]       // [B*T]
    /// Positions where `lossMask` is true.
    public var targetTokenCount: Int
    /// The sample indices in each row, in order.
    public var rowSamples: [[Int]]
    public var epoch: Int

    /// The segment id of a shared prefix; equal to Autograd's `sharedSegment`, whose attention
    /// lets every later token of the row see it.
    public static let sharedSegment: Int32 = -1
}

public struct Batcher: Sendable {
    public let examples: [TrainingExample]
    public let options: BatchOptions
    public private(set) var cursor: DataCursor
    private var currentOrder: [Int]

    /// `cursor` resumes a saved position; without it the batcher starts at epoch 0 with
    /// `options.seed`. Throws when an example does not fit the layout, or the cursor was made
    /// for a different number of examples.
    public init(examples: [TrainingExample], options: BatchOptions, cursor: DataCursor? = nil) throws(DataSchemaError) {
        guard !examples.isEmpty else { throw DataSchemaError.batching("no training examples to batch") }
        guard options.batchSize >= 1 else {
            throw DataSchemaError.batching("batch size \(options.batchSize) must be at least 1")
        }
        var rowLimit: Int?
        switch options.layout {
        case .padToLongest, .sharePrefix: break
        case let .padToFixed(t), let .pack(t):
            guard t >= 1 else { throw DataSchemaError.batching("row length \(t) must be at least 1") }
            rowLimit = t
        }
        for e in examples {
            if e.count == 0 {
                throw DataSchemaError.batching("the example of sample \(e.sampleIndex) (line \(e.line)) has no positions")
            }
            if let t = rowLimit, e.count > t {
                throw DataSchemaError.batching("the example of sample \(e.sampleIndex) (line \(e.line)) has \(e.count) positions, more than the row length \(t); encode with maxSequenceLength <= \(t)")
            }
        }
        let start = cursor ?? DataCursor(seed: options.seed, exampleCount: examples.count)
        guard start.exampleCount == examples.count else {
            throw DataSchemaError.batching("the cursor was saved for \(start.exampleCount) examples but the data has \(examples.count); resume with the same data and maxSequenceLength")
        }
        guard start.epoch >= 0, start.index >= 0, start.index <= examples.count else {
            throw DataSchemaError.batching("the cursor (epoch \(start.epoch), index \(start.index)) is outside the data (\(examples.count) examples)")
        }
        self.examples = examples
        self.options = options
        self.cursor = start
        self.currentOrder = []
        self.currentOrder = makeOrder(epoch: start.epoch)
    }

    /// The order of example indices in `epoch`.
    public func order(epoch: Int) -> [Int] {
        epoch == cursor.epoch && !currentOrder.isEmpty ? currentOrder : makeOrder(epoch: epoch)
    }

    private func makeOrder(epoch: Int) -> [Int] {
        Batcher.epochOrder(count: examples.count, seed: cursor.seed, epoch: epoch, shuffle: options.shuffle)
    }

    /// The order of `count` items in `epoch`: file order without `shuffle`, else a permutation
    /// drawn from the run seed mixed with the epoch number.
    public static func epochOrder(count: Int, seed: UInt64, epoch: Int, shuffle: Bool) -> [Int] {
        guard shuffle else { return Array(0..<count) }
        var mixer = SplitMix64(seed: seed ^ (UInt64(epoch) &* 0xD1B5_4A32_D192_ED03))
        return SplitMix64.permutation(count: count, seed: mixer.next())
    }

    /// The next batch of the current epoch, or nil when the epoch is used up; the nil also
    /// moves the cursor to the start of the next epoch.
    public mutating func next() -> Batch? {
        guard cursor.index < examples.count else {
            cursor.epoch += 1
            cursor.index = 0
            currentOrder = makeOrder(epoch: cursor.epoch)
            return nil
        }
        let (rows, end) = rowsStarting(at: cursor.index, in: currentOrder)
        cursor.index = end
        return assemble(rows)
    }

    /// Batches in `epoch` (depends on the epoch's order when packing).
    public func batchCount(epoch: Int) -> Int {
        let epochOrder = order(epoch: epoch)
        var index = 0
        var count = 0
        while index < examples.count {
            index = rowsStarting(at: index, in: epochOrder).end
            count += 1
        }
        return count
    }

    /// Up to B rows from `order[start...]`, each a list of example indices.
    private func rowsStarting(at start: Int, in order: [Int]) -> (rows: [[Int]], end: Int) {
        var rows: [[Int]] = []
        var i = start
        switch options.layout {
        case .padToLongest, .padToFixed, .sharePrefix:
            while rows.count < options.batchSize, i < order.count {
                rows.append([order[i]])
                i += 1
            }
        case let .pack(t):
            while rows.count < options.batchSize, i < order.count {
                var row: [Int] = []
                var used = 0
                while i < order.count, used + examples[order[i]].count <= t {
                    used += examples[order[i]].count
                    row.append(order[i])
                    i += 1
                }
                rows.append(row)
            }
        }
        return (rows, i)
    }

    /// The number of leading positions the examples share: equal inputs, none in the loss, and
    /// at least one position of each example left after it.
    public static func commonPrefix(_ group: [TrainingExample]) -> Int {
        guard let first = group.first else { return 0 }
        let limit = group.map { $0.count - 1 }.min()!
        var n = 0
        while n < limit, group.allSatisfy({ $0.inputs[n] == first.inputs[n] && !$0.targetMask[n] }) { n += 1 }
        return n
    }

    /// The batch as one row with its common prefix once, or nil when sharing would save less
    /// than a quarter of its tokens.
    private func assembleShared(_ rows: [[Int]]) -> Batch? {
        let group = rows.map { examples[$0[0]] }
        guard group.count >= 2 else { return nil }
        let l = Self.commonPrefix(group)
        let total = group.reduce(0) { $0 + $1.count }
        guard 4 * (group.count - 1) * l >= total else { return nil }
        let t = total - (group.count - 1) * l
        var inputIds = Array(group[0].inputs[0..<l]), targets = Array(group[0].targets[0..<l])
        var lossMask = [Bool](repeating: false, count: l)
        var segmentIds = [Int32](repeating: Batch.sharedSegment, count: l)
        var positions = Array(0..<l)
        for (s, e) in group.enumerated() {
            inputIds += e.inputs[l...]
            targets += e.targets[l...]
            lossMask += e.targetMask[l...]
            segmentIds += [Int32](repeating: Int32(s + 1), count: e.count - l)
            positions += l..<e.count
        }
        return Batch(batchSize: 1, length: t, inputIds: inputIds, targets: targets, lossMask: lossMask,
                     segmentIds: segmentIds, positions: positions, targetTokenCount: group.reduce(0) { $0 + $1.targetTokenCount },
                     rowSamples: [group.map(\.sampleIndex)], epoch: cursor.epoch)
    }

    private func assemble(_ rows: [[Int]]) -> Batch {
        if case .sharePrefix = options.layout, let shared = assembleShared(rows) { return shared }
        let b = rows.count
        let t: Int
        switch options.layout {
        case .padToLongest, .sharePrefix: t = rows.map { $0.reduce(0) { $0 + examples[$1].count } }.max()!
        case let .padToFixed(fixed), let .pack(fixed): t = fixed
        }
        let pad = options.padTokenId
        var inputIds = [Int](repeating: pad, count: b * t)      // [B*T]
        var targets = [Int](repeating: pad, count: b * t)       // [B*T]
        var lossMask = [Bool](repeating: false, count: b * t)   // [B*T]
        var segmentIds = [Int32](repeating: 0, count: b * t)    // [B*T]
        var positions = [Int](repeating: 0, count: b * t)       // [B*T]
        var targetCount = 0
        for (r, row) in rows.enumerated() {
            var offset = r * t
            for (s, exampleIndex) in row.enumerated() {
                let e = examples[exampleIndex]
                for p in 0..<e.count {
                    inputIds[offset + p] = e.inputs[p]
                    targets[offset + p] = e.targets[p]
                    lossMask[offset + p] = e.targetMask[p]
                    segmentIds[offset + p] = Int32(s + 1)
                    positions[offset + p] = p
                }
                targetCount += e.targetTokenCount
                offset += e.count
            }
        }
        return Batch(batchSize: b, length: t, inputIds: inputIds, targets: targets, lossMask: lossMask,
                     segmentIds: segmentIds, positions: positions, targetTokenCount: targetCount,
                     rowSamples: rows.map { $0.map { examples[$0].sampleIndex } }, epoch: cursor.epoch)
    }
}
