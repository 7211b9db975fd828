// Pearson's chi-square test for the sampling tests (speculative decoding keeps the target's
// distribution): the statistic of observed counts against exact probabilities, and the upper
// 0.1% point of the chi-square distribution.
import Foundation

public enum ChiSquare {
    /// Upper 0.1% point of chi-square with `df` degrees of freedom (Wilson–Hilferty).
    public static func critical(df: Int) -> Double {
        let d = Double(df), z = 3.09
        return d * pow(1 - 2 / (9 * d) + z * (2 / (9 * d)).squareRoot(), 3)
    }

    /// Pearson's statistic of `counts` against `probabilities` over `n` draws, pooling cells
    /// expected below 5 (and outcomes with no probability) into one cell.
    public static func statistic(counts: [Int: Int], probabilities: [Int: Double], n: Int) -> (stat: Double, df: Int) {
        var stat = 0.0, cells = 0, pooledObserved = 0, pooledExpected = 0.0
        for (k, p) in probabilities {
            let e = p * Double(n), o = counts[k] ?? 0
            if e < 5 {
                pooledObserved += o
                pooledExpected += e
            } else {
                stat += (Double(o) - e) * (Double(o) - e) / e
                cells += 1
            }
        }
        let unexpected = counts.filter { probabilities[$0.key] == nil }.values.reduce(0, +)
        pooledObserved += unexpected
        if pooledExpected > 0 {
            stat += (Double(pooledObserved) - pooledExpected) * (Double(pooledObserved) - pooledExpected) / pooledExpected
            cells += 1
        } else if pooledObserved > 0 {
            stat = .infinity
        }
        return (stat, max(1, cells - 1))
    }
}

/// JSON schemas of the guided-generation tests: nested objects with bounds, arrays of objects,
/// an enum of mixed values, a pattern.
public enum GuidedGenerationSchemas {
    public static let all: [String] = [
        #"{"type":"object","properties":{"title":{"type":"string","maxLength":12},"day":{"enum":["mon","tue","wed"]},"minutes":{"type":["integer","null"],"minimum":0,"maximum":600},"attendees":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},"location":{"type":["string","null"],"maxLength":10}},"required":["title","day","minutes","attendees"],"additionalProperties":false}"#,
        #"{"type":"array","items":{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"number","minimum":-5,"maximum":5}},"required":["ok"]},"minItems":1,"maxItems":2}"#,
        #"{"enum":["red","green",3,null,{"a":[1,2]}]}"#,
        #"{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}"#,
    ]
}
