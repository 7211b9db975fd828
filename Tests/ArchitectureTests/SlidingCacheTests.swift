// The KV cache bounded per window kind (issue 37): Gemma 3's sliding layers (window 4 on 6 of 7
// layers) and Phi-3's (window 16 on every layer) keep window + a small margin of positions, and
// every pass over such a cache — chunked prefill with chunks around the window, one-token decoding,
// batched decoding, verify passes rolled back, segmented passes, a copied prefix, the server's
// prompt cache, speculative decoding — gives the bits the unbounded cache gives (the same
// arithmetic on the same keys) and the training pass's logits. Also the bytes of the gemma-3-1b
// shape's cache at a 4,096-token context.
import AdapterRuntime
import Autograd
import Export
import Foundation
@testable import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import TestSupport
import Training
import XCTest

final class SlidingCacheTests: XCTestCase {
    /// A fixture with room for 256 positions, its training model, a 150-token sequence and a
    /// second one, and engines whose sliding layers keep window + `margin` positions or all.
    struct Setup {
        let name: String
        let config: ModelConfig
        let model: LlamaModel
        let ids: [Int], other: [Int]
        let expected: [Float], otherExpected: [Float]  // [150, V] each
        let window: Int, margin: Int
        let base: BaseWeights

        init(_ name: String, margin: Int) throws {
            self.name = name
            let f = try ArchitectureFixture(name)
            var config = f.config
            config.maxPositionEmbeddings = 256  // room for the positions; no effect on the numbers
            self.config = config
            var rng = SeededRNG(seed: 7)
            base = try BaseWeights(config: config, tensors: f.weights())
            model = try LlamaModel(weights: base, lora: nil, rng: &rng)
            var g = SeededRNG(seed: 5)
            ids = (0..<150).map { _ in Int(g.next() % 297) + 3 }
            other = (0..<150).map { _ in Int(g.next() % 297) + 3 }
            expected = ArchitectureFixture.logits(model, [ids])
            otherExpected = ArchitectureFixture.logits(model, [other])
            window = config.slidingWindow!
            self.margin = margin
        }

        var V: Int { config.vocabSize }
        func engine(bounded: Bool, kvCache: KVCachePrecision = .float32) -> InferenceModel {
            InferenceModel(base: base, kvCache: kvCache, slidingMargin: bounded ? margin : nil)
        }
        func rows(_ logits: [Float], _ range: Range<Int>) -> [Float] { Array(logits[(range.lowerBound * V)..<(range.upperBound * V)]) }
        var slidingLayers: [Int] { (0..<config.numLayers).filter { config.window(layer: $0) != nil } }
    }

    static let setups: [(String, Int)] = [("gemma3", 3), ("phi3", 5)]

    /// Runs `script` on the bounded and the unbounded engine: the same bits, and (float32 caches)
    /// the training pass's logits `reference` within 1e-4.
    func check(_ s: Setup, _ what: String, kvCache: KVCachePrecision = .float32, reference: [Float]? = nil,
               _ script: (InferenceModel) -> [Float]) {
        let bounded = script(s.engine(bounded: true, kvCache: kvCache))
        let unbounded = script(s.engine(bounded: false, kvCache: kvCache))
        XCTAssertEqual(bounded.count, unbounded.count, "\(s.name) \(what)")
        XCTAssertTrue(bounded == unbounded, "\(s.name) \(what): bounded and unbounded caches differ by \(relativeError(bounded, unbounded))")
        if let reference { assertClose(bounded, reference, rel: kvCache == .float32 ? 1e-4 : 1e-2, "\(s.name) \(what) against the training pass") }
    }

    /// Prefill in chunks of sizes around the window and the margin (one to many passes of it),
    /// in every attention path, then the cache's size: the sliding layers hold window + margin
    /// rows, the global ones every position.
    func testChunkedPrefillPastTheWindow() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            let w = s.window
            for chunk in [1, w - 1, w, w + 1, margin + 1, margin + 2, w + margin + 1, 2 * w + 3, 40, 150] {
                for mode in chunk >= 32 ? InferenceModel.PromptAttention.allCases : [.auto] {
                    check(s, "chunks of \(chunk), \(mode) attention", reference: s.expected) { engine in
                        InferenceModel.$promptAttention.withValue(mode) {
                            let cache = engine.makeCache(capacity: 8)
                            var got: [Float] = []
                            for a in stride(from: 0, to: 150, by: chunk) {
                                got += engine.forward(Array(s.ids[a..<min(150, a + chunk)]), cache: cache, allLogits: true)
                            }
                            XCTAssertEqual(cache.count, 150)
                            return got
                        }
                    }
                }
            }
            // the bound: sliding layers at window + margin rows, global ones at every position
            let engine = s.engine(bounded: true), cache = engine.makeCache(capacity: 8)
            _ = engine.forward(Array(s.ids[..<100]), cache: cache)
            for t in 100..<150 { _ = engine.forward([s.ids[t]], cache: cache) }
            for l in 0..<s.config.numLayers {
                if s.slidingLayers.contains(l) {
                    XCTAssertEqual(cache.capacities[l], w + margin, "\(name) layer \(l)")
                    XCTAssertEqual(cache.firsts[l], 150 - (w + margin), "\(name) layer \(l) keeps the last window + margin positions")
                } else {
                    XCTAssertGreaterThanOrEqual(cache.capacities[l], 150, "\(name) layer \(l)")
                }
            }
            let unbounded = s.engine(bounded: false).makeCache(capacity: 150)
            let width = s.config.numKVHeads * s.config.headDim * 4
            XCTAssertEqual(KVCache.bytes(s.config, positions: 150, slidingMargin: margin),
                           2 * width * (s.slidingLayers.count * (w + margin) + (s.config.numLayers - s.slidingLayers.count) * 150))
            XCTAssertEqual(unbounded.bytes, 2 * width * s.config.numLayers * 150)
            XCTAssertLessThan(cache.bytes, unbounded.bytes)
        }
    }

    /// A 100-token prefix (one pass longer than window + margin: the sliding layers through the
    /// pass's scratch) then one token at a time; and two conversations decoded as batched rows.
    func testDecodingAndBatchedDecodingPastTheWindow() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            for kv in KVCachePrecision.allCases {
                check(s, "decoding, \(kv) cache", kvCache: kv, reference: s.expected) { engine in
                    let cache = engine.makeCache()
                    var got = engine.forward(Array(s.ids[..<100]), cache: cache, allLogits: true)
                    for t in 100..<150 { got += engine.forward([s.ids[t]], cache: cache) }
                    return got
                }
                check(s, "batched decoding, \(kv) cache", kvCache: kv, reference: s.expected + s.otherExpected) { engine in
                    let caches = [engine.makeCache(capacity: 4), engine.makeCache(capacity: 4)]
                    var got: [[Float]] = [[], []], out: [Float] = []
                    for t in 0..<150 {
                        engine.forward(batch: [s.ids[t], s.other[t]], caches: caches, into: &out)
                        got[0] += out[0..<s.V]
                        got[1] += out[s.V...]
                    }
                    return got[0] + got[1]
                }
            }
        }
    }

    /// Verify passes of k + 1 rows whose proposals are wrong after j of them, rolled back to
    /// the kept rows, round after round past the window — k below and above the margin (a pass
    /// longer than the margin grows the sliding layers rather than lose the rows it may drop) —
    /// for one conversation (`forward(_:cache:logitsAt:)`) and two in segmented passes.
    func testVerifyPassesWithRollbackPastTheWindow() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            let plan: [(k: Int, accepted: Int)] = [(2, 0), (4, 2), (margin + 3, 1), (2 * s.window + 2, margin + 2), (3, 3), (6, 0)]
            /// The tokens of a round at `p`: the next token, then k proposals, wrong from the j-th.
            func round(_ seq: [Int], _ p: Int, _ k: Int, _ j: Int) -> [Int] {
                (0...k).map { i in p + i >= seq.count ? 3 : (i <= j ? seq[p + i] : (seq[p + i] - 2) % 297 + 3) }
            }
            for kv in KVCachePrecision.allCases {
                check(s, "verify passes with rollback, \(kv) cache", kvCache: kv, reference: s.expected) { engine in
                    let cache = engine.makeCache(capacity: 8)
                    var got = engine.forward(Array(s.ids[..<20]), cache: cache, allLogits: true)
                    var p = 20, r = 0, logits: [Float] = []
                    while p < 150 {
                        let (k, j) = plan[r % plan.count]
                        let tokens = round(s.ids, p, k, j)
                        engine.forward(tokens, cache: cache, logitsAt: Array(0...k), into: &logits)
                        let keep = min(j + 1, 150 - p)  // the rows up to the first wrong proposal
                        got += s.rows(logits, 0..<keep)
                        XCTAssertTrue(cache.holds(prefix: p + keep), "\(name): a verify pass can be rolled back")
                        cache.truncate(to: p + keep)
                        p += keep
                        r += 1
                    }
                    if engine.slidingMargin != nil {  // the pass of 2·window + 3 rows grew the sliding layers past window + margin
                        XCTAssertTrue(s.slidingLayers.allSatisfy { cache.capacities[$0] >= s.window - 1 + 2 * s.window + 3 }, "\(name)")
                    }
                    return got
                }
                check(s, "segmented verify passes with rollback, \(kv) cache", kvCache: kv, reference: s.expected + s.otherExpected) { engine in
                    let caches = [engine.makeCache(capacity: 8), engine.makeCache(capacity: 8)]
                    let seqs = [s.ids, s.other]
                    var got: [[Float]] = [[], []], p = [0, 0], r = 0, logits: [Float] = []
                    while p.contains(where: { $0 < 150 }) {
                        var segments: [InferenceModel.PassSegment] = [], plans: [(b: Int, k: Int, j: Int)] = []
                        for b in 0..<2 where p[b] < 150 {
                            let (k, j) = plan[(r + 3 * b) % plan.count]
                            segments.append(.init(tokens: round(seqs[b], p[b], k, j), cache: caches[b], adapter: nil, logitRows: Array(0...k)))
                            plans.append((b, k, j))
                        }
                        engine.forward(segments: segments, into: &logits)
                        var row = 0
                        for (b, k, j) in plans {
                            let keep = min(j + 1, 150 - p[b])
                            got[b] += s.rows(logits, row..<(row + keep))
                            caches[b].truncate(to: p[b] + keep)
                            p[b] += keep
                            row += k + 1
                        }
                        r += 1
                    }
                    return got[0] + got[1]
                }
            }
        }
    }

    /// A prefix copied from a cache that went past the window (`copyPrefix`, as batched
    /// generation's shared prefix and the server's prompt cache do): a length whose window the
    /// sliding layers still hold continues with the bits of the unbounded cache's copy; a
    /// shorter one is refused (`holds`), and `truncate(toAtMost:)` falls back to 0.
    func testCopiedPrefixBeyondTheWindow() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            let held = 120 - margin - 1  // the shortest prefix a cache of 120 positions still holds
            for length in [120, 120 - margin, held] {
                check(s, "a copied prefix of \(length) of 120 positions", reference: s.rows(s.expected, length..<150)) { engine in
                    let source = engine.makeCache(capacity: 8)
                    for a in stride(from: 0, to: 120, by: 10) { _ = engine.forward(Array(s.ids[a..<(a + 10)]), cache: source) }
                    XCTAssertTrue(source.holds(prefix: length), "\(name) \(length)")
                    let target = engine.makeCache(capacity: 8)
                    target.copyPrefix(of: source, length: length)
                    return engine.forward(Array(s.ids[length...]), cache: target, allLogits: true)
                }
            }
            let engine = s.engine(bounded: true), cache = engine.makeCache()
            for a in stride(from: 0, to: 120, by: 10) { _ = engine.forward(Array(s.ids[a..<(a + 10)]), cache: cache) }
            XCTAssertEqual(cache.shortestHeldPrefix, held, name)
            XCTAssertFalse(cache.holds(prefix: held - 1), name)
            XCTAssertTrue(cache.holds(prefix: 0) && cache.holds(prefix: 120), name)
            XCTAssertEqual(cache.truncate(toAtMost: held - 1), 0, "\(name): what the window needs is gone, so it starts over")
            XCTAssertEqual(engine.forward(s.ids, cache: cache, allLogits: true), engine.forward(s.ids, cache: engine.makeCache(), allLogits: true), name)
            // the unbounded cache holds every prefix
            let unbounded = s.engine(bounded: false), all = unbounded.makeCache()
            _ = unbounded.forward(Array(s.ids[..<120]), cache: all)
            XCTAssertEqual(all.shortestHeldPrefix, 0, name)
        }
    }

    /// The server's prompt cache on a sliding model: a prompt sharing a long prefix (past the
    /// window) with a kept one whose sliding layers still hold that prefix's window copies it, and
    /// continues with the training pass's logits; one that shares a shorter prefix (its window
    /// dropped) copies nothing; a prompt a kept one extends is served from it when it can be.
    func testPromptCacheReusesWhatTheSlidingLayersHold() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            let engine = s.engine(bounded: true)
            let promptCache = PromptCache(budget: 64 << 20, minimumLength: 4)
            let kept = Array(s.ids[..<110])
            let source = engine.makeCache(capacity: 8)
            _ = engine.forward(kept, cache: source)
            promptCache.keep(kept, adapter: nil, from: source, model: engine)
            XCTAssertEqual(promptCache.usage.prompts, 1)
            XCTAssertEqual(promptCache.usage.bytes, KVCache.bytes(s.config, positions: 110, slidingMargin: margin), name)
            // shares 108 tokens (110 − margin − 1 ≤ 108: held) and goes on as `ids`
            let target = engine.makeCache(capacity: 8)
            let rest = promptCache.seed(target, for: s.ids, adapter: nil)
            XCTAssertEqual(rest.count, 150 - 110, "\(name): copies the whole kept prompt")
            assertClose(engine.forward(Array(rest), cache: target, allLogits: true), s.rows(s.expected, 110..<150), "\(name) after the kept prompt")
            let near = Array(s.ids[..<(110 - margin - 1)]) + s.other[..<30]
            let nearTarget = engine.makeCache(capacity: 8)
            let nearRest = promptCache.seed(nearTarget, for: near, adapter: nil)
            XCTAssertEqual(nearRest.count, 30, "\(name): copies the \(110 - margin - 1) shared positions")
            let nearExpected = ArchitectureFixture.logits(s.model, [near])
            assertClose(engine.forward(Array(nearRest), cache: nearTarget, allLogits: true), s.rows(nearExpected, (110 - margin - 1)..<near.count),
                        "\(name) after a shared prefix of the kept prompt")
            // a shorter shared prefix: its window is gone from the kept prompt's sliding layers
            let far = Array(s.ids[..<60]) + s.other[..<30]
            XCTAssertEqual(promptCache.seed(engine.makeCache(), for: far, adapter: nil).count, far.count, "\(name): nothing to copy")
            XCTAssertEqual(promptCache.hits, 2)
        }
    }

    /// The scheduler on Gemma 3 with a prompt cache and prompts longer than the window: every
    /// request gets the tokens the unbounded engine gives it alone, a prompt whose shared prefix
    /// the kept one still holds reuses it, one that shares too little reuses nothing.
    func testSchedulerOverASlidingModel() async throws {
        let s = try Setup("gemma3", margin: 8)
        let system = Array(s.ids[..<90])
        let a = system + [11, 12, 13, 14, 15], b = system + [21, 22, 23], c = Array(system[..<40]) + [31, 32, 33]
        let scheduler = Scheduler(model: s.engine(bounded: true), maxActive: 2, queueCapacity: 4, prefillChunk: .tokens(7))
        scheduler.start()
        defer { scheduler.shutdown() }
        var reused = 0
        for (i, (prompt, copied)) in [(a, 0), (b, 90), (c, 0)].enumerated() {
            let request = DecodeRequest(prompt: prompt, adapter: nil, maxTokens: 12, stopTokens: [])
            var tokens: [Int] = []
            for await e in try scheduler.submit(request).events { if case .tokens(let t) = e { tokens += t } }
            let alone = Generator.generate(s.engine(bounded: false), GenerationRequest(prompt: prompt, maxNewTokens: 12, stopTokens: []))
            XCTAssertEqual(tokens, alone.tokens, "request \(i)")
            reused += copied
            XCTAssertEqual(scheduler.promptCacheUse.reusedTokens, reused, "request \(i)")
        }
    }

    /// Speculative decoding with prompt lookup (proposals taken from a repeating prompt, mostly
    /// rejected by the random model: verify passes rolled back) past the window gives the greedy
    /// tokens of plain decoding on the unbounded cache.
    func testSpeculativeDecodingPastTheWindow() throws {
        for (name, margin) in Self.setups {
            let s = try Setup(name, margin: margin)
            let prompt = Array((s.ids[..<12] + s.ids[..<12] + s.ids[..<12]).prefix(30))
            let request = GenerationRequest(prompt: prompt, maxNewTokens: 60, stopTokens: [])
            let plain = Generator.generate(s.engine(bounded: false), request)
            let decoder = SpeculativeDecoder(target: s.engine(bounded: true), drafter: .ngram(NGramDraft()), draftTokens: 4)
            let (tokens, stats) = decoder.generate(request)
            XCTAssertEqual(tokens, plain.tokens, name)
            XCTAssertGreaterThan(stats.generation.draftTokensProposed, 0, "\(name): the lookup proposed tokens")
        }
    }

    /// A session over Gemma 3 whose turns run past the window + margin (its cache compacted):
    /// the second turn reuses the cached conversation and answers what a new session given the
    /// same transcript answers from a whole prefill.
    func testSessionTurnsPastTheWindow() async throws {
        let f = try ArchitectureFixture("gemma3")
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = f.config
        config.maxPositionEmbeddings = 512
        try ModelExport.writeGGUF(config: config, tensors: f.weights(), tokenizer: ArchitectureFixture.tokenizerData(), to: dir + "/base.gguf")
        let model = try LanguageModel(path: dir + "/base.gguf", activations: .float32)
        let options = GenerationOptions(maximumResponseTokens: 90)
        let session = LanguageModelSession(model: model.plain)
        let first = try await session.respond(to: "say fox", options: options)
        XCTAssertGreaterThan(first.promptTokens + first.generatedTokens, 4 + KVCache.defaultSlidingMargin, "past the window + margin")
        let after = session.transcript
        let second = try await session.respond(to: "say dog", options: options)
        XCTAssertGreaterThan(second.reusedPromptTokens, 0, "the cached turn is reused")
        let fresh = LanguageModelSession(model: model.plain, transcript: after)
        let again = try await fresh.respond(to: "say dog", options: options)
        XCTAssertEqual(again.reusedPromptTokens, 0)
        XCTAssertEqual(second.content, again.content)
    }

    /// The figure: the gemma-3-1b shape (26 layers, 22 sliding with window 512, one kv head
    /// of 256) at a 4,096-token context — a cache taken there by a whole prefill and decoding
    /// steps holds 512 + 64 positions on the sliding layers, every position on the 4 global ones.
    func testGemma3OneBillionShapeCacheBytesAtA4096Context() {
        let config = PublishedShape.gemma3_1b.config
        let windows = (0..<config.numLayers).map { config.window(layer: $0) }
        XCTAssertEqual(windows.compactMap { $0 }, [Int](repeating: 512, count: 22))
        let rowBytes = config.numKVHeads * config.headDim * 4  // 1 KiB of keys (or values) per position per layer
        for precision in KVCachePrecision.allCases {
            let cache = KVCache(layers: config.numLayers, width: config.numKVHeads * config.headDim, capacity: 4096,
                                precision: precision, windows: windows)
            // a 4,000-token prefill, then 96 decoding steps, as runBlocks drives a cache (no model: the
            // bookkeeping and the allocation only)
            for rows in [4000] + [Int](repeating: 1, count: 96) {
                cache.begin(adding: rows, undoable: rows == 1)
                for l in 0..<config.numLayers {
                    cache.enter(layer: l)
                    cache.leave(layer: l)
                }
                cache.finish()
            }
            XCTAssertEqual(cache.count, 4096)
            let bounded = 2 * (22 * (512 + KVCache.defaultSlidingMargin) + 4 * 4096) * rowBytes / (4 / precision.size)
            let every = 2 * 26 * 4096 * rowBytes / (4 / precision.size)
            XCTAssertEqual(cache.bytes, bounded, "\(precision)")
            XCTAssertEqual(KVCache.bytes(config, positions: 4096, precision: precision), bounded, "\(precision)")
            XCTAssertEqual(KVCache.bytes(config, positions: 4096, precision: precision, slidingMargin: nil), every, "\(precision)")
            print(String(format: "gemma-3-1b shape, %@ KV cache at 4,096 positions: %d bytes (%.1f MB; 22 sliding layers x %d positions + 4 global x 4,096), every position: %d bytes (%.1f MB)",
                         precision.rawValue, cache.bytes, Double(cache.bytes) / 1e6, 512 + KVCache.defaultSlidingMargin, every, Double(every) / 1e6))
        }
    }
}
