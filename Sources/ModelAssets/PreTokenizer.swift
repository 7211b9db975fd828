// The pre-tokenizers of byte-level BPE models, written by hand over Unicode scalars: the GPT-2
// regex, SmolLM's individual digits + GPT-2, the Llama-3 / Qwen2 regexes and GPT-4o's o200k regex
// (Phi-4-mini). Each matcher mirrors
// its regex alternative by alternative (leftmost-first, greedy, with the backtracking the regex
// would do), as Hugging Face `tokenizers` (Oniguruma) runs it. No normalization and no byte
// mapping here (see Tokenizer.swift). References: openai/gpt-2 encoder.py, llama.cpp llama-vocab.cpp.

/// How text is cut into words before BPE. Names follow GGUF's `tokenizer.ggml.pre`.
public enum PreTokenizer: String, Sendable, CaseIterable {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` (GPT-2, HF ByteLevel use_regex).
    case gpt2
    /// Every `\p{N}` scalar on its own, then the GPT-2 regex on the text between (HF
    /// `Sequence[Digits(individual_digits), ByteLevel]`; SmolLM, StarCoder).
    case smollm
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    case llama3 = "llama-bpe"
    /// The Llama-3 regex with `\p{N}` (single digits) in place of `\p{N}{1,3}`.
    case qwen2
    /// OpenAI's o200k regex (GPT-4o; Phi-4-mini, Llama 4): letter runs cut by case, each word taking
    /// an optional contraction, `\p{N}{1,3}`, and punctuation runs that keep a following `/` or newline:
    /// `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|`
    /// `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|`
    /// `\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    case gpt4o = "gpt-4o"

    /// The GGUF `tokenizer.ggml.pre` names accepted for each kind.
    static func fromGGUFName(_ name: String) -> PreTokenizer? {
        switch name {
        case "gpt2", "default": return .gpt2
        case "smollm", "starcoder", "refact": return .smollm
        case "llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe", "falcon3": return .llama3
        case "qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez": return .qwen2
        case "gpt-4o", "llama4", "kanana2", "talkie": return .gpt4o  // llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O
        default: return nil
        }
    }

    static let supportedGGUFNames = ["gpt2", "smollm", "starcoder", "refact", "llama-bpe", "llama3", "llama-v3",
                                     "dbrx", "smaug-bpe", "falcon3", "qwen2", "deepseek-r1-qwen", "stablelm2",
                                     "hunyuan", "megrez", "gpt-4o", "llama4", "kanana2", "talkie"]

    /// The regex this kind implements, spelled as Hugging Face writes it.
    public var pattern: String {
        switch self {
        case .gpt2, .smollm: return PreTokenizer.gpt2Pattern
        case .llama3: return PreTokenizer.llama3Pattern
        case .qwen2: return PreTokenizer.qwen2Pattern
        case .gpt4o: return PreTokenizer.gpt4oPattern
        }
    }

    static let gpt2Pattern = #"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"#
    static let llama3Pattern = #"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"#
    static let gpt4oPattern = #"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"#
    static let qwen2Pattern = #"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"#

    /// The words of `text`, in order; joined they give `text` back.
    public func split(_ text: String) -> [String] {
        let scalars = Array(text.unicodeScalars)
        let classes = ScalarClass.classify(scalars)
        var words: [String] = []
        forEachWord(scalars: scalars, classes: classes, in: 0..<scalars.count) { range in
            var word = String.UnicodeScalarView()
            word.append(contentsOf: scalars[range])
            words.append(String(word))
        }
        return words
    }

    /// Calls `body` with the scalar range of each word in `range`, left to right.
    func forEachWord(scalars: [Unicode.Scalar], classes: [UInt8], in range: Range<Int>,
                     _ body: (Range<Int>) -> Void) {
        switch self {
        case .gpt2:
            var i = range.lowerBound
            while i < range.upperBound {
                let end = PreTokenizer.matchGPT2(scalars, classes, i, range.upperBound)
                body(i..<end)
                i = end
            }
        case .smollm:
            // Digits(individual_digits) isolates each numeric scalar; the regex then runs on
            // each stretch between them as on a string of its own (so `\s+(?!\S)` sees its end).
            var start = range.lowerBound
            var i = range.lowerBound
            while i <= range.upperBound {
                if i == range.upperBound || classes[i] & ScalarClass.kindMask == ScalarClass.number {
                    var j = start
                    while j < i {
                        let end = PreTokenizer.matchGPT2(scalars, classes, j, i)
                        body(j..<end)
                        j = end
                    }
                    if i < range.upperBound { body(i..<(i + 1)) }
                    start = i + 1
                }
                i += 1
            }
        case .llama3, .qwen2:
            let maxDigits = self == .llama3 ? 3 : 1
            var i = range.lowerBound
            while i < range.upperBound {
                let end = PreTokenizer.matchLlama3(scalars, classes, i, range.upperBound, maxDigits: maxDigits)
                body(i..<end)
                i = end
            }
        case .gpt4o:
            var i = range.lowerBound
            while i < range.upperBound {
                let end = PreTokenizer.matchGPT4o(scalars, classes, i, range.upperBound)
                body(i..<end)
                i = end
            }
        }
    }

    // MARK: matchers; each returns the end of the match starting at i (always > i)

    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    static func matchGPT2(_ s: [Unicode.Scalar], _ cls: [UInt8], _ i: Int, _ end: Int) -> Int {
        let c = s[i].value
        if c == 0x27, i + 1 < end {  // '
            let n = s[i + 1].value
            if n == 0x73 || n == 0x74 || n == 0x6D || n == 0x64 { return i + 2 }  // s t m d
            if i + 2 < end {
                let n2 = s[i + 2].value
                if (n == 0x72 && n2 == 0x65) || (n == 0x76 && n2 == 0x65) || (n == 0x6C && n2 == 0x6C) { return i + 3 }
            }
        }
        // ` ?X+` for X in L, N, other: the optional space is tried first, then dropped; dropping
        // it can only help when the space itself is in X, which it never is.
        let j = c == 0x20 ? i + 1 : i
        if j < end {
            let k = cls[j] & ScalarClass.kindMask
            if k != ScalarClass.space {
                var e = j + 1
                while e < end && cls[e] & ScalarClass.kindMask == k { e += 1 }
                return e
            }
        }
        // c is whitespace here (a space not followed by a word scalar, or other whitespace).
        var e = i + 1
        while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.space { e += 1 }
        if e == end { return e }          // \s+(?!\S) up to the end of the text
        if e - 1 > i { return e - 1 }     // \s+(?!\S) backs off one so that a space remains
        return e                          // \s+
    }

    /// The Llama-3 regex; `maxDigits` 3 gives `\p{N}{1,3}` (Llama-3), 1 gives `\p{N}` (Qwen2).
    static func matchLlama3(_ s: [Unicode.Scalar], _ cls: [UInt8], _ i: Int, _ end: Int, maxDigits: Int) -> Int {
        let c = s[i].value
        let contraction = matchContraction(s, i, end)
        if contraction > i { return contraction }
        let k = cls[i] & ScalarClass.kindMask
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if k == ScalarClass.letter {
            var e = i + 1
            while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.letter { e += 1 }
            return e
        }
        if k != ScalarClass.number && cls[i] & ScalarClass.newline == 0,
           i + 1 < end, cls[i + 1] & ScalarClass.kindMask == ScalarClass.letter {
            var e = i + 2
            while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.letter { e += 1 }
            return e
        }
        // \p{N}{1,maxDigits}
        if k == ScalarClass.number {
            var e = i + 1
            while e < end && e - i < maxDigits && cls[e] & ScalarClass.kindMask == ScalarClass.number { e += 1 }
            return e
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        let j = c == 0x20 ? i + 1 : i
        if j < end && cls[j] & ScalarClass.kindMask == ScalarClass.other {
            var e = j + 1
            while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.other { e += 1 }
            while e < end && cls[e] & ScalarClass.newline != 0 { e += 1 }
            return e
        }
        return matchWhitespace(cls, i, end)
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at i: its end, or i when there is none. Oniguruma's case
    /// folding also maps U+017F (long s) to s.
    @inline(__always)
    static func matchContraction(_ s: [Unicode.Scalar], _ i: Int, _ end: Int) -> Int {
        guard i + 1 < end, s[i].value == 0x27 else { return i }
        let n = s[i + 1].value | 0x20
        if n == 0x73 || n == 0x74 || n == 0x6D || n == 0x64 || s[i + 1].value == 0x17F { return i + 2 }
        if i + 2 < end, s[i + 1].value < 0x80, s[i + 2].value < 0x80 {
            let n2 = s[i + 2].value | 0x20
            if (n == 0x72 && n2 == 0x65) || (n == 0x76 && n2 == 0x65) || (n == 0x6C && n2 == 0x6C) { return i + 3 }
        }
        return i
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at i, a whitespace scalar: `\s*[\r\n]+` ends at the run's last
    /// newline if it has one; else the run, less its last scalar when a non-space follows.
    static func matchWhitespace(_ cls: [UInt8], _ i: Int, _ end: Int) -> Int {
        var e = i
        var lastNewline = -1
        while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.space {
            if cls[e] & ScalarClass.newline != 0 { lastNewline = e }
            e += 1
        }
        if lastNewline >= 0 { return lastNewline + 1 }
        if e == end { return e }          // \s+(?!\S)
        if e - 1 > i { return e - 1 }     // \s+(?!\S), backing off one
        return e                          // \s+
    }

    /// The o200k regex (see `gpt4o`). Its first two alternatives share the optional prefix
    /// `[^\r\n\p{L}\p{N}]?` (tried taken, then not) and differ in which case run must be there:
    /// U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (`ScalarClass.upper`), W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]
    /// (`.lower`); Lm, Lo and marks are in both.
    static func matchGPT4o(_ s: [Unicode.Scalar], _ cls: [UInt8], _ i: Int, _ end: Int) -> Int {
        let k = cls[i] & ScalarClass.kindMask
        let prefixable = k != ScalarClass.letter && k != ScalarClass.number && cls[i] & ScalarClass.newline == 0
        // U*W+ from j: the U run is greedy, then gives scalars back until W+ can start: at the run's
        // end when a W-only scalar (Ll) follows, else at the run's last scalar that is also in W.
        func upperThenLower(_ j: Int) -> Int? {
            var e1 = j
            while e1 < end && cls[e1] & ScalarClass.upper != 0 { e1 += 1 }
            var w = e1
            if !(e1 < end && cls[e1] & ScalarClass.lower != 0) {
                w = e1 - 1
                while w >= j && cls[w] & ScalarClass.lower == 0 { w -= 1 }
                if w < j { return nil }
            }
            var e2 = w + 1
            while e2 < end && cls[e2] & ScalarClass.lower != 0 { e2 += 1 }
            return matchContraction(s, e2, end)
        }
        // U+W* from j, where a U scalar stands.
        func upperRun(_ j: Int) -> Int {
            var e = j + 1
            while e < end && cls[e] & ScalarClass.upper != 0 { e += 1 }
            while e < end && cls[e] & ScalarClass.lower != 0 { e += 1 }
            return matchContraction(s, e, end)
        }
        if prefixable, let e = upperThenLower(i + 1) { return e }
        if let e = upperThenLower(i) { return e }
        if prefixable, i + 1 < end, cls[i + 1] & ScalarClass.upper != 0 { return upperRun(i + 1) }
        if cls[i] & ScalarClass.upper != 0 { return upperRun(i) }
        // \p{N}{1,3}
        if k == ScalarClass.number {
            var e = i + 1
            while e < end && e - i < 3 && cls[e] & ScalarClass.kindMask == ScalarClass.number { e += 1 }
            return e
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n/]*
        let j = s[i].value == 0x20 ? i + 1 : i
        if j < end && cls[j] & ScalarClass.kindMask == ScalarClass.other {
            var e = j + 1
            while e < end && cls[e] & ScalarClass.kindMask == ScalarClass.other { e += 1 }
            while e < end && (cls[e] & ScalarClass.newline != 0 || s[e].value == 0x2F) { e += 1 }
            return e
        }
        return matchWhitespace(cls, i, end)
    }
}

/// Per-scalar character classes for the matchers: exactly one of letter (\p{L}), number
/// (\p{N}), space (\s, the Unicode White_Space property, as Oniguruma defines it) or other;
/// plus a flag for \r and \n, and the o200k regex's two case classes (a scalar may be in both).
enum ScalarClass {
    static let letter: UInt8 = 1
    static let number: UInt8 = 2
    static let space: UInt8 = 3
    static let other: UInt8 = 4
    static let kindMask: UInt8 = 7
    static let newline: UInt8 = 8
    /// In [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}].
    static let upper: UInt8 = 16
    /// In [\p{Ll}\p{Lm}\p{Lo}\p{M}].
    static let lower: UInt8 = 32

    static let ascii: [UInt8] = (0..<128).map { classify(Unicode.Scalar(UInt8($0))) }

    static func classify(_ s: Unicode.Scalar) -> UInt8 {
        if s.value == 0x0A || s.value == 0x0D { return space | newline }
        let p = s.properties
        switch p.generalCategory {
        case .uppercaseLetter, .titlecaseLetter:
            return letter | upper
        case .lowercaseLetter:
            return letter | lower
        case .modifierLetter, .otherLetter:
            return letter | upper | lower
        case .nonspacingMark, .spacingMark, .enclosingMark:
            return other | upper | lower
        case .decimalNumber, .letterNumber, .otherNumber:
            return number
        default:
            return p.isWhitespace ? space : other
        }
    }

    static func classify(_ scalars: [Unicode.Scalar]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: scalars.count)
        ascii.withUnsafeBufferPointer { table in
            for (i, s) in scalars.enumerated() {
                out[i] = s.value < 128 ? table[Int(s.value)] : classify(s)
            }
        }
        return out
    }
}
