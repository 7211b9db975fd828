// One batch, different adapters per row: every row of a mixed batch (several adapters, and rows
// with none) gives the logits that row gets alone on a model built with its own adapter, bit for
// bit, over stored weights; on the tiny model and, when it is fetched, on SmolLM2 (Q4_1 blocks).
import Autograd
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class RowAdapterTests: XCTestCase {
    /// A random adapter on all seven targets with B ≠ 0.
    func randomAdapter(_ base: BaseModel, seed: UInt64, rank: Int = 4) -> Adapter {
        TestSupport.randomAdapter(base, rank: rank, scale: 0.05, seed: seed)
    }

    /// Prompts of different lengths, each with an adapter (or none), prefilled and decoded for
    /// `steps` steps together; each row checked against its own single-adapter model.
    func checkMixedBatch(_ base: BaseModel, steps: Int, file: StaticString = #filePath, line: UInt = #line) {
        let V = base.config.vocabSize
        let adapters: [Adapter?] = [randomAdapter(base, seed: 1), nil, randomAdapter(base, seed: 2), randomAdapter(base, seed: 1),
                                    randomAdapter(base, seed: 3, rank: 8), nil]
        let prompts: [[Int]] = adapters.indices.map { b in (0..<(3 + 2 * b)).map { (7 * $0 + 11 * b + 5) % V } }
        let shared = InferenceModel(base: base.weights)
        let rowAdapters = adapters.map { $0.map { RowAdapter($0, config: base.config) } }
        let alone = adapters.map { InferenceModel(base: base.weights, adapter: $0) }
        let caches = adapters.indices.map { _ in shared.makeCache(capacity: 64) }
        let aloneCaches = adapters.indices.map { _ in shared.makeCache(capacity: 64) }
        var tokens: [Int] = []
        for b in adapters.indices {
            var mixed: [Float] = [], reference: [Float] = []
            shared.forward(prompts[b], cache: caches[b], adapter: rowAdapters[b], into: &mixed)
            alone[b].forward(prompts[b], cache: aloneCaches[b], into: &reference)
            XCTAssertEqual(mixed, reference, "row \(b)'s prefill with its adapter over the shared base", file: file, line: line)
            tokens.append(Sampler.argmax(reference[...]))
        }
        var logits: [Float] = []
        for step in 0..<steps {
            shared.forward(batch: tokens, caches: caches, adapters: rowAdapters, into: &logits)  // [B, V]
            for b in adapters.indices {
                let reference = alone[b].forward([tokens[b]], cache: aloneCaches[b])
                let row = Array(logits[(b * V)..<((b + 1) * V)])
                XCTAssertEqual(row, reference, "step \(step), row \(b) (adapter \(adapters[b]?.source ?? "none"))", file: file, line: line)
                tokens[b] = Sampler.argmax(reference[...])
            }
        }
        // the adapters change the numbers (so the check above compares something)
        XCTAssertNotEqual(Array(logits[0..<V]), Array(logits[(V)..<(2 * V)]), file: file, line: line)
    }

    /// A float16 KV cache (`--kv-cache float16`) on the tiny model: logits near the float32
    /// cache's while decoding (and not equal: the rounding is there), a cache that grows and a
    /// copied prefix give the bits of one made big enough, batched rows equal each row alone, and
    /// a position takes half the bytes.
    func testFloat16KVCacheOnTheTinyModel() throws {
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir()), storage: .stored)
        checkFloat16Cache(base, steps: 6)
    }

    /// The same on SmolLM2 (Q4_1 blocks), printing how far the logits move.
    func testFloat16KVCacheOnSmolLM2() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let worst = checkFloat16Cache(try BaseModel.load(path: path, storage: .stored), steps: 8)
        print("RowAdapterTests: SmolLM2 with a float16 KV cache: largest |logit difference| / largest |logit| = \(worst)")
    }

    /// Decodes greedily (the float32 cache's choices) with both caches; returns the largest logit
    /// difference relative to the largest logit.
    @discardableResult
    func checkFloat16Cache(_ base: BaseModel, steps: Int, file: StaticString = #filePath, line: UInt = #line) -> Float {
        let f32 = InferenceModel(base: base.weights), f16 = InferenceModel(base: base.weights, kvCache: .float16)
        let V = base.config.vocabSize
        let prompt = (0..<9).map { (5 * $0 + 3) % V }
        let c32 = f32.makeCache(capacity: 64), c16 = f16.makeCache(capacity: 64), small = f16.makeCache(capacity: 2)
        XCTAssertEqual(2 * c16.bytesPerPosition, c32.bytesPerPosition, file: file, line: line)
        XCTAssertEqual(c16.precision, .float16, file: file, line: line)
        var a = f32.forward(prompt, cache: c32), b = f16.forward(prompt, cache: c16)
        XCTAssertEqual(f16.forward(prompt, cache: small), b, "a float16 cache that grows gives the same bits", file: file, line: line)
        var moved = 0, relative: Float = 0
        for step in 0..<steps {
            let scale = a.map { abs($0) }.max()!, worst = zip(a, b).map { abs($0 - $1) }.max()!
            XCTAssertLessThan(worst, 5e-3 * scale, "step \(step): float16 cache logits within 5e-3 of the largest", file: file, line: line)
            relative = max(relative, worst / scale)
            if worst > 0 { moved += 1 }
            let t = Sampler.argmax(a[...])
            a = f32.forward([t], cache: c32)
            b = f16.forward([t], cache: c16)
            XCTAssertEqual(f16.forward([t], cache: small), b, "step \(step), grown cache", file: file, line: line)
        }
        XCTAssertGreaterThan(moved, 0, "the rounding moves the logits (so the comparison compares something)", file: file, line: line)
        let copy = f16.makeCache(capacity: 4)
        copy.copyPrefix(of: c16, length: c16.count)
        XCTAssertEqual(f16.forward([7], cache: copy), f16.forward([7], cache: c16), "a copied float16 prefix continues as the original",
                       file: file, line: line)
        // two conversations in one batch, each with its own float16 cache, equal each alone
        let prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
        let caches = prompts.map { _ in f16.makeCache(capacity: 16) }, alone = prompts.map { _ in f16.makeCache(capacity: 16) }
        var tokens: [Int] = []
        for (i, p) in prompts.enumerated() {
            _ = f16.forward(p, cache: caches[i])
            tokens.append(Sampler.argmax(f16.forward(p, cache: alone[i])[...]))
        }
        var logits: [Float] = []
        f16.forward(batch: tokens, caches: caches, adapters: [nil, nil], into: &logits)
        for i in prompts.indices {
            XCTAssertEqual(Array(logits[(i * V)..<((i + 1) * V)]), f16.forward([tokens[i]], cache: alone[i]), "row \(i) of the batch",
                           file: file, line: line)
        }
        return relative
    }

    func testMixedAdapterBatchEqualsEachRowAloneOnTheTinyModel() throws {
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir()), storage: .stored)
        XCTAssertTrue(base.weights.layers[0].projection(.q).isStored, "the tiny GGUF is kept as stored")
        checkMixedBatch(base, steps: 6)
    }

    func testMixedAdapterBatchEqualsEachRowAloneOnSmolLM2() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let base = try BaseModel.load(path: path, storage: .stored)
        checkMixedBatch(base, steps: 3)
    }

    /// Segments of several tokens (forced tokens, a draft's proposals) from conversations with
    /// different adapters in one pass: each segment's logit rows are the bits it gets alone, and
    /// the caches hold what a pass alone leaves.
    func checkSegmentedPass(_ base: BaseModel, file: StaticString = #filePath, line: UInt = #line) {
        let V = base.config.vocabSize
        let adapters: [Adapter?] = [randomAdapter(base, seed: 1), nil, randomAdapter(base, seed: 2), randomAdapter(base, seed: 1)]
        let lengths = [1, 4, 3, 6], wanted = [[0], [1, 3], [0, 1, 2], [5]]
        let shared = InferenceModel(base: base.weights)
        let rowAdapters = adapters.map { $0.map { RowAdapter($0, config: base.config) } }
        let alone = adapters.map { InferenceModel(base: base.weights, adapter: $0) }
        var segments: [InferenceModel.PassSegment] = [], aloneCaches: [KVCache] = []
        for b in adapters.indices {
            let prompt = (0..<(5 + 3 * b)).map { (13 * $0 + 7 * b + 3) % V }
            let cache = shared.makeCache(capacity: 64), own = shared.makeCache(capacity: 64)
            var scratch: [Float] = []
            shared.forward(prompt, cache: cache, adapter: rowAdapters[b], into: &scratch)
            alone[b].forward(prompt, cache: own, into: &scratch)
            aloneCaches.append(own)
            segments.append(.init(tokens: (0..<lengths[b]).map { (5 * $0 + 17 * b + 1) % V }, cache: cache, adapter: rowAdapters[b], logitRows: wanted[b]))
        }
        var logits: [Float] = []
        shared.forward(segments: segments, into: &logits)
        XCTAssertEqual(logits.count, wanted.joined().count * V, file: file, line: line)
        var row = 0
        for b in adapters.indices {
            var reference: [Float] = []
            alone[b].forward(segments[b].tokens, cache: aloneCaches[b], logitsAt: wanted[b], into: &reference)
            XCTAssertEqual(Array(logits[(row * V)..<((row + wanted[b].count) * V)]), reference, "segment \(b)", file: file, line: line)
            XCTAssertEqual(segments[b].cache.count, aloneCaches[b].count, file: file, line: line)
            row += wanted[b].count
        }
        // a next step from each cache agrees too: the keys and values the pass stored are the same
        var next: [Float] = []
        shared.forward(batch: [1, 2, 3, 4], caches: segments.map(\.cache), adapters: rowAdapters, into: &next)
        for b in adapters.indices {
            XCTAssertEqual(Array(next[(b * V)..<((b + 1) * V)]), alone[b].forward([b + 1], cache: aloneCaches[b]), "step after segment \(b)", file: file, line: line)
        }
    }

    func testSegmentedPassEqualsEachSegmentAloneOnTheTinyModel() throws {
        checkSegmentedPass(try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir()), storage: .stored))
    }

    func testSegmentedPassEqualsEachSegmentAloneOnSmolLM2() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        checkSegmentedPass(try BaseModel.load(path: path, storage: .stored))
    }

    func testARowAdapterOverFloat32WeightsMatchesTheMergedModelToRounding() throws {
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir()), storage: .float32)
        let adapter = randomAdapter(base, seed: 4)
        let shared = InferenceModel(base: base.weights)
        let merged = InferenceModel(base: base.weights, adapter: adapter)
        var a: [Float] = []
        shared.forward([3, 9, 27], cache: shared.makeCache(), adapter: RowAdapter(adapter, config: base.config), into: &a)
        let b = merged.forward([3, 9, 27], cache: merged.makeCache())
        let plain = shared.forward([3, 9, 27], cache: shared.makeCache())
        for i in a.indices { XCTAssertEqual(a[i], b[i], accuracy: 1e-4 * max(1, abs(b[i]))) }
        XCTAssertGreaterThan(zip(plain, b).map { abs($0 - $1) }.max()!, 1e-3, "the adapter changes the logits")
    }

    /// Float16 row adapters: each row of a mixed batch (float16, float32 and no adapter) gets the
    /// bits it gets alone; the float16 factors compute exactly what float32 factors holding the
    /// same rounded values compute; and the rounding moves the logits by far less than the
    /// adapter does.
    func testFloat16RowAdaptersAreExactForTheirRoundedFactors() throws {
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: TinyAssets.tempDir()), storage: .stored)
        let V = base.config.vocabSize
        let adapter = randomAdapter(base, seed: 5)
        let rounded = Adapter(source: "rounded", lora: adapter.lora, baseConfig: base.config, baseSignature: base.signature,
                              tensors: adapter.tensors.map { ($0.0, HostTensor(shape: $0.1.shape, data: $0.1.data.map { Float(Float16($0)) })) })
        let half = RowAdapter(adapter, config: base.config, precision: .float16)
        XCTAssertEqual(half.precision, .float16)
        let full = RowAdapter(adapter, config: base.config), roundedFull = RowAdapter(rounded, config: base.config)
        let shared = InferenceModel(base: base.weights)
        let rows: [RowAdapter?] = [half, full, nil, half, roundedFull]
        let caches = rows.indices.map { _ in shared.makeCache(capacity: 32) }
        let aloneCaches = rows.indices.map { _ in shared.makeCache(capacity: 32) }
        var logits: [Float] = [], alone: [Float] = []
        for (b, r) in rows.enumerated() {
            shared.forward([4, 8, 15, 16], cache: caches[b], adapter: r, into: &alone)
            shared.forward([4, 8, 15, 16], cache: aloneCaches[b], adapter: r, into: &logits)
        }
        var tokens = [23, 23, 23, 23, 23]
        for step in 0..<4 {
            shared.forward(batch: tokens, caches: caches, adapters: rows, into: &logits)
            for b in rows.indices {
                shared.forward(batch: [tokens[b]], caches: [aloneCaches[b]], adapters: [rows[b]], into: &alone)
                XCTAssertEqual(Array(logits[(b * V)..<((b + 1) * V)]), alone, "step \(step), row \(b)")
            }
            let halfRow = Array(logits[0..<V]), fullRow = Array(logits[V..<(2 * V)]), plainRow = Array(logits[(2 * V)..<(3 * V)])
            XCTAssertEqual(halfRow, Array(logits[(4 * V)..<(5 * V)]), "float16 factors = float32 factors holding the rounded values")
            let effect = zip(fullRow, plainRow).map { abs($0 - $1) }.max()!, rounding = zip(halfRow, fullRow).map { abs($0 - $1) }.max()!
            XCTAssertGreaterThan(effect, 1e-3, "the adapter changes the logits")
            XCTAssertGreaterThan(rounding, 0, "float16 rounding changes something")
            XCTAssertLessThan(rounding, 0.01 * effect, "step \(step): float16 factors move the logits by \(rounding), the adapter by \(effect)")
            tokens = tokens.map { ($0 * 31 + step + 1) % V }  // the same for every row, so rows 0 and 4 stay comparable
        }
    }
}
