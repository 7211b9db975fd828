// The one training loop. It knows nothing of LoRA or distillation: it takes an objective
// (trainable tensors + a loss over a batch), a deterministic batch source, and options, runs
// forward → zero grads → backward → clip → AdamW, evaluates and checkpoints per epoch, and
// reports progress as events that the CLIs render. Exact resume: the state at any optimizer
// step (position in the data, optimizer moments, RNG) is a value a checkpoint stores.
import Autograd
import DataSchema
import Foundation

/// What the loop trains: the tensors AdamW updates, and the loss (mean over the batch's
/// target tokens) it differentiates. The adapter's cross-entropy and the draft's divergence are two of these.
public protocol TrainingObjective: AnyObject {
    var parameters: [(name: String, tensor: Tensor)] { get }
    func loss(_ batch: Batch, rng: inout SeededRNG, training: Bool) -> Tensor
    /// Part `rank` of `size` of a batch in a data-parallel run (nil when empty). Default:
    /// `Batch.share` (rows, or the samples after a shared prefix).
    func share(_ batch: Batch, rank: Int, of size: Int) -> Batch?
    /// The loss of `part` (a share of `whole`) and the weight that makes it its share of the
    /// whole batch's loss: the parts' weighted losses add up to `loss(whole)`. Default: the mean
    /// over the part's target tokens, weighted by its part of the batch's target tokens.
    func partLoss(_ part: Batch, of whole: Batch, rng: inout SeededRNG, training: Bool) -> (loss: Tensor, weight: Double)
    /// How much a batch counts in the evaluation's mean of batch losses. Default: its target tokens.
    func evaluationWeight(_ batch: Batch) -> Int
    /// The objective's own measurements since the last call, as sums and counts (a data-parallel
    /// run adds the ranks' up): the same names in the same order on every call. Default: none.
    func takeMetrics() -> [MetricSum]
}

/// One measurement over some items (pairs, tokens): its sum and how many items it covers.
public struct MetricSum: Sendable, Equatable {
    public var name: String
    public var sum: Double
    public var count: Double
    public init(name: String, sum: Double, count: Double) {
        self.name = name
        self.sum = sum
        self.count = count
    }

    /// Means by name (a metric over nothing is left out).
    public static func means(_ sums: [MetricSum]) -> [String: Double]? {
        let out = Dictionary(sums.filter { $0.count > 0 }.map { ($0.name, $0.sum / $0.count) }, uniquingKeysWith: { a, _ in a })
        return out.isEmpty ? nil : out
    }
}

extension TrainingObjective {
    public func share(_ batch: Batch, rank: Int, of size: Int) -> Batch? { batch.share(rank: rank, of: size) }
    public func partLoss(_ part: Batch, of whole: Batch, rng: inout SeededRNG, training: Bool) -> (loss: Tensor, weight: Double) {
        (loss(part, rng: &rng, training: training), Double(part.targetTokenCount) / Double(whole.targetTokenCount))
    }
    public func evaluationWeight(_ batch: Batch) -> Int { batch.targetTokenCount }
    public func takeMetrics() -> [MetricSum] { [] }
}

/// Batches in a reproducible order: `batch(epoch:index:)` returns the same batch for the same
/// arguments, so a resumed run sees exactly the data an uninterrupted one would.
public protocol BatchSource {
    /// Batches in `epoch` (packing makes it depend on the epoch's order).
    func batchCount(epoch: Int) -> Int
    func batch(epoch: Int, index: Int) -> Batch
}

public struct TrainingOptions: Codable, Sendable, Equatable {
    public var epochs = 2
    public var learningRate: Float = 1e-3
    public var warmupSteps = 0
    public var gradientAccumulationSteps = 1
    public var weightDecay: Float = 1e-2
    /// Global gradient-norm bound; nil or 0 turns clipping off.
    public var clipGradNorm: Float? = 1.0
    public var schedule: LRSchedule = .cosine
    public var maxSteps: Int? = nil
    public var seed: UInt64 = 0
    /// Write an epoch checkpoint every this many epochs.
    public var checkpointFrequency = 1
    /// Report a step event every this many optimizer steps.
    public var lossUpdateFrequency = 1
    public init() {}

    /// Optimizer steps in an epoch of `batches` micro-batches (a partial accumulation counts).
    public func stepsPerEpoch(_ batches: Int) -> Int {
        (batches + gradientAccumulationSteps - 1) / max(1, gradientAccumulationSteps)
    }
}

/// Where a run stands, complete enough to continue it bit for bit.
public struct TrainerState: Codable, Sendable, Equatable {
    public var step = 0  // optimizer steps taken
    public var epoch = 0  // current epoch (0-based)
    public var batchIndex = 0  // next micro-batch within the epoch
    public var rng: SeededRNG
    public var optimizerStep = 0
    public var history: [StepRecord] = []
    public var evals: [EvalRecord] = []
    public init(seed: UInt64) { rng = SeededRNG(seed: seed ^ 0x5EED_AD4F_7E12_0001) }
}

public struct StepRecord: Codable, Sendable, Equatable {
    public var step: Int
    public var epoch: Int
    public var loss: Float
    public var learningRate: Float
    public var gradNorm: Float
    public var tokens: Int
    /// The objective's measurements over the step (preference rewards, ...); nil when it has none.
    public var metrics: [String: Double]? = nil
}

public struct EvalRecord: Codable, Sendable, Equatable {
    public var epoch: Int  // 1-based: evaluated after this many epochs
    public var step: Int
    public var loss: Float
    public var perplexity: Float { Float(Foundation.exp(Double(loss))) }
    public var tokens: Int
    /// The objective's measurements over the eval set; nil when it has none.
    public var metrics: [String: Double]? = nil
}

public enum CheckpointKind: Sendable, Equatable {
    case epoch(Int)  // 1-based
    case final
    case interrupted
}

/// Saves the objective's tensors and the trainer state; owned by the CLI's kind of run.
public protocol Checkpointer {
    /// Writes a checkpoint and returns its path.
    func save(_ kind: CheckpointKind, state: TrainerState, optimizer: AdamW, options: TrainingOptions) throws -> String
    /// Removes epoch checkpoints beyond the best `keep` by eval loss (nil keeps all).
    func prune(evals: [EvalRecord], keep: Int?) throws -> [String]
}

public struct TrainingPlan: Sendable {
    public var trainBatchesPerEpoch: Int
    public var stepsPerEpoch: Int
    public var totalSteps: Int
    public var trainableParameters: Int
    public var resumedFromStep: Int
}

public enum TrainingEvent: Sendable {
    case started(TrainingPlan)
    case step(StepRecord, totalSteps: Int, tokensPerSecond: Double, elapsed: Double)
    /// Data-parallel runs: what the ranks did since the last report (sent just before `.step`).
    case dataParallel(DataParallelReport)
    case evaluated(EvalRecord)
    case checkpointSaved(path: String, kind: CheckpointKind)
    case checkpointsPruned([String])
    case stopped(atStep: Int, checkpoint: String)
    case finished(state: TrainerState)
}

public enum TrainingOutcome: Sendable, Equatable {
    case finished(finalCheckpoint: String)
    case interrupted(checkpoint: String)
}

public struct Trainer {
    public var options: TrainingOptions
    public var keepBest: Int?
    /// The processes of a data-parallel run (`mpirun -np N`): each computes its share of every
    /// batch, gradients are summed over them, rank 0 writes the checkpoints. Nil (or a group
    /// of one) trains in this process alone, exactly as without it.
    public var group: ProcessGroup?
    /// Set once rank 0's starting point has been shared.
    var startShared = false

    public init(options: TrainingOptions, keepBest: Int? = nil) {
        self.options = options
        self.keepBest = keepBest
    }

    public func stepsPerEpoch(_ batches: Int) -> Int { options.stepsPerEpoch(batches) }

    /// Optimizer steps of the whole run over `source`: every epoch's, capped by maxSteps.
    public func totalSteps(_ source: BatchSource) -> Int {
        let all = (0..<options.epochs).reduce(0) { $0 + stepsPerEpoch(source.batchCount(epoch: $1)) }
        return options.maxSteps.map { min($0, all) } ?? all
    }

    /// Mean loss over every target token of `source` (batches weighted by the objective's
    /// `evaluationWeight`: target tokens, or pairs), without gradients.
    public static func evaluate(_ objective: TrainingObjective, _ source: BatchSource) -> (loss: Float, tokens: Int) {
        var rng = SeededRNG(seed: 0)
        var total = 0.0
        var weights = 0
        var tokens = 0
        withNoGrad {
            for i in 0..<source.batchCount(epoch: 0) {
                let b = source.batch(epoch: 0, index: i)
                guard b.targetTokenCount > 0 else { continue }
                let l = objective.loss(b, rng: &rng, training: false)
                let w = objective.evaluationWeight(b)
                total += Double(l.data[0]) * Double(w)
                weights += w
                tokens += b.targetTokenCount
            }
        }
        return (weights > 0 ? Float(total / Double(weights)) : .nan, tokens)
    }

    /// Runs (or continues, from `state`) the training. `shouldStop` is polled after every
    /// optimizer step (SIGINT/SIGTERM handlers set it); then a resumable checkpoint is written.
    public func run(objective: TrainingObjective, train: BatchSource, eval: BatchSource?,
                    checkpointer: Checkpointer, state initial: TrainerState, optimizer initialOptimizer: AdamW? = nil,
                    shouldStop: () -> Bool = { false },
                    onEvent: (TrainingEvent) -> Void) throws -> TrainingOutcome {
        let params = objective.parameters.map(\.tensor)
        var state = initial
        var optimizer = initialOptimizer ?? AdamW(parameterSizes: params.map(\.count), weightDecay: options.weightDecay)
        let parallel = group.flatMap { $0.size > 1 ? $0 : nil }
        if let parallel, !startShared {
            // Every rank continues from rank 0's state, options and tensors (only it read a checkpoint).
            var shared = self
            (state, optimizer, shared.options) = try Trainer.shareStart(parallel, params: params, optimizer: optimizer,
                                                                      state: state, options: options)
            shared.startShared = true
            return try shared.run(objective: objective, train: train, eval: eval, checkpointer: checkpointer, state: state,
                                  optimizer: optimizer, shouldStop: shouldStop, onEvent: onEvent)
        }
        let isRoot = (parallel?.rank ?? 0) == 0
        /// Rank 0 writes; every rank learns the path (and waits for the write).
        func save(_ kind: CheckpointKind) throws -> String {
            guard let parallel else { return try checkpointer.save(kind, state: state, optimizer: optimizer, options: options) }
            let path = isRoot ? try checkpointer.save(kind, state: state, optimizer: optimizer, options: options) : ""
            return String(decoding: try parallel.broadcast(Array(path.utf8), root: 0), as: UTF8.self)
        }
        func prune() throws -> [String] { isRoot ? try checkpointer.prune(evals: state.evals, keep: keepBest) : [] }
        var window = parallel.map { DataParallelWindow(ranks: $0.size) }
        var lastSum = 0.0
        let firstCount = train.batchCount(epoch: 0)
        guard firstCount > 0 else { throw TrainingError.data("the training data gives no batches") }
        let accum = max(1, options.gradientAccumulationSteps)
        let total = totalSteps(train)
        onEvent(.started(TrainingPlan(trainBatchesPerEpoch: firstCount, stepsPerEpoch: stepsPerEpoch(firstCount),
                                      totalSteps: total, trainableParameters: params.reduce(0) { $0 + $1.count },
                                      resumedFromStep: state.step)))
        let start = monotonicSeconds()
        var windowStart = start
        var windowTokens = 0
        var lastCheckpoint: String? = nil

        while state.epoch < options.epochs && state.step < total {
            let perEpoch = train.batchCount(epoch: state.epoch)
            while state.batchIndex < perEpoch && state.step < total {
                for p in params { p.grad = nil }
                let micro = min(accum, perEpoch - state.batchIndex)
                var stepLoss = 0.0
                var stepTokens = 0
                var shared = parallel.map { SharedStep(group: $0, micro: micro) }
                for j in 0..<micro {
                    let b = train.batch(epoch: state.epoch, index: state.batchIndex + j)
                    if shared != nil {
                        shared!.accumulate(objective, b, rng: &state.rng)
                        stepTokens += b.inputIds.count
                        continue
                    }
                    let loss = objective.loss(b, rng: &state.rng, training: true)
                    let value = loss.data[0]
                    guard value.isFinite else {
                        throw TrainingError.nonFiniteLoss(step: state.step, value: value, lastGoodCheckpoint: lastCheckpoint)
                    }
                    scale(loss, 1 / Float(micro)).backward()
                    stepLoss += Double(value) / Double(micro)
                    stepTokens += b.inputIds.count
                }
                var stopRequested = false
                if let step = shared {
                    // The ranks' gradients summed: from here on every rank holds the same numbers.
                    let t0 = monotonicSeconds()
                    let r = try step.reduce(params, stop: shouldStop(), previousSum: lastSum)
                    lastSum = monotonicSeconds() - t0
                    window!.add(tokens: r.tokens, compute: r.compute, previousSum: r.previousSum, bytes: r.bytes)
                    guard r.loss.isFinite else {
                        throw SharedError(TrainingError.nonFiniteLoss(step: state.step, value: Float(r.loss), lastGoodCheckpoint: lastCheckpoint).errorDescription!)
                    }
                    stepLoss = r.loss
                    stopRequested = r.stop
                }
                let norm: Float
                if let clip = options.clipGradNorm, clip > 0 {
                    norm = clipGradients(params, maxNorm: clip)
                } else {
                    norm = gradientNorm(params)
                }
                guard norm.isFinite else {
                    throw TrainingError.nonFiniteLoss(step: state.step, value: norm, lastGoodCheckpoint: lastCheckpoint)
                }
                let lr = options.learningRate * options.schedule.factor(step: state.step, warmupSteps: options.warmupSteps, totalSteps: total)
                optimizer.update(params, lr: lr)
                var metrics = objective.takeMetrics()
                if let parallel, !metrics.isEmpty { metrics = try Trainer.sumMetrics(metrics, parallel) }
                let record = StepRecord(step: state.step + 1, epoch: state.epoch + 1, loss: Float(stepLoss),
                                        learningRate: lr, gradNorm: norm, tokens: stepTokens, metrics: MetricSum.means(metrics))
                state.step += 1
                state.batchIndex += micro
                state.optimizerStep = optimizer.step
                state.history.append(record)
                windowTokens += stepTokens
                if state.step % max(1, options.lossUpdateFrequency) == 0 || state.step == total {
                    let now = monotonicSeconds()
                    if let w = window {
                        onEvent(.dataParallel(w.report(seconds: now - windowStart)))
                        window = DataParallelWindow(ranks: w.ranks)
                    }
                    onEvent(.step(record, totalSteps: total, tokensPerSecond: Double(windowTokens) / max(1e-9, now - windowStart),
                                  elapsed: now - start))
                    windowStart = now
                    windowTokens = 0
                }
                if parallel == nil ? shouldStop() : stopRequested {
                    let path = try save(.interrupted)
                    onEvent(.stopped(atStep: state.step, checkpoint: path))
                    return .interrupted(checkpoint: path)
                }
            }
            // an epoch ends when its batches are used up, or at the step limit mid-epoch
            let epochDone = state.batchIndex >= perEpoch
            if epochDone {
                state.epoch += 1
                state.batchIndex = 0
            }
            if epochDone || state.step >= total {
                let epochNumber = epochDone ? state.epoch : state.epoch + 1
                if let eval, eval.batchCount(epoch: 0) > 0 {
                    _ = objective.takeMetrics()
                    let (l, n) = try parallel.map { try Trainer.evaluate(objective, eval, group: $0) } ?? Trainer.evaluate(objective, eval)
                    var metrics = objective.takeMetrics()
                    if let parallel, !metrics.isEmpty { metrics = try Trainer.sumMetrics(metrics, parallel) }
                    let rec = EvalRecord(epoch: epochNumber, step: state.step, loss: l, tokens: n, metrics: MetricSum.means(metrics))
                    state.evals.append(rec)
                    onEvent(.evaluated(rec))
                }
                if epochDone && state.epoch % max(1, options.checkpointFrequency) == 0 && state.step < total {
                    let path = try save(.epoch(state.epoch))
                    lastCheckpoint = path
                    onEvent(.checkpointSaved(path: path, kind: .epoch(state.epoch)))
                    let removed = try prune()
                    if !removed.isEmpty { onEvent(.checkpointsPruned(removed)) }
                }
            }
        }
        if state.step >= total && state.batchIndex == 0 && state.epoch > 0 && options.epochs > 0 {
            // the last epoch's checkpoint doubles as the final one only by name; write both
            let path = try save(.epoch(state.epoch))
            onEvent(.checkpointSaved(path: path, kind: .epoch(state.epoch)))
        }
        let final = try save(.final)
        onEvent(.checkpointSaved(path: final, kind: .final))
        let removed = try prune()
        if !removed.isEmpty { onEvent(.checkpointsPruned(removed)) }
        onEvent(.finished(state: state))
        return .finished(finalCheckpoint: final)
    }
}

