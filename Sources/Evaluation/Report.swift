// The evaluation summary for people (a fixed-width table, one row per model) and for programs
// (JSON with snake_case keys). Columns that apply to no target of the file (JSON checks without
// a response_format, tool calls without tools) are left out of the table.
import Foundation

public enum EvaluationTable {
    static func pct(_ r: Double?) -> String { r.map { String(format: "%.1f%%", $0 * 100) } ?? "-" }

    public static func render(_ report: EvaluationReport) -> String {
        let hasJSON = report.models.contains { $0.jsonTargets > 0 }
        let hasTools = report.models.contains { $0.referenceToolCalls > 0 }
        let hasGeneration = report.models.contains { $0.targets > 0 }
        let hasConstrained = report.models.contains(where: \.constrained)
        let hasPreference = report.models.contains { $0.preferencePairs != nil }
        var header = ["model", "eval loss", "ppl"]
        if hasPreference { header += ["pref acc", "pref margin", "reward acc"] }
        if hasGeneration { header += ["exact match"] }
        if hasJSON { header += ["JSON valid", "schema ok", "JSON equal"] }
        if hasConstrained { header += ["incomplete", "closed by limit"] }
        if hasTools { header += ["tool name", "tool args"] }
        if hasGeneration { header += ["tok/s"] }
        var rows: [[String]] = [header]
        for m in report.models {
            var row = [m.label,
                       m.evalLoss.map { String(format: "%.4f", $0) } ?? "-",
                       m.perplexity.map { String(format: "%.3f", $0) } ?? "-"]
            if hasPreference {
                row += [pct(m.preferenceAccuracy), m.preferenceMargin.map { String(format: "%.3f", $0) } ?? "-",
                        m.label == "base" ? "-" : pct(m.rewardAccuracy)]
            }
            if hasGeneration { row.append("\(pct(m.exactMatchRate)) (\(m.exactMatches)/\(m.targets))") }
            if hasJSON { row += [pct(m.jsonValidRate), pct(m.schemaConformanceRate), pct(m.jsonEqualRate)] }
            if hasConstrained { row += m.constrained ? ["\(m.incompleteReplies)", "\(m.closedByLimitReplies)"] : ["-", "-"] }
            if hasTools { row += [pct(m.toolNameAccuracy), pct(m.toolArgumentAccuracy)] }
            if hasGeneration { row.append(m.tokensPerSecond.map { String(format: "%.1f", $0) } ?? "-") }
            rows.append(row)
        }
        let widths = (0..<header.count).map { c in rows.map { $0[c].count }.max() ?? 0 }
        var lines = rows.map { row in
            row.enumerated().map { c, cell in
                c == 0 ? cell.padding(toLength: widths[c], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[c] - cell.count) + cell
            }.joined(separator: "  ")
        }
        lines.insert(String(repeating: "-", count: lines[0].count), at: 1)
        var out = "\(report.evalData): \(report.samples) samples, \(report.targets) \(report.turns == .last ? "final replies" : "assistant turns") generated greedily (at most \(report.maxNewTokens) new tokens)\n"
        out += lines.joined(separator: "\n") + "\n"
        for m in report.models {
            guard let draft = m.draft else { continue }
            let ratio = m.draftTokensProposed > 0 ? Double(m.draftTokensAccepted) / Double(m.draftTokensProposed) : 0
            out += String(format: "%@: speculative decoding with the %@ draft: %d tokens proposed, %d kept (%.1f%%)\n",
                          m.label, draft, m.draftTokensProposed, m.draftTokensAccepted, ratio * 100)
        }
        for n in report.notes { out += "note: \(n)\n" }
        return out
    }

    public static func json(_ report: EvaluationReport) throws -> String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        e.keyEncodingStrategy = .convertToSnakeCase
        return String(decoding: try e.encode(report), as: UTF8.self)
    }
}

/// evaluate-adapter's progress lines, from the run's events: exact matches counted per row (a
/// model's plain and constrained rows are separate rows, each with its own count), a line every
/// `every` replies of a row and at its last.
public struct EvaluationProgress: Sendable {
    public let every: Int
    private var exact: [String: Int] = [:]

    public init(every: Int = 10) { self.every = max(1, every) }

    /// The line to print for `event`, if any.
    public mutating func line(for event: EvaluationEvent) -> String? {
        guard case .generated(let label, let done, let total, let r) = event else { return nil }
        if r.exactMatch { exact[label, default: 0] += 1 }
        guard done % every == 0 || done == total else { return nil }
        return "\(label): generated \(done)/\(total), exact match so far \(exact[label] ?? 0)/\(done)"
    }
}
