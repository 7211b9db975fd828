// Data-parallel training as the one loop sees it: a `ProcessGroup` (the processes of
// `mpirun -np N`), how a run starts from rank 0's state, how each rank computes its share of a
// batch and how the shares' gradients are summed (in rank order, so a run repeated with the same
// N repeats bit for bit), and how evaluation is split and reduced. Training holds no transport:
// the executables pass in DataParallel's MPI communicator; without one nothing here runs.
// Follows PyTorch DDP / Horovod: broadcast the starting state, sum gradients every step, and
// every rank takes the same optimizer step.
import Autograd
import DataSchema
import Foundation

/// The processes of one data-parallel run, as the training loop needs them. Every rank calls
/// the same operations in the same order; each returns on every rank with the same result.
public protocol ProcessGroup: AnyObject {
    var rank: Int { get }
    var size: Int { get }
    /// Elementwise sum of every rank's `values` (the same count on every rank), on every rank.
    /// The ranks' values are added in rank order (0 + 1 + ... + N−1), so equal inputs give equal bits.
    func sum(_ values: inout [Float]) throws
    /// Every rank's `bytes`, in rank order, on every rank.
    func allGather(_ bytes: [UInt8]) throws -> [[UInt8]]
    /// Rank `root`'s `bytes` on every rank (the others' argument is ignored).
    func broadcast(_ bytes: [UInt8], root: Int) throws -> [UInt8]
}

/// An error that every rank of a data-parallel run meets at the same point (it was decided on
/// summed or gathered values), so the job reports it once, from rank 0.
public struct SharedError: LocalizedError {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var errorDescription: String? { message }
}

/// What the data-parallel side of the steps since the last report cost, for the progress line.
public struct DataParallelReport: Sendable, Equatable {
    public var ranks: Int
    /// Optimizer steps in the window, and its wall time.
    public var steps: Int
    public var seconds: Double
    /// Positions each rank computed in the window (its shares, padding included).
    public var tokensPerRank: [Int]
    /// Seconds each rank spent computing its shares (forward and backward) in the window.
    public var computeSecondsPerRank: [Double]
    /// Seconds per step in the gradient sum, on the rank that waited least (the transfer
    /// itself; the others also wait for the slowest rank).
    public var allreduceSecondsPerStep: Double
    /// Bytes each rank puts into the sum per step (the gradients and a few counters).
    public var allreduceBytesPerStep: Int
}

/// Every rank, once its setup is done (or has failed), tells the others: the job goes on only
/// if all are ready with the same `key` (data fingerprint, base signature, ...). Throws a
/// `SharedError` naming the failed ranks and their messages, the same on every rank.
public enum GroupSetup {
    public static func agree(_ group: ProcessGroup, key: String, error: Error?) throws {
        let mine: String
        if let error {
            mine = "E" + ((error as? LocalizedError)?.errorDescription ?? "\(error)")
        } else {
            mine = "K" + key
        }
        let all = try group.allGather(Array(mine.utf8)).map { String(decoding: $0, as: UTF8.self) }
        let failed = all.enumerated().filter { $0.element.hasPrefix("E") }
        if !failed.isEmpty {
            // One line per distinct message, naming its ranks (data errors come once, not N times).
            var lines: [(message: String, ranks: [Int])] = []
            for (r, m) in failed {
                let text = String(m.dropFirst())
                if let i = lines.firstIndex(where: { $0.message == text }) { lines[i].ranks.append(r) } else { lines.append((text, [r])) }
            }
            let describe = { (ranks: [Int]) -> String in
                ranks.count == group.size ? "" : " (on rank\(ranks.count > 1 ? "s" : "") \(ranks.map(String.init).joined(separator: ", ")))"
            }
            throw SharedError(lines.map { $0.message + describe($0.ranks) }.joined(separator: "\n"))
        }
        if let r = all.indices.first(where: { all[$0] != all[0] }) {
            throw SharedError("rank \(r) prepared a different run than rank 0 (\(all[r].dropFirst()) vs \(all[0].dropFirst())); every rank must read the same base model and training data with the same flags")
        }
    }
}

extension Array where Element == Float {
    var bytes: [UInt8] { withUnsafeBytes { [UInt8]($0) } }
    init(bytes: ArraySlice<UInt8>) {
        precondition(bytes.count % 4 == 0, "[DataParallel] \(bytes.count) bytes are not whole Floats")
        self = [Float](repeating: 0, count: bytes.count / 4)
        self.withUnsafeMutableBytes { out in bytes.withUnsafeBytes { out.copyMemory(from: $0) } }
    }
}

/// Rank 0's starting point of a run (fresh or resumed), as every rank adopts it.
struct SharedStart: Codable {
    var state: TrainerState
    var options: TrainingOptions
    var optimizerStep: Int
    var sizes: [Int]
}

extension Trainer {
    /// Rank 0's state, options, trained tensors and AdamW moments, on every rank: only rank 0
    /// reads a checkpoint to resume from, and every rank starts from exactly the same numbers.
    static func shareStart(_ group: ProcessGroup, params: [Tensor], optimizer: AdamW, state: TrainerState,
                           options: TrainingOptions) throws -> (TrainerState, AdamW, TrainingOptions) {
        let head = try JSONEncoder().encode(SharedStart(state: state, options: options, optimizerStep: optimizer.step,
                                                        sizes: params.map(\.count)))
        let start = try JSONDecoder().decode(SharedStart.self, from: Data(try group.broadcast(Array(head), root: 0)))
        guard start.sizes == params.map(\.count) else {
            throw SharedError("rank \(group.rank) built a model whose trained tensors differ from rank 0's (\(params.count) tensors vs \(start.sizes.count)); every rank must use the same base model and adapter settings")
        }
        var opt = AdamW(parameterSizes: start.sizes, weightDecay: start.options.weightDecay)
        opt.step = start.optimizerStep
        // One tensor at a time: values, then the two moments (bounded message sizes).
        for (i, p) in params.enumerated() {
            let values = try group.broadcast(group.rank == 0 ? p.data.bytes : [], root: 0)
            let m = try group.broadcast(group.rank == 0 ? optimizer.m[i].bytes : [], root: 0)
            let v = try group.broadcast(group.rank == 0 ? optimizer.v[i].bytes : [], root: 0)
            p.data = [Float](bytes: values[...])
            opt.m[i] = [Float](bytes: m[...])
            opt.v[i] = [Float](bytes: v[...])
        }
        return (start.state, opt, start.options)
    }

    /// Mean loss over every target token of `source`, the batches dealt round-robin to the
    /// ranks and their sums added in batch order: the same bits as `evaluate` in one process.
    static func evaluate(_ objective: TrainingObjective, _ source: BatchSource, group: ProcessGroup) throws -> (loss: Float, tokens: Int) {
        var rng = SeededRNG(seed: 0)
        var mine: [Float] = []  // (batch index, loss, target tokens) per batch of this rank
        withNoGrad {
            for i in stride(from: group.rank, to: source.batchCount(epoch: 0), by: group.size) {
                let b = source.batch(epoch: 0, index: i)
                guard b.targetTokenCount > 0 else { continue }
                let l = objective.loss(b, rng: &rng, training: false)
                mine += [Float(i), l.data[0], Float(b.targetTokenCount), Float(objective.evaluationWeight(b))]
            }
        }
        var rows: [(index: Int, loss: Float, tokens: Int, weight: Int)] = []
        for part in try group.allGather(mine.bytes) {
            let v = [Float](bytes: part[...])
            for k in stride(from: 0, to: v.count, by: 4) { rows.append((Int(v[k]), v[k + 1], Int(v[k + 2]), Int(v[k + 3]))) }
        }
        var total = 0.0
        var weights = 0
        var tokens = 0
        for r in rows.sorted(by: { $0.index < $1.index }) {
            total += Double(r.loss) * Double(r.weight)
            weights += r.weight
            tokens += r.tokens
        }
        return (weights > 0 ? Float(total / Double(weights)) : .nan, tokens)
    }

    /// Every rank's metric sums and counts added up (the same names in the same order on every rank).
    static func sumMetrics(_ metrics: [MetricSum], _ group: ProcessGroup) throws -> [MetricSum] {
        var buffer = metrics.flatMap { [Float($0.sum), Float($0.count)] }
        try group.sum(&buffer)
        return metrics.enumerated().map { MetricSum(name: $0.element.name, sum: Double(buffer[2 * $0.offset]), count: Double(buffer[2 * $0.offset + 1])) }
    }
}

/// One optimizer step's work on one rank: its share of each micro-batch (the objective's
/// `share`), forward and backward with the share's loss weighted as the objective's `partLoss`
/// says, then the sum over the ranks. Weighting: the loss of a batch is the mean over its T target
/// tokens; a share with t of them computes the mean over its own, times t / T (and 1 /
/// micro-batches), so the ranks' gradients add up to the whole batch's (a preference objective
/// divides by the whole batch's pairs itself, weight 1).
struct SharedStep {
    let group: ProcessGroup
    let micro: Int
    var loss = 0.0  // this rank's part of the step's loss
    var tokens = 0  // positions this rank computed
    var nonFinite = false
    var computeSeconds = 0.0

    init(group: ProcessGroup, micro: Int) {
        self.group = group
        self.micro = micro
    }

    mutating func accumulate(_ objective: TrainingObjective, _ batch: Batch, rng: inout SeededRNG) {
        // One draw per micro-batch on every rank keeps the run's generator the same everywhere;
        // each rank's dropout stream is its own (dropout differs from one process, nothing else does).
        var local = SeededRNG(seed: rng.next() ^ (UInt64(group.rank + 1) &* 0xA24B_AED4_963E_E407))
        guard let share = objective.share(batch, rank: group.rank, of: group.size), share.targetTokenCount > 0 else { return }
        let t0 = monotonicSeconds()
        let (shareLoss, part) = objective.partLoss(share, of: batch, rng: &local, training: true)
        let value = shareLoss.data[0]
        let weight = part / Double(micro)
        if value.isFinite {
            scale(shareLoss, Float(weight)).backward()
        } else {
            nonFinite = true
        }
        loss += Double(value) * weight
        tokens += share.inputIds.count
        computeSeconds += monotonicSeconds() - t0
    }

    /// Sums the ranks' gradients into every parameter's `grad` (nil where no rank computed one,
    /// as in one process) and returns the step's loss, whether any rank asked to stop, and the
    /// per-rank counters. `previousSum` is this rank's time in the last step's sum.
    func reduce(_ params: [Tensor], stop: Bool, previousSum: Double) throws
        -> (loss: Double, stop: Bool, tokens: [Int], compute: [Double], previousSum: [Double], bytes: Int) {
        let n = group.size, r = group.rank
        // [gradients..., has-grad per parameter, loss, stop, tokens one-hot, compute one-hot, previous sum one-hot]
        var buffer: [Float] = []
        buffer.reserveCapacity(params.reduce(0) { $0 + $1.count } + params.count + 2 + 3 * n)
        for p in params { buffer += p.grad ?? [Float](repeating: 0, count: p.count) }
        buffer += params.map { $0.grad == nil ? 0 : 1 }
        buffer.append(nonFinite ? .nan : Float(loss))
        buffer.append(stop ? 1 : 0)
        let tail = buffer.count
        buffer += [Float](repeating: 0, count: 3 * n)
        buffer[tail + r] = Float(tokens)
        buffer[tail + n + r] = Float(computeSeconds)
        buffer[tail + 2 * n + r] = Float(previousSum)
        try group.sum(&buffer)
        var offset = 0
        for (i, p) in params.enumerated() {
            let present = buffer[buffer.count - 3 * n - 2 - params.count + i] > 0
            p.grad = present ? Array(buffer[offset..<(offset + p.count)]) : nil
            offset += p.count
        }
        let lossIndex = tail - 2
        return (Double(buffer[lossIndex]), buffer[lossIndex + 1] > 0,
                (0..<n).map { Int(buffer[tail + $0]) }, (0..<n).map { Double(buffer[tail + n + $0]) },
                (0..<n).map { Double(buffer[tail + 2 * n + $0]) }, buffer.count * 4)
    }
}

/// Sums a window of steps' data-parallel counters into a report.
struct DataParallelWindow {
    let ranks: Int
    var steps = 0
    var tokens: [Int]
    var compute: [Double]
    var sums: [Double]
    var sumSteps = 0
    var bytes = 0

    init(ranks: Int) {
        self.ranks = ranks
        tokens = [Int](repeating: 0, count: ranks)
        compute = [Double](repeating: 0, count: ranks)
        sums = compute
    }

    mutating func add(tokens t: [Int], compute c: [Double], previousSum s: [Double], bytes b: Int) {
        steps += 1
        for i in 0..<ranks {
            tokens[i] += t[i]
            compute[i] += c[i]
            sums[i] += s[i]
        }
        if s.contains(where: { $0 > 0 }) { sumSteps += 1 }
        bytes = b
    }

    func report(seconds: Double) -> DataParallelReport {
        DataParallelReport(ranks: ranks, steps: steps, seconds: seconds, tokensPerRank: tokens, computeSecondsPerRank: compute,
                           allreduceSecondsPerStep: sumSteps > 0 ? (sums.min() ?? 0) / Double(sumSteps) : 0,
                           allreduceBytesPerStep: bytes)
    }
}
