// The scheduler on the tiny model: continuous batching gives every request, whatever its adapter
// and whenever it joins, the tokens the generation loop gives it alone; a full queue is refused;
// cancelled requests (a consumer that leaves while waiting or mid-reply) free their slots.
import Autograd
import DataSchema
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import TestSupport
import XCTest

final class SchedulerTests: XCTestCase {
    func tinyBase(_ name: String = #function, seed: UInt64 = 1, context: Int = 2048) throws -> BaseModel {
        try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir(name), seed: seed, context: context), storage: .stored)
    }

    static func randomAdapter(_ base: BaseModel, seed: UInt64, rank: Int = 4) -> Adapter {
        TestSupport.randomAdapter(base, rank: rank, scale: 0.2, seed: seed)
    }

    /// Every event of a request until it finishes.
    static func collect(_ events: AsyncStream<DecodeEvent>) async -> (tokens: [Int], finish: DecodeEvent?) {
        var tokens: [Int] = [], last: DecodeEvent? = nil
        for await e in events {
            if case .tokens(let t) = e { tokens += t } else { last = e }
        }
        return (tokens, last)
    }

    func testContinuousBatchingGivesEachRequestWhatItGetsAlone() async throws {
        try await continuousBatchingGivesEachRequestWhatItGetsAlone(prefillChunk: .seconds(0.5))
    }

    /// The same with prompts prefilled 3 tokens at a time between passes (every prompt in several
    /// chunks, 1 to 2 tokens for a prompt that meets a spent budget).
    func testChunkedPrefillGivesEachRequestWhatItGetsAlone() async throws {
        try await continuousBatchingGivesEachRequestWhatItGetsAlone(prefillChunk: .tokens(3))
    }

    func continuousBatchingGivesEachRequestWhatItGetsAlone(prefillChunk: Scheduler.PrefillChunk, name: String = #function) async throws {
        let base = try tinyBase(name)
        let adapters: [Adapter?] = [Self.randomAdapter(base, seed: 1), nil, Self.randomAdapter(base, seed: 2), Self.randomAdapter(base, seed: 1),
                                    Self.randomAdapter(base, seed: 3, rank: 8), nil, Self.randomAdapter(base, seed: 2)]
        let rowAdapters = adapters.map { $0.map { RowAdapter($0, config: base.config) } }
        let V = base.config.vocabSize
        var requests: [DecodeRequest] = []
        for i in adapters.indices {
            let prompt = (0..<(4 + 3 * i)).map { (5 * $0 + 13 * i + 3) % V }
            // two rows sample (their seeds make them repeatable), the rest are greedy; no stop
            // token for some, so they run to their budget while others join and leave
            let sampling = i % 3 == 2 ? SamplingOptions(temperature: 1, topK: 20) : SamplingOptions()
            requests.append(DecodeRequest(prompt: prompt, adapter: rowAdapters[i], maxTokens: 6 + 5 * i,
                                          stopTokens: i % 2 == 0 ? base.stopTokenIds : [], sampling: sampling, seed: UInt64(40 + i)))
        }
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 3, queueCapacity: 16, prefillChunk: prefillChunk)
        scheduler.start()
        defer { scheduler.shutdown() }
        let streams = try requests.map { try scheduler.submit($0).events }
        var results = [(tokens: [Int], finish: DecodeEvent?)](repeating: ([], nil), count: requests.count)
        await withTaskGroup(of: (Int, [Int], DecodeEvent?).self) { group in
            for (i, s) in streams.enumerated() { group.addTask { let r = await Self.collect(s); return (i, r.tokens, r.finish) } }
            for await (i, t, f) in group { results[i] = (t, f) }
        }
        for (i, r) in requests.enumerated() {
            let alone = Generator.generate(InferenceModel(base: base.weights, adapter: adapters[i]),
                                           GenerationRequest(prompt: r.prompt, maxNewTokens: r.maxTokens, stopTokens: r.stopTokens,
                                                             sampling: r.sampling, seed: r.seed))
            XCTAssertEqual(results[i].tokens, alone.tokens, "request \(i) (adapter \(adapters[i]?.source ?? "none")) gets what it gets alone")
            let reason: DecodeFinish = alone.stats.stoppedAtEndOfTurn ? .stop : .length
            XCTAssertEqual(results[i].finish, .finished(reason, completionTokens: alone.tokens.count, complete: reason == .stop), "request \(i)")
        }
        let s = scheduler.status
        XCTAssertEqual(s.active, 0)
        XCTAssertEqual(s.queued, 0)
        XCTAssertLessThan(s.passes, s.rowSteps, "rows shared passes")
    }

    /// Prompts that begin alike with the same adapter copy the kept prefix (the longest, leaving
    /// each prompt a token of its own) and still get what they get alone; another adapter, or a
    /// scheduler without a prompt cache, reuses nothing.
    func testPromptsThatBeginAlikeReuseTheKeptPrefix() async throws {
        let base = try tinyBase()
        let V = base.config.vocabSize
        let adapter = Self.randomAdapter(base, seed: 5)
        let rowAdapter = RowAdapter(adapter, config: base.config)
        let system = (0..<20).map { (7 * $0 + 2) % V }
        let a = system + [11, 12, 13, 14, 15], b = system + [21, 22, 23], c = system + [31, 32]
        // (prompt, adapter?, positions expected to be copied)
        let plan: [([Int], Bool, Int)] = [(a, true, 0), (b, true, 20), (c, false, 0), (a + [16, 17, 18], true, 25), (b, true, 22), (c, false, 21)]
        for cacheBytes in [128 << 20, 0] {
            let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 4, promptCacheBytes: cacheBytes)
            scheduler.start()
            defer { scheduler.shutdown() }
            var reused = 0
            for (i, (prompt, adapted, copied)) in plan.enumerated() {
                let request = DecodeRequest(prompt: prompt, adapter: adapted ? rowAdapter : nil, maxTokens: 8, stopTokens: [])
                let got = await Self.collect(try scheduler.submit(request).events)
                let alone = Generator.generate(InferenceModel(base: base.weights, adapter: adapted ? adapter : nil),
                                               GenerationRequest(prompt: prompt, maxNewTokens: 8, stopTokens: []))
                XCTAssertEqual(got.tokens, alone.tokens, "request \(i), cache \(cacheBytes)")
                if cacheBytes > 0 { reused += copied }
                XCTAssertEqual(scheduler.promptCacheUse.reusedTokens, reused, "request \(i), cache \(cacheBytes)")
            }
            XCTAssertEqual(scheduler.promptCacheUse.hits, cacheBytes > 0 ? 4 : 0)
        }
    }

    /// The kept prompts stay within the byte budget (least recently used out first), a prompt that
    /// extends a kept one replaces it, and one a kept prompt already extends adds nothing.
    func testPromptCacheKeepsItsBudget() throws {
        let base = try tinyBase()
        let model = InferenceModel(base: base.weights)
        let perPosition = model.makeCache().bytesPerPosition
        let cache = PromptCache(budget: 30 * perPosition, minimumLength: 4)
        func prefilled(_ p: [Int]) -> KVCache {
            let c = model.makeCache()
            _ = model.forward(p, cache: c)
            return c
        }
        let p1 = Array(0..<12), p2 = Array(100..<112)
        cache.keep(p1, adapter: nil, from: prefilled(p1), model: model)
        cache.keep(p2, adapter: nil, from: prefilled(p2), model: model)
        XCTAssertEqual(cache.usage.prompts, 2)
        XCTAssertEqual(cache.usage.bytes, 24 * perPosition)
        cache.keep(Array(p1.prefix(8)), adapter: nil, from: prefilled(Array(p1.prefix(8))), model: model)  // p1 already holds it
        XCTAssertEqual(cache.usage.prompts, 2)
        let p1b = p1 + [50, 51, 52]
        cache.keep(p1b, adapter: nil, from: prefilled(p1b), model: model)  // replaces p1
        XCTAssertEqual(cache.usage.prompts, 2)
        XCTAssertEqual(cache.usage.bytes, 27 * perPosition)
        let p3 = Array(200..<210)
        cache.keep(p3, adapter: nil, from: prefilled(p3), model: model)  // over budget: p2, least recently used, goes
        XCTAssertEqual(cache.usage.prompts, 2)
        XCTAssertLessThanOrEqual(cache.usage.bytes, 30 * perPosition)
        let target = model.makeCache()
        XCTAssertEqual(Array(cache.seed(target, for: p2 + [1], adapter: nil)), p2 + [1], "p2 was evicted")
        XCTAssertEqual(target.count, 0)
        XCTAssertEqual(Array(cache.seed(target, for: p1b + [9], adapter: nil)), [9])
        XCTAssertEqual(target.count, p1b.count)
    }

    /// While a reply is being decoded, a long prompt is prefilled a chunk between two of its passes
    /// (with whole prompts it waits for the whole prefill); a prompt with no reply to delay is
    /// prefilled whole; every request still gets what it gets alone.
    func testALongPromptIsPrefilledBetweenPassesOfTheRepliesInFlight() async throws {
        let base = try tinyBase()
        let V = base.config.vocabSize
        let short = DecodeRequest(prompt: [5, 6, 7], adapter: nil, maxTokens: 20, stopTokens: [])
        let long = DecodeRequest(prompt: (0..<60).map { (11 * $0 + 4) % V }, adapter: nil, maxTokens: 5, stopTokens: [])
        typealias Step = Scheduler.Step
        // A prompt's first token comes from the last row of its prefill. Round 1: the short
        // prompt's 3 (nothing is decoded yet), 1 of the long one's 60 (the chunk's rest), a pass;
        // then 4 tokens and a pass a round; the long prompt's last 3 in round 16, then both rows
        // (the long reply's 4 tokens after its first)
        let chunked: [Step] = [.prefill(tokens: 3, decoding: 0), .prefill(tokens: 1, decoding: 1), .pass(rows: 1, prefilling: 1)]
            + (0..<14).flatMap { _ in [Step.prefill(tokens: 4, decoding: 1), .pass(rows: 1, prefilling: 1)] }
            + [.prefill(tokens: 3, decoding: 1)] + Array(repeating: .pass(rows: 2, prefilling: 0), count: 4)
        let whole: [Step] = [.prefill(tokens: 3, decoding: 0), .prefill(tokens: 60, decoding: 1)]
            + Array(repeating: .pass(rows: 2, prefilling: 0), count: 4) + Array(repeating: .pass(rows: 1, prefilling: 0), count: 15)
        let alone: [Step] = [.prefill(tokens: 60, decoding: 0)] + Array(repeating: .pass(rows: 1, prefilling: 0), count: 4)
        for (chunk, requests, expected) in [(Scheduler.PrefillChunk.tokens(4), [short, long], chunked), (.whole, [short, long], whole), (.tokens(4), [long], alone)] {
            let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 0, prefillChunk: chunk)
            let log = NSLock()
            var steps: [Step] = []
            scheduler.observer = { step in log.withLock { steps.append(step) } }
            // submitted before the thread starts, so all are admitted in its first round
            let streams = try requests.map { try scheduler.submit($0).events }
            scheduler.start()
            defer { scheduler.shutdown() }
            for (request, events) in zip(requests, streams) {
                let got = await Self.collect(events)
                let alone = Generator.generate(InferenceModel(base: base.weights),
                                               GenerationRequest(prompt: request.prompt, maxNewTokens: request.maxTokens, stopTokens: []))
                XCTAssertEqual(got.tokens, alone.tokens, "prompt of \(request.prompt.count), chunk \(chunk)")
            }
            XCTAssertEqual(log.withLock { steps }, expected, "chunk \(chunk), \(requests.count) requests: the decoding thread's steps")
        }
    }

    /// Rows with a draft (prompt lookup here) and guided rows whose forced tokens go into one pass
    /// get what the generation loop gives them alone, in fewer passes than tokens; with more rows
    /// decoding than `draftRowLimit` the draft rests and the replies are still the same.
    func testDraftsAndForcedTokensChangeNoReply() async throws {
        let base = try tinyBase()
        let library = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
        let echo = base.tokenizer.encode("<|im_start|>user\nabc abc abc abd abc<|im_end|>\n<|im_start|>assistant\nabc ab")
        let constraint = try library.jsonSchema(try JSONSchema(try JSONValue.parse(GuidedGenerationSchemas.all[0])))
        let lookup = Drafter.ngram(NGramDraft(minimum: 1, maximum: 3))
        let requests = [
            DecodeRequest(prompt: echo, adapter: nil, maxTokens: 24, stopTokens: [], draft: (lookup, 4)),
            DecodeRequest(prompt: echo, adapter: nil, maxTokens: 60, stopTokens: base.stopTokenIds, constraint: constraint, draft: (lookup, 3)),
            DecodeRequest(prompt: echo, adapter: nil, maxTokens: 60, stopTokens: base.stopTokenIds, sampling: SamplingOptions(temperature: 0.8),
                          seed: 9, constraint: constraint),
        ]
        for limit in [3, 1] {
            let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 3, queueCapacity: 4, draftRowLimit: limit)
            scheduler.start()
            defer { scheduler.shutdown() }
            for (i, request) in requests.enumerated() {  // one at a time: each row alone, so its draft runs
                let got = await Self.collect(try scheduler.submit(request).events)
                let alone = Generator.generate(InferenceModel(base: base.weights), request.generation)
                XCTAssertEqual(got.tokens, alone.tokens, "request \(i), limit \(limit)")
                let reason: DecodeFinish = alone.stats.stoppedAtEndOfTurn ? .stop : .length
                XCTAssertEqual(got.finish, .finished(reason, completionTokens: alone.tokens.count, complete: reason == .stop && !alone.stats.incomplete), "request \(i)")
            }
            XCTAssertLessThan(scheduler.status.passes, requests.map { Generator.generate(InferenceModel(base: base.weights), $0.generation).tokens.count }.reduce(0, +),
                              "forced tokens and kept proposals need no pass of their own")
            // all three at once: more rows than a limit of 1, so the drafts rest; the same replies
            let streams = try requests.map { try scheduler.submit($0).events }
            for (i, events) in streams.enumerated() {
                let got = await Self.collect(events)
                XCTAssertEqual(got.tokens, Generator.generate(InferenceModel(base: base.weights), requests[i].generation).tokens, "together: request \(i), limit \(limit)")
            }
        }
    }

    /// A time-bounded chunk takes as many tokens as the measured rate allows in that time, never
    /// fewer than the products need to stay efficient; a first guess before any measure.
    func testTimedChunksFollowTheMeasuredRate() {
        typealias Chunk = Scheduler.PrefillChunk
        XCTAssertEqual(Chunk.seconds(0.5).tokens(rate: nil), Chunk.firstTokens)
        XCTAssertEqual(Chunk.seconds(0.5).tokens(rate: 0.002), 250, "500 tokens/s: 250 in half a second")
        XCTAssertEqual(Chunk.seconds(0.25).tokens(rate: 0.0001), 2500)
        XCTAssertEqual(Chunk.seconds(0.5).tokens(rate: 0.1), Chunk.minimumTokens, "10 tokens/s: still the minimum")
        XCTAssertEqual(Chunk.tokens(7).tokens(rate: 0.1), 7)
        XCTAssertEqual(Chunk.whole.tokens(rate: 0.1), Int.max)
        XCTAssertFalse(Chunk.seconds(0).isValid)
        XCTAssertFalse(Chunk.tokens(0).isValid)
    }

    func testAFullQueueIsRefusedAndCancelledRequestsFreeTheirSlots() async throws {
        let base = try tinyBase()
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 1)
        let long = DecodeRequest(prompt: [5, 6, 7], adapter: RowAdapter(Self.randomAdapter(base, seed: 1), config: base.config),
                                 maxTokens: 1500, stopTokens: [])
        // not started yet: two requests fit the free slots, one waits, the next is refused
        let a = try scheduler.submit(long), b = try scheduler.submit(long), c = try scheduler.submit(long)
        XCTAssertThrowsError(try scheduler.submit(long)) { error in
            guard case ServerError.overloaded = error else { return XCTFail("\(error)") }
            XCTAssertEqual((error as? ServerError)?.status, 503)
        }
        c.ticket.cancel()  // leaves while waiting
        scheduler.start()
        defer { scheduler.shutdown() }
        // a leaves after its first tokens; b is dropped unread (its consumer is gone)
        var iterator = a.events.makeAsyncIterator()
        guard case .tokens? = await iterator.next() else { return XCTFail("a's first event is its first token") }
        a.ticket.cancel()
        var aFinish: DecodeEvent? = nil
        while let e = await iterator.next() { if case .finished = e { aFinish = e } }
        guard case .finished(.cancelled, let n, false)? = aFinish else { return XCTFail("a ends cancelled: \(String(describing: aFinish))") }
        XCTAssertLessThan(n, 1500)
        var cEvents: [DecodeEvent] = []
        for await e in c.events { cEvents.append(e) }
        XCTAssertEqual(cEvents, [.finished(.cancelled, completionTokens: 0, complete: false)], "a request cancelled while waiting never runs")
        b.ticket.cancel()
        let deadline = Date().addingTimeInterval(20)
        while scheduler.status.active + scheduler.status.queued > 0 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
        XCTAssertEqual(scheduler.status.active, 0, "every slot is free again")
        XCTAssertEqual(scheduler.status.queued, 0)
        // and the freed slots serve new requests
        let again = try scheduler.submit(DecodeRequest(prompt: [5, 6], adapter: nil, maxTokens: 4, stopTokens: []))
        let r = await Self.collect(again.events)
        XCTAssertEqual(r.tokens.count, 4)
    }

    func testRequestsThatCannotRunAreRefusedBeforeTakingASlot() throws {
        let base = try tinyBase(context: 64)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 1, queueCapacity: 0)
        XCTAssertThrowsError(try scheduler.submit(DecodeRequest(prompt: Array(repeating: 5, count: 60), adapter: nil, maxTokens: 10, stopTokens: []))) {
            XCTAssertEqual(($0 as? ServerError)?.code, "context_length_exceeded")
        }
        XCTAssertThrowsError(try scheduler.submit(DecodeRequest(prompt: [], adapter: nil, maxTokens: 10, stopTokens: [])))
        XCTAssertThrowsError(try scheduler.submit(DecodeRequest(prompt: [1], adapter: nil, maxTokens: 0, stopTokens: [])))
        XCTAssertEqual(scheduler.status.queued, 0)
        _ = try scheduler.submit(DecodeRequest(prompt: [1], adapter: nil, maxTokens: 1, stopTokens: []))  // the one slot is still free
    }
}
