// The preference objectives (DPO, IPO, ORPO) for the one training loop: the policy is the base
// with the trained LoRA; DPO and IPO compare it with a reference, the same base weights with the
// adapter off or with a fixed adapter (a second LlamaModel over the same arrays: no copy of the
// weights), whose log-probabilities are computed once per pair (alone, its prompt once, so the
// bits never depend on the batch, the layout or the process) and kept. Each sequence's
// log-probability is the sum over its reply's target tokens; ORPO's NLL covers every position
// of the chosen sequence, prompt included, as TRL's ORPOTrainer does. DPO and IPO may add the chosen
// replies' cross-entropy (RPO; TRL's loss_type [sigmoid, sft] with loss_weights [1, α], formerly
// rpo_alpha): their token mean over the batch, weighted by α. Metrics as TRL logs them.
// Batches come from PreferenceBatcher (a pair never split; Batch.preferencePairs).
import Autograd
import DataSchema
import Foundation
import ModelDefinition

public struct PreferenceSettings: Sendable, Equatable, Codable {
    public enum Objective: String, Sendable, Codable, CaseIterable {
        case dpo, ipo, orpo
    }

    public var objective: Objective
    /// DPO/IPO: β (the reference's pull; IPO's τ). ORPO: λ, the odds-ratio term's weight.
    public var beta: Double
    /// DPO only: TRL's robust-DPO label smoothing ε in [0, 0.5).
    public var labelSmoothing: Double
    /// DPO and IPO: α, the weight of the chosen replies' cross-entropy added to the pair loss (RPO:
    /// TRL's loss_type [.., "sft"] with loss_weights [1, α]); 0 leaves it out.
    public var rpoAlpha: Double

    public init(objective: Objective, beta: Double = 0.1, labelSmoothing: Double = 0, rpoAlpha: Double = 0) {
        self.objective = objective
        self.beta = beta
        self.labelSmoothing = labelSmoothing
        self.rpoAlpha = rpoAlpha
    }

    public var kind: PreferenceLossKind {
        switch objective {
        case .dpo: .sigmoid(beta: beta, labelSmoothing: labelSmoothing)
        case .ipo: .ipo(beta: beta)
        case .orpo: .orpo(lambda: beta)
        }
    }

    /// Whether the objective compares with a reference model.
    public var needsReference: Bool { objective != .orpo }

    public func validate() throws {
        guard beta > 0, beta.isFinite else { throw TrainingError.invalidConfig("--beta must be positive, got \(beta)") }
        guard labelSmoothing >= 0 && labelSmoothing < 0.5 else {
            throw TrainingError.invalidConfig("--label-smoothing must be in [0, 0.5), got \(labelSmoothing)")
        }
        if labelSmoothing > 0 && objective != .dpo {
            throw TrainingError.invalidConfig("--label-smoothing applies to --objective dpo only, not \(objective.rawValue)")
        }
        guard rpoAlpha >= 0, rpoAlpha.isFinite else { throw TrainingError.invalidConfig("--rpo-alpha must be 0 or more, got \(rpoAlpha)") }
        if rpoAlpha > 0 && objective == .orpo {
            throw TrainingError.invalidConfig("--rpo-alpha applies to --objective dpo or ipo; orpo has its own cross-entropy term")
        }
    }
}

public final class PreferenceObjective: TrainingObjective {
    public let model: LlamaModel
    /// The reference for DPO/IPO (nil for ORPO).
    public let reference: LlamaModel?
    public let settings: PreferenceSettings

    struct PairKey: Hashable {
        var chosen: [Int], chosenMask: [Bool], rejected: [Int], rejectedMask: [Bool]
    }
    /// Reference log-probabilities (chosen, rejected) per pair, by content.
    var referenceCache: [PairKey: (Double, Double)] = [:]
    /// Pairs whose reference log-probabilities were computed (not found in the cache).
    public private(set) var referenceForwards = 0

    /// Sums since the last `takeMetrics`.
    var sums: [String: (sum: Double, count: Double)] = [:]

    public init(model: LlamaModel, reference: LlamaModel?, settings: PreferenceSettings) throws {
        try settings.validate()
        if settings.needsReference && reference == nil {
            throw TrainingError.invalidConfig("--objective \(settings.objective.rawValue) needs a reference model")
        }
        self.model = model
        self.reference = settings.needsReference ? reference : nil
        self.settings = settings
    }

    public var parameters: [(name: String, tensor: Tensor)] { model.loraParameters }

    public func share(_ batch: Batch, rank: Int, of size: Int) -> Batch? { batch.rowShare(rank: rank, of: size) }
    public func evaluationWeight(_ batch: Batch) -> Int { batch.preferencePairCount }

    /// The names `takeMetrics` reports, in order (TRL's).
    public var metricNames: [String] {
        var names = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"]
        if settings.objective == .orpo { names += ["nll_loss", "log_odds_ratio", "log_odds_chosen"] }
        if settings.rpoAlpha > 0 { names += ["nll_loss"] }
        return names
    }

    public func takeMetrics() -> [MetricSum] {
        defer { sums = [:] }
        return metricNames.map { MetricSum(name: $0, sum: sums[$0]?.sum ?? 0, count: sums[$0]?.count ?? 0) }
    }

    func add(_ name: String, _ value: Double, count: Double = 1) {
        sums[name, default: (0, 0)].sum += value
        sums[name, default: (0, 0)].count += count
    }

    /// What one batch asks of the model: the rows whose target log-probabilities are needed, the
    /// sequence (2k chosen, 2k+1 rejected) and ORPO NLL pair (k) each row counts in.
    struct Layout {
        var rows: [Int] = []
        var sequence: [Int] = []
        var nllPair: [Int] = []
        var replyTokens: [Int] = []  // [2N]
        var nllTokens = 0
        var pairs = 0
    }

    static func layout(_ b: Batch, nll: Bool) -> Layout {
        var out = Layout()
        let pairs = b.preferencePairs
        out.pairs = pairs.count
        out.replyTokens = [Int](repeating: 0, count: 2 * pairs.count)
        for (k, (c, r)) in pairs.enumerated() {
            let base = c.row * b.length
            if nll {
                // every position of the chosen sequence: its row's shared prompt, then its own
                for p in Array(0..<c.sharedPrompt) + Array(c.positions) {
                    let i = base + p
                    out.rows.append(i)
                    out.sequence.append(b.lossMask[i] && p >= c.sharedPrompt ? 2 * k : -1)
                    out.nllPair.append(k)
                    if b.lossMask[i] && p >= c.sharedPrompt { out.replyTokens[2 * k] += 1 }
                }
                out.nllTokens += c.sharedPrompt + c.positions.count
            } else {
                for p in c.positions where b.lossMask[base + p] {
                    out.rows.append(base + p)
                    out.sequence.append(2 * k)
                    out.nllPair.append(-1)
                    out.replyTokens[2 * k] += 1
                }
            }
            for p in r.positions where b.lossMask[base + p] {
                out.rows.append(base + p)
                out.sequence.append(2 * k + 1)
                out.nllPair.append(-1)
                out.replyTokens[2 * k + 1] += 1
            }
        }
        return out
    }

    /// The sequence log-probabilities [2N] (and ORPO's chosen NLL sums [N]) of `model` on `b`.
    static func sequenceLogProbs(_ model: LlamaModel, _ b: Batch, _ l: Layout, nll: Bool, rng: inout SeededRNG,
                                 training: Bool) -> (Tensor, Tensor?) {
        let layout = ForwardLayout(batch: b.batchSize, positions: b.positions, segmentIds: b.segmentIds)
        let hidden = model.hiddenStates(ids: b.inputIds, layout: layout, rng: &rng, training: training)  // [B*T, D]
        let h = gatherRows(hidden, l.rows)  // [R, D]
        let targets = l.rows.map { b.targets[$0] }
        let lp = model.lmHead.map { linearLogProbs(hidden: h, weight: $0, targets: targets) }
            ?? linearLogProbs(hidden: h, frozen: model.storedHead!, targets: targets)  // [R]
        let seq = segmentSums(lp, segments: l.sequence, count: 2 * l.pairs)  // [2N]
        return (seq, nll ? segmentSums(lp, segments: l.nllPair, count: l.pairs) : nil)
    }

    /// The pair `k` of `b` alone, as chosen and rejected examples (key and input of the reference).
    static func pairExamples(_ b: Batch, _ c: PreferenceSequence, _ r: PreferenceSequence) -> (TrainingExample, TrainingExample) {
        func example(_ s: PreferenceSequence) -> TrainingExample {
            let base = s.row * b.length
            let idx = Array(base..<(base + s.sharedPrompt)) + s.positions.map { base + $0 }
            return TrainingExample(sampleIndex: s.sampleIndex, line: 0, inputs: idx.map { b.inputIds[$0] },
                                   targets: idx.map { b.targets[$0] }, targetMask: idx.map { b.lossMask[$0] && $0 >= base + s.sharedPrompt })
        }
        return (example(c), example(r))
    }

    /// Reference log-probabilities per pair of `b`, from the cache or computed for each pair alone.
    func referenceLogProbs(_ b: Batch) -> [Double] {
        guard let reference else { return [] }
        var out: [Double] = []
        for (c, r) in b.preferencePairs {
            let (ce, re) = Self.pairExamples(b, c, r)
            let key = PairKey(chosen: ce.inputs + [ce.targets.last ?? 0], chosenMask: ce.targetMask,
                              rejected: re.inputs + [re.targets.last ?? 0], rejectedMask: re.targetMask)
            if let v = referenceCache[key] {
                out += [v.0, v.1]
                continue
            }
            let pair = PreferenceExample(sampleIndex: c.sampleIndex, line: 0, chosen: ce, rejected: re)
            // One row, the prompt once: the same numbers whatever batch or layout the pair came in.
            let alone: Batch
            do {
                alone = try PreferenceBatcher(examples: [pair], options: BatchOptions(batchSize: 1, layout: .sharePrefix, shuffle: false))
                    .batches(epoch: 0)[0]
            } catch {
                preconditionFailure("[PreferenceObjective] one pair of a batch did not batch alone: \(error)")
            }
            let l = Self.layout(alone, nll: false)
            var rng = SeededRNG(seed: 0)
            let (seq, _) = withNoGrad { Self.sequenceLogProbs(reference, alone, l, nll: false, rng: &rng, training: false) }
            let v = (Double(seq.data[0]), Double(seq.data[1]))
            referenceCache[key] = v
            referenceForwards += 1
            out += [v.0, v.1]
        }
        return out
    }

    public func loss(_ batch: Batch, rng: inout SeededRNG, training: Bool) -> Tensor {
        partLoss(batch, of: batch, rng: &rng, training: training).loss
    }

    public func partLoss(_ part: Batch, of whole: Batch, rng: inout SeededRNG, training: Bool) -> (loss: Tensor, weight: Double) {
        let orpo = settings.objective == .orpo
        let l = Self.layout(part, nll: orpo)
        let w = whole == part ? l : Self.layout(whole, nll: orpo)
        let ref = settings.needsReference ? referenceLogProbs(part) : nil
        let (seq, nll) = Self.sequenceLogProbs(model, part, l, nll: orpo, rng: &rng, training: training)
        // RPO's cross-entropy: a token mean over the whole batch's chosen replies (TRL's "sft" term)
        let chosenTokens = stride(from: 0, to: w.replyTokens.count, by: 2).reduce(0) { $0 + w.replyTokens[$1] }
        let loss = preferenceLoss(policy: seq, reference: ref, lengths: l.replyTokens, nll: nll, nllDivisor: Double(max(1, w.nllTokens)),
                                  pairDivisor: Double(max(1, w.pairs)), kind: settings.kind,
                                  chosenWeight: settings.rpoAlpha / Double(max(1, chosenTokens)))
        record(seq.data.map(Double.init), reference: ref, lengths: l.replyTokens, nll: nll.map { $0.data.map(Double.init) },
               nllTokens: l.nllTokens)
        return (loss, 1)
    }

    /// The step's measurements as TRL's trainers log them.
    func record(_ policy: [Double], reference: [Double]?, lengths: [Int], nll: [Double]?, nllTokens: Int) {
        let beta = settings.beta
        for k in 0..<(policy.count / 2) {
            var c = policy[2 * k], r = policy[2 * k + 1]
            let rc: Double, rr: Double
            if let reference {
                rc = beta * (c - reference[2 * k])
                rr = beta * (r - reference[2 * k + 1])
            } else {
                // ORPO: log-probabilities averaged per reply token, rewards β times them
                c /= Double(lengths[2 * k])
                r /= Double(lengths[2 * k + 1])
                rc = beta * c
                rr = beta * r
                let odds = (c - r) - (PreferenceMath.log1mexp(c) - PreferenceMath.log1mexp(r))
                add("log_odds_chosen", odds)
                add("log_odds_ratio", PreferenceMath.logSigmoid(odds))
            }
            add("rewards/chosen", rc)
            add("rewards/rejected", rr)
            add("rewards/accuracies", rc > rr ? 1 : 0)
            add("rewards/margins", rc - rr)
            add("logps/chosen", c)
            add("logps/rejected", r)
        }
        if let nll { add("nll_loss", -nll.reduce(0, +), count: Double(nllTokens)) }
        if settings.rpoAlpha > 0 {
            add("nll_loss", -stride(from: 0, to: policy.count, by: 2).reduce(0) { $0 + policy[$1] },
                count: Double(stride(from: 0, to: lengths.count, by: 2).reduce(0) { $0 + lengths[$1] }))
        }
    }
}

extension PreferenceObjective {
    /// Each pair's (chosen, rejected) sequence log-probabilities under `model`, batch by batch of
    /// epoch 0, without gradients: for scoring a preference eval set (evaluate-adapter).
    public static func pairLogProbs(_ model: LlamaModel, _ source: BatchSource) -> [(chosen: Double, rejected: Double)] {
        var out: [(Double, Double)] = []
        var rng = SeededRNG(seed: 0)
        for i in 0..<source.batchCount(epoch: 0) {
            let b = source.batch(epoch: 0, index: i)
            let l = layout(b, nll: false)
            let (seq, _) = withNoGrad { sequenceLogProbs(model, b, l, nll: false, rng: &rng, training: false) }
            for k in 0..<l.pairs { out.append((Double(seq.data[2 * k]), Double(seq.data[2 * k + 1]))) }
        }
        return out
    }
}

/// Random access to preference batches for the loop (PreferenceBatcher's, one epoch kept).
public final class PreferenceBatches: BatchSource {
    public let batcher: PreferenceBatcher
    private var cachedEpoch = -1
    private var cached: [Batch] = []
    private var counts: [Int: Int] = [:]

    public init(examples: [PreferenceExample], options: BatchOptions) throws {
        batcher = try PreferenceBatcher(examples: examples, options: options)
    }

    public func batchCount(epoch: Int) -> Int {
        if let c = counts[epoch] { return c }
        let c = batcher.batchCount(epoch: epoch)
        counts[epoch] = c
        return c
    }

    public func batch(epoch: Int, index: Int) -> Batch {
        if cachedEpoch != epoch {
            cached = batcher.batches(epoch: epoch)
            cachedEpoch = epoch
        }
        precondition(index < cached.count, "[PreferenceBatches] batch \(index) of epoch \(epoch) beyond \(cached.count)")
        return cached[index]
    }
}
