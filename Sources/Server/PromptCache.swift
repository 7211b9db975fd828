// Prompts' keys and values kept after their prefill, per adapter, so that a request whose prompt
// begins like a recent one's (the same system message, a conversation's earlier turns) copies
// those positions instead of computing them again — what vLLM calls automatic prefix caching and
// llama.cpp's server prompt caching. Bounded by bytes, least recently used out first. A copied
// prefix gives the logits of a whole-prompt prefill to float rounding (the rows after it are
// computed in a shorter pass; batched generation's shared prefixes do the same). Used only by
// the scheduler's decoding thread. A model with sliding-window layers keeps only a window + margin
// of a prompt's last positions there (KVCache), so an entry serves a common prefix that ends within
// its last margin + 1 positions (the rows after it need only the window before them), or none.
import Inference

final class PromptCache {
    struct Entry {
        /// Held, so its identity cannot pass to another adapter while the entry lives.
        let adapter: RowAdapter?
        let tokens: [Int]
        let cache: KVCache
        let bytes: Int
        var lastUse: Int
    }

    /// Bytes of keys and values kept at most (0: nothing is kept).
    let budget: Int
    /// Shorter common prefixes are computed again (a copy has a cost too).
    let minimumLength: Int
    private(set) var entries: [Entry] = []
    private var bytes = 0, clock = 0
    /// Prompts that reused a kept prefix, and the positions they copied instead of computing.
    private(set) var hits = 0, reusedTokens = 0

    init(budget: Int, minimumLength: Int = 8) {
        self.budget = budget
        self.minimumLength = minimumLength
    }

    /// Seeds the empty `cache` with the longest kept prefix of `prompt` for `adapter` (leaving
    /// `prompt` at least one token of its own, whose logits the prefill needs); returns the
    /// tokens of `prompt` still to run.
    func seed(_ cache: KVCache, for prompt: [Int], adapter: RowAdapter?) -> ArraySlice<Int> {
        var best = -1, length = 0
        for (i, e) in entries.enumerated() where e.adapter === adapter {
            let n = min(CachedPrefix.commonLength(e.tokens, prompt), prompt.count - 1)
            // a prefix shorter than what the entry's sliding layers hold cannot be served from it
            if n > length && e.cache.holds(prefix: n) { (best, length) = (i, n) }
        }
        guard best >= 0, length >= minimumLength else { return prompt[...] }
        clock += 1
        entries[best].lastUse = clock
        cache.copyPrefix(of: entries[best].cache, length: length)
        hits += 1
        reusedTokens += length
        return prompt[length...]
    }

    /// Keeps the first `prompt.count` positions of `cache` (just prefilled with `prompt`) for
    /// later prompts; an entry `prompt` extends is replaced, one that extends `prompt` is kept
    /// instead (for a model with sliding layers: when it serves every prefix the other would).
    func keep(_ prompt: [Int], adapter: RowAdapter?, from cache: KVCache, model: InferenceModel) {
        guard budget > 0, prompt.count >= minimumLength, cache.holds(prefix: prompt.count) else { return }
        clock += 1
        let covering = entries.firstIndex { $0.adapter === adapter && $0.tokens.count >= prompt.count && CachedPrefix.commonLength($0.tokens, prompt) == prompt.count }
        if let i = covering, entries[i].cache.shortestHeldPrefix == 0 {  // it serves every prefix of `prompt`
            entries[i].lastUse = clock
            return
        }
        let size = KVCache.bytes(model.config, positions: prompt.count, precision: model.kvCache, slidingMargin: model.slidingMargin)
        guard size <= budget else { return }
        let copy = model.makeCache(capacity: prompt.count)
        copy.copyPrefix(of: cache, length: prompt.count)
        if let i = covering, entries[i].cache.shortestHeldPrefix <= copy.shortestHeldPrefix {  // and every one the copy would
            entries[i].lastUse = clock
            return
        }
        entries.removeAll { e in
            let extended = e.adapter === adapter && CachedPrefix.commonLength(e.tokens, prompt) == e.tokens.count
                && copy.shortestHeldPrefix <= e.cache.shortestHeldPrefix
            if extended { bytes -= e.bytes }
            return extended
        }
        while bytes + size > budget, let oldest = entries.indices.min(by: { entries[$0].lastUse < entries[$1].lastUse }) {
            bytes -= entries[oldest].bytes
            entries.remove(at: oldest)
        }
        entries.append(Entry(adapter: adapter, tokens: prompt, cache: copy, bytes: size, lastUse: clock))
        bytes += size
    }

    /// Prompts kept and their bytes.
    var usage: (prompts: Int, bytes: Int) { (entries.count, bytes) }
}
