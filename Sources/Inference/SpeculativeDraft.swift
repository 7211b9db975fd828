// The draft side of speculative decoding at inference time: a trained draft (the model
// definition's DraftWeights) as a KV-cached engine whose head may score only a subset of the
// vocabulary; and the measured cost ratio c of a draft step to a target step. Leaves out the
// accept/reject loop (SpeculativeDecoder) and training the draft (Distillation).
import Autograd
import Foundation
import ModelAssets
import ModelDefinition

public final class DraftEngine: @unchecked Sendable {
    /// The draft's blocks, embeddings and final norm (its full head, if any, is not used when restricted).
    public let trunk: InferenceModel
    /// Sorted token ids the head scores; nil = the whole vocabulary.
    public let vocabulary: [Int]?
    /// Head rows for `vocabulary` ([V', D]); nil when the trunk's own head is used.
    let head: Weights?
    /// The adapter the draft was distilled from (nil: the bare base), from its checkpoint.
    public let teacherAdapterSignature: String?
    public var vocabSize: Int { trunk.config.vocabSize }

    /// `precision` float16 halves the bytes a draft step streams; the speculative output is the
    /// same either way (the target checks every proposal), only the acceptance rate may move.
    public init(_ draft: DraftWeights, precision: InferenceModel.WeightPrecision = .float32) {
        trunk = InferenceModel(base: draft.weights, precision: precision)
        vocabulary = draft.vocabulary
        teacherAdapterSignature = draft.teacherAdapterSignature
        if let vocabulary = draft.vocabulary {
            let D = draft.config.hiddenSize
            var h = [Float](repeating: 0, count: vocabulary.count * D)  // [V', D]: only these rows unpacked
            let full = draft.weights.head
            h.withUnsafeMutableBufferPointer { p in
                for (k, id) in vocabulary.enumerated() { full.dequantizeRows(id..<(id + 1), into: p.baseAddress! + k * D) }
            }
            head = Weights(h, precision)
        } else {
            head = nil
        }
    }

    /// Loads a draft-model checkpoint for `base`; an adapter checkpoint, a draft for another base
    /// or another vocabulary is refused with a message saying what the file is.
    public static func load(path: String, base: BaseModel, precision: InferenceModel.WeightPrecision = .float32) throws -> DraftEngine {
        DraftEngine(try DraftWeights.load(path: path, base: base), precision: precision)
    }

    public func makeCache(capacity: Int? = nil) -> KVCache { trunk.makeCache(capacity: capacity) }

    /// Runs `tokens` after the cache and returns the head's logits for the next token: [V'] over
    /// `vocabulary` (or [V]).
    public func nextLogits(_ tokens: [Int], cache: KVCache) -> [Float] {
        guard let vocabulary, let head else { return trunk.forward(tokens, cache: cache) }
        let hn = trunk.hiddenStates(tokens, cache: cache, lastRows: 1)  // [1, D]
        var logits = [Float](repeating: 0, count: vocabulary.count)
        hn.withUnsafeBufferPointer { hp in
            logits.withUnsafeMutableBufferPointer { lp in
                head.matmulNT(hp.baseAddress!, m: 1, n: vocabulary.count, k: trunk.config.hiddenSize, lp.baseAddress!)  // [1, V']
            }
        }
        return logits
    }

    /// The token id of compact index `k` of `nextLogits`.
    @inline(__always)
    public func tokenId(_ k: Int) -> Int { vocabulary?[k] ?? k }

    /// `nextLogits` spread over the whole vocabulary, −∞ where the head has no row.
    public func fullLogits(_ compact: [Float]) -> [Float] {
        guard let vocabulary else { return compact }
        var out = [Float](repeating: -.infinity, count: vocabSize)
        for (k, id) in vocabulary.enumerated() { out[id] = compact[k] }
        return out
    }
}

/// Seconds per token of a draft step and a target step, measured on this engine.
public struct DraftCost: Sendable, Equatable, Codable {
    public var draftSecondsPerToken: Double
    public var targetSecondsPerToken: Double
    /// c = draft time / target time per token.
    public var ratio: Double { targetSecondsPerToken > 0 ? draftSecondsPerToken / targetSecondsPerToken : .nan }

    public init(draftSecondsPerToken: Double, targetSecondsPerToken: Double) {
        self.draftSecondsPerToken = draftSecondsPerToken
        self.targetSecondsPerToken = targetSecondsPerToken
    }
}

public enum SpeculativeCost {
    /// Seconds per token of a single-token decode step after a `context`-token prefill, draft and
    /// target, each the best of `repeats` runs of `steps` steps: c = draft / target.
    public static func measure(target: InferenceModel, draft: DraftEngine, context: Int = 64, steps: Int = 16,
                               repeats: Int = 3) -> DraftCost {
        let V = target.config.vocabSize
        let prompt = (0..<context).map { ($0 * 7919 + 13) % V }
        func perToken(_ prefill: (KVCache) -> Void, _ step: (Int, KVCache) -> Void, _ cache: () -> KVCache) -> Double {
            var best = Double.infinity
            for _ in 0..<repeats {
                let c = cache()
                prefill(c)
                let t0 = monotonicSeconds()
                for i in 0..<steps { step(prompt[i % context], c) }
                best = min(best, (monotonicSeconds() - t0) / Double(steps))
            }
            return best
        }
        let t = perToken({ _ = target.forward(prompt, cache: $0) }, { _ = target.forward([$0], cache: $1) },
                         { target.makeCache(capacity: context + steps + 1) })
        let d = perToken({ _ = draft.nextLogits(prompt, cache: $0) }, { _ = draft.nextLogits([$0], cache: $1) },
                         { draft.makeCache(capacity: context + steps + 1) })
        return DraftCost(draftSecondsPerToken: d, targetSecondsPerToken: t)
    }

    /// Seconds per target pass that scores `rows` new tokens after a `context`-token prefill (the
    /// cache rolled back after each pass), the best of `repeats` runs of `steps` passes: the cost of
    /// verifying γ = rows − 1 proposals, to set against a single-token step (rows = 1).
    public static func passSeconds(target: InferenceModel, context: Int, rows: Int, steps: Int = 8, repeats: Int = 3) -> Double {
        passSeconds(target: target, context: context, rows: [rows], steps: steps, repeats: repeats)[0]
    }

    /// `passSeconds` for each of `rows` (every row's logits, as a verify pass), from one prefill;
    /// within each repeat the row counts take turns, so a busy machine's slow moments weigh on
    /// all of them alike and their ratios compare passes of the same minutes.
    public static func passSeconds(target: InferenceModel, context: Int, rows: [Int], steps: Int = 8, repeats: Int = 3) -> [Double] {
        let V = target.config.vocabSize
        let prompt = (0..<context).map { ($0 * 7919 + 13) % V }
        let cache = target.makeCache(capacity: context + (rows.max() ?? 1) + 1)
        var logits: [Float] = []
        target.forward(prompt, cache: cache, into: &logits)
        var best = [Double](repeating: .infinity, count: rows.count)
        for _ in 0..<repeats {
            for (k, n) in rows.enumerated() {
                let t0 = monotonicSeconds()
                for i in 0..<steps {
                    target.forward((0..<n).map { prompt[(i + $0) % context] }, cache: cache, logitsAt: Array(0..<n), into: &logits)
                    cache.truncate(to: context)
                }
                best[k] = min(best[k], (monotonicSeconds() - t0) / Double(steps))
            }
        }
        return best
    }
}

/// Prompt lookup drafting (Saxena 2023, "prompt lookup decoding"): the token that followed the
/// most recent earlier occurrence of the text's last n tokens, for the longest n from `maximum`
/// down to `minimum` that occurs earlier. No model and no cache: it pays where a reply copies
/// spans of its prompt or of itself (extraction, rewriting, tool arguments), and costs only the
/// verify rows of proposals the target rejects where it does not.
public struct NGramDraft: Sendable, Equatable {
    public var minimum: Int
    public var maximum: Int

    public init(minimum: Int = 2, maximum: Int = 4) {
        precondition(minimum >= 1 && maximum >= minimum, "[NGramDraft] n from \(minimum) to \(maximum)")
        self.minimum = minimum
        self.maximum = maximum
    }

    /// The token after the latest earlier occurrence of `text`'s longest matching suffix, or nil.
    public func propose(after text: [Int]) -> Int? {
        let L = text.count
        guard L >= 2 else { return nil }
        for n in stride(from: min(maximum, L - 1), through: minimum, by: -1) {
            let last = text[L - 1]
            // starts s with s + n ≤ L − 1, so text[s + n] exists and precedes the suffix's end
            var s = L - n - 1
            while s >= 0 {
                if text[s + n - 1] == last {
                    var k = 0
                    while k < n - 1 && text[s + k] == text[L - n + k] { k += 1 }
                    if k == n - 1 { return text[s + n] }
                }
                s -= 1
            }
        }
        return nil
    }
}

/// Which draft a tool decodes with: `auto` (a trained draft given as a checkpoint or carried by
/// the adapter's package, else none), `model` (that trained draft, required), `ngram` (prompt
/// lookup) or `none`.
public enum DraftKind: String, Sendable, CaseIterable {
    case auto, model, ngram, none
}

/// A tool's draft settings, resolved against the loaded model (`resolve`).
public struct DraftSelection: Sendable {
    public var kind: DraftKind
    /// A draft-model checkpoint (train-draft) given apart from the adapter.
    public var checkpoint: String?
    /// γ; nil: the package's speculativeDecodingDraftTokenCount for its own draft, else `defaultTokens`.
    public var tokens: Int?
    public var precision: InferenceModel.WeightPrecision
    public var ngram: NGramDraft
    public static let defaultTokens = 5

    public init(kind: DraftKind = .auto, checkpoint: String? = nil, tokens: Int? = nil,
                precision: InferenceModel.WeightPrecision = .float16, ngram: NGramDraft = NGramDraft()) {
        self.kind = kind
        self.checkpoint = checkpoint
        self.tokens = tokens
        self.precision = precision
        self.ngram = ngram
    }

    /// The draft for `model`, with γ and notes worth telling the user (a draft distilled from
    /// another adapter); nil for no draft. Throws when `model` is asked for and there is none,
    /// or the checkpoint is not a draft for this base.
    public func resolve(_ model: LoadedModel) throws -> (drafter: Drafter, tokens: Int, notes: [String])? {
        switch kind {
        case .none:
            return nil
        case .ngram:
            return (.ngram(ngram), tokens ?? Self.defaultTokens, [])
        case .auto, .model:
            if let checkpoint {
                let engine = try DraftEngine.load(path: checkpoint, base: model.base, precision: precision)
                var notes: [String] = []
                if engine.teacherAdapterSignature != model.adapterSignature {
                    notes.append("the draft was distilled from \(engine.teacherAdapterSignature == nil ? "the bare base model" : "another adapter"), not from this model; the output is unchanged but fewer draft tokens may be accepted")
                }
                return (.model(engine), tokens ?? Self.defaultTokens, notes)
            }
            if let packaged = model.draft {
                return (.model(DraftEngine(packaged, precision: precision)), tokens ?? model.draftTokenCount ?? Self.defaultTokens, [])
            }
            if kind == .model {
                throw ModelError.unsupported("--draft model needs a trained draft: give --draft-checkpoint (a draft-model-*.safetensors from train-draft) or an .fmadapter package that carries one; or use --draft ngram, which needs no training")
            }
            return nil
        }
    }
}
