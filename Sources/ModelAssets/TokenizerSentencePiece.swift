// SentencePiece-style BPE (Llama 2, Gemma, Phi-3, Mistral v1): spaces become "▁", a "▁" may be put
// before each piece of text, merges run over Unicode scalars, and a scalar outside the vocabulary
// becomes its UTF-8 bytes as `<0xNN>` tokens (byte fallback) or the unknown token. Covers HF
// tokenizers' BPE(byte_fallback) with the Metaspace pre-tokenizer or the Prepend/Replace normalizers,
// and llama.cpp's SPM tokenizer (llm_tokenizer_spm: merge by piece score). Not here: Unigram models,
// precompiled normalizer charmaps. References: HF tokenizers models/bpe, pre_tokenizers/metaspace.rs,
// normalizers/prepend.rs, decoders/byte_fallback.rs + strip.rs; llama.cpp src/llama-vocab.cpp.

/// How a SentencePiece-style tokenizer prepares text and decodes it.
public struct SentencePieceOptions: Sendable, Equatable {
    /// When a "▁" goes before a piece of text (the text between two added tokens).
    public enum Prefix: String, Sendable, Equatable {
        /// Before every non-empty piece, even one that starts with a space: HF's `Prepend("▁")`
        /// normalizer (Llama 2's tokenizer.json) and llama.cpp's `add_space_prefix`.
        case everyPiece
        /// Metaspace `prepend_scheme: always`: before every piece that does not already start with "▁".
        case always
        /// Metaspace `prepend_scheme: first`: only before the piece at the very start of the text.
        case first
        /// No prefix (Gemma; Metaspace `never`).
        case never
    }

    public var prefix: Prefix
    /// Words are cut before each "▁" (Metaspace `split: true`); otherwise a piece is one word.
    public var splitsAtSpace: Bool
    /// A scalar outside the vocabulary becomes `<0xNN>` byte tokens (when all of them exist).
    public var byteFallback: Bool
    /// The id a scalar gets when byte fallback cannot spell it; nil drops it (as HF does without one).
    public var unknownTokenId: Int?
    /// Runs of unknown scalars become one unknown token.
    public var fusesUnknown: Bool
    /// Leading spaces removed from decoded text (HF decoder `Strip(" ", start: n)`; 1 for Llama 2).
    public var stripsLeadingSpaces: Int

    public init(prefix: Prefix, splitsAtSpace: Bool = false, byteFallback: Bool = true, unknownTokenId: Int? = nil,
                fusesUnknown: Bool = true, stripsLeadingSpaces: Int = 0) {
        self.prefix = prefix
        self.splitsAtSpace = splitsAtSpace
        self.byteFallback = byteFallback
        self.unknownTokenId = unknownTokenId
        self.fusesUnknown = fusesUnknown
        self.stripsLeadingSpaces = stripsLeadingSpaces
    }
}

/// The SentencePiece space marker, U+2581.
let metaspace: Unicode.Scalar = "\u{2581}"

/// The byte a `<0xNN>` token spells (upper- or lower-case hex), or nil.
func byteFallbackValue(_ token: String) -> UInt8? {
    let u = Array(token.utf8)
    guard u.count == 6, u[0] == 0x3C, u[1] == 0x30, u[2] == 0x78, u[5] == 0x3E else { return nil }
    func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x41...0x46: return c - 0x41 + 10
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
    guard let hi = hex(u[3]), let lo = hex(u[4]) else { return nil }
    return hi << 4 | lo
}

/// A piece of text as the SentencePiece model sees it: spaces as "▁", maybe a "▁" in front, and for
/// each scalar the index of the original scalar it came from (nil for the inserted prefix).
struct MetaspaceText {
    var scalars: [Unicode.Scalar] = []
    var origin: [Int?] = []
}

extension BPETokenizer {
    /// `slice` (text between added tokens) with spaces replaced and the prefix applied; `atTextStart`
    /// tells whether the slice begins the whole text (Metaspace `first`).
    func metaspaceText(_ slice: ArraySlice<Unicode.Scalar>, atTextStart: Bool, options: SentencePieceOptions) -> MetaspaceText {
        var t = MetaspaceText()
        guard !slice.isEmpty else { return t }
        t.scalars.reserveCapacity(slice.count + 1)
        t.origin.reserveCapacity(slice.count + 1)
        let startsWithMarker = slice.first == " " || slice.first == metaspace
        let prefix: Bool
        switch options.prefix {
        case .everyPiece: prefix = true
        case .always: prefix = !startsWithMarker
        case .first: prefix = atTextStart && !startsWithMarker
        case .never: prefix = false
        }
        if prefix {
            t.scalars.append(metaspace)
            t.origin.append(nil)
        }
        for i in slice.indices {
            t.scalars.append(slice[i] == " " ? metaspace : slice[i])
            t.origin.append(i)
        }
        return t
    }

    /// Calls `body` with each word's range in `text.scalars`: all of it, or cut before every "▁".
    func forEachMetaspaceWord(_ text: MetaspaceText, options: SentencePieceOptions, _ body: (Range<Int>) -> Void) {
        let n = text.scalars.count
        guard n > 0 else { return }
        guard options.splitsAtSpace else { return body(0..<n) }
        var start = 0
        for i in 1..<n where text.scalars[i] == metaspace {
            body(start..<i)
            start = i
        }
        body(start..<n)
    }

    /// BPE on one word of scalars: each scalar its token, else its byte tokens, else the unknown
    /// token; then merges by rank (HF word.rs; for GGUF, ranks follow piece scores as llama.cpp's
    /// SPM tokenizer merges, best score then leftmost).
    func encodeSentencePieceWord(_ word: ArraySlice<Unicode.Scalar>, options: SentencePieceOptions, into out: inout [Int]) {
        var key: [UInt8] = []
        key.reserveCapacity(word.count * 3)
        for s in word { appendUTF8Bytes(s, to: &key) }
        if let cached = cache.lookup(key) {
            for id in cached { out.append(Int(id)) }
            return
        }
        var ids: [Int32] = []
        ids.reserveCapacity(word.count)
        var lastWasUnknown = false
        var bytes: [UInt8] = []
        for s in word {
            if let id = scalarTokens[s.value] {
                ids.append(id)
                lastWasUnknown = false
                continue
            }
            if options.byteFallback {
                bytes.removeAll(keepingCapacity: true)
                appendUTF8Bytes(s, to: &bytes)
                if bytes.allSatisfy({ byteTokens[Int($0)] >= 0 }) {
                    for b in bytes { ids.append(byteTokens[Int(b)]) }
                    lastWasUnknown = false
                    continue
                }
            }
            guard let unk = options.unknownTokenId else { continue }
            if !(options.fusesUnknown && lastWasUnknown) { ids.append(Int32(unk)) }
            lastWasUnknown = true
        }
        ids = ids.count > 48 ? mergeLong(ids) : mergeShort(ids)
        if key.count <= 256 { cache.insert(key, ids) }
        for id in ids { out.append(Int(id)) }
    }

    /// Encodes text between added tokens the SentencePiece way.
    func encodeSentencePiece(_ slice: ArraySlice<Unicode.Scalar>, atTextStart: Bool, options: SentencePieceOptions, into out: inout [Int]) {
        let text = metaspaceText(slice, atTextStart: atTextStart, options: options)
        forEachMetaspaceWord(text, options: options) { range in
            encodeSentencePieceWord(text.scalars[range], options: options, into: &out)
        }
    }

    /// Whether `s` can be encoded without the unknown token or being dropped.
    func sentencePieceEncodes(_ s: Unicode.Scalar, options: SentencePieceOptions) -> Bool {
        if scalarTokens[(s == " " ? metaspace : s).value] != nil { return true }
        guard options.byteFallback else { return false }
        var bytes: [UInt8] = []
        appendUTF8Bytes(s, to: &bytes)
        return bytes.allSatisfy { byteTokens[Int($0)] >= 0 }
    }
}

extension BPETokenizer {
    /// Merge rules from piece scores, as llama.cpp's SPM tokenizer applies them: two adjacent
    /// symbols merge when their concatenation is a token, the best score first (ties: leftmost).
    /// Every split of every token into two tokens is a rule ranked by the token's score (equal
    /// scores share a rank, so position decides, as in llama.cpp).
    static func mergesFromScores(tokens: [String], scores: [Float], source: String) throws -> (merges: [(left: String, right: String)], ranks: [Int]) {
        guard scores.count == tokens.count else {
            throw ModelAssetsError.malformed(path: source, item: "tokenizer.ggml.scores", reason: "\(scores.count) scores for \(tokens.count) tokens")
        }
        // Byte-exact lookups (HF and llama.cpp compare bytes; Swift Strings compare canonically).
        var index: [[UInt8]: Int32] = [:]
        index.reserveCapacity(tokens.count)
        for (id, t) in tokens.enumerated() where !t.isEmpty { index[Array(t.utf8)] = Int32(id) }
        let distinct = Array(Set(scores)).sorted(by: >)
        var rankOf: [Float: Int] = [:]
        for (r, s) in distinct.enumerated() { rankOf[s] = r }
        var rules: [(rank: Int, id: Int, left: String, right: String)] = []
        for (id, t) in tokens.enumerated() where t.unicodeScalars.count > 1 {
            let bytes = Array(t.utf8)
            for cut in 1..<bytes.count where bytes[cut] & 0xC0 != 0x80 {  // at scalar boundaries
                let l = Array(bytes[..<cut]), r = Array(bytes[cut...])
                if index[l] != nil, index[r] != nil {
                    rules.append((rankOf[scores[id]]!, id, String(decoding: l, as: UTF8.self), String(decoding: r, as: UTF8.self)))
                }
            }
        }
        rules.sort { ($0.rank, $0.id) < ($1.rank, $1.id) }
        return (rules.map { ($0.left, $0.right) }, rules.map(\.rank))
    }
}

extension TokenizerData {
    /// A SentencePiece vocabulary's (`model == "llama"`) merge rules as Hugging Face BPE lists them,
    /// best first: every split of a normal piece into two pieces, ordered by the piece's score
    /// (transformers' converter makes the same list from a tokenizer.model).
    public func sentencePieceMerges() throws -> [(left: String, right: String)] {
        guard let scores, let types = tokenTypes, types.count == tokens.count else {
            throw ModelAssetsError.missingKey(path: "GGUF tokenizer metadata", key: scores == nil ? "tokenizer.ggml.scores" : "tokenizer.ggml.token_type")
        }
        let mergeable = tokens.enumerated().map { types[$0.offset] == 1 ? $0.element : "" }
        return try BPETokenizer.mergesFromScores(tokens: mergeable, scores: scores, source: "GGUF tokenizer metadata").merges
    }
}

