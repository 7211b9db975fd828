// A grammar over a vocabulary: which tokens may come next in each state. A token is allowed
// when all its bytes keep the grammar's DFA alive; the stop tokens when the text so far is
// complete. Masks are computed by walking the vocabulary trie beside the DFA and cached per
// DFA state, so a state seen again costs a dictionary lookup. One constraint serves any
// number of concurrent generations (its caches sit behind a lock).
import Foundation

/// The tokens allowed in one state, as a bitset over the vocabulary. Immutable.
public final class TokenMask: Sendable {
    /// The vocabulary size the mask covers.
    public let count: Int
    /// Bit `id % 64` of word `id / 64` is set when token `id` is allowed.
    public let words: [UInt64]
    public let allowedCount: Int

    init(count: Int, words: [UInt64]) {
        self.count = count
        self.words = words
        self.allowedCount = words.reduce(0) { $0 + $1.nonzeroBitCount }
    }

    public func contains(_ id: Int) -> Bool {
        id >= 0 && id < count && words[id >> 6] & (1 << UInt64(id & 63)) != 0
    }

    public var isEmpty: Bool { allowedCount == 0 }

    /// The allowed ids in increasing order.
    public var allowedTokens: [Int] {
        var out: [Int] = []
        out.reserveCapacity(allowedCount)
        for (w, word) in words.enumerated() {
            var bits = word
            while bits != 0 {
                out.append(w << 6 + bits.trailingZeroBitCount)
                bits &= bits - 1
            }
        }
        return out
    }

    /// Sets every disallowed logit to -infinity (positions past `count` included).
    public func apply(to logits: UnsafeMutableBufferPointer<Float>) {
        let n = min(logits.count, count)
        var w = 0
        while w << 6 < n {
            let word = words[w]
            let base = w << 6
            let end = min(base + 64, n)
            if word == .max && end - base == 64 {
                // all allowed
            } else if word == 0 {
                for i in base..<end { logits[i] = -.infinity }
            } else {
                var bits = ~word
                while bits != 0 {
                    let i = base + bits.trailingZeroBitCount
                    if i >= end { break }
                    logits[i] = -.infinity
                    bits &= bits - 1
                }
            }
            w += 1
        }
        if logits.count > count {
            for i in count..<logits.count { logits[i] = -.infinity }
        }
    }
}

public final class TokenConstraint: @unchecked Sendable {
    public let grammar: Grammar
    public let vocabulary: TokenVocabulary
    private let lock = NSLock()
    private let dfa: LazyDFA
    private var masks: [Int32: TokenMask] = [:]
    /// Masks by `maskKey`: DFA states that differ only in string counts far from both ends of
    /// their windows share one.
    private var masksByKey: [[Int64]: TokenMask] = [:]
    private var walks = 0
    private var forced: [Int32: [Int]] = [:]
    /// Per DFA state: the most tokens to completion any allowed content token leaves (computed
    /// the first time a token limit comes near), and masks narrowed by a limit, keyed by state
    /// and the tokens to completion allowed after the token.
    private var maxAfter: [Int32: Int32] = [:]
    private var budgetMasks: [Int64: TokenMask] = [:]
    /// Per DFA state: tokens that complete the text (`tokensToCompletionLocked`).
    private var tokenDistances: [Int32: Int32] = [:]
    private let emptyMask: TokenMask
    private var walkStack: [Int32]
    /// The grammar's byte class of each trie node's byte.
    private let nodeClass: [UInt8]

    /// `maxDFAStates` bounds the lazily built DFA; past it, tokens that need new states are
    /// masked out (see `isExhausted`), which keeps every allowed token correct.
    public init(grammar: Grammar, vocabulary: TokenVocabulary, maxDFAStates: Int = 1_000_000) {
        self.grammar = grammar
        self.vocabulary = vocabulary
        self.dfa = LazyDFA(nfa: grammar.nfa, maxStates: maxDFAStates)
        self.emptyMask = TokenMask(count: vocabulary.count, words: [UInt64](repeating: 0, count: (vocabulary.count + 63) / 64))
        self.walkStack = [Int32](repeating: 0, count: vocabulary.trie.maxDepth + 1)
        let classOf = grammar.nfa.classOf
        self.nodeClass = vocabulary.trie.byte.map { classOf[Int($0)] }
    }

    /// The state before any token.
    public func start() -> ConstraintState {
        lock.lock()
        defer { lock.unlock() }
        return ConstraintState(constraint: self, dfaState: dfa.start)
    }

    /// DFA states built so far, states with a mask, and trie walks made (fewer than masks when
    /// string positions shared one).
    public var statistics: (dfaStates: Int, cachedMasks: Int, trieWalks: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (dfa.stateCount, masks.count, walks)
    }

    /// True when the DFA hit `maxDFAStates` and some tokens were masked out for that reason.
    public var isExhausted: Bool {
        lock.lock()
        defer { lock.unlock() }
        return dfa.exhausted
    }

    func isAccepting(_ s: Int32) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return dfa.isAccepting(s)
    }

    /// The tokens allowed next (stop tokens exactly when the text is complete); empty after a stop token.
    public func allowedTokens(_ state: ConstraintState) -> TokenMask {
        if state.isFinished { return emptyMask }
        lock.lock()
        defer { lock.unlock() }
        return maskLocked(state.dfaState)
    }

    /// Sets the logits of disallowed tokens to -infinity.
    public func mask(logits: UnsafeMutableBufferPointer<Float>, _ state: ConstraintState) {
        allowedTokens(state).apply(to: logits)
    }

    public func mask(logits: inout [Float], _ state: ConstraintState) {
        let m = allowedTokens(state)
        logits.withUnsafeMutableBufferPointer { m.apply(to: $0) }
    }

    /// The tokens allowed next when this token and at most `remaining - 1` more may follow,
    /// a stop token included: besides the plain mask's rule, a content token must leave a text
    /// that the tokens then left can still complete, the stop token included (measured by
    /// `tokensToCompletion`: the shortest completion in bytes, spelled greedily in the longest
    /// tokens). A reply that keeps to these masks ends complete within its limit, cut short
    /// rather than cut off. `narrowed` tells whether the limit removed any token. When the limit
    /// is already too near to complete in time, or the narrowed mask would be empty (possible
    /// only where two shortest completions tokenize differently), the plain mask.
    public func allowedTokens(_ state: ConstraintState, remaining: Int) -> (mask: TokenMask, narrowed: Bool) {
        if state.isFinished { return (emptyMask, false) }
        lock.lock()
        defer { lock.unlock() }
        let s = state.dfaState
        let plain = maskLocked(s)
        // Tokens to completion a content token may leave: the tokens left after it, less the stop.
        let limit = remaining - 2
        // no completion needs more tokens than bytes, nor more bytes than the largest distance
        if limit >= Int(grammar.nfa.maxDistance) || Int(tokensToCompletionLocked(s)) > remaining - 1 { return (plain, false) }
        if limit >= Int(maxAfterLocked(s, plain)) { return (plain, false) }
        let key = Int64(s) << 32 | Int64(max(limit, -1) + 1)
        if let m = budgetMasks[key] { return (m, true) }
        var words = plain.words
        var content = 0
        for id in plain.allowedTokens where !vocabulary.isStop(id) {
            if let next = nextLocked(s, id), Int(tokensToCompletionLocked(next)) <= limit {
                content += 1
            } else {
                words[id >> 6] &= ~(1 << UInt64(id & 63))
            }
        }
        if content == 0 && !dfa.isAccepting(s) { return (plain, false) }
        let m = TokenMask(count: vocabulary.count, words: words)
        if budgetMasks.count >= 4096 { budgetMasks.removeAll(keepingCapacity: true) }
        budgetMasks[key] = m
        return (m, true)
    }

    /// Sets the logits of tokens not allowed within the token limit to -infinity
    /// (`allowedTokens(_:remaining:)`); true when the limit narrowed the choice.
    @discardableResult
    public func mask(logits: UnsafeMutableBufferPointer<Float>, _ state: ConstraintState, remaining: Int) -> Bool {
        let (m, narrowed) = allowedTokens(state, remaining: remaining)
        m.apply(to: logits)
        return narrowed
    }

    /// Bytes the text needs at least before it is complete (0 when it is).
    func distanceToCompletion(_ s: Int32) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return Int(dfa.distance(s))
    }

    func tokensToCompletion(_ s: Int32) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let t = tokensToCompletionLocked(s)
        return t == .max ? Int.max : Int(t)
    }

    /// Tokens that make the text whole from `s`: one shortest completion in bytes (each byte the
    /// lowest that brings the text one byte nearer), spelled by the longest tokens from left to
    /// right; Int32.max when the vocabulary cannot spell it. An upper bound on the fewest tokens.
    private func tokensToCompletionLocked(_ s: Int32) -> Int32 {
        if let t = tokenDistances[s] { return t }
        var bytes: [UInt8] = []
        var cur = s
        while let (b, next) = dfa.nearerByte(cur) {
            bytes.append(b)
            cur = next
        }
        var count: Int32 = dfa.isAccepting(cur) ? 0 : .max, pos = 0
        while count != .max && pos < bytes.count {
            if let best = vocabulary.trie.longestMatch(bytes, from: pos).best {
                pos += best.length
                count += 1
            } else {
                count = .max
            }
        }
        if tokenDistances.count >= 1 << 20 { tokenDistances.removeAll(keepingCapacity: true) }
        tokenDistances[s] = count
        return count
    }

    /// Whether `token` may come next: the same answer as the mask, without computing it.
    public func allows(_ token: Int, in state: ConstraintState) -> Bool {
        if state.isFinished { return false }
        lock.lock()
        defer { lock.unlock() }
        return nextLocked(state.dfaState, token) != nil
    }

    /// Tokens the caller may append without sampling: while the grammar allows exactly one
    /// byte at a time (not at a point where the text could end), the longest tokens spelling
    /// those bytes, stopping before a token when a longer allowed token would reach past the
    /// forced bytes; or, when nothing is forced that way, the single allowed token if there is
    /// exactly one and no stop token. Each returned token is allowed in turn.
    public func forcedTokens(_ state: ConstraintState) -> [Int] {
        if state.isFinished { return [] }
        lock.lock()
        defer { lock.unlock() }
        if let cached = forced[state.dfaState] { return cached }
        let result = computeForced(state.dfaState)
        forced[state.dfaState] = result
        return result
    }

    /// Walks the trie for `state` even when its mask is cached (DFA rows built earlier are
    /// reused): the cost of a new mask once the grammar's states exist. For benchmarks.
    public func recomputeMask(_ state: ConstraintState) -> TokenMask {
        lock.lock()
        defer { lock.unlock() }
        masks[state.dfaState] = nil
        return maskLocked(state.dfaState)
    }

    // MARK: under the lock

    /// The state after `token`, nil when the token is not allowed (stop tokens not handled here).
    func nextLocked(_ s: Int32, _ token: Int) -> Int32? {
        guard let bytes = vocabulary.bytes(of: token) else { return nil }
        var cur = s
        for b in bytes {
            cur = dfa.next(cur, b)
            if cur == LazyDFA.dead { return nil }
        }
        return cur
    }

    private func maxAfterLocked(_ s: Int32, _ plain: TokenMask) -> Int32 {
        if let m = maxAfter[s] { return m }
        var m: Int32 = 0
        for id in plain.allowedTokens where !vocabulary.isStop(id) {
            if let next = nextLocked(s, id) { m = max(m, tokensToCompletionLocked(next)) }
        }
        maxAfter[s] = m
        return m
    }

    private func maskLocked(_ s: Int32) -> TokenMask {
        if let m = masks[s] { return m }
        let key = maskKey(s)
        if let key, let m = masksByKey[key] {
            masks[s] = m
            return m
        }
        walks += 1
        var words = [UInt64](repeating: 0, count: (vocabulary.count + 63) / 64 + TokenTrie.spareWords)
        walk(from: s, into: &words)
        words.removeLast(TokenTrie.spareWords)
        if dfa.isAccepting(s) {
            for id in vocabulary.stopTokens { words[id >> 6] |= 1 << UInt64(id & 63) }
        }
        let m = TokenMask(count: vocabulary.count, words: words)
        masks[s] = m
        if let key { masksByKey[key] = m }
        return m
    }

    /// What a state's mask depends on: its NFA states, those inside a length-windowed string
    /// replaced by (template, scalars still needed, scalars still allowed), both clamped to the
    /// longest token + 1 (no token can tell larger values apart). Nil when tokens are too long
    /// to pack the key.
    private func maskKey(_ s: Int32) -> [Int64]? {
        let nfa = grammar.nfa
        let horizon = vocabulary.maxTokenLength + 1
        guard !nfa.windows.isEmpty, horizon < 4096 else { return nil }
        var key: [Int64] = []
        for q in dfa.members(s) {
            let i = Int(q)
            let template = nfa.countedTemplate[i]
            if template < 0 {
                key.append(Int64(q))
                continue
            }
            let window = nfa.windows[Int(nfa.countedWindow[i])]
            let c = Int(nfa.countedCount[i])
            let need = min(max(window.minLength - c, 0), horizon)
            let room = window.maxLength.map { min(max($0 - c, 0), horizon) } ?? horizon
            key.append(1 << 62 | Int64(template) << 24 | Int64(need) << 12 | Int64(room))
        }
        key.sort()
        var unique: [Int64] = []
        for k in key where unique.last != k { unique.append(k) }
        return unique
    }

    /// Sets the bit of every trie token whose bytes keep the DFA alive from `s`: one pass over
    /// the preorder trie, a dead prefix skipping its whole subtree. `words` has
    /// `TokenTrie.spareWords` words past the vocabulary (nodes without a token set bits there).
    private func walk(from s: Int32, into words: inout [UInt64]) {
        let trie = vocabulary.trie
        let n = trie.nodeCount
        var table = dfa.table
        walkStack[0] = s
        nodeClass.withUnsafeBufferPointer { nodeClass in
        trie.depth.withUnsafeBufferPointer { depth in
        trie.skip.withUnsafeBufferPointer { skip in
        trie.nodeToken.withUnsafeBufferPointer { nodeToken in
        walkStack.withUnsafeMutableBufferPointer { stack in
        words.withUnsafeMutableBufferPointer { words in
            var i = 0
            // `current` is the state at depth `currentDepth` on the path to node i, kept out of
            // memory while the walk descends; the stack is read only when it climbs.
            var current = s
            var currentDepth = 0
            while i < n {
                let d = Int(depth[i])
                let from = d > currentDepth ? current : stack[d &- 1]
                let k = Int(from) &+ Int(nodeClass[i])
                var t = table[k]
                if t < 0 {
                    dfa.fill(from)
                    table = dfa.table
                    t = table[k]
                }
                if t == LazyDFA.dead {
                    current = from
                    currentDepth = d &- 1
                    i = Int(skip[i])
                    continue
                }
                stack[d] = t
                current = t
                currentDepth = d
                let id = Int(nodeToken[i])
                words[id &>> 6] |= 1 &<< UInt64(id & 63)
                i &+= 1
            }
        }}}}}}
        for (first, other) in trie.duplicates where words[Int(first) >> 6] & (1 << UInt64(first & 63)) != 0 {
            words[Int(other) >> 6] |= 1 << UInt64(other & 63)
        }
    }

    private func computeForced(_ s0: Int32) -> [Int] {
        // The forced bytes: one live byte at a time, up to a state where the text could end.
        var bytes: [UInt8] = []
        var s = s0
        while !dfa.isAccepting(s), bytes.count < 4096, let b = dfa.onlyLiveByte(s) {
            bytes.append(b)
            s = dfa.next(s, b)
        }
        var tokens: [Int] = []
        var pos = 0
        var cur = s0
        let trie = vocabulary.trie
        while pos < bytes.count {
            // Longest token spelling bytes[pos...] within the forced bytes.
            let (best, node, depth) = trie.longestMatch(bytes, from: pos)
            if pos + depth == bytes.count && node >= 0 {
                // Tokens that continue past the forced bytes would be cut off by forcing; leave the choice.
                let live = trie.children(of: node).contains { dfa.next(s, trie.byte[$0]) != LazyDFA.dead }
                if live { break }
            }
            guard let chosen = best, let after = nextLocked(cur, chosen.id) else { break }
            tokens.append(chosen.id)
            cur = after
            pos += chosen.length
        }
        if tokens.isEmpty && !dfa.isAccepting(s0) {
            let m = maskLocked(s0)
            if m.allowedCount == 1 { tokens = m.allowedTokens }
        }
        return tokens
    }
}

/// Where one generation is in the grammar. A value: copy it to branch (speculative decoding).
public struct ConstraintState: Sendable {
    public let constraint: TokenConstraint
    var dfaState: Int32
    /// True once a stop token was taken; nothing may follow.
    public private(set) var isFinished = false

    init(constraint: TokenConstraint, dfaState: Int32) {
        self.constraint = constraint
        self.dfaState = dfaState
    }

    /// The text so far is one the grammar produces in full (a stop token is allowed). When
    /// generation ends for another reason (a token limit) and this is false, the output is
    /// incomplete and must be reported so.
    public var isComplete: Bool { constraint.isAccepting(dfaState) }

    /// The fewest bytes that make the text complete (0 when it is); one token spells at least one.
    public var distanceToCompletion: Int { isFinished ? 0 : constraint.distanceToCompletion(dfaState) }

    /// Tokens that make the text complete (0 when it is): one shortest completion in bytes spelled
    /// by the longest tokens, an upper bound on the fewest; Int.max when the vocabulary cannot
    /// spell it. A reply with at least this many tokens left, plus one for the stop token, can
    /// be completed (`TokenConstraint.allowedTokens(_:remaining:)`).
    public var tokensToCompletion: Int { isFinished ? 0 : constraint.tokensToCompletion(dfaState) }

    /// No token is allowed, not even a stop token: generation cannot go on (possible only when
    /// the vocabulary cannot spell what the grammar needs next, or the DFA limit was hit).
    public var isDead: Bool { !isFinished && constraint.allowedTokens(self).isEmpty }

    /// Takes `token`; throws when the grammar does not allow it here (the state is unchanged).
    public mutating func advance(token: Int) throws(GuidanceError) {
        guard !isFinished else {
            throw GuidanceError.tokenNotAllowed(token: token, reason: "generation already ended with a stop token")
        }
        if constraint.vocabulary.isStop(token) {
            guard isComplete else {
                throw GuidanceError.tokenNotAllowed(token: token, reason: "it is a stop token, and the output is not complete yet")
            }
            isFinished = true
            return
        }
        guard let bytes = constraint.vocabulary.bytes(of: token) else {
            throw GuidanceError.tokenNotAllowed(token: token, reason: "it is special or outside the vocabulary, and never part of constrained output")
        }
        constraint.lockForState()
        defer { constraint.unlockForState() }
        guard let next = constraint.nextLocked(dfaState, token) else {
            let shown = String(decoding: bytes, as: UTF8.self).debugDescription
            throw GuidanceError.tokenNotAllowed(token: token, reason: "its text \(shown) cannot continue the output under the \(constraint.grammar.summary)")
        }
        dfaState = next
    }

    public mutating func advance(tokens: [Int]) throws(GuidanceError) {
        for t in tokens { try advance(token: t) }
    }
}

extension TokenConstraint {
    func lockForState() { lock.lock() }
    func unlockForState() { lock.unlock() }
}
