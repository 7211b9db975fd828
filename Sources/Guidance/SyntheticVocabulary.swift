// A byte-level vocabulary made up from a seed, for tests and benchmarks without a model
// file: the 256 single bytes, JSON punctuation runs, escapes, numbers, ASCII and UTF-8 words
// (with and without a leading space), random printable runs, and a few duplicate spellings,
// so its trie is shaped like a real BPE vocabulary's. Ids 0-2 are special; id 0 stops.

/// SplitMix64: small, seedable, the same numbers on every platform.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension TokenVocabulary {
    /// `size` tokens (at least 1,024); id 0 is the stop token, ids 1 and 2 other specials.
    public static func synthetic(size: Int, seed: UInt64 = 1) -> TokenVocabulary {
        let size = max(size, 1024)
        var rng = SeededGenerator(seed: seed)
        var tokens: [[UInt8]?] = [nil, nil, nil]
        var seen = Set<[UInt8]>()
        func add(_ t: [UInt8]) {
            guard tokens.count < size, !t.isEmpty, seen.insert(t).inserted else { return }
            tokens.append(t)
        }
        for b in 0..<256 { add([UInt8(b)]) }
        let punctuation = [
            "{\"", "\"}", "\":\"", "\",\"", "\":", ",\"", "\":[", "\":{\"", "\"]", "\"],\"", "\"},\"", "\"}]", "}]",
            "},{\"", "],\"", "[\"", "[{\"", "null", "true", "false", "[]", "{}", "\\\"", "\\\\", "\\n", "\\t", "\\u",
            "\\u00", "\":null", "\":true", "\":false", "\":0", "\":1", ".0", ".5", "-1", "e+", "E-", "\"\"", " \"",
        ]
        for p in punctuation { add(Array(p.utf8)) }
        for n in 0..<1000 { add(Array(String(n).utf8)) }
        for n in 0..<100 { add(Array(String(format2(n)).utf8)) }
        let letters = Array("abcdefghijklmnopqrstuvwxyz".utf8)
        let utf8Words = ["é", "ü", "ñ", "ß", "日本", "語", "中文", "€", "ö", "Ω", "😀", "👍", "à", "ç", "ø", "å"]
        for w in utf8Words { add(Array(w.utf8)); add(Array((" " + w).utf8)) }
        let printable = Array(32...126).map { UInt8($0) }
        var cycle = 0
        while tokens.count < size {
            cycle += 1
            switch rng.next() % 10 {
            case 0..<6:
                let length = 2 + Int(rng.next() % UInt64(min(4 + cycle / 2000, 12)))
                var w = (0..<length).map { _ in letters[Int(rng.next() % 26)] }
                if rng.next() % 4 == 0 { w[0] -= 32 }  // capitalized
                if rng.next() % 2 == 0 { w.insert(0x20, at: 0) }
                if rng.next() % 16 == 0 { w.append(contentsOf: Array(utf8Words[Int(rng.next() % UInt64(utf8Words.count))].utf8)) }
                add(w)
            case 6..<8:
                let length = 2 + Int(rng.next() % 5)
                add((0..<length).map { _ in printable[Int(rng.next() % UInt64(printable.count))] })
            case 8:
                let digits = 2 + Int(rng.next() % 4)
                add((0..<digits).map { _ in UInt8(48 + rng.next() % 10) })
            default:
                // A duplicate spelling of an existing token under another id.
                if let t = tokens[3 + Int(rng.next() % UInt64(tokens.count - 3))] { tokens.append(t) }
            }
        }
        return try! TokenVocabulary(tokens: tokens, stopTokens: [0])
    }

    private static func format2(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
}
