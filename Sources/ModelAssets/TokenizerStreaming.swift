// Incremental decoding for generation: feed token ids one at a time and get back only text whose
// UTF-8 is complete, holding back the start of a multi-byte character until its last byte arrives.
// Concatenating every `feed` result and `finish()` gives exactly `decode(allIds)`: SentencePiece
// byte-fallback tokens (`<0xE6>` ...) are bytes like any other, and the decoder's leading-space strip
// applies at the stream's start. Not here: clean-up of tokenization spaces (HF's
// clean_up_tokenization_spaces; neither kind of BPE here needs it).

public struct StreamingDecoder: Sendable {
    public let tokenizer: BPETokenizer
    public let skipSpecialTokens: Bool
    /// Special tokens decoded to their text even when special tokens are skipped: a thinking
    /// model's `<think>`/`</think>` (GGUF marks such added tokens user-defined, which this tokenizer
    /// counts as special), so the reply's thinking can be told from its answer.
    public var keptTokens: Set<Int> = []
    /// Bytes of an unfinished character (at most 3).
    private var pending: [UInt8] = []
    /// Leading spaces the decoder may still strip (SentencePiece `Strip`); 0 once text has begun.
    private var stripLeft: Int

    public init(tokenizer: BPETokenizer, skipSpecialTokens: Bool = false) {
        self.tokenizer = tokenizer
        self.skipSpecialTokens = skipSpecialTokens
        self.stripLeft = tokenizer.sentencePiece?.stripsLeadingSpaces ?? 0
    }

    /// Adds one token; returns the text that is now complete (often "", sometimes several characters).
    public mutating func feed(_ id: Int) -> String {
        tokenizer.appendBytes(of: id, skipSpecialTokens: skipSpecialTokens && !keptTokens.contains(id), to: &pending)
        while stripLeft > 0, let first = pending.first {
            if first == 0x20 {
                pending.removeFirst()
                stripLeft -= 1
            } else {
                stripLeft = 0
            }
        }
        let cut = StreamingDecoder.completePrefixLength(pending)
        guard cut > 0 else { return "" }
        let text = String(decoding: pending[0..<cut], as: UTF8.self)
        pending.removeFirst(cut)
        return text
    }

    /// Emits whatever is still held back (a cut-off character becomes U+FFFD) and resets.
    public mutating func finish() -> String {
        defer {
            pending.removeAll()
            stripLeft = tokenizer.sentencePiece?.stripsLeadingSpaces ?? 0
        }
        return pending.isEmpty ? "" : String(decoding: pending, as: UTF8.self)
    }

    /// Whether bytes are being held back for an unfinished character.
    public var hasPendingBytes: Bool { !pending.isEmpty }

    /// How many leading bytes can be decoded now without changing the result of decoding all bytes:
    /// everything, unless the tail is a valid but unfinished UTF-8 sequence, which is held back.
    /// Cutting just before a lead byte keeps UTF-8's maximal-subpart replacement identical.
    static func completePrefixLength(_ bytes: [UInt8]) -> Int {
        let n = bytes.count
        // The last byte that is not a continuation byte (10xxxxxx), within the last 4.
        var lead = n - 1
        while lead >= 0 && lead >= n - 4 && bytes[lead] & 0xC0 == 0x80 { lead -= 1 }
        guard lead >= 0 && lead >= n - 4 else { return n }
        let b = bytes[lead]
        let need: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch b {
        case 0xC2...0xDF: need = 2
        case 0xE0: need = 3; secondRange = 0xA0...0xBF
        case 0xED: need = 3; secondRange = 0x80...0x9F
        case 0xE1...0xEC, 0xEE...0xEF: need = 3
        case 0xF0: need = 4; secondRange = 0x90...0xBF
        case 0xF1...0xF3: need = 4
        case 0xF4: need = 4; secondRange = 0x80...0x8F
        default: return n  // ASCII or a byte that can never start a character
        }
        let have = n - lead
        if have >= need { return n }
        if have >= 2 && !secondRange.contains(bytes[lead + 1]) { return n }  // already invalid
        return lead
    }
}
