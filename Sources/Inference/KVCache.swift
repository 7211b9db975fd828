// The KV cache: every layer's keys and values for the positions a conversation has run, per window
// kind. A global layer keeps every position; a sliding layer (Gemma 3's, every layer of a Phi-3
// with a window) keeps at most its window plus a margin between passes, as llama.cpp's SWA cache
// does (window + a batch), so a 4,096-token Gemma-3-1B context holds 576 positions on 22 of its 26
// layers. Rows are contiguous (slot 0 holds position `first`; compacted when a pass would run past
// the end), so the attention kernels read a window as one range. Not here: the attention itself
// (InferenceModel.Attention) and which prefixes servers keep (PromptCache, CachedPrefix).
import CBlockKernels
import Foundation
import ModelAssets
import ModelDefinition

/// Keys and values of every layer for the tokens seen so far. `count` tokens are valid;
/// `truncate(to:)` rolls back (speculative decoding rejects a draft's tail). Storage is reserved
/// uninitialized, so an unused capacity costs address space, not memory.
///
/// A sliding layer with window w needs, for a pass of R new rows after N positions, the keys of
/// positions N − w + 1 ..< N + R (its first row's window and the rows themselves); between passes
/// it keeps at most w + `slidingMargin` positions, the oldest dropped. So:
/// - a pass of at most margin + 1 rows, and every verify pass (`forward(_:cache:logitsAt:)`,
///   `forward(segments:)`, which grow the layer for it when they are longer), can be undone whole
///   by `truncate`; a longer prefill pass runs its sliding layers through a scratch of
///   w − 1 + R rows, one layer at a time, and keeps its last w + margin positions after;
/// - `truncate(to: L)` and `copyPrefix(length: L)` need the positions L − w + 1 ..< L, which
///   `holds(prefix:)` says the cache still has (always L = 0 and L = count; every L ≥
///   `shortestHeldPrefix`). Callers that may reach further back recompute from 0
///   (`truncate(toAtMost:)`), as a session or the prompt cache does.
public final class KVCache {
    public let precision: KVCachePrecision
    let width: Int
    /// Each layer's attention window (nil: a global layer), as the model's.
    let windows: [Int?]
    /// Positions a sliding layer keeps beyond its window between passes (nil: every position).
    public let slidingMargin: Int?
    /// Per layer: keys and values of `capacities[l]` rows, slot s holding position `firsts[l] + s`
    /// (rows `firsts[l] ..< count` valid).
    private(set) var keys: [UnsafeMutableRawPointer]
    private(set) var values: [UnsafeMutableRawPointer]
    private(set) var capacities: [Int]
    private(set) var firsts: [Int]
    public private(set) var count = 0
    let workspace = Workspace()
    /// Every layer's keys and values in one allocation: a server makes and drops a cache per
    /// request, and 2 x layers blocks of ~100 KB each (60 for SmolLM2) fragmented the heap (a
    /// 10-minute load run's RSS still rose 1.5 MB/min).
    private var storage: UnsafeMutableRawPointer

    /// A pass in progress (`begin` ... `finish`): its rows, and the sliding layers it runs
    /// through `scratch` (their first position there; nil: the layer's own rows).
    private var passRows = 0
    private var scratchFirst: [Int?]
    private var scratch: UnsafeMutableRawPointer?
    private var scratchRows = 0

    /// The default `slidingMargin`: a pass of up to 65 rows (a verify pass of a few drafted tokens,
    /// a decoding step, a short prompt chunk) needs no scratch and can be undone whole.
    public static let defaultSlidingMargin = 64

    init(layers: Int, width: Int, capacity: Int, precision: KVCachePrecision = .float32, windows: [Int?] = [],
         slidingMargin: Int? = KVCache.defaultSlidingMargin) {
        precondition(windows.isEmpty || windows.count == layers, "[KVCache] \(windows.count) windows for \(layers) layers")
        precondition(slidingMargin.map { $0 >= 0 } ?? true, "[KVCache] a negative sliding margin")
        self.width = width
        self.precision = precision
        let windows = windows.isEmpty ? [Int?](repeating: nil, count: layers) : windows
        self.windows = windows
        self.slidingMargin = slidingMargin
        firsts = [Int](repeating: 0, count: layers)
        scratchFirst = [Int?](repeating: nil, count: layers)
        let capacity = max(capacity, 1)
        capacities = windows.map { min(capacity, Self.bound($0, slidingMargin) ?? capacity) }
        (storage, keys, values) = Self.allocate(capacities, bytes: width * precision.size)
    }

    deinit {
        storage.deallocate()
        scratch?.deallocate()
    }

    /// The most positions a layer keeps between passes: window + margin (nil: unbounded).
    static func bound(_ window: Int?, _ margin: Int?) -> Int? {
        guard let window, let margin else { return nil }
        return window + margin
    }

    /// One allocation of per-layer blocks: layer l's keys then its values, `capacities[l]` rows of `bytes` each.
    private static func allocate(_ capacities: [Int], bytes: Int)
        -> (UnsafeMutableRawPointer, [UnsafeMutableRawPointer], [UnsafeMutableRawPointer]) {
        // malloc's own alignment: 64 went through posix_memalign, and serve's RSS after a minute
        // of 8 clients rose to 638 MB instead of 500 (freed blocks reused less well)
        let storage = UnsafeMutableRawPointer.allocate(byteCount: max(1, 2 * capacities.reduce(0, +) * bytes), alignment: 16)
        var k: [UnsafeMutableRawPointer] = [], v: [UnsafeMutableRawPointer] = []
        var at = storage
        for c in capacities {
            k.append(at)
            v.append(at + c * bytes)
            at += 2 * c * bytes
        }
        return (storage, k, v)
    }

    /// Bytes of one position's keys (or values) in one layer.
    var rowBytes: Int { width * precision.size }

    /// Bytes of keys and values the cache holds room for (every layer).
    public var bytes: Int { 2 * capacities.reduce(0, +) * rowBytes }

    /// The largest capacity of a layer: the positions a global layer has room for.
    public var capacity: Int { capacities.max() ?? 0 }

    /// Bytes one position holds in a layer that keeps every position (keys and values of every layer).
    public var bytesPerPosition: Int { keys.count * rowBytes * 2 }

    /// Bytes a cache for `config` holding `positions` positions reserves (`makeCache(capacity:)`):
    /// every position on global layers, at most window + margin on sliding ones.
    public static func bytes(_ config: ModelConfig, positions: Int, precision: KVCachePrecision = .float32,
                             slidingMargin: Int? = defaultSlidingMargin) -> Int {
        let rows = (0..<config.numLayers).reduce(0) { $0 + min(positions, bound(config.window(layer: $1), slidingMargin) ?? positions) }
        return 2 * rows * config.numKVHeads * config.headDim * precision.size
    }

    private func reallocate(_ newCapacities: [Int]) {
        let (s, k, v) = Self.allocate(newCapacities, bytes: rowBytes)
        for l in keys.indices {
            let held = max(0, count - firsts[l])
            k[l].copyMemory(from: keys[l], byteCount: held * rowBytes)
            v[l].copyMemory(from: values[l], byteCount: held * rowBytes)
        }
        storage.deallocate()
        (storage, keys, values, capacities) = (s, k, v, newCapacities)
    }

    /// Makes room for a pass of `rows` new positions: global layers grow (doubling); a sliding
    /// layer grows up to its bound (beyond it for an `undoable` pass, which must keep its first
    /// row's window), then compacts (drops its oldest rows, keeping the pass's window), or, for a
    /// prefill pass longer than the bound, runs this pass through a scratch (`enter`/`leave`).
    func begin(adding rows: Int, undoable: Bool) {
        precondition(passRows == 0 && rows > 0, "[KVCache.begin] \(rows) rows while a pass of \(passRows) runs")
        let n = count, end = count + rows
        var want = capacities
        for l in keys.indices {
            if let w = windows[l], let b = Self.bound(w, slidingMargin) {
                let needed = min(n, w - 1) + rows  // the pass's keys: its first row's window and its rows
                let target = max(min(end, b), undoable ? needed : 0)
                if target > capacities[l] { want[l] = max(target, min(2 * capacities[l], b)) }
            } else if end > capacities[l] {
                var c = capacities[l]
                while c < end { c *= 2 }
                want[l] = c
            }
        }
        if want != capacities { reallocate(want) }
        passRows = rows
        for l in keys.indices {
            guard let w = windows[l], slidingMargin != nil, end - firsts[l] > capacities[l] else { continue }
            let oldest = max(0, n - w + 1)  // the oldest position the pass reads
            if end - oldest <= capacities[l] {
                // compact: keep the newest rows that leave room for the pass
                let first = end - capacities[l], moved = n - first
                memmove(keys[l], keys[l] + (first - firsts[l]) * rowBytes, moved * rowBytes)
                memmove(values[l], values[l] + (first - firsts[l]) * rowBytes, moved * rowBytes)
                firsts[l] = first
            } else {
                scratchFirst[l] = oldest
                scratchRows = max(scratchRows, end - oldest)
            }
        }
        if scratchRows > 0 { scratch = .allocate(byteCount: 2 * scratchRows * rowBytes, alignment: 16) }
    }

    /// Before layer `l`'s keys are stored: a scratch layer gets the window its first row reads.
    func enter(layer l: Int) {
        guard let first = scratchFirst[l], let scratch else { return }
        let rows = count - first, from = (first - firsts[l]) * rowBytes
        scratch.copyMemory(from: keys[l] + from, byteCount: rows * rowBytes)
        (scratch + scratchRows * rowBytes).copyMemory(from: values[l] + from, byteCount: rows * rowBytes)
    }

    /// After layer `l`'s attention: a scratch layer keeps the pass's last `capacities[l]` positions.
    func leave(layer l: Int) {
        guard let first = scratchFirst[l], let scratch else { return }
        let end = count + passRows, kept = end - capacities[l]
        let from = (kept - first) * rowBytes
        keys[l].copyMemory(from: scratch + from, byteCount: capacities[l] * rowBytes)
        values[l].copyMemory(from: scratch + scratchRows * rowBytes + from, byteCount: capacities[l] * rowBytes)
        firsts[l] = kept
        scratchFirst[l] = nil
    }

    /// The pass's rows are in: `count` moves past them.
    func finish() {
        precondition(passRows > 0 && scratchFirst.allSatisfy { $0 == nil }, "[KVCache.finish] no pass, or a layer not left")
        count += passRows
        passRows = 0
        scratch?.deallocate()
        scratch = nil
        scratchRows = 0
    }

    /// Where layer `l`'s rows are during a pass: keys and values from position `first` on.
    func view(layer l: Int) -> (keys: UnsafeMutableRawPointer, values: UnsafeMutableRawPointer, first: Int) {
        if let first = scratchFirst[l], let scratch { return (scratch, scratch + scratchRows * rowBytes, first) }
        return (keys[l], values[l], firsts[l])
    }

    /// Stores one position's keys and values (`width` floats each) of layer `layer`, rounded to
    /// the cache's precision.
    func store(layer: Int, position: Int, keys k: UnsafePointer<Float>, values v: UnsafePointer<Float>) {
        let (keys, values, first) = view(layer: layer)
        precondition(position >= first && position < count + passRows, "[KVCache.store] position \(position) outside \(first) ..< \(count + passRows)")
        let at = (position - first) * rowBytes
        switch precision {
        case .float32:
            (keys + at).copyMemory(from: k, byteCount: rowBytes)
            (values + at).copyMemory(from: v, byteCount: rowBytes)
        case .float16:
            bk_to_half(k, (keys + at).assumingMemoryBound(to: UInt16.self), width)
            bk_to_half(v, (values + at).assumingMemoryBound(to: UInt16.self), width)
        }
    }

    /// The shortest length other than 0 the cache can be cut back to (0 when no sliding layer
    /// dropped a position): what a sliding layer needs after length L is L − w + 1 ..< L.
    public var shortestHeldPrefix: Int {
        keys.indices.reduce(0) { m, l in firsts[l] > 0 ? max(m, firsts[l] + windows[l]! - 1) : m }
    }

    /// True when the cache holds what a pass after its first `length` positions needs (for
    /// `truncate(to:)` and for a `copyPrefix` from it).
    public func holds(prefix length: Int) -> Bool {
        length <= count && (length == 0 || length >= shortestHeldPrefix)
    }

    public func truncate(to length: Int) {
        precondition(passRows == 0 && holds(prefix: length),
                     "[KVCache.truncate] to \(length) of \(count) positions; the sliding layers hold from length \(shortestHeldPrefix) on")
        count = length
        if length == 0 { firsts = firsts.map { _ in 0 } }
    }

    /// Cuts back to `length` when the cache holds that prefix, else to 0 (the sliding layers
    /// dropped positions it needs: the caller runs the tokens again); returns the length kept.
    @discardableResult
    public func truncate(toAtMost length: Int) -> Int {
        let kept = holds(prefix: min(length, count)) ? min(length, count) : 0
        truncate(to: kept)
        return kept
    }

    /// Replaces the contents with the first `length` positions of `other` (a prompt prefix
    /// computed once and shared by several conversations), which must hold them (`holds(prefix:)`).
    public func copyPrefix(of other: KVCache, length: Int) {
        precondition(other.keys.count == keys.count && other.width == width && other.precision == precision && other.windows == windows
                     && other.holds(prefix: length),
                     "[KVCache.copyPrefix] \(length) positions of a cache holding \(other.count) (its sliding layers from length \(other.shortestHeldPrefix) on)")
        precondition(passRows == 0, "[KVCache.copyPrefix] during a pass")
        count = 0
        firsts = firsts.map { _ in 0 }
        var want = capacities
        for l in keys.indices {
            let target = min(length, Self.bound(windows[l], slidingMargin) ?? length)
            if target > capacities[l] { want[l] = target }
        }
        if want != capacities { reallocate(want) }
        for l in keys.indices {
            let first = windows[l] == nil ? 0 : max(other.firsts[l], length - capacities[l])
            let from = (first - other.firsts[l]) * rowBytes, rows = length - first
            keys[l].copyMemory(from: other.keys[l] + from, byteCount: rows * rowBytes)
            values[l].copyMemory(from: other.values[l] + from, byteCount: rows * rowBytes)
            firsts[l] = first
        }
        count = length
    }
}
