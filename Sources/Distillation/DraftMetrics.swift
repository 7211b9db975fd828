// What a draft is worth for speculative decoding, measured after each epoch: the divergences
// from its teacher, the acceptance rate α = E[Σ_v min(p_teacher, p_draft)] (temperature 1), the
// greedy agreement rate, and from α and the cost ratio c the expected tokens per target call and
// speed-up for γ = 1…8. Leaves out timing (the caller measures c). Follows Leviathan et al. 2022 §3.
import Autograd
import DataSchema
import Foundation
import Inference
import Training

/// Expected benefit of speculative decoding with γ draft tokens (Leviathan et al. 2022, eqs. 1 and thm 3.8).
public struct SpeculativeEstimate: Sendable, Equatable, Codable {
    public var gamma: Int
    /// (1 − α^(γ+1)) / (1 − α): tokens produced per target forward pass.
    public var tokensPerTargetCall: Double
    /// (1 − α^(γ+1)) / ((1 − α)(γc + 1)): wall-clock speed-up over plain decoding.
    public var speedup: Double
}

public enum SpeculativeMath {
    public static func tokensPerTargetCall(alpha: Double, gamma: Int) -> Double {
        if alpha >= 1 { return Double(gamma + 1) }
        return (1 - pow(alpha, Double(gamma + 1))) / (1 - alpha)
    }

    public static func speedup(alpha: Double, gamma: Int, costRatio c: Double) -> Double {
        tokensPerTargetCall(alpha: alpha, gamma: gamma) / (Double(gamma) * c + 1)
    }

    public static func table(alpha: Double, costRatio c: Double, gammas: ClosedRange<Int> = 1...8) -> [SpeculativeEstimate] {
        gammas.map { g in
            SpeculativeEstimate(gamma: g, tokensPerTargetCall: tokensPerTargetCall(alpha: alpha, gamma: g),
                                speedup: speedup(alpha: alpha, gamma: g, costRatio: c))
        }
    }

    /// The γ with the highest expected speed-up (the smallest on ties).
    public static func best(_ table: [SpeculativeEstimate]) -> SpeculativeEstimate? {
        table.max { ($0.speedup, -$0.gamma) < ($1.speedup, -$1.gamma) }
    }
}

/// Draft-versus-teacher agreement over a data set's assistant positions.
public struct DraftEvalMetrics: Sendable, Equatable, Codable {
    public var positions = 0
    /// KL(draft ‖ teacher) over the whole vocabulary (finite even with a restricted head).
    public var klReverse = 0.0
    /// KL(teacher ‖ draft); with a restricted head, against the teacher renormalised on the head's tokens.
    public var klForward = 0.0
    /// ½ Σ_v |p_teacher − p_draft| over the whole vocabulary = 1 − α.
    public var totalVariation = 0.0
    /// α: mean Σ_v min(p_teacher, p_draft), the probability a sampled draft token is accepted.
    public var acceptance = 0.0
    /// How often the draft's most likely token is the teacher's.
    public var greedyAgreement = 0.0
    /// Mean teacher probability on tokens the draft's head cannot propose (0 with a full head).
    public var teacherMassOutsideHead = 0.0
}

public enum DraftEvaluation {
    /// Measures `objective`'s draft against its teacher over every assistant position of
    /// `source` (epoch 0), up to `maxPositions`. No gradients; leaves the objective's RNG alone.
    public static func measure(_ objective: DraftObjective, _ source: BatchSource, maxPositions: Int = 4096) -> DraftEvalMetrics {
        var m = DraftEvalMetrics()
        var sums = [Double](repeating: 0, count: 6)
        let vocabulary = objective.draft.vocabulary
        let V = objective.teacher.config.vocabSize
        withNoGrad {
            var rng = SeededRNG(seed: 0)
            for b in 0..<source.batchCount(epoch: 0) where m.positions < maxPositions {
                let batch = source.batch(epoch: 0, index: b)
                guard batch.targetTokenCount > 0 else { continue }
                var (rows, th) = objective.teacherHidden(batch)
                let D = objective.teacher.config.hiddenSize
                let keep = min(rows.count, maxPositions - m.positions)
                rows = Array(rows.prefix(keep))
                th = Array(th.prefix(keep * D))
                let t = objective.teacherLogits(hidden: th, fullVocabulary: true)  // [M, V]
                let layout = ForwardLayout(batch: batch.batchSize, positions: batch.positions, segmentIds: batch.segmentIds)
                let hidden = objective.draft.model.hiddenStates(ids: batch.inputIds, layout: layout, rng: &rng, training: false)
                let s = objective.draft.logits(hidden: hidden, rows: rows)  // [M, V']
                let W = s.shape[1]
                var p = [Float](repeating: 0, count: V), q = [Float](repeating: 0, count: W)
                for r in 0..<keep {
                    t.data.withUnsafeBufferPointer { tp in
                        _ = p.withUnsafeMutableBufferPointer { Kernels.softmaxRow(tp.baseAddress! + r * V, $0.baseAddress!, count: V) }
                    }
                    s.data.withUnsafeBufferPointer { sp in
                        _ = q.withUnsafeMutableBufferPointer { Kernels.softmaxRow(sp.baseAddress! + r * W, $0.baseAddress!, count: W) }
                    }
                    var inHead = 0.0, minSum = 0.0, absDiff = 0.0, klRev = 0.0, klFwdRaw = 0.0
                    var bestQ = 0, bestP = 0
                    for k in 0..<W {
                        let id = vocabulary?[k] ?? k
                        let pv = Double(p[id]), qv = Double(q[k])
                        inHead += pv
                        minSum += min(pv, qv)
                        absDiff += abs(pv - qv)
                        if qv > 0 { klRev += qv * (log(qv) - log(max(pv, 1e-45))) }
                        if pv > 0 { klFwdRaw += pv * (log(pv) - log(max(qv, 1e-45))) }
                        if q[k] > q[bestQ] { bestQ = k }
                    }
                    for v in 1..<V where p[v] > p[bestP] { bestP = v }
                    // KL(p' ‖ q) with p' = p / p(head): (Σ p log(p/q)) / p(head) − log p(head)
                    let klFwd = inHead > 0 ? klFwdRaw / inHead - log(inHead) : .infinity
                    let outside = max(0, 1 - inHead)
                    sums[0] += klRev
                    sums[1] += klFwd
                    sums[2] += (absDiff + outside) / 2
                    sums[3] += minSum
                    sums[4] += (vocabulary?[bestQ] ?? bestQ) == bestP ? 1 : 0
                    sums[5] += outside
                }
                m.positions += keep
            }
        }
        guard m.positions > 0 else { return m }
        let n = Double(m.positions)
        m.klReverse = sums[0] / n
        m.klForward = sums[1] / n
        m.totalVariation = sums[2] / n
        m.acceptance = sums[3] / n
        m.greedyAgreement = sums[4] / n
        m.teacherMassOutsideHead = sums[5] / n
        return m
    }
}

/// A draft's epoch: its agreement with the teacher, the measured cost ratio and the γ table.
public struct DraftEpochMetrics: Sendable, Equatable {
    public var epoch: Int
    public var step: Int
    public var eval: DraftEvalMetrics
    /// Where the metrics were measured: "eval" data, or "train" data when no eval file was given.
    public var dataSet: String
    public var cost: DraftCost
    /// Expected tokens per target call and speed-up for γ = 1…8 at α (sampling, temperature 1).
    public var estimates: [SpeculativeEstimate]
    /// The same at α = the greedy agreement rate (greedy decoding accepts exactly when argmaxes agree).
    public var greedyEstimates: [SpeculativeEstimate]
    public var best: SpeculativeEstimate? { SpeculativeMath.best(estimates) }
    public var bestGreedy: SpeculativeEstimate? { SpeculativeMath.best(greedyEstimates) }

    public init(epoch: Int, step: Int, eval: DraftEvalMetrics, dataSet: String, cost: DraftCost) {
        self.epoch = epoch
        self.step = step
        self.eval = eval
        self.dataSet = dataSet
        self.cost = cost
        estimates = SpeculativeMath.table(alpha: eval.acceptance, costRatio: cost.ratio)
        greedyEstimates = SpeculativeMath.table(alpha: eval.greedyAgreement, costRatio: cost.ratio)
    }

    /// One JSON object for metrics.jsonl.
    public var json: [String: Any] {
        func row(_ e: SpeculativeEstimate) -> [String: Any] {
            ["gamma": e.gamma, "tokens_per_target_call": e.tokensPerTargetCall, "speedup": e.speedup]
        }
        var o: [String: Any] = [
            "type": "draft_eval", "epoch": epoch, "step": step, "data": dataSet, "positions": eval.positions,
            "kl_reverse": eval.klReverse, "kl_forward": eval.klForward, "tvd": eval.totalVariation,
            "acceptance_rate": eval.acceptance, "greedy_agreement": eval.greedyAgreement,
            "teacher_mass_outside_head": eval.teacherMassOutsideHead,
            "cost_ratio": cost.ratio, "draft_seconds_per_token": cost.draftSecondsPerToken,
            "target_seconds_per_token": cost.targetSecondsPerToken,
            "expected": estimates.map(row), "expected_greedy": greedyEstimates.map(row),
        ]
        if let b = best { o["best_gamma"] = b.gamma; o["best_speedup"] = b.speedup }
        if let b = bestGreedy { o["best_gamma_greedy"] = b.gamma; o["best_speedup_greedy"] = b.speedup }
        return o
    }
}
