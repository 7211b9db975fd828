// Evaluating one model (the base, or the base with an adapter) on eval samples: teacher-forced
// eval loss over every assistant token (the same batches and loss as train-adapter's eval), and
// greedy generation of each chosen assistant turn from the turns before it, scored by
// ReplyMetrics, several conversations decoding at once, or one at a time with a draft
// (speculative decoding: the same replies, constrained ones included). Leaves out sampling
// (greedy only, so runs are repeatable).
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
import Training

/// Which assistant turns of a sample are generated and scored.
public enum TurnSelection: String, Sendable, Codable, CaseIterable {
    /// The last assistant turn (the sample's final reply).
    case last
    /// Every assistant turn, each from the reference turns before it (tool calls and the answer after the results).
    case all
}

/// One assistant turn to generate: the conversation before it, the reference, and the
/// response_format it answers when it is the reply to a user turn that has one.
public struct EvalTarget: Sendable {
    public var sampleIndex: Int
    public var line: Int
    /// 0-based index of the assistant turn in the sample's messages.
    public var turnIndex: Int
    public var prompt: [Message]
    public var reference: Message
    public var format: ResponseFormat?
}

/// A model to evaluate: the base alone (`checkpoint == nil`) or with an adapter checkpoint.
public struct ModelUnderTest: Sendable, Equatable {
    public var label: String
    public var checkpoint: String?
    public init(label: String, checkpoint: String?) {
        self.label = label
        self.checkpoint = checkpoint
    }
}

/// One generated turn and its scores (a line of the per-sample JSONL).
public struct TargetResult: Sendable, Codable, Equatable {
    public var model: String
    /// 0-based sample index and 1-based line in the eval file; 1-based turn, as Schema.md counts.
    public var sample: Int
    public var line: Int
    public var turn: Int
    public var promptTokens: Int
    public var reference: String
    public var output: String
    public var exactMatch: Bool
    public var json: JSONCheck?
    public var toolCalls: ToolCallCheck?
    public var generatedTokens: Int
    /// False when the reply ran into --max-new-tokens.
    public var stoppedAtEndOfTurn: Bool
    /// Generated under its response_format's constraint; then whether the token limit (or a
    /// dead end) cut it before it was a whole value.
    public var constrained = false
    public var incomplete: Bool? = nil
    /// Constrained: near the token limit the mask kept only tokens after which the reply could
    /// still close in time, and that removed a choice (`GenerationStats.closedByLimit`).
    public var closedByLimit: Bool? = nil
    public var prefillSeconds: Double
    public var decodeSeconds: Double
    /// Speculative decoding only: tokens the draft proposed and the target kept.
    public var draftTokensProposed: Int? = nil
    public var draftTokensAccepted: Int? = nil
}

/// The figures of one model over the whole eval set.
public struct ModelSummary: Sendable, Codable, Equatable {
    public var label: String
    public var checkpoint: String?
    /// Optimizer steps the checkpoint was trained for (nil for the base).
    public var step: Int?
    public var evalLoss: Double?
    public var perplexity: Double?
    public var evalTokens: Int?
    /// With a preference eval set (--preference-data): its pairs, the fraction whose chosen reply
    /// the model gives the higher log-probability (summed over the reply's tokens), the mean of
    /// that difference, and the fraction whose difference is above the base model's (TRL's
    /// rewards/accuracies with the base as the reference).
    public var preferencePairs: Int?
    public var preferenceAccuracy: Double?
    public var preferenceMargin: Double?
    public var rewardAccuracy: Double?
    public var targets = 0
    public var exactMatches = 0
    public var exactMatchRate: Double?
    /// Replies whose user turn has a response_format, and how many of them pass each check.
    public var jsonTargets = 0
    public var jsonValid = 0
    public var schemaConforming = 0
    public var jsonEqual = 0
    public var jsonValidRate: Double?
    public var schemaConformanceRate: Double?
    public var jsonEqualRate: Double?
    /// Replies generated under their response_format's constraint (this row), and how many of
    /// them the token limit cut before they were whole values.
    public var constrained = false
    public var incompleteReplies = 0
    /// Complete replies the token limit narrowed so they would close in time (valid, perhaps shortened).
    public var closedByLimitReplies = 0
    /// Tool calls in the reference turns, and how many were matched by name / by name and arguments.
    public var referenceToolCalls = 0
    public var toolNamesCorrect = 0
    public var toolArgumentsCorrect = 0
    public var malformedToolCalls = 0
    public var unexpectedToolCalls = 0
    public var toolNameAccuracy: Double?
    public var toolArgumentAccuracy: Double?
    public var generatedTokens = 0
    public var hitTokenLimit = 0
    public var prefillSeconds = 0.0
    public var decodeSeconds = 0.0
    public var tokensPerSecond: Double?
    public var seconds = 0.0
    /// The draft replies were generated with (speculative decoding; nil: none), and its tokens
    /// proposed and kept over the whole set.
    public var draft: String?
    public var draftTokensProposed = 0
    public var draftTokensAccepted = 0

    public init(label: String, checkpoint: String?, step: Int?) {
        self.label = label
        self.checkpoint = checkpoint
        self.step = step
    }

    mutating func add(_ r: TargetResult) {
        targets += 1
        if r.exactMatch { exactMatches += 1 }
        if let j = r.json {
            jsonTargets += 1
            if j.valid { jsonValid += 1 }
            if j.conforms { schemaConforming += 1 }
            if j.equalsReference { jsonEqual += 1 }
        }
        if let t = r.toolCalls {
            referenceToolCalls += t.referenceCalls
            toolNamesCorrect += t.namesCorrect
            toolArgumentsCorrect += t.argumentsCorrect
            malformedToolCalls += t.malformed
            unexpectedToolCalls += t.unexpected
        }
        generatedTokens += r.generatedTokens
        if r.incomplete == true { incompleteReplies += 1 }
        if r.closedByLimit == true && r.incomplete != true { closedByLimitReplies += 1 }
        if !r.stoppedAtEndOfTurn { hitTokenLimit += 1 }
        prefillSeconds += r.prefillSeconds
        decodeSeconds += r.decodeSeconds
        draftTokensProposed += r.draftTokensProposed ?? 0
        draftTokensAccepted += r.draftTokensAccepted ?? 0
    }

    /// Fills the rates from the counts (nil where nothing applies).
    mutating func finish() {
        func rate(_ n: Int, _ d: Int) -> Double? { d > 0 ? Double(n) / Double(d) : nil }
        exactMatchRate = rate(exactMatches, targets)
        jsonValidRate = rate(jsonValid, jsonTargets)
        schemaConformanceRate = rate(schemaConforming, jsonTargets)
        jsonEqualRate = rate(jsonEqual, jsonTargets)
        toolNameAccuracy = rate(toolNamesCorrect, referenceToolCalls)
        toolArgumentAccuracy = rate(toolArgumentsCorrect, referenceToolCalls)
        tokensPerSecond = decodeSeconds > 0 ? Double(generatedTokens) / decodeSeconds : nil
    }
}

public enum Evaluator {
    /// The assistant turns to score, in file order. A turn answers a response_format when it is
    /// the reply to that user turn: the last assistant turn before the next user turn.
    public static func targets(of samples: [Sample], turns: TurnSelection) -> [EvalTarget] {
        var out: [EvalTarget] = []
        for sample in samples {
            let m = sample.messages
            var chosen = m.indices.filter { m[$0].role == .assistant }
            if turns == .last, let last = chosen.last { chosen = [last] }
            for i in chosen {
                var format: ResponseFormat? = nil
                if let u = m[..<i].lastIndex(where: { $0.role == .user }), let f = m[u].responseFormat {
                    let nextUser = m[(i + 1)...].firstIndex(where: { $0.role == .user }) ?? m.endIndex
                    let reply = m[(u + 1)..<nextUser].lastIndex(where: { $0.role == .assistant })
                    if reply == i { format = f }
                }
                out.append(EvalTarget(sampleIndex: sample.index, line: sample.line, turnIndex: i,
                                      prompt: Array(m[..<i]), reference: m[i], format: format))
            }
        }
        return out
    }

    /// Mean cross-entropy over every assistant token of `examples`, teacher-forced, without
    /// gradients: train-adapter's eval loss, by the same objective and batching.
    public static func evalLoss(model: LlamaModel, examples: [TrainingExample], batchSize: Int,
                                padTokenId: Int) throws -> (loss: Double, tokens: Int) {
        let options = BatchOptions(batchSize: batchSize, layout: .sharePrefix, shuffle: false, seed: 0, padTokenId: padTokenId)
        let batches = try EpochBatches(examples: examples, options: options)
        let (loss, tokens) = Trainer.evaluate(AdapterObjective(model: model), batches)
        return (Double(loss), tokens)
    }

    /// The preference scores of `model` on pairs whose log-probabilities under the base are `base`
    /// (see `ModelSummary.preferenceAccuracy`).
    public static func preferenceScores(model: LlamaModel, pairs: BatchSource, base: [(chosen: Double, rejected: Double)])
        -> (pairs: Int, accuracy: Double, margin: Double, rewardAccuracy: Double) {
        let mine = PreferenceObjective.pairLogProbs(model, pairs)
        precondition(mine.count == base.count, "[Evaluator] \(mine.count) pairs scored against \(base.count) base pairs")
        let n = Double(max(1, mine.count))
        let better = mine.filter { $0.chosen > $0.rejected }.count
        let margin = mine.reduce(0) { $0 + ($1.chosen - $1.rejected) }
        let rewarded = zip(mine, base).filter { m, b in (m.chosen - b.chosen) > (m.rejected - b.rejected) }.count
        return (mine.count, Double(better) / n, margin / n, Double(rewarded) / n)
    }

    /// The greedy generation request for one target: its prompt turns rendered for the model;
    /// with `constraints`, a reply to a response_format is constrained to its schema.
    public static func request(for target: EvalTarget, base: BaseModel, encoder: TrainingEncoder, maxNewTokens: Int,
                               constraints: ConstraintLibrary? = nil) throws(EvaluationError) -> GenerationRequest {
        var constraint: TokenConstraint? = nil
        if let constraints, let format = target.format {
            do throws(GuidanceError) {
                constraint = try constraints.jsonSchema(format.schema)
            } catch {
                throw EvaluationError.invalidOption(
                    name: "--constrained",
                    reason: "line \(target.line): the response_format \"\(format.name)\" cannot be enforced by constrained decoding: \(error.localizedDescription); evaluate without --constrained, or use the supported subset (docs/guided-generation.md)")
            }
        }
        let prompt: [Int]
        do throws(DataSchemaError) { prompt = try encoder.encodePrompt(target.prompt) } catch {
            throw EvaluationError.noTargets(path: "line \(target.line)", reason: error.errorDescription ?? "\(error)")
        }
        return GenerationRequest(prompt: prompt, maxNewTokens: maxNewTokens, stopTokens: base.stopTokenIds,
                                 sampling: SamplingOptions(temperature: 0), constraint: constraint)
    }

    /// A generated reply, decoded with special tokens skipped (but those of the model's call
    /// format), scored against the target.
    public static func result(for target: EvalTarget, request: GenerationRequest, tokens: [Int], stats: GenerationStats,
                              base: BaseModel, label: String, calls: ToolCallFormat = .documented) -> TargetResult {
        // special tokens skipped, except those the model's call format writes (Phi-4-mini's <|tool_call|>)
        let output = calls.decodeReply(tokens, tokenizer: base.tokenizer)
        let score = ReplyMetrics.score(output: output, reference: target.reference, format: target.format, calls: calls)
        return TargetResult(model: label, sample: target.sampleIndex, line: target.line, turn: target.turnIndex + 1,
                            promptTokens: request.prompt.count, reference: ReplyMetrics.referenceText(target.reference, format: calls),
                            output: output, exactMatch: score.exactMatch, json: score.json, toolCalls: score.toolCalls,
                            generatedTokens: stats.generatedTokens, stoppedAtEndOfTurn: stats.stoppedAtEndOfTurn,
                            constrained: request.constraint != nil, incomplete: request.constraint != nil ? stats.incomplete : nil,
                            closedByLimit: request.constraint != nil ? stats.closedByLimit : nil,
                            prefillSeconds: stats.prefillSeconds, decodeSeconds: stats.decodeSeconds,
                            draftTokensProposed: stats.draftTokensProposed > 0 ? stats.draftTokensProposed : nil,
                            draftTokensAccepted: stats.draftTokensProposed > 0 ? stats.draftTokensAccepted : nil)
    }

    /// Greedy generation of one target, decoded with special tokens skipped, then scored.
    public static func generate(_ engine: InferenceModel, target: EvalTarget, base: BaseModel,
                                encoder: TrainingEncoder, maxNewTokens: Int, label: String,
                                constraints: ConstraintLibrary? = nil) throws(EvaluationError) -> TargetResult {
        let request = try request(for: target, base: base, encoder: encoder, maxNewTokens: maxNewTokens, constraints: constraints)
        let calls = try callFormat(encoder, targets: [target])
        let (tokens, stats) = Generator.generate(engine, request)
        return result(for: target, request: request, tokens: tokens, stats: stats, base: base, label: label, calls: calls)
    }

    /// The format the model writes tool calls in (its chat template's), for reading calls in
    /// replies; an error naming the template when the template's format is refused and a
    /// reference turn calls tools (scoring its calls in another format would be a guess).
    public static func callFormat(_ encoder: TrainingEncoder, targets: [EvalTarget]) throws(EvaluationError) -> ToolCallFormat {
        guard let chat = encoder.renderer as? ChatFormat else { return .documented }
        switch chat.toolCalls {
        case let .format(f): return f
        case let .refused(reason):
            guard let t = targets.first(where: { !$0.reference.toolCalls.isEmpty }) else { return .documented }
            throw EvaluationError.noTargets(path: "line \(t.line)", reason: "the reference turn calls tools, and tool calls cannot be read in this model's format: \(reason)")
        }
    }

    /// Greedy generation of every target, `batchSize` conversations decoding together (the same
    /// replies as one at a time), reported through `onResult(index, result)` in target order.
    /// With a draft each target is generated alone by speculative decoding (the same replies).
    public static func generate(_ engine: InferenceModel, targets: [EvalTarget], base: BaseModel, encoder: TrainingEncoder,
                                maxNewTokens: Int, batchSize: Int, label: String, constraints: ConstraintLibrary? = nil,
                                draft: (drafter: Drafter, tokens: Int)? = nil,
                                onResult: (Int, TargetResult) throws -> Void) throws {
        let requests = try targets.map { t throws(EvaluationError) in
            try request(for: t, base: base, encoder: encoder, maxNewTokens: maxNewTokens, constraints: constraints)
        }
        let calls = try callFormat(encoder, targets: targets)
        if let draft {
            let decoder = SpeculativeDecoder(target: engine, drafter: draft.drafter, draftTokens: draft.tokens)
            for (i, request) in requests.enumerated() {
                let (tokens, stats) = decoder.generate(request)
                try onResult(i, result(for: targets[i], request: request, tokens: tokens, stats: stats.generation, base: base, label: label, calls: calls))
            }
            return
        }
        var finished: [Int: TargetResult] = [:]
        var next = 0
        try Generator.generateBatch(engine, requests, batchSize: batchSize) { i, tokens, stats in
            finished[i] = result(for: targets[i], request: requests[i], tokens: tokens, stats: stats, base: base, label: label, calls: calls)
            while let r = finished.removeValue(forKey: next) {
                try onResult(next, r)
                next += 1
            }
        }
    }
}
