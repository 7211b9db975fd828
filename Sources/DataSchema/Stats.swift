// Data set statistics for the data tool's `stats`: samples, turns and characters by role, and,
// given a tokenizer and template, token counts, assistant (target) tokens, length percentiles
// and how many samples exceed the maximum sequence length. Characters are counted on the
// rendered turn text (tools and schemas included), as Swift Characters (grapheme clusters).
import ModelAssets

public struct TokenStats: Sendable, Equatable {
    /// Tokens of all samples, untruncated.
    public var tokens: Int
    /// Tokens the loss covers (assistant content and end-of-turn), untruncated.
    public var targetTokens: Int
    /// Sample token counts at percentiles 50, 90, 95, 99 and 100 (nearest rank).
    public var lengthPercentiles: [(percentile: Int, tokens: Int)]
    public var maxSequenceLength: Int
    /// Samples with more than maxSequenceLength + 1 tokens, which training truncates.
    public var exceeding: Int

    public static func == (a: TokenStats, b: TokenStats) -> Bool {
        a.tokens == b.tokens && a.targetTokens == b.targetTokens && a.maxSequenceLength == b.maxSequenceLength
            && a.exceeding == b.exceeding && a.lengthPercentiles.map(\.percentile) == b.lengthPercentiles.map(\.percentile)
            && a.lengthPercentiles.map(\.tokens) == b.lengthPercentiles.map(\.tokens)
    }
}

public struct DataStats: Sendable, Equatable {
    public var samples = 0
    public var turns = 0
    public var turnsByRole: [ChatRole: Int] = [:]
    public var characters = 0
    public var charactersByRole: [ChatRole: Int] = [:]
    public var toolCalls = 0
    public var samplesWithTools = 0
    public var samplesWithResponseFormat = 0
    /// Plain `{"text": ...}` records: no turns; their characters count in `characters` only.
    public var textSamples = 0
    /// Nil when no tokenizer was given.
    public var tokens: TokenStats?

    /// Counts over the accepted samples of `dataSet`; token figures only with an `encoder` (a
    /// sample the template renders as several sequences counts each; one the template refuses throws).
    public static func compute(_ dataSet: DataSet, encoder: TrainingEncoder? = nil) throws(DataSchemaError) -> DataStats {
        var stats = DataStats()
        var lengths: [Int] = []
        var totalTokens = 0
        var targetTokens = 0
        var exceeding = 0
        for sample in dataSet.samples {
            stats.samples += 1
            if sample.messages.contains(where: { !$0.tools.isEmpty }) { stats.samplesWithTools += 1 }
            if sample.messages.contains(where: { $0.responseFormat != nil }) { stats.samplesWithResponseFormat += 1 }
            if let text = Message.plainText(of: sample.messages) {
                stats.textSamples += 1
                stats.characters += text.count
            }
            for m in sample.messages where !m.isPlainText {
                stats.turns += 1
                stats.turnsByRole[m.role, default: 0] += 1
                let chars = ChatRendering.text(of: m).count
                stats.characters += chars
                stats.charactersByRole[m.role, default: 0] += chars
                stats.toolCalls += m.toolCalls.count
            }
            if let encoder {
                let sequences: [EncodedSample]
                do throws(DataSchemaError) { sequences = try encoder.encodeAll(sample.messages) } catch {
                    throw DataSchemaError.invalidData(path: sample.file, listed: [DataIssue(file: sample.file, line: sample.line, kind: .chatTemplate,
                                                                                            message: error.errorDescription ?? "\(error)")],
                                                      totalIssues: 1, rejected: 1, read: dataSet.summary.samplesRead)
                }
                for encoded in sequences {
                    lengths.append(encoded.tokens.count)
                    totalTokens += encoded.tokens.count
                    targetTokens += encoded.targetTokenCount
                    if encoded.tokens.count > encoder.maxSequenceLength + 1 { exceeding += 1 }
                }
            }
        }
        if let encoder {
            lengths.sort()
            let percentiles = [50, 90, 95, 99, 100].map { p -> (percentile: Int, tokens: Int) in
                guard !lengths.isEmpty else { return (p, 0) }
                let rank = max(1, Int((Double(p) / 100 * Double(lengths.count)).rounded(.up)))
                return (p, lengths[min(rank, lengths.count) - 1])
            }
            stats.tokens = TokenStats(tokens: totalTokens, targetTokens: targetTokens, lengthPercentiles: percentiles,
                                      maxSequenceLength: encoder.maxSequenceLength, exceeding: exceeding)
        }
        return stats
    }
}
