// BPE tokenizers: byte-level (GPT-2 family: SmolLM2, Llama-3, Qwen2, Phi-4-mini) and SentencePiece-style (Llama 2,
// Gemma, Phi-3: "▁" for spaces, byte fallback; its text preparation is in TokenizerSentencePiece.swift).
// Special tokens matched whole, a pre-tokenizer (PreTokenizer.swift), then merges by rank per word with
// a word cache; decoding back through the byte alphabet or `<0xNN>` bytes. Reading tokenizer.json is in
// TokenizerJSON.swift, streaming decode in TokenizerStreaming.swift. Not here: Unigram models,
// added-token lstrip/rstrip/single_word flags. Reference: HF `tokenizers` models/bpe (word.rs).
import Foundation

public final class BPETokenizer: TextTokenizer {
    /// One more than the largest token id.
    public let vocabularySize: Int
    public let preTokenizer: PreTokenizer
    public let bosTokenId: Int?
    public let eosTokenId: Int?
    public let padTokenId: Int?
    /// Ids of special (control) tokens: skipped by `decode(_:skipSpecialTokens: true)`.
    public let specialTokenIds: Set<Int>
    /// The model's Jinja chat template, when the source carries one (see `ChatTemplateSource.model`).
    public let chatTemplate: String?
    /// Where `chatTemplate` was read ("the GGUF's tokenizer.chat_template", a tokenizer_config.json path).
    public let chatTemplateOrigin: String?
    /// A word that is itself in the vocabulary is one token, merges or not (HF `ignore_merges`; Llama-3).
    public let ignoresMerges: Bool
    /// Text between special tokens is NFC-normalized first (HF `normalizer: NFC`; Qwen2).
    public let normalizesNFC: Bool
    /// Set for a SentencePiece-style vocabulary (then `preTokenizer` is unused); nil for byte-level BPE.
    public let sentencePiece: SentencePieceOptions?
    /// Whether a BOS token goes before a prompt (GGUF `tokenizer.ggml.add_bos_token`,
    /// tokenizer_config.json `add_bos_token`); nil when the files do not say. What `encodeText`
    /// adds is `textPrefix`/`textSuffix`, which also follow the files' defaults.
    public let addsBOS: Bool?
    /// The ids `encodeText` puts before and after plain text: for tokenizer.json, what transformers 5
    /// adds in `tokenizer(text)`, which is the post_processor's template (tokenizer_config.json's
    /// add_bos_token is dropped when a tokenizer.json is there); for GGUF, what llama.cpp adds with
    /// `add_special` (`TokenizerData.addsBOSToText`, add_eos_token).
    public let textPrefix: [Int]
    public let textSuffix: [Int]

    /// Token spellings by id (byte alphabet for ordinary tokens, raw text for added ones); nil for gaps.
    let tokens: [String?]
    /// Spelling -> id (for `tokens`).
    let vocab: SpellingIndex
    /// The bytes each id decodes to.
    let tokenBytes: ByteTable
    /// The id of the one-byte token for each byte.
    let byteTokens: [Int32]
    /// Bytes that have no token in this vocabulary. `encode` leaves them out, exactly as the Hugging
    /// Face tokenizer does (SmolLM2: 04 06 13 14 16 1D C0 C1 F1 F2 F5-FF), so text holding them does
    /// not round-trip; check with `unencodableScalars(in:)` before training on such text.
    public let unencodableBytes: [UInt8]
    /// (left id << 32 | right id) -> (rank << 32 | merged id).
    let merges: [UInt64: UInt64]
    let specials: SpecialTokenMatcher
    let cache = BPEWordCache(capacity: 20_000)
    /// SentencePiece: the id of each scalar that is a token by itself.
    let scalarTokens: [UInt32: Int32]

    /// Everything an instance is built from, whichever file it came from.
    struct Parts {
        var source: String  // names the file (or metadata) in error messages
        var tokens: [String?]
        var merges: [(left: String, right: String)]
        var mergesKey: String  // where merges[i] is: "\(mergesKey)[\(i)]" in error messages
        var addedTokens: [(content: String, id: Int)]  // matched whole in text
        var specialIds: Set<Int>
        var preTokenizer: PreTokenizer
        var ignoreMerges: Bool
        var nfc: Bool
        var bos: Int?
        var eos: Int?
        var pad: Int?
        var chatTemplate: String?
        var chatTemplateOrigin: String?
        var mergeRanks: [Int]? = nil  // rank of each merge (GGUF SentencePiece: equal scores share one); nil: its index
        var sentencePiece: SentencePieceOptions? = nil
        var addBOS: Bool? = nil
        var textPrefix: [Int] = []
        var textSuffix: [Int] = []
    }

    /// Whether `data` (a GGUF's tokenizer metadata, read again at export) spells the vocabulary
    /// this tokenizer was built from: the same tokens by id, special ids and chat template.
    public func isBuilt(from data: TokenizerData) -> Bool {
        guard data.tokens.count == tokens.count, data.bosTokenId == bosTokenId, data.eosTokenId == eosTokenId,
              data.padTokenId == padTokenId, data.chatTemplate == chatTemplate else { return false }
        return zip(data.tokens, tokens).allSatisfy { $0 == $1 }
    }

    /// From GGUF metadata (`tokenizer.ggml.*`). Control and user-defined tokens (types 3, 4) are
    /// matched whole in text and are special; without token types, bos/eos/pad are.
    public convenience init(data: TokenizerData) throws {
        let source = "GGUF tokenizer metadata"
        if data.model == "llama" {
            try self.init(sentencePieceData: data)
            return
        }
        guard data.model == "gpt2" else {
            throw ModelAssetsError.invalidConfig(
                path: source, field: "tokenizer.ggml.model",
                reason: "tokenizer '\(data.model)' is not supported; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)")
        }
        guard let pre = PreTokenizer.fromGGUFName(data.preTokenizer) else {
            throw ModelAssetsError.invalidConfig(
                path: source, field: "tokenizer.ggml.pre",
                reason: "pre-tokenizer '\(data.preTokenizer)' is not supported (supported: \(PreTokenizer.supportedGGUFNames.joined(separator: ", "))); use a GPT-2, SmolLM, Llama-3, Qwen2 or GPT-4o (Phi-4-mini) family model")
        }
        if let types = data.tokenTypes, types.count != data.tokens.count {
            throw ModelAssetsError.malformed(
                path: source, item: "tokenizer.ggml.token_type",
                reason: "\(types.count) token types for \(data.tokens.count) tokens")
        }
        var merges: [(left: String, right: String)] = []
        merges.reserveCapacity(data.merges.count)
        for (i, line) in data.merges.enumerated() {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ModelAssetsError.malformed(
                    path: source, item: "tokenizer.ggml.merges[\(i)]",
                    reason: "'\(line)' is not two tokens separated by one space")
            }
            merges.append((String(parts[0]), String(parts[1])))
        }
        var added: [(content: String, id: Int)] = []
        var special = Set<Int>()
        if let types = data.tokenTypes {
            for (id, t) in types.enumerated() where t == 3 || t == 4 {
                added.append((data.tokens[id], id))
                special.insert(id)
            }
        } else {
            for id in [data.bosTokenId, data.eosTokenId, data.padTokenId].compactMap({ $0 })
            where id >= 0 && id < data.tokens.count {
                added.append((data.tokens[id], id))
                special.insert(id)
            }
        }
        // llama.cpp applies ignore_merges for the Llama-3 pre-tokenizer; HF's Qwen2 normalizes NFC.
        try self.init(parts: Parts(
            source: source, tokens: data.tokens, merges: merges, mergesKey: "tokenizer.ggml.merges", addedTokens: added, specialIds: special,
            preTokenizer: pre, ignoreMerges: pre == .llama3, nfc: pre == .qwen2,
            bos: data.bosTokenId, eos: data.eosTokenId, pad: data.padTokenId, chatTemplate: data.chatTemplate,
            chatTemplateOrigin: data.chatTemplate == nil ? nil : "the GGUF's tokenizer.chat_template", addBOS: data.addBOS,
            textPrefix: data.addsBOSToText ? [data.bosTokenId].compactMap { $0 } : [],
            textSuffix: data.addEOS == true ? [data.eosTokenId].compactMap { $0 } : []))
    }

    /// From GGUF metadata with `tokenizer.ggml.model = "llama"` (llama.cpp's SPM tokenizer): merges
    /// follow piece scores; control and user-defined tokens (types 3, 4) are matched whole; byte
    /// tokens (type 6) are the fallback; `add_space_prefix` (default true) puts "▁" before each piece
    /// of text, as llama.cpp does at the start and after every special token.
    convenience init(sentencePieceData data: TokenizerData) throws {
        let source = "GGUF tokenizer metadata"
        guard let scores = data.scores else {
            throw ModelAssetsError.missingKey(path: source, key: "tokenizer.ggml.scores")
        }
        guard let types = data.tokenTypes else {
            throw ModelAssetsError.missingKey(path: source, key: "tokenizer.ggml.token_type")
        }
        guard types.count == data.tokens.count else {
            throw ModelAssetsError.malformed(path: source, item: "tokenizer.ggml.token_type", reason: "\(types.count) token types for \(data.tokens.count) tokens")
        }
        // Only normal pieces take part in merges: control, user-defined, unused and byte tokens are
        // reached some other way (llama.cpp looks every text up, but their texts cannot be built from
        // normal pieces in a SentencePiece vocabulary, and scoring them would only add rules).
        let mergeable = data.tokens.enumerated().map { types[$0.offset] == 1 ? $0.element : "" }
        let (merges, ranks) = try BPETokenizer.mergesFromScores(tokens: mergeable, scores: scores, source: source)
        var added: [(content: String, id: Int)] = []
        var special = Set<Int>()
        for (id, t) in types.enumerated() where t == 3 || t == 4 {
            added.append((data.tokens[id], id))
            if t == 3 { special.insert(id) }
        }
        let unk = data.unknownTokenId ?? types.firstIndex(of: 2)
        let options = SentencePieceOptions(
            prefix: data.addSpacePrefix ?? true ? .everyPiece : .never, byteFallback: true, unknownTokenId: unk,
            stripsLeadingSpaces: data.addSpacePrefix ?? true ? 1 : 0)
        try self.init(parts: Parts(
            source: source, tokens: data.tokens, merges: merges, mergesKey: "tokenizer.ggml.scores", addedTokens: added, specialIds: special,
            preTokenizer: .gpt2, ignoreMerges: false, nfc: false,
            bos: data.bosTokenId, eos: data.eosTokenId, pad: data.padTokenId, chatTemplate: data.chatTemplate,
            chatTemplateOrigin: data.chatTemplate == nil ? nil : "the GGUF's tokenizer.chat_template",
            mergeRanks: ranks, sentencePiece: options, addBOS: data.addBOS,
            textPrefix: data.addsBOSToText ? [data.bosTokenId].compactMap { $0 } : [],
            textSuffix: data.addEOS == true ? [data.eosTokenId].compactMap { $0 } : []))
    }

    init(parts: Parts) throws {
        let source = parts.source
        var vocab = SpellingIndex(parts.tokens)
        for (content, id) in parts.addedTokens where vocab[content] == nil { vocab.add(content, id) }

        // Bytes per id: added tokens are raw text; others go through the byte alphabet, or are
        // taken as raw UTF-8 if they are not spelled in it (as HF's ByteLevel decoder does).
        let addedIds = Set(parts.addedTokens.map(\.id))
        var tokenBytes = ByteTable(capacity: parts.tokens.count)
        var byteTokens = [Int32](repeating: -1, count: 256)
        var scalarTokens: [UInt32: Int32] = [:]
        var missing: [String] = []
        if let sp = parts.sentencePiece {
            // "▁" decodes to a space (HF decoder Replace), `<0xNN>` to its byte (ByteFallback), added
            // tokens to their text with "▁" replaced too (HF runs them through the same decoders).
            for (id, t) in parts.tokens.enumerated() {
                guard let t else {
                    tokenBytes.append([])
                    continue
                }
                if sp.byteFallback, !addedIds.contains(id), let b = byteFallbackValue(t) {
                    tokenBytes.append([b])
                    if byteTokens[Int(b)] < 0 { byteTokens[Int(b)] = Int32(id) }
                    continue
                }
                var bytes: [UInt8] = []
                bytes.reserveCapacity(t.utf8.count)
                for s in t.unicodeScalars { appendUTF8Bytes(s == metaspace ? " " : s, to: &bytes) }
                tokenBytes.append(bytes)
                let scalars = t.unicodeScalars
                if scalars.count == 1, !addedIds.contains(id), scalarTokens[scalars.first!.value] == nil {
                    scalarTokens[scalars.first!.value] = Int32(id)
                }
            }
            if let unk = sp.unknownTokenId, unk < 0 || unk >= parts.tokens.count || parts.tokens[unk] == nil {
                throw ModelAssetsError.malformed(path: source, item: "unknown token id", reason: "id \(unk) is not a token of this \(parts.tokens.count)-token vocabulary")
            }
        } else {
            for (id, t) in parts.tokens.enumerated() {
                if let t, !addedIds.contains(id), let decoded = ByteLevelAlphabet.decode(t) {
                    tokenBytes.append(decoded)
                } else {
                    tokenBytes.append(t.map { Array($0.utf8) } ?? [])
                }
            }
            for b in 0..<256 {
                let spelled = ByteLevelAlphabet.encode([UInt8(b)])
                if let id = vocab[spelled], !addedIds.contains(id) { byteTokens[b] = Int32(id) } else { missing.append(spelled) }
            }
        }
        // SmolLM2 lacks 21 (control bytes 04 06 13 14 16 1D and bytes that UTF-8 never or hardly
        // uses); HF then drops those bytes from the text, and so do we (see `unencodableBytes`).
        guard missing.count <= 128 else {
            throw ModelAssetsError.malformed(
                path: source, item: "vocabulary",
                reason: "\(missing.count) of the 256 byte-level symbols are missing (first: '\(missing[0])'); this is not a byte-level BPE vocabulary")
        }

        var merges: [UInt64: UInt64] = [:]
        merges.reserveCapacity(parts.merges.count)
        for (rank, m) in parts.merges.enumerated() {
            guard let l = vocab[m.left] else {
                throw ModelAssetsError.malformed(path: source, item: "\(parts.mergesKey)[\(rank)]", reason: "merge '\(m.left) \(m.right)' names token '\(m.left)', which is not in the vocabulary")
            }
            guard let r = vocab[m.right] else {
                throw ModelAssetsError.malformed(path: source, item: "\(parts.mergesKey)[\(rank)]", reason: "merge '\(m.left) \(m.right)' names token '\(m.right)', which is not in the vocabulary")
            }
            guard let merged = vocab[m.left + m.right] else {
                throw ModelAssetsError.malformed(path: source, item: "\(parts.mergesKey)[\(rank)]", reason: "merge '\(m.left) \(m.right)' makes '\(m.left + m.right)', which is not in the vocabulary")
            }
            let key = UInt64(l) << 32 | UInt64(r)
            // A repeated pair keeps its first (best) rank, as HF does when it builds its map.
            if merges[key] == nil { merges[key] = UInt64(parts.mergeRanks?[rank] ?? rank) << 32 | UInt64(merged) }
        }

        for (name, id) in [("bos", parts.bos), ("eos", parts.eos), ("pad", parts.pad)] {
            if let id, id < 0 || id >= parts.tokens.count || parts.tokens[id] == nil {
                throw ModelAssetsError.malformed(path: source, item: "\(name) token id", reason: "id \(id) is not a token of this \(parts.tokens.count)-token vocabulary")
            }
        }
        for id in parts.textPrefix + parts.textSuffix where id < 0 || id >= parts.tokens.count || parts.tokens[id] == nil {
            throw ModelAssetsError.malformed(path: source, item: "post_processor", reason: "it adds id \(id), which is not a token of this \(parts.tokens.count)-token vocabulary")
        }

        self.vocabularySize = parts.tokens.count
        self.preTokenizer = parts.preTokenizer
        self.bosTokenId = parts.bos
        self.eosTokenId = parts.eos
        self.padTokenId = parts.pad
        self.specialTokenIds = parts.specialIds
        self.chatTemplate = parts.chatTemplate
        self.chatTemplateOrigin = parts.chatTemplateOrigin
        self.ignoresMerges = parts.ignoreMerges
        self.normalizesNFC = parts.nfc
        self.sentencePiece = parts.sentencePiece
        self.addsBOS = parts.addBOS
        self.textPrefix = parts.textPrefix
        self.textSuffix = parts.textSuffix
        self.scalarTokens = scalarTokens
        self.tokens = parts.tokens
        self.vocab = vocab
        self.tokenBytes = tokenBytes
        self.byteTokens = byteTokens
        self.unencodableBytes = parts.sentencePiece != nil ? [] : (0..<256).filter { byteTokens[$0] < 0 }.map { UInt8($0) }
        self.merges = merges
        self.specials = SpecialTokenMatcher(parts.addedTokens)
    }

    // MARK: lookups

    /// The id of a token as the vocabulary spells it (byte alphabet: "Ġthe"), or of an added token ("<|im_end|>").
    public func tokenId(_ token: String) -> Int? { vocab[token] }

    /// The named special tokens as a chat template sees them (transformers' `special_tokens_map`:
    /// `bos_token`, `eos_token`, `pad_token` when the tokenizer sets them), as their text.
    public var namedSpecialTokens: [(name: String, text: String)] {
        [("bos_token", bosTokenId), ("eos_token", eosTokenId), ("pad_token", padTokenId)].compactMap { name, id in
            guard let id, id >= 0, id < tokens.count, let text = tokens[id] else { return nil }
            return (name, specialTokenIds.contains(id) ? text : decode([id]))
        }
    }

    /// The vocabulary's spelling of `id`; nil if out of range.
    public func tokenString(_ id: Int) -> String? {
        id >= 0 && id < tokens.count ? tokens[id] : nil
    }

    public func isSpecial(_ id: Int) -> Bool { specialTokenIds.contains(id) }

    /// The bytes `id` decodes to (special tokens: their text); nil for an id outside the
    /// vocabulary or a gap in it. Constrained decoding builds its byte trie from these.
    public func bytes(of id: Int) -> [UInt8]? {
        id >= 0 && id < tokens.count && tokens[id] != nil ? Array(tokenBytes[id]) : nil
    }

    /// The scalars of `text` that `encode` would drop because one of their bytes has no token
    /// (see `unencodableBytes`); empty for almost all text.
    public func unencodableScalars(in text: String) -> [Unicode.Scalar] {
        if let sp = sentencePiece {
            // Scalars that become the unknown token (or vanish) are lost to the text.
            return text.unicodeScalars.filter { !sentencePieceEncodes($0, options: sp) }
        }
        guard !unencodableBytes.isEmpty else { return [] }
        var bytes: [UInt8] = []
        return text.unicodeScalars.filter { s in
            bytes.removeAll(keepingCapacity: true)
            appendUTF8Bytes(s, to: &bytes)
            return bytes.contains { byteTokens[Int($0)] < 0 }
        }
    }

    // MARK: encode

    /// Token ids for `text`; added/special tokens written in the text become their own ids.
    /// Nothing is added (chat templates write BOS themselves); `encodeText` adds what the tokenizer
    /// puts around a whole plain-text input.
    public func encode(_ text: String) -> [Int] {
        var out: [Int] = []
        out.reserveCapacity(text.utf8.count / 3 + 4)
        let scalars = Array(text.unicodeScalars)
        var start = 0
        specials.forEachMatch(in: scalars) { range, id in
            if range.lowerBound > start { encodeOrdinary(scalars[start..<range.lowerBound], into: &out) }
            out.append(id)
            start = range.upperBound
        }
        if start < scalars.count { encodeOrdinary(scalars[start...], into: &out) }
        return out
    }

    /// `text` as a whole input: `textPrefix` (BOS when the tokenizer adds it), its tokens, `textSuffix`.
    /// A BOS written in the text stays too, so "<bos>x" gets two, as in Hugging Face and llama.cpp.
    public func encodeText(_ text: String) -> [Int] {
        textPrefix + encode(text) + textSuffix
    }

    /// Encodes text that holds no special tokens: normalize, pre-tokenize, BPE per word.
    func encodeOrdinary(_ slice: ArraySlice<Unicode.Scalar>, into out: inout [Int]) {
        if let sp = sentencePiece {
            return encodeSentencePiece(slice, atTextStart: slice.startIndex == 0, options: sp, into: &out)
        }
        var scalars = Array(slice)
        if normalizesNFC {
            var view = String.UnicodeScalarView()
            view.append(contentsOf: scalars)
            scalars = Array(String(view).precomposedStringWithCanonicalMapping.unicodeScalars)
        }
        let classes = ScalarClass.classify(scalars)
        var word: [UInt8] = []
        word.reserveCapacity(64)
        preTokenizer.forEachWord(scalars: scalars, classes: classes, in: 0..<scalars.count) { range in
            word.removeAll(keepingCapacity: true)
            for i in range { appendUTF8Bytes(scalars[i], to: &word) }
            encodeWord(word, into: &out)
        }
    }

    func encodeWord(_ word: [UInt8], into out: inout [Int]) {
        if word.count == 1 {
            let id = byteTokens[Int(word[0])]
            if id >= 0 { out.append(Int(id)) }
            return
        }
        if let cached = cache.lookup(word) {
            for id in cached { out.append(Int(id)) }
            return
        }
        var ids: [Int32]
        if ignoresMerges, let id = vocab[ByteLevelAlphabet.encode(word)] {
            ids = [Int32(id)]
        } else {
            ids = word.compactMap { byteTokens[Int($0)] >= 0 ? byteTokens[Int($0)] : nil }
            ids = ids.count > 48 ? mergeLong(ids) : mergeShort(ids)
        }
        if word.count <= 256 { cache.insert(word, ids) }
        for id in ids { out.append(Int(id)) }
    }

    @inline(__always) func mergeEntry(_ l: Int32, _ r: Int32) -> UInt64 {
        merges[UInt64(UInt32(bitPattern: l)) << 32 | UInt64(UInt32(bitPattern: r))] ?? .max
    }

    /// BPE on a short word: repeatedly merge the best-ranked pair, leftmost first. Entries pack
    /// rank above the merged id; ranks alone are compared (GGUF SentencePiece ranks are shared by
    /// equal scores, and then the leftmost pair wins). O(n^2) compares, O(n) lookups.
    func mergeShort(_ start: [Int32]) -> [Int32] {
        var syms = start
        guard syms.count > 1 else { return syms }
        var entries = [UInt64](repeating: .max, count: syms.count - 1)  // pair (i, i+1)
        for i in 0..<entries.count { entries[i] = mergeEntry(syms[i], syms[i + 1]) }
        while true {
            var best = UInt64.max
            var at = -1
            for i in 0..<entries.count where entries[i] >> 32 < best >> 32 {
                best = entries[i]
                at = i
            }
            if at < 0 { break }
            syms[at] = Int32(truncatingIfNeeded: best & 0xFFFF_FFFF)
            syms.remove(at: at + 1)
            entries.remove(at: at)
            if at > 0 { entries[at - 1] = mergeEntry(syms[at - 1], syms[at]) }
            if at < entries.count { entries[at] = mergeEntry(syms[at], syms[at + 1]) }
        }
        return syms
    }

    /// The same merges for long words, in O(n log n): a linked list of symbols and a min-heap of
    /// (rank, position), exactly HF's word.rs order (best rank, then leftmost); stale entries are skipped.
    func mergeLong(_ start: [Int32]) -> [Int32] {
        var syms = start
        let n = syms.count
        guard n > 1 else { return syms }
        var next = Array(1...n)
        next[n - 1] = -1
        var prev = Array(-1..<(n - 1))
        var heap = BPEMergeHeap()
        for i in 0..<(n - 1) {
            let e = mergeEntry(syms[i], syms[i + 1])
            if e != .max { heap.push((e & 0xFFFF_FFFF_0000_0000) | UInt64(i)) }
        }
        while let top = heap.pop() {
            let pos = Int(top & 0xFFFF_FFFF)
            let rank = top >> 32
            let right = next[pos]
            guard syms[pos] >= 0, right >= 0 else { continue }
            let e = mergeEntry(syms[pos], syms[right])
            guard e != .max, e >> 32 == rank else { continue }
            syms[pos] = Int32(truncatingIfNeeded: e & 0xFFFF_FFFF)
            syms[right] = -1
            next[pos] = next[right]
            if next[right] >= 0 { prev[next[right]] = pos }
            let p = prev[pos]
            if p >= 0 {
                let e2 = mergeEntry(syms[p], syms[pos])
                if e2 != .max { heap.push((e2 & 0xFFFF_FFFF_0000_0000) | UInt64(p)) }
            }
            if next[pos] >= 0 {
                let e3 = mergeEntry(syms[pos], syms[next[pos]])
                if e3 != .max { heap.push((e3 & 0xFFFF_FFFF_0000_0000) | UInt64(pos)) }
            }
        }
        var out: [Int32] = []
        var i = 0
        while i >= 0 {
            out.append(syms[i])
            i = next[i]
        }
        return out
    }

    // MARK: decode

    /// The text of `ids`. Invalid UTF-8 (a multi-byte character cut off) becomes U+FFFD, as in HF;
    /// an id outside the vocabulary also becomes U+FFFD rather than vanishing.
    public func decode(_ ids: [Int]) -> String {
        decode(ids, skipSpecialTokens: false)
    }

    /// SentencePiece: byte tokens join into UTF-8 (an invalid run gets U+FFFD per maximal
    /// subpart, where HF puts one per byte), and the decoder's `Strip` drops leading spaces.
    public func decode(_ ids: [Int], skipSpecialTokens: Bool) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ids.count * 4)
        for id in ids { appendBytes(of: id, skipSpecialTokens: skipSpecialTokens, to: &bytes) }
        let strip = leadingSpacesToStrip(bytes)
        return String(decoding: bytes[strip...], as: UTF8.self)
    }

    /// How many of `bytes`' leading spaces the decoder strips (0 for byte-level BPE).
    func leadingSpacesToStrip<C: Collection>(_ bytes: C) -> Int where C.Element == UInt8 {
        guard let n = sentencePiece?.stripsLeadingSpaces, n > 0 else { return 0 }
        return bytes.prefix(n).prefix { $0 == 0x20 }.count
    }

    func appendBytes(of id: Int, skipSpecialTokens: Bool, to bytes: inout [UInt8]) {
        guard id >= 0 && id < tokenBytes.count, tokens[id] != nil else {
            bytes.append(contentsOf: [0xEF, 0xBF, 0xBD])
            return
        }
        if skipSpecialTokens && specialTokenIds.contains(id) { return }
        bytes.append(contentsOf: tokenBytes[id])
    }
}

@inline(__always) func appendUTF8Bytes(_ s: Unicode.Scalar, to out: inout [UInt8]) {
    let v = s.value
    if v < 0x80 {
        out.append(UInt8(v))
    } else if v < 0x800 {
        out.append(UInt8(0xC0 | (v >> 6)))
        out.append(UInt8(0x80 | (v & 0x3F)))
    } else if v < 0x10000 {
        out.append(UInt8(0xE0 | (v >> 12)))
        out.append(UInt8(0x80 | ((v >> 6) & 0x3F)))
        out.append(UInt8(0x80 | (v & 0x3F)))
    } else {
        out.append(UInt8(0xF0 | (v >> 18)))
        out.append(UInt8(0x80 | ((v >> 12) & 0x3F)))
        out.append(UInt8(0x80 | ((v >> 6) & 0x3F)))
        out.append(UInt8(0x80 | (v & 0x3F)))
    }
}

/// Finds added tokens in text: leftmost match first, the longest one where several start there
/// (HF's Aho-Corasick LeftmostLongest).
struct SpecialTokenMatcher: Sendable {
    /// Candidates by first scalar, longest first.
    let byFirst: [UInt32: [(scalars: [Unicode.Scalar], id: Int)]]
    /// Bit b set when some candidate starts with ASCII scalar b: a fast reject for most text.
    let asciiFirst: (UInt64, UInt64)

    init(_ tokens: [(content: String, id: Int)]) {
        var by: [UInt32: [(scalars: [Unicode.Scalar], id: Int)]] = [:]
        var lo: UInt64 = 0, hi: UInt64 = 0
        for (content, id) in tokens {
            let s = Array(content.unicodeScalars)
            guard let first = s.first else { continue }
            by[first.value, default: []].append((s, id))
            if first.value < 64 { lo |= 1 << UInt64(first.value) } else if first.value < 128 { hi |= 1 << UInt64(first.value - 64) }
        }
        for k in by.keys { by[k]!.sort { $0.scalars.count > $1.scalars.count } }
        byFirst = by
        asciiFirst = (lo, hi)
    }

    func forEachMatch(in text: [Unicode.Scalar], _ body: (Range<Int>, Int) -> Void) {
        guard !byFirst.isEmpty else { return }
        var i = 0
        while i < text.count {
            let v = text[i].value
            if v < 64 ? asciiFirst.0 & (1 << UInt64(v)) == 0 : (v < 128 && asciiFirst.1 & (1 << UInt64(v - 64)) == 0) {
                i += 1
                continue
            }
            if let candidates = byFirst[v] {
                var matched = false
                for c in candidates where c.scalars.count <= text.count - i {
                    var ok = true
                    for k in 1..<c.scalars.count where text[i + k] != c.scalars[k] {
                        ok = false
                        break
                    }
                    if ok {
                        body(i..<(i + c.scalars.count), c.id)
                        i += c.scalars.count
                        matched = true
                        break
                    }
                }
                if matched { continue }
            }
            i += 1
        }
    }
}

/// Word -> ids memo shared by all callers of one tokenizer; stops growing at `capacity` (as HF's cache does).
final class BPEWordCache: @unchecked Sendable {
    private let lock = NSLock()
    private var map: [[UInt8]: [Int32]] = [:]
    private let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func lookup(_ word: [UInt8]) -> [Int32]? {
        lock.lock()
        defer { lock.unlock() }
        return map[word]
    }

    func insert(_ word: [UInt8], _ ids: [Int32]) {
        lock.lock()
        defer { lock.unlock() }
        if map.count < capacity { map[word] = ids }
    }
}

/// A binary min-heap of packed UInt64 keys.
struct BPEMergeHeap {
    private var items: [UInt64] = []

    mutating func push(_ x: UInt64) {
        items.append(x)
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if items[parent] <= items[i] { break }
            items.swapAt(parent, i)
            i = parent
        }
    }

    mutating func pop() -> UInt64? {
        guard let top = items.first else { return nil }
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count && items[l] < items[m] { m = l }
                if r < items.count && items[r] < items[m] { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return top
    }
}

/// Spelling -> id over a vocabulary's spellings without a `[String: Int]`, whose 49k String keys
/// repeat the spellings `tokens` holds (~1.6 MB for SmolLM2; this, 0.26 MB): an open-addressing
/// table of ids (linear probing, load <= 3/4) that compares a query with `tokens[id]`. Spellings are
/// compared and hashed as UTF-8 bytes, as HF's maps do: Swift's String equality is canonical
/// equivalence, which would make a SentencePiece vocabulary's "é" and "e\u{301}" pieces one (and
/// costs a normalization check per compare). A later id with the same spelling replaces an earlier
/// one, as assigning into a dictionary does; `add` keeps a spelling that is not its id's own (an
/// added token's content) in a small dictionary.
struct SpellingIndex: Sendable {
    private let tokens: [String?]  // shares the tokenizer's array
    private var slots: [Int32]  // -1: empty
    private let mask: Int
    private var others: [[UInt8]: Int] = [:]  // by UTF-8 bytes

    init(_ tokens: [String?]) {
        self.tokens = tokens
        var size = 16
        while size * 3 < tokens.count * 4 { size *= 2 }
        slots = [Int32](repeating: -1, count: size)
        mask = size - 1
        for (id, t) in tokens.enumerated() {
            guard let t else { continue }
            var i = Self.hash(t) & mask
            while slots[i] >= 0 && !Self.same(tokens[Int(slots[i])]!, t) { i = (i + 1) & mask }
            slots[i] = Int32(id)
        }
    }

    static func hash(_ s: String) -> Int {
        var s = s
        return s.withUTF8 { bytes in
            var h = Hasher()
            h.combine(bytes: UnsafeRawBufferPointer(bytes))
            return h.finalize()
        }
    }

    @inline(__always) static func same(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

    subscript(spelling: String) -> Int? {
        var i = Self.hash(spelling) & mask
        while slots[i] >= 0 {
            let id = Int(slots[i])
            if Self.same(tokens[id]!, spelling) { return id }
            i = (i + 1) & mask
        }
        return others.isEmpty ? nil : others[Array(spelling.utf8)]
    }

    /// Maps `spelling` to `id` when no token is spelled so.
    mutating func add(_ spelling: String, _ id: Int) {
        if self[spelling] == nil { others[Array(spelling.utf8)] = id }
    }
}

/// Byte strings by index, all in one buffer: an array per token costs ~40 bytes of header and
/// allocation for ~6 bytes of content (about 2 MB for a 49k-token vocabulary; this, 0.5 MB).
struct ByteTable: Sendable {
    private var data: [UInt8] = []
    private var starts: [Int32] = [0]

    init(capacity: Int) {
        starts.reserveCapacity(capacity + 1)
        data.reserveCapacity(capacity * 8)
    }

    mutating func append(_ bytes: [UInt8]) {
        data.append(contentsOf: bytes)
        starts.append(Int32(data.count))
    }

    var count: Int { starts.count - 1 }

    subscript(i: Int) -> ArraySlice<UInt8> { data[Int(starts[i])..<Int(starts[i + 1])] }
}
