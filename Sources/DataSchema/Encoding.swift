// Rendering samples to token ids and a loss mask: Sample -> the chat template's segments (one
// sequence, or one per assistant turn; see ChatFormat) -> ids, tokenized segment by segment so the
// mask follows `isTarget` exactly; training pairs (inputs ids[0..<n-1], targets ids[1..<n]);
// truncation to `maxSequenceLength` input positions, counted, never silent. Works with any
// TextTokenizer and ConversationRenderer (the model's ChatFormat, a code template, or fakes).
import Foundation
import ModelAssets

/// One rendered sample: every token with whether the loss covers it.
public struct EncodedSample: Sendable, Equatable {
    /// Token ids, possibly truncated.
    public var tokens: [Int]
    /// Per token: part of an assistant turn's content or its end-of-turn token.
    public var isTarget: [Bool]
    /// Token count before truncation.
    public var fullTokenCount: Int
    public var isTruncated: Bool { tokens.count < fullTokenCount }

    public init(tokens: [Int], isTarget: [Bool], fullTokenCount: Int) {
        self.tokens = tokens
        self.isTarget = isTarget
        self.fullTokenCount = fullTokenCount
    }
    public var targetTokenCount: Int { isTarget.reduce(0) { $0 + ($1 ? 1 : 0) } }
}

/// One training sequence: predict `targets[t]` from `inputs[0...t]`; the loss counts only
/// positions where `targetMask[t]` is true.
public struct TrainingExample: Sendable, Equatable {
    public var sampleIndex: Int
    public var line: Int
    public var inputs: [Int]
    public var targets: [Int]
    public var targetMask: [Bool]
    public var count: Int { inputs.count }
    public var targetTokenCount: Int { targetMask.reduce(0) { $0 + ($1 ? 1 : 0) } }

    public init(sampleIndex: Int, line: Int, inputs: [Int], targets: [Int], targetMask: [Bool]) {
        precondition(inputs.count == targets.count && targets.count == targetMask.count,
                     "[TrainingExample] inputs \(inputs.count), targets \(targets.count), mask \(targetMask.count) differ")
        self.sampleIndex = sampleIndex
        self.line = line
        self.inputs = inputs
        self.targets = targets
        self.targetMask = targetMask
    }
}

/// The training examples of a data set, with the issues rendering found.
public struct EncodedDataSet: Sendable {
    public var examples: [TrainingExample]
    /// Samples left out because truncation left them no target token.
    public var issues: [DataIssue]
    /// The reader's summary with `truncated` and rendering rejections added.
    public var summary: DataSummary
}

public struct TrainingEncoder: Sendable {
    public var tokenizer: any TextTokenizer
    /// The chat template: the model's (`ChatFormat`) or a code template.
    public var renderer: any ConversationRenderer
    /// The most input positions a training example may have. A sample of n tokens makes
    /// n - 1 positions, so it fits when n <= maxSequenceLength + 1; longer ones are cut.
    public var maxSequenceLength: Int

    public init(tokenizer: any TextTokenizer, renderer: any ConversationRenderer, maxSequenceLength: Int) {
        precondition(maxSequenceLength >= 1, "[TrainingEncoder] maxSequenceLength \(maxSequenceLength) must be at least 1")
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.maxSequenceLength = maxSequenceLength
    }

    /// With a code template (the built-in ChatML/Llama-3, or a test's).
    public init(tokenizer: any TextTokenizer, template: any ChatTemplating, maxSequenceLength: Int) {
        self.init(tokenizer: tokenizer, renderer: CodeTemplateRenderer(template), maxSequenceLength: maxSequenceLength)
    }

    /// With a model's chat template (its own, a file's, or the built-in one it falls back to) and
    /// the tokenizer's special tokens. Throws when the template does not load.
    public init(tokenizer: BPETokenizer, template: ChatTemplateSource, maxSequenceLength: Int) throws(DataSchemaError) {
        self.init(tokenizer: tokenizer, renderer: try ChatFormat(base: template, tokenizer: tokenizer), maxSequenceLength: maxSequenceLength)
    }

    /// The template's training sequences for a sample (no generation prompt), as segments.
    public func sequences(_ messages: [Message]) throws(DataSchemaError) -> [[TemplateSegment]] {
        try renderer.trainingSequences(messages)
    }

    /// Every training sequence of the sample, untruncated, with the loss mask: usually one; one
    /// per assistant turn when the template writes earlier turns differently (see ChatFormat).
    public func encodeAll(_ messages: [Message]) throws(DataSchemaError) -> [EncodedSample] {
        if let text = Message.plainText(of: messages) {
            // A text record: no template; the text as the tokenizer takes a whole input (BOS first when
            // it adds one, as TRL's tokenizer(text) does), every token trained.
            let ids = text.isEmpty ? [] : tokenizer.encodeText(text)
            return [EncodedSample(tokens: ids, isTarget: Array(repeating: true, count: ids.count), fullTokenCount: ids.count)]
        }
        return try sequences(messages).map(encodeSegments)
    }

    /// Tokenizes segment by segment, so the mask follows `isTarget` exactly.
    func encodeSegments(_ segments: [TemplateSegment]) -> EncodedSample {
        var tokens: [Int] = []
        var isTarget: [Bool] = []
        for segment in segments where !segment.text.isEmpty {
            let ids = tokenizer.encode(segment.text)
            tokens += ids
            isTarget += repeatElement(segment.isTarget, count: ids.count)
        }
        return EncodedSample(tokens: tokens, isTarget: isTarget, fullTokenCount: tokens.count)
    }

    /// The sequence that covers the whole conversation (the only one, or the last turn's),
    /// untruncated, with the loss mask.
    public func encodeFull(_ messages: [Message]) throws(DataSchemaError) -> EncodedSample {
        try encodeAll(messages).last ?? EncodedSample(tokens: [], isTarget: [], fullTokenCount: 0)
    }

    /// `encoded` cut to `maxSequenceLength + 1` tokens (the tail goes).
    public func truncated(_ encoded: EncodedSample) -> EncodedSample {
        var encoded = encoded
        let limit = maxSequenceLength + 1
        if encoded.tokens.count > limit {
            encoded.tokens.removeLast(encoded.tokens.count - limit)
            encoded.isTarget.removeLast(encoded.isTarget.count - limit)
        }
        return encoded
    }

    /// `encodeFull`'s tokens cut to `maxSequenceLength + 1` (the tail goes).
    public func encode(_ messages: [Message]) throws(DataSchemaError) -> EncodedSample {
        truncated(try encodeFull(messages))
    }

    /// Token ids of a prompt for generation: the messages plus the generation prompt, tokenized as
    /// they are (the template writes BOS when the model wants one); plain text as the tokenizer takes
    /// a whole input (`encodeText`: BOS first when it adds one).
    public func encodePrompt(_ messages: [Message]) throws(DataSchemaError) -> [Int] {
        if let plain = Message.plainText(of: messages) { return plain.isEmpty ? [] : tokenizer.encodeText(plain) }
        let text = try renderer.promptText(messages)
        return text.isEmpty ? [] : tokenizer.encode(text)
    }

    /// The training pair of an encoded sample: inputs ids[0..<n-1], targets ids[1..<n].
    public static func example(from encoded: EncodedSample, sampleIndex: Int, line: Int) -> TrainingExample {
        let n = encoded.tokens.count
        guard n >= 2 else {
            return TrainingExample(sampleIndex: sampleIndex, line: line, inputs: [], targets: [], targetMask: [])
        }
        return TrainingExample(sampleIndex: sampleIndex, line: line,
                               inputs: Array(encoded.tokens[0..<(n - 1)]),
                               targets: Array(encoded.tokens[1..<n]),
                               targetMask: Array(encoded.isTarget[1..<n]))
    }

    /// Encodes every sample. A sample with no target position left (after truncation) is an
    /// issue: thrown as `.invalidData` unless `skipInvalid`, else left out and counted.
    public func encode(_ dataSet: DataSet, skipInvalid: Bool = false, maxListedIssues: Int = 50) throws(DataSchemaError) -> EncodedDataSet {
        var examples: [TrainingExample] = []
        examples.reserveCapacity(dataSet.samples.count)
        var issues: [DataIssue] = []
        var summary = dataSet.summary
        func reject(_ sample: Sample, _ kind: DataIssueKind, _ why: String) {
            issues.append(DataIssue(file: sample.file, line: sample.line, kind: kind, message: why))
            summary.accepted -= 1
            summary.rejected += 1
            summary.rejectedByKind[kind, default: 0] += 1
        }
        for sample in dataSet.samples {
            let sequences: [EncodedSample]
            do throws(DataSchemaError) {
                sequences = try encodeAll(sample.messages)
            } catch {
                // The template refused the sample (raise_exception) or could not render it.
                let why: String
                if case let .chatTemplate(_, message) = error { why = "chat template: \(message)" } else { why = error.errorDescription ?? "\(error)" }
                reject(sample, .chatTemplate, why)
                continue
            }
            var kept: [TrainingExample] = []
            var truncatedAny = false
            var fullCount = 0
            for full in sequences {
                let encoded = truncated(full)
                if encoded.isTruncated { truncatedAny = true; fullCount = max(fullCount, encoded.fullTokenCount) }
                let example = TrainingEncoder.example(from: encoded, sampleIndex: sample.index, line: sample.line)
                if example.targetTokenCount > 0 { kept.append(example) }
            }
            if truncatedAny { summary.truncated += 1 }
            if kept.isEmpty {
                let why = truncatedAny
                    ? "no assistant token is left after truncating \(fullCount) tokens to \(maxSequenceLength + 1) (maxSequenceLength \(maxSequenceLength)); shorten the prompt or raise the maximum"
                    : "the rendered sample has no assistant token to train on"
                reject(sample, .noTargetTokens, why)
                continue
            }
            examples += kept
        }
        if !issues.isEmpty && !skipInvalid {
            throw DataSchemaError.invalidData(path: dataSet.file, listed: Array(issues.prefix(maxListedIssues)),
                                              totalIssues: issues.count, rejected: issues.count, read: summary.samplesRead)
        }
        return EncodedDataSet(examples: examples, issues: dataSet.issues + issues, summary: summary)
    }
}
