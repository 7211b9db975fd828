// The draft flags of the tools that decode (generate, evaluate-adapter, bench speculative),
// defined once: which draft (a trained one, prompt lookup or none), the draft's precision and
// prompt lookup's n (DraftSourceOptions), and γ (DraftOptions; bench speculative takes a list of
// γ instead). Resolved against the loaded model by Inference's DraftSelection.
import ArgumentParser
import Inference

extension DraftKind: ExpressibleByArgument {}
extension InferenceModel.WeightPrecision: ExpressibleByArgument {}

/// Which draft and how it runs; γ is the tool's.
public struct DraftSourceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Speculative decoding's draft: auto (the trained draft given with --draft-checkpoint or carried by the adapter's .fmadapter package, else none), model (that trained draft; an error without one), ngram (prompt lookup: proposes the tokens that followed the reply's last tokens where they occur earlier in the prompt or reply; needs no training) or none. Replies are the same with every draft, constrained ones included; only the speed differs. Default: auto (evaluate-adapter: none).", valueName: "kind"))
    public var draft: DraftKind?

    @Option(help: "A draft-model checkpoint (draft-model-*.safetensors, from train-draft) for speculative decoding, instead of a package's own draft.")
    public var draftCheckpoint: String?

    @Option(help: "How a trained draft holds its weights: float16 (half the bytes per draft step, faster) or float32. The output is the same either way.")
    public var draftPrecision: InferenceModel.WeightPrecision = .float16

    @Option(help: "Prompt lookup (--draft ngram): the longest suffix of the reply, in tokens, looked up in the prompt and reply.")
    public var ngramMax: Int = NGramDraft().maximum

    @Option(help: "Prompt lookup (--draft ngram): the shortest suffix looked up; shorter suffixes propose more often and are kept less often.")
    public var ngramMin: Int = NGramDraft().minimum

    public init() {}

    public func validate() throws {
        guard ngramMin >= 1, ngramMax >= ngramMin else { throw ValidationError("--ngram-min must be at least 1 and at most --ngram-max") }
        if draftCheckpoint != nil, let draft, draft == .none || draft == .ngram {
            throw ValidationError("--draft-checkpoint is a trained draft: drop it, or use --draft model (or auto)")
        }
    }

    /// The selection with `defaultKind` where --draft is not given (model when a checkpoint is).
    public func selection(default defaultKind: DraftKind, tokens: Int? = nil) -> DraftSelection {
        DraftSelection(kind: draft ?? (draftCheckpoint != nil ? .model : defaultKind), checkpoint: draftCheckpoint, tokens: tokens,
                       precision: draftPrecision, ngram: NGramDraft(minimum: ngramMin, maximum: ngramMax))
    }
}

/// The draft and γ (generate, evaluate-adapter).
public struct DraftOptions: ParsableArguments {
    @OptionGroup public var source: DraftSourceOptions

    @Option(help: "Tokens the draft proposes per target pass (gamma). Default: a package's speculativeDecodingDraftTokenCount for its own draft, else 5.")
    public var numDraftTokens: Int?

    public init() {}

    public func validate() throws {
        if let n = numDraftTokens, n < 1 { throw ValidationError("--num-draft-tokens must be at least 1") }
    }

    /// The selection with `defaultKind` where --draft is not given.
    public func selection(default defaultKind: DraftKind) -> DraftSelection {
        source.selection(default: defaultKind, tokens: numDraftTokens)
    }
}
