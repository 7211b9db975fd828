// train-adapter's objective flags: supervised (sft, the default) or a preference objective on a
// file of pairs (dpo, ipo, orpo) with its β, label smoothing and RPO weight, an adapter to start from and
// DPO's reference adapter. Checks and defaults come from Training's PreferenceSettings.
import ArgumentParser
import Training

public enum ObjectiveName: String, ExpressibleByArgument, CaseIterable, Sendable {
    case sft, dpo, ipo, orpo
}

public struct ObjectiveOptions: ParsableArguments {
    @Option(help: "What the adapter learns: sft (supervised: the cross-entropy of the assistant turns of --train-data's conversations), or from preference pairs (--train-data of prompt/chosen/rejected records, Schema.md \"Preference pairs\"): dpo (DPO's sigmoid loss against a reference model), ipo (IPO's squared loss against it, per reply token) or orpo (ORPO: the chosen sequence's cross-entropy, prompt included, plus an odds-ratio term; no reference). The losses and the logged rewards are TRL's.")
    public var objective: ObjectiveName = .sft

    @Option(help: "dpo: β, how far the adapter may move from the reference (TRL's default 0.1); ipo: τ, the margin is 1/(2τ); orpo: λ, the weight of the odds-ratio term. Not for sft.")
    public var beta: Double?

    @Option(help: "dpo only: the probability that a pair's preference is flipped, ε in [0, 0.5); above 0 the loss is TRL's robust DPO.")
    public var labelSmoothing: Double = 0

    @Option(help: "dpo and ipo: α, the weight of the chosen replies' cross-entropy (their token mean over the batch) added to the pair loss: RPO, TRL's loss_type [sigmoid, sft] with loss_weights [1, α] (formerly rpo_alpha). It keeps the chosen replies likely while the pair loss separates them from the rejected ones; 1.0 is RPO's paper value. Default 0: plain DPO/IPO.")
    public var rpoAlpha: Double = 0

    @Option(help: "Start from this adapter instead of a fresh one (its LoRA rank, alpha and targets replace --rank, --alpha and --targets): \(AdapterForms.phrase). DPO after supervised training starts from the supervised adapter.")
    public var initCheckpoint: String?

    @Option(help: "dpo and ipo: the reference adapter: \(AdapterForms.phrase). Default: the adapter of --init-checkpoint when given, else the base model with the adapter off. The reference's log-probabilities are computed once per pair.")
    public var referenceCheckpoint: String?

    public init() {}

    public func validate() throws {
        if objective == .sft {
            if beta != nil { throw ValidationError("--beta applies to --objective dpo, ipo or orpo, not sft.") }
            if labelSmoothing != 0 { throw ValidationError("--label-smoothing applies to --objective dpo.") }
            if rpoAlpha != 0 { throw ValidationError("--rpo-alpha applies to --objective dpo or ipo.") }
            if referenceCheckpoint != nil { throw ValidationError("--reference-checkpoint applies to --objective dpo or ipo.") }
            return
        }
        do { try preference?.validate() } catch { throw ValidationError(error.localizedDescription) }
        if objective == .orpo && referenceCheckpoint != nil {
            throw ValidationError("--reference-checkpoint applies to --objective dpo or ipo; orpo has no reference model.")
        }
    }

    /// The preference objective, or nil for sft.
    public var preference: PreferenceSettings? {
        let kind: PreferenceSettings.Objective
        switch objective {
        case .sft: return nil
        case .dpo: kind = .dpo
        case .ipo: kind = .ipo
        case .orpo: kind = .orpo
        }
        return PreferenceSettings(objective: kind, beta: beta ?? 0.1, labelSmoothing: labelSmoothing, rpoAlpha: rpoAlpha)
    }
}
