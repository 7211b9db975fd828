// Sets of Unicode scalar values as sorted ranges, and their UTF-8 byte-range sequences (the
// split of a scalar range into runs whose encodings differ only in a range per byte, as in
// Rust regex-syntax's utf8 module). Patterns' character classes and JSON string contents are
// built from these before they become byte automata.

/// A set of Unicode scalar values: sorted, disjoint, non-adjacent closed ranges; never holds
/// a surrogate (U+D800–U+DFFF), which no UTF-8 text can carry.
struct ScalarSet: Hashable, Sendable {
    private(set) var ranges: [ClosedRange<UInt32>]

    static let empty = ScalarSet(normalized: [])
    /// Every Unicode scalar value.
    static let all = ScalarSet(normalized: [0...0xD7FF, 0xE000...0x10FFFF])
    /// Printable ASCII, U+0020–U+007E.
    static let printableASCII = ScalarSet(normalized: [0x20...0x7E])

    private init(normalized: [ClosedRange<UInt32>]) { ranges = normalized }

    init<S: Sequence>(_ input: S) where S.Element == ClosedRange<UInt32> {
        var sorted = input.filter { $0.lowerBound <= 0x10FFFF }.map { $0.lowerBound...min($0.upperBound, 0x10FFFF) }
        sorted.sort { $0.lowerBound < $1.lowerBound }
        var out: [ClosedRange<UInt32>] = []
        for r in sorted {
            if let last = out.last, r.lowerBound <= last.upperBound &+ 1 {
                out[out.count - 1] = last.lowerBound...max(last.upperBound, r.upperBound)
            } else {
                out.append(r)
            }
        }
        // Take the surrogates out.
        var clean: [ClosedRange<UInt32>] = []
        for r in out {
            if r.upperBound < 0xD800 || r.lowerBound > 0xDFFF {
                clean.append(r)
                continue
            }
            if r.lowerBound < 0xD800 { clean.append(r.lowerBound...0xD7FF) }
            if r.upperBound > 0xDFFF { clean.append(0xE000...r.upperBound) }
        }
        ranges = clean
    }

    init(scalar: UInt32) { self.init([scalar...scalar]) }

    init(_ characters: String) { self.init(characters.unicodeScalars.map { $0.value...$0.value }) }

    var isEmpty: Bool { ranges.isEmpty }

    var count: Int { ranges.reduce(0) { $0 + Int($1.upperBound - $1.lowerBound) + 1 } }

    func contains(_ v: UInt32) -> Bool {
        var lo = 0, hi = ranges.count - 1
        while lo <= hi {
            let mid = (lo + hi) / 2
            if v < ranges[mid].lowerBound { hi = mid - 1 } else if v > ranges[mid].upperBound { lo = mid + 1 } else { return true }
        }
        return false
    }

    func union(_ other: ScalarSet) -> ScalarSet { ScalarSet(ranges + other.ranges) }

    func complement() -> ScalarSet {
        var out: [ClosedRange<UInt32>] = []
        var next: UInt32 = 0
        for r in ranges {
            if r.lowerBound > next { out.append(next...(r.lowerBound - 1)) }
            next = r.upperBound + 1
        }
        if next <= 0x10FFFF { out.append(next...0x10FFFF) }
        return ScalarSet(out)
    }

    func intersection(_ other: ScalarSet) -> ScalarSet {
        var out: [ClosedRange<UInt32>] = []
        var i = 0, j = 0
        while i < ranges.count && j < other.ranges.count {
            let a = ranges[i], b = other.ranges[j]
            let lo = max(a.lowerBound, b.lowerBound), hi = min(a.upperBound, b.upperBound)
            if lo <= hi { out.append(lo...hi) }
            if a.upperBound < b.upperBound { i += 1 } else { j += 1 }
        }
        return ScalarSet(normalized: out)
    }

    func subtracting(_ other: ScalarSet) -> ScalarSet { intersection(other.complement()) }

    /// The members that satisfy `keep`, tested one by one (for sets of modest size).
    func filter(_ keep: (UInt32) -> Bool) -> ScalarSet {
        var out: [ClosedRange<UInt32>] = []
        for r in ranges {
            var runStart: UInt32? = nil
            for v in r {
                if keep(v) {
                    if runStart == nil { runStart = v }
                } else if let s = runStart {
                    out.append(s...(v - 1))
                    runStart = nil
                }
            }
            if let s = runStart { out.append(s...r.upperBound) }
        }
        return ScalarSet(out)
    }
}

/// One byte position of an encoded sequence: the bytes allowed there (one or more ranges).
typealias ByteRanges = [ClosedRange<UInt8>]

enum UTF8Ranges {
    /// Sequences of byte ranges whose concatenations are exactly the UTF-8 encodings of `set`.
    static func sequences(_ set: ScalarSet) -> [[ByteRanges]] {
        var out: [[ByteRanges]] = []
        for r in set.ranges { split(r.lowerBound, r.upperBound, into: &out) }
        return out
    }

    private static func split(_ lo: UInt32, _ hi: UInt32, into out: inout [[ByteRanges]]) {
        var stack: [(UInt32, UInt32)] = [(lo, hi)]
        outer: while let (start, popped) = stack.popLast() {
            var end = popped
            inner: while true {
                // Encoded lengths change at U+007F, U+07FF, U+FFFF.
                for maxValue: UInt32 in [0x7F, 0x7FF, 0xFFFF] where start <= maxValue && maxValue < end {
                    stack.append((maxValue + 1, end))
                    end = maxValue
                    continue inner
                }
                if end <= 0x7F {
                    out.append([[UInt8(start)...UInt8(end)]])
                    continue outer
                }
                for i: UInt32 in 1..<4 {
                    let m: UInt32 = (1 << (6 * i)) - 1
                    if start & ~m != end & ~m {
                        if start & m != 0 {
                            stack.append(((start | m) + 1, end))
                            end = start | m
                            continue inner
                        }
                        if end & m != m {
                            stack.append((end & ~m, end))
                            end = (end & ~m) - 1
                            continue inner
                        }
                    }
                }
                let a = encode(start), b = encode(end)
                out.append(zip(a, b).map { [$0...$1] })
                continue outer
            }
        }
    }

    static func encode(_ v: UInt32) -> [UInt8] {
        if v < 0x80 { return [UInt8(v)] }
        if v < 0x800 { return [UInt8(0xC0 | (v >> 6)), UInt8(0x80 | (v & 0x3F))] }
        if v < 0x10000 {
            return [UInt8(0xE0 | (v >> 12)), UInt8(0x80 | ((v >> 6) & 0x3F)), UInt8(0x80 | (v & 0x3F))]
        }
        return [UInt8(0xF0 | (v >> 18)), UInt8(0x80 | ((v >> 12) & 0x3F)), UInt8(0x80 | ((v >> 6) & 0x3F)), UInt8(0x80 | (v & 0x3F))]
    }
}

/// Fixed-width numerals in a base as sequences of digit ranges (most significant first): every
/// numeral of `width` digits (leading zeros included) whose value lies in lo...hi.
enum DigitRanges {
    static func fixedWidth(_ lo: UInt64, _ hi: UInt64, width: Int, base: UInt64) -> [[ClosedRange<UInt64>]] {
        guard lo <= hi else { return [] }
        if width == 0 { return [[]] }
        var p: UInt64 = 1
        for _ in 1..<width { p *= base }
        let loD = lo / p, hiD = hi / p, loR = lo % p, hiR = hi % p
        if loD == hiD {
            return fixedWidth(loR, hiR, width: width - 1, base: base).map { [loD...loD] + $0 }
        }
        var out: [[ClosedRange<UInt64>]] = []
        var firstFull = loD, lastFull = hiD
        if loR != 0 {
            out += fixedWidth(loR, p - 1, width: width - 1, base: base).map { [loD...loD] + $0 }
            firstFull += 1
        }
        var tail: [[ClosedRange<UInt64>]] = []
        if hiR != p - 1 {
            tail = fixedWidth(0, hiR, width: width - 1, base: base).map { [hiD...hiD] + $0 }
            lastFull -= 1
        }
        if firstFull <= lastFull {
            out.append([firstFull...lastFull] + Array(repeating: 0...(base - 1), count: width - 1))
        }
        return out + tail
    }

    /// Decimal numerals without leading zeros ("0" for zero) whose value lies in lo...hi.
    static func decimal(_ lo: UInt64, _ hi: UInt64) -> [[ByteRanges]] {
        guard lo <= hi else { return [] }
        var out: [[ByteRanges]] = []
        var width = 1
        var low: UInt64 = 0, high: UInt64 = 9
        while low <= hi {
            let a = max(lo, low), b = min(hi, high)
            if a <= b {
                for seq in fixedWidth(a, b, width: width, base: 10) {
                    out.append(seq.map { [UInt8(48 + $0.lowerBound)...UInt8(48 + $0.upperBound)] })
                }
            }
            if high >= UInt64.max / 10 { break }
            width += 1
            low = high + 1
            high = high * 10 + 9
        }
        return out
    }

    /// The bytes of hex digits lo...hi (0-15), both letter cases.
    static func hexBytes(_ r: ClosedRange<UInt64>) -> ByteRanges {
        var out: ByteRanges = []
        if r.lowerBound <= 9 { out.append(UInt8(48 + r.lowerBound)...UInt8(48 + min(r.upperBound, 9))) }
        if r.upperBound >= 10 {
            let a = max(r.lowerBound, 10) - 10, b = r.upperBound - 10
            out.append(UInt8(97 + a)...UInt8(97 + b))
            out.append(UInt8(65 + a)...UInt8(65 + b))
        }
        return out
    }
}
