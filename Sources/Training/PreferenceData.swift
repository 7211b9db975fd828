// train-adapter's data step for preference objectives: read and validate the pair files before
// any compute, render each pair (TrainingEncoder.encodePair), and batch whole pairs
// (PreferenceBatcher: the prompt once per pair by default; packing puts whole pairs in rows of
// twice --max-sequence-length, since a pair holds two sequences). The data fingerprint covers
// the file, the data settings and the objective, for exact resume.
import DataSchema
import Foundation
import ModelDefinition

/// What the preference data step found, for the start summary.
public struct PreparedPreferenceData {
    public var train: PreferenceBatches
    public var eval: PreferenceBatches?
    public var trainSummary: DataSummary
    public var evalSummary: DataSummary?
    public var issues: [DataIssue]
    /// Tokens of the chosen and the rejected sequences, each whole.
    public var trainTokens: Int
    /// Reply tokens in the loss (chosen and rejected).
    public var trainTargetTokens: Int
    /// Positions the first epoch's batches compute (padding included, shared prompts once).
    public var firstEpochPositions: Int
    public var fingerprint: String
}

extension DataSettings {
    /// The pair layout: whole pairs packed in rows of 2 × maxSequenceLength, padded to that, the
    /// prompt shared, or chosen and rejected whole one after the other.
    var preferenceLayout: BatchOptions.Layout {
        packSequences ? .pack(2 * maxSequenceLength) : fixedSizedSequences ? .padToFixed(2 * maxSequenceLength)
            : sharePrefix ? .sharePrefix : .padToLongest
    }
}

extension DataPreparation {
    public static func preparePreferences(_ s: DataSettings, base: BaseModel, extraSettings: [String] = []) throws -> PreparedPreferenceData {
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: s.maxSequenceLength)
        func load(_ path: String, role: String) throws -> EncodedPreferenceSet {
            guard try DataReader.holdsPreferences(path: path) else {
                throw TrainingError.data("\(path): the \(role) file holds no preference pairs (records with \"prompt\", \"chosen\" and \"rejected\"; Schema.md \"Preference pairs\"); --objective dpo, ipo and orpo train on pairs, --objective sft on conversations")
            }
            let data = try DataReader.readPreferences(path: path, options: ReadOptions(mode: .train, skipInvalid: s.skipInvalid))
            guard !data.samples.isEmpty else {
                throw TrainingError.data("\(path): no usable preference pairs in the \(role) file (\(data.summary)); see Schema.md for the format")
            }
            return try encoder.encode(data, skipInvalid: s.skipInvalid)
        }
        let train = try load(s.trainData, role: "training")
        let pad = base.tokenizer.padTokenId ?? base.tokenizer.eosTokenId ?? 0
        let layout = s.preferenceLayout
        let trainBatches = try PreferenceBatches(examples: train.examples,
                                                 options: BatchOptions(batchSize: s.batchSize, layout: layout, shuffle: true, seed: s.seed, padTokenId: pad))
        var evalBatches: PreferenceBatches? = nil
        var evalSummary: DataSummary? = nil
        var issues = train.issues
        if let evalPath = s.evalData {
            let ev = try load(evalPath, role: "eval")
            evalBatches = try PreferenceBatches(examples: ev.examples,
                                                options: BatchOptions(batchSize: s.batchSize, layout: layout, shuffle: false, seed: 0, padTokenId: pad))
            evalSummary = ev.summary
            issues += ev.issues
        }
        // Sharing the prompt changes how a pair is laid out, not what it computes.
        let layoutText = layout == .sharePrefix ? "\(BatchOptions.Layout.padToLongest)" : "\(layout)"
        let settingsText = (["preference pairs maxSequenceLength=\(s.maxSequenceLength) layout=\(layoutText) batchSize=\(s.batchSize) seed=\(s.seed) skipInvalid=\(s.skipInvalid)"]
            + extraSettings).joined(separator: " ")
        return PreparedPreferenceData(
            train: trainBatches, eval: evalBatches, trainSummary: train.summary, evalSummary: evalSummary, issues: issues,
            trainTokens: train.examples.reduce(0) { $0 + $1.chosen.count + $1.rejected.count },
            trainTargetTokens: train.examples.reduce(0) { $0 + $1.chosen.targetTokenCount + $1.rejected.targetTokenCount },
            firstEpochPositions: (0..<trainBatches.batchCount(epoch: 0)).reduce(0) { $0 + trainBatches.batch(epoch: 0, index: $1).inputIds.count },
            fingerprint: try Fingerprint.sha256(file: s.trainData, then: Data(settingsText.utf8)))
    }
}
