// Statistics of a preference file for the data tool's `stats`: pairs, prompt turns by role,
// characters of prompts and of each side's replies, and, given an encoder, the tokens the pairs
// make (prompt once, chosen and rejected reply tokens, the trained ones) and how many pairs
// training truncates. Characters are counted on the rendered turn text, as in `DataStats`.
import ModelAssets

public struct PreferenceStats: Sendable, Equatable {
    public var pairs = 0
    public var promptTurns = 0
    public var promptTurnsByRole: [ChatRole: Int] = [:]
    public var promptCharacters = 0
    public var chosenCharacters = 0
    public var rejectedCharacters = 0
    public var toolCalls = 0
    public var pairsWithTools = 0
    public var pairsWithResponseFormat = 0
    /// Nil without an encoder.
    public var tokens: Tokens?

    public struct Tokens: Sendable, Equatable {
        /// Prompt tokens, once per pair (TRL's prompt_len: up to where the replies begin).
        public var promptTokens: Int
        /// Tokens after the prompt in the chosen and the rejected conversation, untruncated.
        public var chosenTokens: Int
        public var rejectedTokens: Int
        /// Tokens the loss covers in each side's reply (assistant content and end-of-turn).
        public var chosenTargetTokens: Int
        public var rejectedTargetTokens: Int
        /// Positions a pair computes with its prompt once, at percentiles 50, 90, 95, 99, 100.
        public var pairPercentiles: [Int]
        public var maxSequenceLength: Int
        /// Pairs with a conversation of more than maxSequenceLength + 1 tokens (truncated in training).
        public var exceeding: Int
    }

    public static func compute(_ data: PreferenceDataSet, encoder: TrainingEncoder? = nil) throws(DataSchemaError) -> PreferenceStats {
        var s = PreferenceStats()
        var lengths: [Int] = []
        var t = Tokens(promptTokens: 0, chosenTokens: 0, rejectedTokens: 0, chosenTargetTokens: 0, rejectedTargetTokens: 0,
                       pairPercentiles: [], maxSequenceLength: encoder?.maxSequenceLength ?? 0, exceeding: 0)
        for pair in data.samples {
            s.pairs += 1
            let all = pair.prompt + pair.chosen + pair.rejected
            if all.contains(where: { !$0.tools.isEmpty }) { s.pairsWithTools += 1 }
            if all.contains(where: { $0.responseFormat != nil }) { s.pairsWithResponseFormat += 1 }
            s.toolCalls += all.reduce(0) { $0 + $1.toolCalls.count }
            for m in pair.prompt {
                s.promptTurns += 1
                s.promptTurnsByRole[m.role, default: 0] += 1
                s.promptCharacters += ChatRendering.text(of: m).count
            }
            s.chosenCharacters += pair.chosen.reduce(0) { $0 + ChatRendering.text(of: $1).count }
            s.rejectedCharacters += pair.rejected.reduce(0) { $0 + ChatRendering.text(of: $1).count }
            guard let encoder else { continue }
            var full = encoder
            full.maxSequenceLength = Int.max - 1  // untruncated counts
            let (c, r) = try full.encodePair(prompt: pair.prompt, chosen: pair.chosen, rejected: pair.rejected)
            var start = 0
            while start < min(c.tokens.count, r.tokens.count) && c.tokens[start] == r.tokens[start] && !c.isTarget[start] && !r.isTarget[start] { start += 1 }
            t.promptTokens += start
            t.chosenTokens += c.tokens.count - start
            t.rejectedTokens += r.tokens.count - start
            t.chosenTargetTokens += c.targetTokenCount
            t.rejectedTargetTokens += r.targetTokenCount
            lengths.append(c.tokens.count + r.tokens.count - start)
            if max(c.tokens.count, r.tokens.count) > encoder.maxSequenceLength + 1 { t.exceeding += 1 }
        }
        if encoder != nil {
            lengths.sort()
            t.pairPercentiles = [50, 90, 95, 99, 100].map { p in
                guard !lengths.isEmpty else { return 0 }
                let rank = max(1, Int((Double(p) / 100 * Double(lengths.count)).rounded(.up)))
                return lengths[min(rank, lengths.count) - 1]
            }
            s.tokens = t
        }
        return s
    }
}
