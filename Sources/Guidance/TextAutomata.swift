// Byte automata for text and numbers: strings of a scalar automaton with a length window
// (JSON-escaped or raw UTF-8), integers in a range, JSON numbers with or without bounds.

enum ScalarEncoding {
    /// Inside a JSON string: plain UTF-8 for what needs no escape; `\" \\ \/ \b \f \n \r \t`
    /// and `\uXXXX` (BMP, either hex case) where they spell a scalar of the set.
    case jsonString
    /// Plain UTF-8.
    case raw

    func sequences(_ set: ScalarSet) -> [[ByteRanges]] {
        switch self {
        case .raw:
            return UTF8Ranges.sequences(set)
        case .jsonString:
            var out = UTF8Ranges.sequences(set.intersection(ScalarSet([0x20...0x21, 0x23...0x5B, 0x5D...0x10FFFF])))
            let backslash: ByteRanges = [0x5C...0x5C]
            let short: [(UInt32, UInt8)] = [(0x22, 0x22), (0x5C, 0x5C), (0x2F, 0x2F), (0x08, 0x62), (0x0C, 0x66), (0x0A, 0x6E), (0x0D, 0x72), (0x09, 0x74)]
            for (scalar, letter) in short where set.contains(scalar) {
                out.append([backslash, [letter...letter]])
            }
            for r in set.intersection(ScalarSet([0...0xFFFF])).ranges {
                for digits in DigitRanges.fixedWidth(UInt64(r.lowerBound), UInt64(r.upperBound), width: 4, base: 16) {
                    out.append([backslash, [0x75...0x75]] + digits.map(DigitRanges.hexBytes))
                }
            }
            return out
        }
    }
}

/// Byte-range sequences as a small automaton from a source (-1) to a target (-1) through
/// `nodes` inner states, equal suffixes shared: built once per scalar set, copied per use.
struct EncodingShape {
    var nodes: Int32 = 0
    var edges: [(from: Int32, ranges: ByteRanges, to: Int32)] = []

    init(_ seqs: [[ByteRanges]]) {
        var memo: [[ByteRanges]: Int32] = [:]
        for seq in seqs {
            guard !seq.isEmpty else { continue }
            var cur: Int32 = -1
            var j = seq.count - 1
            while j >= 1 {
                let key = Array(seq[j...])
                if let n = memo[key] {
                    cur = n
                } else {
                    let n = nodes
                    nodes += 1
                    edges.append((n, seq[j], cur))
                    memo[key] = n
                    cur = n
                }
                j -= 1
            }
            edges.append((-1, seq[0], cur))
        }
    }
}

/// A bound of a number: `minimum: 3` is (3, false), `exclusiveMinimum: 3` is (3, true).
struct NumberBound {
    var value: Double
    var exclusive: Bool
}

extension NFABuilder {
    /// The strings of `nfa` holding minLength...maxLength scalars (nil: no upper bound), encoded.
    /// States are (NFA state, scalars so far), the count saturating at minLength when unbounded.
    func scalarStrings(_ nfa: ScalarNFA, minLength: Int, maxLength: Int?, encoding: ScalarEncoding, path: String) throws(GuidanceError) -> Fragment {
        let cap = maxLength ?? minLength
        let width = Int64(cap + 1)
        var ids: [Int64: Int32] = [:]
        var queue: [(p: Int32, c: Int)] = []
        // States are annotated with their place in the automaton and their count when the
        // count matters (a window), so that masks can be shared across counts (CountedState).
        let window: Int32? = minLength > 0 || maxLength != nil ? newWindow(LengthWindow(minLength: minLength, maxLength: maxLength)) : nil
        struct Place: Hashable {
            var p: Int32
            var set: Int32
            var node: Int32
        }
        var places: [Place: Int32] = [:]
        func template(_ key: Place) -> Int32 {
            if let t = places[key] { return t }
            let t = newTemplate()
            places[key] = t
            return t
        }
        func id(_ p: Int32, _ c: Int) -> Int32 {
            let key = Int64(p) * width + Int64(c)
            if let s = ids[key] { return s }
            let s = state()
            ids[key] = s
            queue.append((p, c))
            if let window { annotate(s, CountedState(template: template(Place(p: p, set: -1, node: -1)), count: Int32(c), window: window)) }
            return s
        }
        let start = id(nfa.start, 0)
        let end = state()
        var encoded: [Int32: EncodingShape] = [:]
        var next = 0
        while next < queue.count {
            let (p, c) = queue[next]
            next += 1
            let s = ids[Int64(p) * width + Int64(c)]!
            for t in nfa.epsilon[Int(p)] { connect(s, id(t, c)) }
            if p == nfa.accept && c >= minLength { connect(s, end) }
            for (setIndex, q) in nfa.edges[Int(p)] {
                let c2: Int
                if c < cap { c2 = c + 1 } else if maxLength == nil { c2 = c } else { continue }
                let target = id(q, c2)
                let shape: EncodingShape
                if let e = encoded[setIndex] { shape = e } else {
                    shape = EncodingShape(encoding.sequences(nfa.sets[Int(setIndex)]))
                    encoded[setIndex] = shape
                }
                // A copy of the shape's inner states; on the way to (q, c2) each is the same
                // place for every count.
                let first = Int32(count)
                for node in 0..<shape.nodes {
                    let created = state()
                    if let window {
                        annotate(created, CountedState(template: template(Place(p: q, set: setIndex, node: Int32(node))), count: Int32(c2), window: window))
                    }
                }
                for e in shape.edges {
                    let from = e.from < 0 ? s : first + e.from
                    let to = e.to < 0 ? target : first + e.to
                    edge(from, e.ranges, to)
                }
            }
            if isOverLimit { throw GuidanceError.tooLarge(path: path, limit: stateLimit) }
        }
        return Fragment(start: start, end: end)
    }

    /// Decimal integers lo...hi without leading zeros (and no "-0"); nil when the range is empty.
    func integer(_ lo: Int64, _ hi: Int64) -> Fragment? {
        guard lo <= hi else { return nil }
        let a = state(), b = state()
        var memo: [[ByteRanges]: Int32] = [:]
        if hi >= 0 {
            sequences(from: a, to: b, DigitRanges.decimal(UInt64(max(lo, 0)), UInt64(hi)), memo: &memo)
        }
        if lo < 0 {
            let minus = state()
            edge(a, 0x2D, 0x2D, minus)
            let smallest: Int64 = hi < 0 ? -hi : 1
            sequences(from: minus, to: b, DigitRanges.decimal(UInt64(smallest), UInt64(-lo)), memo: &memo)
        }
        return Fragment(start: a, end: b)
    }

    func digits(min: Int, max: Int) -> Fragment {
        // Never throws: the digit fragment cannot fail.
        (try? repeated(min: min, max: max) { () throws(GuidanceError) -> Fragment in byteSet([0x30...0x39]) }) ?? empty()
    }

    /// Any JSON number with at most `maxIntegerDigits` integer digits, `maxFractionDigits`
    /// fraction digits and a two-digit exponent, so that it stays finite as a Double.
    func unboundedNumber() -> Fragment {
        // "-0.5" needs "-0"; as a number on its own "-0" is JSON's zero.
        let intPart = concat([optional(literal("-")), integer(0, Self.integerLimit)!])
        let fraction = optional(concat([literal("."), digits(min: 1, max: Self.maxFractionDigits)]))
        let exponent = optional(concat([byteSet([0x45...0x45, 0x65...0x65]), optional(byteSet([0x2B...0x2B, 0x2D...0x2D])), digits(min: 1, max: 2)]))
        return concat([intPart, fraction, exponent])
    }

    /// Integers: at most 15 digits, so every one is exact as a Double.
    static let integerLimit: Int64 = 999_999_999_999_999
    static let maxFractionDigits = 15
    /// Bounded numbers: at most 7 integer and 8 fraction digits (15 significant digits), so
    /// that the Double the validator compares keeps the order of the decimal.
    static let boundedIntegerLimit: Int64 = 9_999_999
    static let boundedFractionDigits = 8

    /// The smallest and largest integer that satisfy the bounds, clamped to ±limit.
    static func integerWindow(lower: NumberBound?, upper: NumberBound?, limit: Int64) -> (Int64, Int64) {
        func clamp(_ x: Double) -> Int64 {
            if x.isNaN { return 0 }
            return Int64(Swift.max(Swift.min(x, Double(limit) + 1), -Double(limit) - 1))
        }
        var lo = -limit, hi = limit
        if let lower { lo = Swift.max(lo, clamp(lower.exclusive ? lower.value.rounded(.down) + 1 : lower.value.rounded(.up))) }
        if let upper { hi = Swift.min(hi, clamp(upper.exclusive ? upper.value.rounded(.up) - 1 : upper.value.rounded(.down))) }
        return (lo, hi)
    }

    /// Numbers within the bounds, written without exponent: whole numbers in the integer window;
    /// n.F with 0 <= n and n + 1 <= floor(upper); -n.F with -n inside the window and
    /// -(n + 1) >= ceil(lower). Each form keeps the bound under the validator's Double compare.
    func boundedNumber(lower: NumberBound?, upper: NumberBound?) -> Fragment? {
        let limit = Self.boundedIntegerLimit
        let (lo, hi) = Self.integerWindow(lower: lower, upper: upper, limit: limit)
        var parts: [Fragment] = []
        if let whole = integer(lo, hi) { parts.append(whole) }
        func clamp(_ x: Double) -> Int64 { Int64(Swift.max(Swift.min(x, Double(limit)), -Double(limit) - 1)) }
        // Non-negative with a fraction: n >= max(0, lo), n <= floor(upper) - 1.
        let posLow = Swift.max(0, lo)
        let posHigh = upper.map { clamp($0.value.rounded(.down) - 1) } ?? limit
        if posLow <= posHigh, let n = integer(posLow, posHigh) {
            parts.append(concat([n, literal("."), digits(min: 1, max: Self.boundedFractionDigits)]))
        }
        // Negative with a fraction: -(n.F) <= -n <= hi, and > -(n + 1) >= ceil(lower).
        let negLow = Swift.max(0, -hi)
        let negHigh = lower.map { clamp(-$0.value.rounded(.up) - 1) } ?? limit
        if negLow <= negHigh, let n = integer(negLow, negHigh) {
            parts.append(concat([literal("-"), n, literal("."), digits(min: 1, max: Self.boundedFractionDigits)]))
        }
        return parts.isEmpty ? nil : union(parts)
    }
}
