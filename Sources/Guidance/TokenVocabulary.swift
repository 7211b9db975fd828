// A tokenizer's vocabulary as bytes, with a byte trie of its ordinary tokens laid out in
// preorder: walking it beside a DFA visits each live prefix once and skips a dead subtree in
// one step (`skip`), which is how a state's token mask is computed.
import ModelAssets

public struct TokenVocabulary: Sendable {
    /// One more than the largest token id (the logits' length).
    public let count: Int
    /// Tokens that end generation; allowed exactly when the grammar's text is complete.
    public let stopTokens: [Int]
    /// Bytes of each usable token; nil for special, stop, empty or missing ids.
    let tokenBytes: [[UInt8]?]
    let trie: TokenTrie

    /// `tokens[id]` is the bytes of token `id`, nil for one that generation must never choose
    /// (special and control tokens, gaps). Stop tokens are never part of the text.
    public init(tokens: [[UInt8]?], stopTokens: [Int]) throws(GuidanceError) {
        guard !stopTokens.isEmpty else {
            throw GuidanceError.invalidVocabulary("no stop token; pass the end-of-sequence (or end-of-turn) token id")
        }
        for id in stopTokens where id < 0 || id >= tokens.count {
            throw GuidanceError.invalidVocabulary("stop token \(id) is outside the \(tokens.count)-token vocabulary")
        }
        let stops = Set(stopTokens)
        var usable = tokens
        for id in usable.indices where stops.contains(id) || usable[id]?.isEmpty == true { usable[id] = nil }
        self.count = tokens.count
        self.stopTokens = stops.sorted()
        self.tokenBytes = usable
        self.trie = TokenTrie(usable)
    }

    /// The tokenizer's tokens, special ones left out. Stop tokens default to the end-of-sequence
    /// token and the chat templates' end-of-turn tokens (`<|im_end|>`, `<|eot_id|>`) it has.
    public init(tokenizer: BPETokenizer, stopTokens: [Int]? = nil) throws(GuidanceError) {
        var stops = stopTokens ?? []
        if stopTokens == nil {
            if let eos = tokenizer.eosTokenId { stops.append(eos) }
            for name in ["<|im_end|>", "<|eot_id|>", "<end_of_turn>"] {
                if let id = tokenizer.tokenId(name), tokenizer.isSpecial(id), !stops.contains(id) { stops.append(id) }
            }
        }
        let tokens: [[UInt8]?] = (0..<tokenizer.vocabularySize).map { id in
            tokenizer.isSpecial(id) ? nil : tokenizer.bytes(of: id)
        }
        try self.init(tokens: tokens, stopTokens: stops)
    }

    /// The bytes of an ordinary token; nil for special, stop and unusable ids.
    public func bytes(of id: Int) -> [UInt8]? { id >= 0 && id < count ? tokenBytes[id] : nil }

    public func isStop(_ id: Int) -> Bool { stopTokens.contains(id) }

    /// Tokens generation may choose (stop tokens not counted).
    public var usableCount: Int { trie.tokenIds.count }

    /// The longest token, in bytes.
    public var maxTokenLength: Int { trie.maxDepth }

    /// Nodes of the byte trie (distinct token prefixes): what a new state's mask walks at most.
    public var trieNodeCount: Int { trie.nodeCount }
}

/// Tries in preorder: node i has `byte[i]`, `depth[i]` (1 for the root's children), the index
/// just past its subtree `skip[i]`, and the tokens that end there,
/// `tokenIds[tokenStart[i]..<tokenStart[i + 1]]` (several when ids share their bytes).
final class TokenTrie: Sendable {
    let byte: [UInt8]
    let depth: [UInt16]
    let skip: [Int32]
    let tokenStart: [Int32]
    let tokenIds: [Int32]
    let maxDepth: Int
    /// The first token ending at each node, or for none a bit in one of `spareWords` words past
    /// the vocabulary (mask building discards them): the walk sets a bit per node without
    /// branching, and successive nodes without a token write to different words, so the
    /// writes do not wait on each other.
    let nodeToken: [Int32]
    static let spareWords = 8
    /// Further ids spelled like a node's first one: (first, other), set after a walk.
    let duplicates: [(first: Int32, other: Int32)]

    init(_ tokens: [[UInt8]?]) {
        let ids = tokens.indices.filter { tokens[$0] != nil }.sorted { a, b in
            let x = tokens[a]!, y = tokens[b]!
            return x.lexicographicallyPrecedes(y) || (x == y && a < b)
        }
        var byte: [UInt8] = [], depth: [UInt16] = []
        var owner: [Int32] = []  // per token in `ids` order: its node
        var atDepth: [Int32] = [-1]
        var previous: [UInt8] = []
        var maxDepth = 0
        for id in ids {
            let t = tokens[id]!
            var lcp = 0
            while lcp < t.count && lcp < previous.count && t[lcp] == previous[lcp] { lcp += 1 }
            if !(lcp == t.count && t.count == previous.count) {
                for d in lcp..<t.count {
                    byte.append(t[d])
                    depth.append(UInt16(min(d + 1, Int(UInt16.max))))
                    if atDepth.count <= d + 1 { atDepth.append(0) }
                    atDepth[d + 1] = Int32(byte.count - 1)
                }
            }
            owner.append(atDepth[t.count])
            maxDepth = max(maxDepth, t.count)
            previous = t
        }
        let n = byte.count
        var tokenStart = [Int32](repeating: 0, count: n + 1)
        for node in owner { tokenStart[Int(node) + 1] += 1 }
        for i in 0..<n { tokenStart[i + 1] += tokenStart[i] }
        // `owner` is non-decreasing (tokens attach to the newest node), so ids are in node order.
        var skip = [Int32](repeating: Int32(n), count: n)
        var open: [Int] = []
        for i in 0..<n {
            while let top = open.last, depth[top] >= depth[i] {
                skip[top] = Int32(i)
                open.removeLast()
            }
            open.append(i)
        }
        self.byte = byte
        self.depth = depth
        self.skip = skip
        self.tokenStart = tokenStart
        self.tokenIds = ids.map { Int32($0) }
        self.maxDepth = maxDepth
        let spareBase = Int32((tokens.count + 63) / 64 * 64)
        var nodeToken = (0..<n).map { spareBase + Int32(64 * ($0 % Self.spareWords)) }
        var duplicates: [(Int32, Int32)] = []
        for i in 0..<n where tokenStart[i] < tokenStart[i + 1] {
            let first = Int32(ids[Int(tokenStart[i])])
            nodeToken[i] = first
            for k in Int(tokenStart[i]) + 1..<Int(tokenStart[i + 1]) { duplicates.append((first, Int32(ids[k]))) }
        }
        self.nodeToken = nodeToken
        self.duplicates = duplicates
    }

    var nodeCount: Int { byte.count }

    /// The child of `parent` (-1: the root) spelled by `b`, or nil.
    func child(of parent: Int, _ b: UInt8) -> Int? {
        var i = parent + 1
        let end = parent < 0 ? byte.count : Int(skip[parent])
        while i < end {
            if byte[i] == b { return i }
            i = Int(skip[i])
        }
        return nil
    }

    /// The longest token spelling a prefix of `bytes[pos...]` (its first id and length; nil when
    /// no token does), and the deepest node the bytes reach with its depth.
    func longestMatch(_ bytes: [UInt8], from pos: Int) -> (best: (id: Int, length: Int)?, node: Int, depth: Int) {
        var node = -1, depth = 0
        var best: (id: Int, length: Int)?
        while pos + depth < bytes.count, let c = child(of: node, bytes[pos + depth]) {
            node = c
            depth += 1
            if tokenStart[c] < tokenStart[c + 1] { best = (Int(tokenIds[Int(tokenStart[c])]), depth) }
        }
        return (best, node, depth)
    }

    /// Children of `parent` (-1: the root).
    func children(of parent: Int) -> [Int] {
        var out: [Int] = []
        var i = parent + 1
        let end = parent < 0 ? byte.count : Int(skip[parent])
        while i < end {
            out.append(i)
            i = Int(skip[i])
        }
        return out
    }
}
