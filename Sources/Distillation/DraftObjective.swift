// The draft's training objective: distillation from a frozen teacher (base + adapter, merged,
// on Inference's KV-cache path, no gradients) into the draft, as the mean divergence over the
// vocabulary at the batch's assistant positions. One more `TrainingObjective` for the one loop;
// leaves out the run and metrics.
// Follows the reference toolkit's draft training (reverse KL by default) and DistiLLM's divergences.
//
// Dimensions: N = B*T rows of the batch, M assistant rows, D hidden, V vocab, V' draft head size.
import Autograd
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import Training

public final class DraftObjective: TrainingObjective {
    public let draft: DraftModel
    /// The teacher's forward: the base with its adapter merged in (what generation runs).
    public let teacher: TeacherForward
    public let divergence: Divergence
    /// The teacher's output head [V, D] (LoRA never targets it: the base's), as the base holds
    /// it: a stored head is multiplied from its blocks, never copied whole.
    let teacherFullHead: FrozenMatrix
    /// The teacher's head rows for the draft's vocabulary ([V', D], float32); nil for a full head.
    let teacherHeadRows: Tensor?

    /// Teacher hidden states are a pure function of a sample's tokens, so they are computed once
    /// per sample (alone, batch 1, so that the bits never depend on batch composition and a resumed
    /// run sees exactly the numbers an uninterrupted one did) and kept while they fit `cacheLimit` floats.
    struct SegmentKey: Hashable {
        var ids: [Int]
        var mask: [Bool]
    }
    var cache: [SegmentKey: [Float]] = [:]  // key -> [m, D] at the segment's loss rows
    var cachedFloats = 0
    public var cacheLimit = 256 << 20
    public private(set) var teacherForwards = 0

    /// `head` is the teacher's output head [V, D] (the base's `head`).
    public init(draft: DraftModel, teacher: TeacherForward, head: FrozenMatrix, divergence: Divergence) {
        self.draft = draft
        self.teacher = teacher
        self.divergence = divergence
        teacherFullHead = head
        teacherHeadRows = draft.vocabulary.map { Self.rows(of: head, $0) }
    }

    /// Rows `ids` of a frozen matrix as a constant tensor [ids.count, columns] (only those rows unpacked).
    static func rows(of m: FrozenMatrix, _ ids: [Int]) -> Tensor {
        let D = m.columns
        var out = [Float](repeating: 0, count: ids.count * D)
        out.withUnsafeMutableBufferPointer { p in
            for (k, id) in ids.enumerated() { m.dequantizeRows(id..<(id + 1), into: p.baseAddress! + k * D) }
        }
        return Tensor(shape: [ids.count, D], data: out)
    }

    public var parameters: [(name: String, tensor: Tensor)] { draft.trainableParameters }

    /// The batch's assistant rows (indices into N, in order) and the teacher's final hidden
    /// states there ([M, D]).
    func teacherHidden(_ batch: Batch) -> (rows: [Int], hidden: [Float]) {
        let T = batch.length, D = teacher.config.hiddenSize
        var rows: [Int] = []
        var hidden: [Float] = []
        hidden.reserveCapacity(batch.targetTokenCount * D)
        for r in 0..<batch.batchSize {
            // A shared prompt prefix (Batch.sharedSegment) leads each of the row's segments.
            var shared = 0
            while shared < T && batch.segmentIds[r * T + shared] == Batch.sharedSegment { shared += 1 }
            let prefixIds = Array(batch.inputIds[(r * T)..<(r * T + shared)])
            let prefixMask = [Bool](repeating: false, count: shared)
            var j = shared
            while j < T {
                let seg = batch.segmentIds[r * T + j]
                guard seg != 0 else { j += 1; continue }
                var end = j
                while end < T && batch.segmentIds[r * T + end] == seg { end += 1 }
                let range = (r * T + j)..<(r * T + end)
                let key = SegmentKey(ids: prefixIds + batch.inputIds[range], mask: prefixMask + batch.lossMask[range])
                if key.mask.contains(true) {
                    let h = cache[key] ?? computeSegment(key)
                    hidden += h
                    rows += range.filter { batch.lossMask[$0] }
                }
                j = end
            }
        }
        return (rows, hidden)
    }

    func computeSegment(_ key: SegmentKey) -> [Float] {
        let D = teacher.config.hiddenSize, n = key.ids.count
        let h = teacher.hiddenStates(key.ids)  // [n, D]
        precondition(h.count == n * D, "[DraftObjective] the teacher forward gave \(h.count) floats for \(n) tokens of width \(D)")
        teacherForwards += 1
        var out: [Float] = []
        for p in 0..<n where key.mask[p] { out += h[(p * D)..<((p + 1) * D)] }  // [m, D]
        if cachedFloats + out.count <= cacheLimit {
            cache[key] = out
            cachedFloats += out.count
        }
        return out
    }

    /// Teacher logits at the batch's assistant rows: over the draft's head tokens ([M, V']), or
    /// over the whole vocabulary with `fullVocabulary` ([M, V]; the metrics need it).
    /// With a restricted head this is the teacher renormalised on those tokens: for the reverse
    /// KL that changes the loss only by the constant −log p_teacher(vocabulary), so the gradient
    /// is exactly the full-vocabulary one.
    func teacherLogits(hidden: [Float], fullVocabulary: Bool = false) -> Tensor {
        let D = teacher.config.hiddenSize
        let h = Tensor(shape: [hidden.count / D, D], data: hidden)  // [M, D]
        return withNoGrad {
            if !fullVocabulary, let rows = teacherHeadRows { return linear(h, weight: rows) }  // [M, V']
            return linear(h, frozen: teacherFullHead)  // [M, V]
        }
    }

    public func loss(_ batch: Batch, rng: inout SeededRNG, training: Bool) -> Tensor {
        let (rows, th) = teacherHidden(batch)
        let t = teacherLogits(hidden: th)  // [M, V']
        let layout = ForwardLayout(batch: batch.batchSize, positions: batch.positions, segmentIds: batch.segmentIds)
        let hidden = draft.model.hiddenStates(ids: batch.inputIds, layout: layout, rng: &rng, training: training)  // [N, D]
        let s = draft.logits(hidden: hidden, rows: rows)  // [M, V']
        return Autograd.divergence(student: s, teacher: t, kind: divergence)
    }
}
