// Rendering preference pairs to token ids: prompt + chosen and prompt + rejected each rendered as
// a training sample (TrainingEncoder), the reply's tokens found as TRL finds them (the prompt
// rendered with the generation prompt; the reply starts where that and the whole conversation
// part), and the loss mask kept only on the reply's assistant tokens (content and end-of-turn: an
// assistant turn in the prompt's history and a tool result inside the reply are not trained).
// Leaves out batching (PreferenceBatching.swift). Follows TRL's DPOTrainer tokenize_fn.

/// One pair as two training examples over the same prompt.
public struct PreferenceExample: Sendable, Equatable {
    public var sampleIndex: Int
    public var line: Int
    public var chosen: TrainingExample
    public var rejected: TrainingExample
    /// Leading positions the two examples share outside the loss (inputs equal, no target):
    /// the prompt, computed once per pair when batched.
    public var sharedPositions: Int

    public init(sampleIndex: Int, line: Int, chosen: TrainingExample, rejected: TrainingExample) {
        self.sampleIndex = sampleIndex
        self.line = line
        self.chosen = chosen
        self.rejected = rejected
        sharedPositions = Batcher.commonPrefix([chosen, rejected])
    }

    /// Positions the pair computes when its prompt is shared.
    public var sharedCount: Int { chosen.count + rejected.count - sharedPositions }
}

/// The pairs of a data set as examples, with the issues rendering found.
public struct EncodedPreferenceSet: Sendable {
    public var examples: [PreferenceExample]
    public var issues: [DataIssue]
    public var summary: DataSummary
}

extension TrainingEncoder {
    /// The reply's part of an encoded conversation: targets only from `start` on.
    static func replyOnly(_ e: EncodedSample, from start: Int) -> EncodedSample {
        var out = e
        for i in 0..<min(start, out.isTarget.count) { out.isTarget[i] = false }
        return out
    }

    /// Renders one pair: each conversation untruncated, the reply's start (TRL's prompt_len: the
    /// shorter common prefix of the prompt with its generation prompt and each conversation), the
    /// mask cleared before it, then each cut to maxSequenceLength + 1 tokens.
    /// Throws when the chat template refuses or cannot render either conversation.
    public func encodePair(prompt: [Message], chosen: [Message], rejected: [Message]) throws(DataSchemaError)
        -> (chosen: EncodedSample, rejected: EncodedSample) {
        let c = try encodeFull(prompt + chosen), r = try encodeFull(prompt + rejected)
        let p = try encodePrompt(prompt)
        func common(_ a: [Int], _ b: [Int]) -> Int {
            var n = 0
            while n < min(a.count, b.count) && a[n] == b[n] { n += 1 }
            return n
        }
        let start = min(common(p, c.tokens), common(p, r.tokens))
        let limit = maxSequenceLength + 1
        func cut(_ e: EncodedSample) -> EncodedSample {
            var out = Self.replyOnly(e, from: start)
            if out.tokens.count > limit {
                out.tokens.removeLast(out.tokens.count - limit)
                out.isTarget.removeLast(out.isTarget.count - limit)
            }
            return out
        }
        return (cut(c), cut(r))
    }

    /// Encodes every pair. A pair either of whose replies has no target token left after
    /// truncation is an issue: thrown as `.invalidData` unless `skipInvalid`, else left out and counted.
    public func encode(_ dataSet: PreferenceDataSet, skipInvalid: Bool = false, maxListedIssues: Int = 50) throws(DataSchemaError) -> EncodedPreferenceSet {
        var examples: [PreferenceExample] = []
        var issues: [DataIssue] = []
        var summary = dataSet.summary
        for s in dataSet.samples {
            let c: EncodedSample, r: EncodedSample
            do throws(DataSchemaError) {
                (c, r) = try encodePair(prompt: s.prompt, chosen: s.chosen, rejected: s.rejected)
            } catch {
                // The template refused the pair (raise_exception) or could not render it: an issue, as for samples.
                let why: String
                if case let .chatTemplate(_, message) = error { why = "chat template: \(message)" } else { why = error.errorDescription ?? "\(error)" }
                issues.append(DataIssue(file: s.file, line: s.line, kind: .chatTemplate, message: why))
                summary.accepted -= 1
                summary.rejected += 1
                summary.rejectedByKind[.chatTemplate, default: 0] += 1
                continue
            }
            if c.isTruncated || r.isTruncated { summary.truncated += 1 }
            let ce = TrainingEncoder.example(from: c, sampleIndex: s.index, line: s.line)
            let re = TrainingEncoder.example(from: r, sampleIndex: s.index, line: s.line)
            let empty: (key: String, encoded: EncodedSample)? = ce.targetTokenCount == 0 ? ("chosen", c)
                : re.targetTokenCount == 0 ? ("rejected", r) : nil
            if let (key, e) = empty {
                let why = e.isTruncated
                    ? "the \"\(key)\" reply has no token left after truncating \(e.fullTokenCount) tokens to \(maxSequenceLength + 1) (maxSequenceLength \(maxSequenceLength)); shorten the prompt or raise the maximum"
                    : "the rendered \"\(key)\" reply has no assistant token to train on"
                issues.append(DataIssue(file: s.file, line: s.line, kind: .noTargetTokens, message: why))
                summary.accepted -= 1
                summary.rejected += 1
                summary.rejectedByKind[.noTargetTokens, default: 0] += 1
                continue
            }
            examples.append(PreferenceExample(sampleIndex: s.index, line: s.line, chosen: ce, rejected: re))
        }
        if !issues.isEmpty && !skipInvalid {
            throw DataSchemaError.invalidData(path: dataSet.file, listed: Array(issues.prefix(maxListedIssues)),
                                              totalIssues: issues.count, rejected: issues.count, read: summary.samplesRead)
        }
        return EncodedPreferenceSet(examples: examples, issues: dataSet.issues + issues, summary: summary)
    }
}
