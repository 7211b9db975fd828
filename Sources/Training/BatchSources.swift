// Random access to DataSchema's batches: batch(epoch, index) for the trainer, built by running
// a Batcher from the start of that epoch and keeping that epoch's batches. Reproducible by
// construction (the order is a function of seed and epoch), which is what exact resume needs.
import DataSchema

public final class EpochBatches: BatchSource {
    public let examples: [TrainingExample]
    public let options: BatchOptions
    private var cachedEpoch = -1
    private var cached: [Batch] = []
    private var counts: [Int: Int] = [:]
    private let probe: Batcher

    /// Throws what Batcher throws for data that does not fit the layout.
    public init(examples: [TrainingExample], options: BatchOptions) throws {
        self.examples = examples
        self.options = options
        probe = try Batcher(examples: examples, options: options)
    }

    public func batchCount(epoch: Int) -> Int {
        if let c = counts[epoch] { return c }
        let c = probe.batchCount(epoch: epoch)
        counts[epoch] = c
        return c
    }

    public func batch(epoch: Int, index: Int) -> Batch {
        if cachedEpoch != epoch {
            var b: Batcher
            do {
                b = try Batcher(examples: examples, options: options,
                                cursor: DataCursor(epoch: epoch, index: 0, seed: options.seed, exampleCount: examples.count))
            } catch {
                preconditionFailure("[EpochBatches] a batcher that validated once refused epoch \(epoch): \(error)")
            }
            var all: [Batch] = []
            while let next = b.next() { all.append(next) }
            cached = all
            cachedEpoch = epoch
        }
        precondition(index < cached.count, "[EpochBatches] batch \(index) of epoch \(epoch) beyond \(cached.count)")
        return cached[index]
    }
}
