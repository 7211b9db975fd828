// Regular expressions for guided generation: a parser for the non-backtracking subset
// (literals, classes, `.`, `* + ? {m,n}`, lazy quantifiers, alternation, groups, `^`/`$` at the
// ends) into a tree over scalar sets, and that tree into an NFA whose edges carry scalar sets.
// Lookaround, backreferences, word boundaries, possessive quantifiers, inline flags, Unicode
// properties and nested class operations are refused with the reason.
//
// Two readings. `.json` is a JSON Schema `pattern` as the validator (Swift `Regex`, grapheme
// semantics, unanchored search) checks it: the generated string must contain a match, and its
// characters are kept to scalars that are a grapheme cluster on their own whatever surrounds
// them (so per-scalar matching here and per-character matching there agree); `.`, negated
// classes and the free text around an unanchored match are printable ASCII. `.raw` is
// `Grammar.regex`: a full match over Unicode scalars, `.` any scalar but newline.
import Foundation

indirect enum PatternNode {
    /// One scalar from the set.
    case set(ScalarSet)
    case sequence([PatternNode])
    case alternation([PatternNode])
    case repetition(PatternNode, min: Int, max: Int?)
    case anchorStart
    case anchorEnd
}

enum PatternReading {
    case json
    case raw

    /// What `.` stands for.
    var dot: ScalarSet {
        switch self {
        case .json: return .printableASCII
        case .raw: return ScalarSet.all.subtracting(ScalarSet(scalar: 0x0A))
        }
    }

    /// What negated classes and \D \W \S are taken out of.
    var universe: ScalarSet {
        switch self {
        case .json: return .printableASCII
        case .raw: return .all
        }
    }

    /// The scalars a literal or positive class may contribute.
    func admit(_ set: ScalarSet) -> ScalarSet {
        switch self {
        case .raw: return set
        case .json:
            let ascii = set.intersection(ScalarSet([0x09...0x0A, 0x20...0x7E]))
            let rest = set.subtracting(ScalarSet([0...0x7F]))
            if rest.isEmpty { return ascii }
            return ascii.union(rest.filter(PatternReading.isIsolatedGrapheme))
        }
    }

    /// A non-ASCII scalar that forms a grapheme cluster by itself beside anything else that may
    /// be generated (not a mark, joiner, prepend, Hangul jamo or regional indicator), is its own
    /// NFC form (Swift compares characters after normalization), and is assigned.
    static func isIsolatedGrapheme(_ v: UInt32) -> Bool {
        guard let s = Unicode.Scalar(v) else { return false }
        switch s.properties.generalCategory {
        case .control, .format, .surrogate, .privateUse, .unassigned, .nonspacingMark, .spacingMark, .enclosingMark,
             .lineSeparator, .paragraphSeparator:
            return false
        default:
            break
        }
        let one = String(Character(s))
        guard Array(one.precomposedStringWithCanonicalMapping.unicodeScalars) == [s] else { return false }
        return ("a" + one).count == 2 && (one + "a").count == 2 && (one + one).count == 2
    }
}

struct PatternParser {
    let scalars: [Unicode.Scalar]
    let reading: PatternReading
    let pattern: String
    let path: String
    var i = 0

    static let maxCount = 100_000

    init(_ pattern: String, reading: PatternReading, path: String) {
        self.pattern = pattern
        self.scalars = Array(pattern.unicodeScalars)
        self.reading = reading
        self.path = path
    }

    func fail(_ reason: String) -> GuidanceError {
        .invalidPattern(path: path, pattern: pattern, reason: reason)
    }

    /// The pattern as alternatives with their anchors taken off: (node, ^ at start, $ at end).
    mutating func parseTop() throws(GuidanceError) -> [(node: PatternNode, anchoredStart: Bool, anchoredEnd: Bool)] {
        let top = try parseAlternation()
        guard i == scalars.count else { throw fail("unbalanced ')' at position \(i + 1)") }
        let alternatives: [PatternNode]
        if case let .alternation(list) = top { alternatives = list } else { alternatives = [top] }
        var out: [(PatternNode, Bool, Bool)] = []
        for alt in alternatives {
            var items: [PatternNode]
            if case let .sequence(list) = alt { items = list } else { items = [alt] }
            var anchoredStart = false, anchoredEnd = false
            while case .anchorStart? = items.first { items.removeFirst(); anchoredStart = true }
            while case .anchorEnd? = items.last { items.removeLast(); anchoredEnd = true }
            let node = PatternNode.sequence(items)
            if Self.containsAnchor(node) {
                throw fail("'^' and '$' are supported only at the start and end of the pattern (or of a top-level alternative)")
            }
            out.append((node, anchoredStart, anchoredEnd))
        }
        return out
    }

    static func containsAnchor(_ node: PatternNode) -> Bool {
        switch node {
        case .anchorStart, .anchorEnd: return true
        case .set: return false
        case let .sequence(list), let .alternation(list): return list.contains(where: containsAnchor)
        case let .repetition(inner, _, _): return containsAnchor(inner)
        }
    }

    var atEnd: Bool { i >= scalars.count }
    func peek(_ k: Int = 0) -> Unicode.Scalar? { i + k < scalars.count ? scalars[i + k] : nil }

    mutating func parseAlternation() throws(GuidanceError) -> PatternNode {
        var alternatives = [try parseSequence()]
        while peek() == "|" {
            i += 1
            alternatives.append(try parseSequence())
        }
        return alternatives.count == 1 ? alternatives[0] : .alternation(alternatives)
    }

    mutating func parseSequence() throws(GuidanceError) -> PatternNode {
        var items: [PatternNode] = []
        while let c = peek(), c != "|", c != ")" {
            var atom = try parseAtom()
            atom = try parseQuantifiers(atom)
            items.append(atom)
        }
        return items.count == 1 ? items[0] : .sequence(items)
    }

    mutating func parseQuantifiers(_ atom: PatternNode) throws(GuidanceError) -> PatternNode {
        var node = atom
        var quantified = false
        while let c = peek() {
            var bounds: (Int, Int?)
            switch c {
            case "*": bounds = (0, nil); i += 1
            case "+": bounds = (1, nil); i += 1
            case "?": bounds = (0, 1); i += 1
            case "{":
                guard let b = try parseBraces() else {
                    throw fail("a literal '{' must be escaped as \\{ (position \(i + 1))")
                }
                bounds = b
            default:
                return node
            }
            if quantified { throw fail("a quantifier follows another quantifier at position \(i); add a group") }
            switch node {
            case .anchorStart, .anchorEnd: throw fail("an anchor cannot be repeated")
            default: break
            }
            quantified = true
            // Lazy (x*?) matches the same strings as greedy for "is there a match"; possessive (x*+) does not.
            if peek() == "?" {
                i += 1
            } else if peek() == "+" {
                throw fail("possessive quantifiers (x*+, x++, x?+, x{m,n}+) change which strings match; use the plain quantifier")
            }
            node = .repetition(node, min: bounds.0, max: bounds.1)
        }
        return node
    }

    /// `{m}`, `{m,}`, `{m,n}`, `{,n}`; nil when the brace does not start a quantifier.
    mutating func parseBraces() throws(GuidanceError) -> (Int, Int?)? {
        var j = i + 1
        func number(_ j: inout Int) -> Int? {
            var v = 0, digits = 0
            while j < scalars.count, scalars[j].value >= 0x30, scalars[j].value <= 0x39 {
                v = min(v * 10 + Int(scalars[j].value - 0x30), Self.maxCount + 1)
                digits += 1
                j += 1
            }
            return digits > 0 ? v : nil
        }
        let lo = number(&j)
        var hi: Int?? = .some(lo)
        if j < scalars.count, scalars[j] == "," {
            j += 1
            let h = number(&j)
            hi = .some(h)
            if lo == nil && h == nil { return nil }
        } else if lo == nil {
            return nil
        }
        guard j < scalars.count, scalars[j] == "}" else { return nil }
        i = j + 1
        let minCount = lo ?? 0
        let maxCount: Int? = hi ?? nil
        if let maxCount, maxCount < minCount { throw fail("{\(minCount),\(maxCount)} has its bounds reversed") }
        if minCount > Self.maxCount || (maxCount ?? 0) > Self.maxCount {
            throw fail("repetition counts above \(Self.maxCount) are not supported")
        }
        return (minCount, maxCount)
    }

    mutating func parseAtom() throws(GuidanceError) -> PatternNode {
        let c = scalars[i]
        switch c {
        case "(":
            i += 1
            if peek() == "?" {
                if peek(1) == ":" {
                    i += 2
                } else if peek(1) == "<", let n = peek(2), n != "=", n != "!" {
                    try skipGroupName(from: i + 2, closer: ">")
                } else if peek(1) == "P", peek(2) == "<" {
                    try skipGroupName(from: i + 3, closer: ">")
                } else if peek(1) == "'" {
                    try skipGroupName(from: i + 2, closer: "'")
                } else {
                    throw fail("the group '(?\(peek(1).map { String($0) } ?? "")' (lookaround, atomic group, inline flags or a conditional) is not supported; only (...), (?:...) and named groups are")
                }
            }
            let inner = try parseAlternation()
            guard peek() == ")" else { throw fail("a '(' is not closed") }
            i += 1
            return inner
        case ")":
            throw fail("unbalanced ')' at position \(i + 1)")
        case "[":
            return .set(try parseClass())
        case ".":
            i += 1
            return .set(reading.dot)
        case "^":
            i += 1
            return .anchorStart
        case "$":
            i += 1
            return .anchorEnd
        case "\\":
            let e = try parseEscape(inClass: false)
            return .set(e.isClass ? e.set : reading.admit(e.set))
        case "*", "+", "?":
            throw fail("'\(c)' at position \(i + 1) has nothing to repeat")
        case "{":
            if try parseBraces() != nil { throw fail("a quantifier at position \(i + 1) has nothing to repeat") }
            throw fail("a literal '{' must be escaped as \\{ (position \(i + 1))")
        default:
            i += 1
            return .set(reading.admit(ScalarSet(scalar: c.value)))
        }
    }

    mutating func skipGroupName(from start: Int, closer: Unicode.Scalar) throws(GuidanceError) {
        var j = start
        while j < scalars.count, scalars[j] != closer {
            guard scalars[j].properties.isAlphabetic || scalars[j] == "_" || (scalars[j].isASCII && scalars[j].properties.numericType != nil) else {
                throw fail("a group name holds '\(scalars[j])'")
            }
            j += 1
        }
        guard j < scalars.count, j > start else { throw fail("a named group is not closed") }
        i = j + 1
    }

    /// One escape after a backslash at `i`: a single scalar, or a class (\d \w \s and negations).
    mutating func parseEscape(inClass: Bool) throws(GuidanceError) -> (set: ScalarSet, isClass: Bool) {
        i += 1
        guard let c = peek() else { throw fail("the pattern ends with a lone backslash") }
        i += 1
        let digits = ScalarSet([0x30...0x39])
        let word = ScalarSet([0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x5F...0x5F])
        let space: ScalarSet = reading == .json ? ScalarSet([0x09...0x0A, 0x20...0x20]) : ScalarSet([0x09...0x0D, 0x20...0x20])
        switch c {
        case "d": return (digits, true)
        case "w": return (word, true)
        case "s": return (space, true)
        // Negations: Swift's \D, \W, \S exclude the Unicode digits, word and space characters;
        // the generation universe holds none of those beyond the ASCII ones taken out here.
        case "D": return (reading.universe.subtracting(digits), true)
        case "W": return (reading.universe.subtracting(word), true)
        case "S": return (reading.universe.subtracting(ScalarSet([0x09...0x0D, 0x20...0x20, 0x85...0x85, 0xA0...0xA0])), true)
        case "t": return (ScalarSet(scalar: 0x09), false)
        case "n": return (ScalarSet(scalar: 0x0A), false)
        case "r": return (ScalarSet(scalar: 0x0D), false)
        case "f": return (ScalarSet(scalar: 0x0C), false)
        case "u", "x":
            var value: UInt32 = 0
            var count = 0
            if peek() == "{" {
                i += 1
                while let h = peek(), h != "}" {
                    guard let d = h.properties.isASCIIHexDigit ? UInt32(String(h), radix: 16) : nil, count < 8 else {
                        throw fail("\\\(c){...} needs hex digits")
                    }
                    value = value * 16 + d
                    count += 1
                    i += 1
                }
                guard peek() == "}", count > 0 else { throw fail("\\\(c){...} is not closed") }
                i += 1
            } else {
                let need = c == "u" ? 4 : 2
                for _ in 0..<need {
                    guard let h = peek(), h.properties.isASCIIHexDigit, let d = UInt32(String(h), radix: 16) else {
                        throw fail("\\\(c) needs \(need) hex digits")
                    }
                    value = value * 16 + d
                    i += 1
                }
            }
            guard value <= 0x10FFFF, !(0xD800...0xDFFF).contains(value) else { throw fail("\\\(c) names no Unicode scalar") }
            return (ScalarSet(scalar: value), false)
        default:
            if c.isASCII && !(c.properties.isAlphabetic || c.properties.numericType != nil) {
                return (ScalarSet(scalar: c.value), false)  // an escaped punctuation character or space
            }
            throw fail("the escape \\\(c) (word boundary, backreference, anchor, Unicode property or other special escape) is not supported")
        }
    }

    /// A bracket class at `i` ("[...]"), complemented against the universe when negated.
    mutating func parseClass() throws(GuidanceError) -> ScalarSet {
        i += 1
        var negated = false
        if peek() == "^" { negated = true; i += 1 }
        var positive = ScalarSet.empty     // literals and ranges (pass through `admit`)
        var classes = ScalarSet.empty      // \d \w \s and negations (already in the universe)
        var first = true
        while true {
            guard let c = peek() else { throw fail("a '[' is not closed") }
            if c == "]" && !first { i += 1; break }
            if c == "]" { throw fail("an empty class '[]' or a leading ']' is not supported; escape it as \\]") }
            first = false
            if c == "[" { throw fail("nested classes and POSIX classes ([:alpha:]) are not supported") }
            if (c == "&" && peek(1) == "&") || (c == "~" && peek(1) == "~") || (c == "-" && peek(1) == "-") {
                throw fail("class set operations (&&, --, ~~) are not supported")
            }
            var low: UInt32
            if c == "\\" {
                let e = try parseEscape(inClass: true)
                if e.isClass {
                    if peek() == "-", peek(1) != "]" { throw fail("a class escape cannot start a range") }
                    classes = classes.union(e.set)
                    continue
                }
                low = e.set.ranges[0].lowerBound
            } else {
                low = c.value
                i += 1
            }
            if peek() == "-", let next = peek(1), next != "]" {
                i += 1
                var high: UInt32
                if next == "\\" {
                    let e = try parseEscape(inClass: true)
                    if e.isClass { throw fail("a class escape cannot end a range") }
                    high = e.set.ranges[0].lowerBound
                } else {
                    if next == "[" { throw fail("nested classes are not supported") }
                    high = next.value
                    i += 1
                }
                guard low <= high else { throw fail("the class range is reversed") }
                if peek() == "-", peek(1) != "]" {
                    throw fail("a '-' right after a range is ambiguous; escape it as \\-")
                }
                positive = positive.union(ScalarSet([low...high]))
            } else {
                positive = positive.union(ScalarSet(scalar: low))
            }
        }
        if negated {
            return reading.universe.subtracting(positive.union(classes))
        }
        return reading.admit(positive).union(classes)
    }
}

/// An NFA over scalars: edges carry scalar sets (indices into `sets`).
final class ScalarNFA {
    var epsilon: [[Int32]] = []
    var edges: [[(set: Int32, to: Int32)]] = []
    var sets: [ScalarSet] = []
    private var setIndex: [ScalarSet: Int32] = [:]
    var start: Int32 = 0
    var accept: Int32 = 0
    let stateLimit: Int

    init(stateLimit: Int) { self.stateLimit = stateLimit }

    var count: Int { epsilon.count }

    func state() -> Int32 {
        epsilon.append([])
        edges.append([])
        return Int32(epsilon.count - 1)
    }

    func edge(_ a: Int32, _ set: ScalarSet, _ b: Int32) {
        let k: Int32
        if let existing = setIndex[set] { k = existing } else {
            k = Int32(sets.count)
            sets.append(set)
            setIndex[set] = k
        }
        edges[Int(a)].append((k, b))
    }

    /// A Thompson fragment for `node`; throws when the automaton outgrows the limit.
    func build(_ node: PatternNode, path: String) throws(GuidanceError) -> (Int32, Int32) {
        if count > stateLimit { throw GuidanceError.tooLarge(path: path, limit: stateLimit) }
        switch node {
        case let .set(s):
            let a = state(), b = state()
            if !s.isEmpty { edge(a, s, b) }
            return (a, b)
        case let .sequence(items):
            let a = state()
            var end = a
            for item in items {
                let (s, e) = try build(item, path: path)
                epsilon[Int(end)].append(s)
                end = e
            }
            return (a, end)
        case let .alternation(items):
            let a = state(), b = state()
            for item in items {
                let (s, e) = try build(item, path: path)
                epsilon[Int(a)].append(s)
                epsilon[Int(e)].append(b)
            }
            return (a, b)
        case let .repetition(inner, minCount, maxCount):
            let a = state()
            var end = a
            for _ in 0..<minCount {
                let (s, e) = try build(inner, path: path)
                epsilon[Int(end)].append(s)
                end = e
            }
            let b = state()
            if let maxCount {
                for _ in minCount..<maxCount {
                    let (s, e) = try build(inner, path: path)
                    epsilon[Int(end)].append(s)
                    epsilon[Int(end)].append(b)
                    end = e
                }
                epsilon[Int(end)].append(b)
            } else {
                let (s, e) = try build(inner, path: path)
                let loop = state()
                epsilon[Int(end)].append(loop)
                epsilon[Int(loop)].append(s)
                epsilon[Int(e)].append(loop)
                epsilon[Int(loop)].append(b)
            }
            return (a, b)
        case .anchorStart, .anchorEnd:
            let a = state()
            return (a, a)
        }
    }

    /// The language of a parsed pattern: full matches in `.raw`; in `.json`, strings holding a
    /// match (free printable ASCII before an unanchored start and after an unanchored end).
    static func compile(_ pattern: String, reading: PatternReading, path: String, stateLimit: Int) throws(GuidanceError) -> ScalarNFA {
        var parser = PatternParser(pattern, reading: reading, path: path)
        let alternatives = try parser.parseTop()
        let nfa = ScalarNFA(stateLimit: stateLimit)
        let a = nfa.state(), b = nfa.state()
        for alt in alternatives {
            var node = alt.node
            if reading == .json {
                let free = PatternNode.repetition(.set(reading.dot), min: 0, max: nil)
                node = .sequence((alt.anchoredStart ? [] : [free]) + [node] + (alt.anchoredEnd ? [] : [free]))
            }
            let (s, e) = try nfa.build(node, path: path)
            nfa.epsilon[Int(a)].append(s)
            nfa.epsilon[Int(e)].append(b)
        }
        nfa.start = a
        nfa.accept = b
        return nfa
    }
}
