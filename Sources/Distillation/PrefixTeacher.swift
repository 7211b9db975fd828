// The teacher's forward for draft distillation on the KV-cache path: the base with the adapter
// merged in, and the prompt prefix every training sample begins with (system message, schema)
// run once, at set-up; each sample then copies its keys and values and runs only its own tokens.
// A draft's first epoch spends most of its time in the teacher, and the extraction example's
// samples share 139 of their ~215 tokens. Each sample's result is a pure function of its tokens
// (the prefix is fixed by the data), so a resumed run sees the numbers an uninterrupted one did.
import Foundation
import Inference
import ModelAssets
import ModelDefinition

/// A teacher's final hidden states (after the final norm) of one token sequence, [n, D]. A pure
/// function of `ids`, so exact resume holds.
public protocol TeacherForward: AnyObject {
    var config: ModelConfig { get }
    func hiddenStates(_ ids: [Int]) -> [Float]
}

public final class PrefixTeacher: TeacherForward {
    /// The teacher on the KV-cache path (float32); train-draft measures the cost ratio with it.
    public let model: InferenceModel
    /// The shared prefix and its hidden states [p, D]; nil when too short to pay.
    let shared: CachedPrefix?
    let prefixHidden: [Float]
    public var prefix: [Int] { shared?.tokens ?? [] }
    public var config: ModelConfig { model.config }

    /// Prefixes shorter than this are not worth a copy of their keys and values.
    public static let defaultMinimumLength = 16

    /// `sharedPrefix` shorter than `minimumLength` tokens is not worth a copy: every sample then runs whole.
    public init(base: BaseWeights, adapter: Adapter?, sharedPrefix: [Int], minimumLength: Int = defaultMinimumLength) {
        model = InferenceModel(base: base, adapter: adapter)
        if sharedPrefix.count >= minimumLength {
            let cache = model.makeCache(capacity: sharedPrefix.count)
            prefixHidden = model.hiddenStates(sharedPrefix, cache: cache)
            shared = CachedPrefix(tokens: sharedPrefix, cache: cache)
        } else {
            prefixHidden = []
            shared = nil
        }
    }

    /// Final hidden states of `ids`, [n, D].
    public func hiddenStates(_ ids: [Int]) -> [Float] {
        guard !ids.isEmpty else { return [] }
        let cache = model.makeCache(capacity: ids.count)
        if let shared, shared.isExtended(by: ids) {
            return prefixHidden + model.hiddenStates(shared.seed(cache, for: ids), cache: cache)
        }
        return model.hiddenStates(ids, cache: cache)
    }
}
