// The scheduler on the tiny model: continuous batching gives every request, whatever its adapter
// and whenever it joins, the tokens the generation loop gives it alone; a full queue is refused;
// cancelled requests (a consumer that leaves while waiting or mid-reply) free their slots.
import Autograd
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import Server
import TestSupport
import XCTest

final class SchedulerTests: XCTestCase {
    func tinyBase(_ name: String = #function, seed: UInt64 = 1, context: Int = 2048) throws -> BaseModel {
        try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir(name), seed: seed, context: context), storage: .stored)
    }

    static func randomAdapter(_ base: BaseModel, seed: UInt64, rank: Int = 4) -> Adapter {
        let lora = LoRAConfig(rank: rank, alpha: Float(2 * rank))
        var rng = SeededRNG(seed: seed)
        let tensors = TensorTable.loraTensors(config: base.config, lora: lora).map { name, shape in
            (name, HostTensor(shape: shape, data: (0..<shape.reduce(1, *)).map { _ in 0.2 * Float.random(in: -1...1, using: &rng) }))
        }
        return Adapter(source: "random \(seed)", lora: lora, baseConfig: base.config, baseSignature: base.signature, tensors: tensors)
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
        let base = try tinyBase()
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
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 3, queueCapacity: 16)
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
