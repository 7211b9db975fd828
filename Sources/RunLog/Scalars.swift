// Which TensorBoard scalars a metrics row becomes: one table, used when a row is written and when
// a resumed log is replayed into a new event file, so the event files always say what
// metrics.jsonl says. Tags group by row type (train/, eval/, draft/, evaluate/); the draft's γ
// table becomes one tag per γ. scripts/check_tensorboard.py holds the same table, written
// independently from docs/run-logs.md, to check the files against each other.
import Foundation

public enum MetricScalars {
    /// Row type → (tag prefix, the row's numeric fields that become scalars).
    static let fields: [String: (prefix: String, names: [String])] = [
        "train": ("train/", ["loss", "smoothed_loss", "learning_rate", "grad_norm", "tokens_per_second"] + preference),
        "eval": ("eval/", ["loss", "perplexity"] + preference),
        "draft_eval": ("draft/", ["kl_reverse", "kl_forward", "tvd", "acceptance_rate", "greedy_agreement",
                                  "teacher_mass_outside_head", "cost_ratio", "best_gamma", "best_speedup",
                                  "best_gamma_greedy", "best_speedup_greedy"]),
        "evaluation": ("evaluate/", ["eval_loss", "perplexity", "exact_match_rate", "json_valid_rate", "schema_conformance_rate",
                                     "json_equal_rate", "tool_name_accuracy", "tool_argument_accuracy", "incomplete_replies",
                                     "tokens_per_second", "preference_accuracy", "preference_margin", "reward_accuracy"]),
    ]

    /// Preference training's measurements (TRL's names), in train and eval rows.
    static let preference = ["rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen", "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen"]

    /// Per-γ lists of draft_eval rows: (row field, value field, tag stem); tag = stem + "gamma_" + γ.
    static let gammaTables: [(list: String, value: String, stem: String)] = [
        ("expected", "speedup", "draft/expected_speedup/"),
        ("expected", "tokens_per_target_call", "draft/tokens_per_target_call/"),
        ("expected_greedy", "speedup", "draft/greedy_speedup/"),
    ]

    /// The scalars of `row`, in a fixed order; fields that are absent, null or not finite are left out.
    public static func scalars(of row: [String: Any]) -> [(tag: String, value: Double)] {
        guard let type = row["type"] as? String, let spec = fields[type] else { return [] }
        var out: [(tag: String, value: Double)] = []
        for name in spec.names {
            if let v = number(row[name]) { out.append((spec.prefix + name, v)) }
        }
        if type == "draft_eval" {
            for t in gammaTables {
                for entry in (row[t.list] as? [[String: Any]]) ?? [] {
                    if let g = number(entry["gamma"]), let v = number(entry[t.value]) {
                        out.append((t.stem + "gamma_\(Int(g))", v))
                    }
                }
            }
        }
        return out
    }

    /// A finite number from a row (Swift values as appended, NSNumber as parsed), else nil.
    public static func number(_ v: Any?) -> Double? {
        let d: Double?
        switch v {
        case let x as Double: d = x
        case let x as Float: d = Double(x)
        case let x as Int: d = Double(x)
        case let x as NSNumber: d = x.doubleValue
        default: d = nil
        }
        return d.flatMap { $0.isFinite ? $0 : nil }
    }

    /// An integer from a row (a step, an epoch), else nil.
    public static func integer(_ v: Any?) -> Int? {
        switch v {
        case let x as Int: x
        case let x as NSNumber: x.intValue
        case let x as Double: Int(exactly: x)
        default: nil
        }
    }

    /// What each tag means, shown beside its chart in TensorBoard.
    public static let descriptions: [String: String] = {
        var d: [String: String] = [
            "train/loss": "Training loss of the optimizer step (mean over the batch's target tokens): cross-entropy of the assistant tokens for an adapter, the distillation divergence for a draft.",
            "train/smoothed_loss": "Exponential moving average of train/loss (beta 0.8), divided by 1 - 0.8^t so that it does not start at zero.",
            "train/learning_rate": "AdamW learning rate of the step (warmup and schedule applied).",
            "train/grad_norm": "Global L2 norm of the gradients before clipping.",
            "train/tokens_per_second": "Positions computed per second since the previous logged step (padding included, shared prefixes once).",
            "eval/loss": "Loss on the eval file after an epoch (or at the step limit), without dropout.",
            "eval/perplexity": "exp(eval/loss) of an adapter.",
            "draft/kl_reverse": "KL(draft || teacher) over the vocabulary, mean over assistant positions.",
            "draft/kl_forward": "KL(teacher || draft), mean over assistant positions.",
            "draft/tvd": "Total variation distance between teacher and draft (1 - acceptance rate).",
            "draft/acceptance_rate": "Alpha: the probability that a sampled draft token is accepted (temperature 1).",
            "draft/greedy_agreement": "How often the draft's most likely token is the teacher's.",
            "draft/teacher_mass_outside_head": "Teacher probability on tokens the draft's head cannot propose.",
            "draft/cost_ratio": "c: the draft's time per token over the target's, measured once.",
            "draft/best_gamma": "The number of draft tokens with the highest expected speed-up (sampling).",
            "draft/best_speedup": "The expected speed-up at draft/best_gamma (sampling).",
            "draft/best_gamma_greedy": "The number of draft tokens with the highest expected speed-up (greedy decoding).",
            "draft/best_speedup_greedy": "The expected speed-up at draft/best_gamma_greedy.",
            "evaluate/eval_loss": "Teacher-forced loss on the assistant tokens of the eval file.",
            "evaluate/perplexity": "exp(evaluate/eval_loss).",
            "evaluate/exact_match_rate": "Share of greedy replies equal to the reference (ends trimmed).",
            "evaluate/json_valid_rate": "Share of replies to response_format turns that are valid JSON.",
            "evaluate/schema_conformance_rate": "Share of replies to response_format turns that conform to the schema.",
            "evaluate/json_equal_rate": "Share of replies to response_format turns whose JSON equals the reference's.",
            "evaluate/tool_name_accuracy": "Share of reference tool calls matched by name.",
            "evaluate/tool_argument_accuracy": "Share of reference tool calls matched by name and arguments.",
            "evaluate/incomplete_replies": "Constrained replies the token limit cut before they were whole values.",
            "evaluate/tokens_per_second": "Generated tokens per second of decoding.",
        ]
        for g in 1...8 {
            d["draft/expected_speedup/gamma_\(g)"] = "Expected wall-clock speed-up of speculative sampling with \(g) draft tokens, from alpha and c (Leviathan et al. 2022)."
            d["draft/tokens_per_target_call/gamma_\(g)"] = "Expected tokens per target forward pass with \(g) draft tokens."
            d["draft/greedy_speedup/gamma_\(g)"] = "Expected speed-up of greedy speculative decoding with \(g) draft tokens (alpha = greedy agreement)."
        }
        return d
    }()
}
