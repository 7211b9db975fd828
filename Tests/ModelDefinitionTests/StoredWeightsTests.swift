// The frozen base kept as its file stores it gives the float32 path's numbers: tiny models written
// in every matrix type we can encode, loaded both ways, agree on the signature, on prefill and
// decoding logits (with and without an adapter, which the stored path adds per row instead of
// merging), and hold less; a multi-row pass equals single-row steps bit for bit. On the real
// SmolLM2 (when fetched): logits within 1e-5 relative and the same greedy text.
import Autograd
import CBlockKernels
import Foundation
import Inference
import ModelAssets
@testable import ModelDefinition
import TestSupport
import Training
import XCTest

final class StoredWeightsTests: XCTestCase {
    /// max |a - b| / max |b|
    func relative(_ a: [Float], _ b: [Float]) -> Float {
        precondition(a.count == b.count)
        var d: Float = 0, m: Float = 0
        for i in a.indices { d = max(d, abs(a[i] - b[i])); m = max(m, abs(b[i])) }
        return d / max(m, 1e-12)
    }

    /// A tiny base (hidden 256, so rows are whole K-quant blocks) written with its matrices as `type`.
    func tinyModel(_ type: GGMLType, in dir: String) throws -> String {
        try TinyAssets.writeBlockModel(type, in: dir)
    }

    static let matrixTypes: [GGMLType] = [.f32, .f16, .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K]

    /// A random adapter on all seven targets with B ≠ 0 (alpha 2 × rank, values uniform in ±scale).
    func randomAdapter(_ base: BaseModel, rank: Int = 4, scale: Float = 0.1, seed: UInt64 = 11) throws -> Adapter {
        TestSupport.randomAdapter(base, rank: rank, scale: scale, seed: seed, source: "random")
    }

    func testStoredMatchesFloat32ForEveryMatrixType() throws {
        let dir = TinyAssets.tempDir()
        for type in Self.matrixTypes {
            let path = try tinyModel(type, in: dir)
            let f32 = try BaseModel.load(path: path, storage: .float32)
            let stored = try BaseModel.load(path: path, storage: .stored)
            XCTAssertEqual(stored.signature, f32.signature, "\(type): one signature whatever the storage")
            XCTAssertTrue(stored.weights.layers[0].projection(.q).isStored && stored.weights.embedding.isStored)
            XCTAssertFalse(f32.weights.layers[0].projection(.q).isStored)
            let ids = f32.tokenizer.encode("<|im_start|>user\nsay the things in order<|im_end|>\n<|im_start|>assistant\n")
            for adapter in [nil, try randomAdapter(f32)] {
                let a = InferenceModel(base: f32.weights, adapter: adapter), b = InferenceModel(base: stored.weights, adapter: adapter)
                let ca = a.makeCache(), cb = b.makeCache()
                let la = a.forward(ids, cache: ca, allLogits: true), lb = b.forward(ids, cache: cb, allLogits: true)
                XCTAssertLessThan(relative(lb, la), 1e-5, "\(type) prefill, adapter \(adapter != nil)")
                for t in [5, 17, 2] {
                    let sa = a.forward([t], cache: ca), sb = b.forward([t], cache: cb)
                    XCTAssertLessThan(relative(sb, sa), 1e-5, "\(type) decode step, adapter \(adapter != nil)")
                }
            }
            if type != .f32 { XCTAssertLessThan(InferenceModel(base: stored.weights).weightBytes, InferenceModel(base: f32.weights).weightBytes) }
        }
    }

    /// Training from the blocks: the loss and every LoRA gradient of the stored path equal the
    /// float32 path's (the same frozen values, multiplied a panel at a time), and the losses of a
    /// few AdamW steps stay within 1e-4; the stored model holds no float32 copy of any matrix.
    /// (The tiny model is the same in every process; over 40 seeds at portable, AVX2 and AVX-512
    /// the losses differed by at most 4e-6. AdamW's first steps can turn a gradient's rounding into
    /// a whole lr-size step where it is near zero, so a model drawn anew in each process, as the
    /// dictionary's order once made it, failed one CI run at 1.1e-4.)
    func testTrainingFromStoredWeightsMatchesFloat32() throws {
        let dir = TinyAssets.tempDir()
        for type in [GGMLType.f16, .q8_0, .q4_K, .q6_K] {
            let path = try tinyModel(type, in: dir)
            let f32 = try BaseModel.load(path: path, storage: .float32), stored = try BaseModel.load(path: path, storage: .stored)
            let lora = LoRAConfig(rank: 4, alpha: 8, targets: [.q, .v, .o, .down])
            var r1 = SeededRNG(seed: 5), r2 = SeededRNG(seed: 5)
            let a = try LlamaModel(weights: f32.weights, lora: lora, rng: &r1), b = try LlamaModel(weights: stored.weights, lora: lora, rng: &r2)
            XCTAssertTrue(b.namedWeights.allSatisfy { $0.tensor.shape.count == 1 }, "\(type): only norms are tensors on the stored path")
            for (pa, pb) in zip(a.loraParameters, b.loraParameters) {
                XCTAssertEqual(pa.name, pb.name)
                XCTAssertEqual(pa.tensor.data, pb.tensor.data, "same initial adapter")
                for i in 0..<pa.tensor.count where pa.name.hasSuffix("lora_B.weight") { let v = 0.01 * Float(i % 5 + 1); pa.tensor.data[i] = v; pb.tensor.data[i] = v }
            }
            let ids = [1, 40, 41, 42, 2, 43, 44, 45, 46, 3, 60, 61]
            let targets = Array(ids.dropFirst()) + [2]
            let mask = ids.indices.map { $0 % 3 != 0 }
            let layout = ForwardLayout.rows(batch: 2, length: 6)
            var optA = AdamW(parameterSizes: a.loraParameters.map(\.tensor.count), weightDecay: 0)
            var optB = AdamW(parameterSizes: b.loraParameters.map(\.tensor.count), weightDecay: 0)
            for step in 0..<3 {
                var ra = SeededRNG(seed: 9), rb = SeededRNG(seed: 9)
                let la = a.loss(inputs: ids, targets: targets, lossMask: mask, layout: layout, rng: &ra, training: true)
                let lb = b.loss(inputs: ids, targets: targets, lossMask: mask, layout: layout, rng: &rb, training: true)
                XCTAssertEqual(lb.data[0], la.data[0], accuracy: 1e-4 * abs(la.data[0]), "\(type) step \(step) loss")
                for p in a.loraParameters { p.tensor.grad = nil }
                for p in b.loraParameters { p.tensor.grad = nil }
                la.backward()
                lb.backward()
                for (pa, pb) in zip(a.loraParameters, b.loraParameters) {
                    let ga = pa.tensor.grad!, gb = pb.tensor.grad!
                    // (later steps: AdamW's m/√v turns rounding-size differences of near-zero
                    // gradients into lr-size steps, so only the losses are compared there)
                    if step == 0 { XCTAssertLessThan(relative(gb, ga), 1e-4, "\(type) gradient of \(pa.name)") }
                }
                optA.update(a.loraParameters.map(\.tensor), lr: 1e-2)
                optB.update(b.loraParameters.map(\.tensor), lr: 1e-2)
            }
        }
    }

    /// A q4_K matrix of `values` (rows x k, row-major) held as stored blocks in memory of its own.
    static func storedQ4K(rows: Int, k: Int, values: [Float]) throws -> FrozenMatrix {
        final class Bytes {
            let p: UnsafeMutableRawPointer
            init(_ b: [UInt8]) { p = .allocate(byteCount: b.count, alignment: 64); p.copyMemory(from: b, byteCount: b.count) }
            deinit { p.deallocate() }
        }
        let encoded = try Quantize.run(.q4_K, rows: rows, k: k, values: values, tensor: "w")
        let bytes = Bytes(encoded)
        return FrozenMatrix(stored: StoredTensor(type: .q4_K, shape: [rows, k], bytes: bytes.p, byteCount: encoded.count, owner: bytes))
    }

    /// Panels sized to the activations they meet (here 2·m·k floats: more than the 1 MiB floor,
    /// fewer rows than the matrix, so two panels) give the float32 matrix's numbers, forward and
    /// input gradient (which accumulates over the panels).
    func testPanelsSizedToTheActivationsMatchFloat32() throws {
        let rows = 4096 + 48, k = 256, m = 1100
        var rng = SeededRNG(seed: 5)
        let w = (0..<rows * k).map { _ in Float.random(in: -1...1, using: &rng) }
        let stored = try Self.storedQ4K(rows: rows, k: k, values: w)
        let p = stored.panelRows(m: m)
        XCTAssertGreaterThan(p * k, 1 << 18, "more than the 1 MiB floor")
        XCTAssertLessThan(p, rows, "several panels")
        let dense = FrozenMatrix(rows: rows, columns: k, values: stored.values)
        let x = (0..<m * k).map { _ in Float.random(in: -1...1, using: &rng) }
        var ys = [Float](repeating: 0, count: m * rows), yd = ys
        stored.multiply(x, m: m, into: &ys, ldy: rows, activations: .float32)
        dense.multiply(x, m: m, into: &yd, ldy: rows, activations: .float32)
        XCTAssertLessThan(relative(ys, yd), 1e-5, "forward")
        let dy = (0..<m * rows).map { _ in Float.random(in: -1...1, using: &rng) }
        var dxs = [Float](repeating: 0.5, count: m * k), dxd = dxs
        stored.multiplyAccumulate(dy, m: m, ldDy: rows, into: &dxs, ldx: k)
        dense.multiplyAccumulate(dy, m: m, ldDy: rows, into: &dxd, ldx: k)
        XCTAssertLessThan(relative(dxs, dxd), 1e-5, "input gradient")
    }

    /// The decoder's products of many rows through float32 pieces (`multiplyInPieces`): two
    /// matrices side by side in y (a gap column past them stays as it was), the second's rows
    /// not a whole number of pieces, give each float32 matrix's numbers; the pieces depend on m,
    /// k and the rows alone.
    func testPiecesSideBySideMatchFloat32() throws {
        let k = 512, m = 70, sizes = [1000, 328]
        var rng = SeededRNG(seed: 9)
        var stored: [FrozenMatrix] = [], dense: [FrozenMatrix] = []
        for rows in sizes {
            let w = (0..<rows * k).map { _ in Float.random(in: -1...1, using: &rng) }
            let s = try Self.storedQ4K(rows: rows, k: k, values: w)
            stored.append(s)
            dense.append(FrozenMatrix(rows: rows, columns: k, values: s.values))
        }
        let total = sizes.reduce(0, +), ldy = total + 1
        let size = FrozenMatrix.pieceRows(m: m, k: k, rows: total)
        XCTAssertEqual(size, 80, "as many as the input rows, rounded up to 16")
        XCTAssertNotEqual(sizes[1] % size, 0, "a short last piece")
        let x = (0..<m * k).map { _ in Float.random(in: -1...1, using: &rng) }
        var y = [Float](repeating: 7, count: m * ldy), expected = y
        x.withUnsafeBufferPointer { xp in
            y.withUnsafeMutableBufferPointer { FrozenMatrix.multiplyInPieces(stored, xp.baseAddress!, m: m, into: $0.baseAddress!, ldy: ldy) }
            expected.withUnsafeMutableBufferPointer { e in
                dense[0].multiply(xp.baseAddress!, m: m, into: e.baseAddress!, ldy: ldy, activations: .float32)
                dense[1].multiply(xp.baseAddress!, m: m, into: e.baseAddress! + sizes[0], ldy: ldy, activations: .float32)
            }
        }
        XCTAssertLessThan(relative(y, expected), 1e-5)
        XCTAssertTrue((0..<m).allSatisfy { y[$0 * ldy + total] == 7 }, "the gap column is untouched")
        // the auto path takes them for a prefill at this level when the blocks are not chosen
        var viaMultiply = [Float](repeating: 7, count: m * ldy)
        x.withUnsafeBufferPointer { xp in
            viaMultiply.withUnsafeMutableBufferPointer { v in
                FrozenMatrix.$manyRows.withValue(.panels) { FrozenMatrix.multiply(stored, xp.baseAddress!, m: m, into: v.baseAddress!, ldy: ldy) }
            }
        }
        XCTAssertEqual(viaMultiply, y, "FrozenMatrix.multiply with panels runs the pieces")
    }

    /// A prompt longer than `packedRows` goes through the pieces a block of rows at a time (on
    /// AVX-512, where bk_gemm packs the activations): every row gets the bits it gets alone, and
    /// the float32 matrix's numbers.
    func testLongPromptsGoThroughPiecesInBlocksOfRows() throws {
        guard bk_active_level() >= Int32(BK_LEVEL_AVX512) else {
            print("StoredWeightsTests: the pieces run sgemm below AVX-512 (level \(bk_active_level())), whose bits may depend on m; block checks skipped")
            return
        }
        let k = 256, rows = 40, m = FrozenMatrix.packedRows + 37
        var rng = SeededRNG(seed: 12)
        let stored = try Self.storedQ4K(rows: rows, k: k, values: (0..<rows * k).map { _ in Float.random(in: -1...1, using: &rng) })
        let dense = FrozenMatrix(rows: rows, columns: k, values: stored.values)
        let x = (0..<m * k).map { _ in Float.random(in: -1...1, using: &rng) }
        var y = [Float](repeating: .nan, count: m * rows), expected = y
        x.withUnsafeBufferPointer { xp in
            y.withUnsafeMutableBufferPointer { FrozenMatrix.multiplyInPieces([stored], xp.baseAddress!, m: m, into: $0.baseAddress!, ldy: rows) }
            expected.withUnsafeMutableBufferPointer { dense.multiply(xp.baseAddress!, m: m, into: $0.baseAddress!, ldy: rows, activations: .float32) }
        }
        XCTAssertLessThan(relative(y, expected), 1e-5)
        for r in [0, 1023, 1024, m - 1] {
            var alone = [Float](repeating: .nan, count: rows)
            x.withUnsafeBufferPointer { xp in
                alone.withUnsafeMutableBufferPointer { FrozenMatrix.multiplyInPieces([stored], xp.baseAddress! + r * k, m: 1, into: $0.baseAddress!, ldy: rows) }
            }
            XCTAssertEqual(alone.map(\.bitPattern), y[(r * rows)..<((r + 1) * rows)].map(\.bitPattern), "row \(r) of \(m) differs from the row alone")
        }
    }

    /// Decoding's parallel pieces (`streamPieces`) on real call shapes (Qwen3-0.6B's q|k|v, o,
    /// gate|up; a 151,936-row head; tiny and empty matrices): every row of every matrix in exactly
    /// one piece, each matrix's pieces in row order, the first piece the biggest, the last small, no
    /// sliver shorter than half a tail piece unless the matrix is; and a product split that way
    /// has the bits of each matrix multiplied alone.
    func testStreamPiecesCoverEveryRowOnceBigFirst() throws {
        for rows in [[2048, 1024, 1024], [1024], [3072, 3072], [151_936], [8, 0, 300], [0, 5]] {
            for cores in [1, 2, 4] {
                let pieces = FrozenMatrix.streamPieces(rows, cores: cores)
                for (j, n) in rows.enumerated() {
                    let mine = pieces.filter { $0.matrix == j }.map(\.rows)
                    XCTAssertEqual(mine.map(\.count).reduce(0, +), n, "\(rows) cores \(cores): matrix \(j)")
                    XCTAssertEqual(mine.first?.lowerBound ?? 0, 0)
                    XCTAssertTrue(zip(mine, mine.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound }, "\(rows): contiguous, in order")
                    XCTAssertTrue(mine.allSatisfy { $0.count >= min(n, FrozenMatrix.streamTail / 2) }, "\(rows): \(mine)")
                }
                XCTAssertEqual(pieces.map(\.matrix), pieces.map(\.matrix).sorted(), "matrices in order")
                let total = rows.reduce(0, +)
                if total >= 8 * FrozenMatrix.streamTail * cores {
                    XCTAssertEqual(pieces[0].rows.count, pieces.map(\.rows.count).max(), "\(rows) cores \(cores): the first piece is the biggest")
                    XCTAssertGreaterThanOrEqual(pieces[0].rows.count, total / (2 * cores), "\(rows) cores \(cores): a big first piece")
                    XCTAssertLessThan(pieces.last!.rows.count, total / (2 * cores), "\(rows) cores \(cores): the last piece is small")
                }
            }
        }
        let k = 256, sizes = [700, 300]
        var rng = SeededRNG(seed: 4)
        let stored = try sizes.map { n in try Self.storedQ4K(rows: n, k: k, values: (0..<n * k).map { _ in Float.random(in: -1...1, using: &rng) }) }
        let x = (0..<k).map { _ in Float.random(in: -1...1, using: &rng) }
        var together = [Float](repeating: 0, count: sizes[0] + sizes[1]), alone = together
        x.withUnsafeBufferPointer { xp in
            together.withUnsafeMutableBufferPointer { FrozenMatrix.multiply(stored, xp.baseAddress!, m: 1, into: $0.baseAddress!, ldy: $0.count) }
            alone.withUnsafeMutableBufferPointer { a in
                withThreads(1) {
                    stored[0].multiply(xp.baseAddress!, m: 1, into: a.baseAddress!, ldy: a.count, activations: .float32)
                    stored[1].multiply(xp.baseAddress!, m: 1, into: a.baseAddress! + sizes[0], ldy: a.count, activations: .float32)
                }
            }
        }
        XCTAssertEqual(together, alone)
    }

    /// A prompt of many rows through the block kernels in groups (`ManyRowsPath.blocks`) gives
    /// the bits of one-token steps (each row's arithmetic is its own), and the float32 panels'
    /// numbers (`.panels`, and the float32 model's sgemm) within 1e-5 relative; q8 activations
    /// in groups also give the bits of their own one-token steps. 150 rows: three groups of the
    /// tiny model's 64.
    func testGroupedPrefillEqualsSingleStepsAndPanels() throws {
        let dir = TinyAssets.tempDir()
        for type in Self.matrixTypes {
            let path = try tinyModel(type, in: dir)
            let f32 = try BaseModel.load(path: path, storage: .float32), stored = try BaseModel.load(path: path, storage: .stored)
            let V = f32.config.vocabSize
            let ids = (0..<150).map { ($0 * 37 + 5) % V }
            XCTAssertGreaterThan(ids.count, 2 * FrozenMatrix.groupRows(k: 512, activations: .float32), "several groups")
            for adapter in [nil, try randomAdapter(f32)] {
                let reference = InferenceModel(base: f32.weights, adapter: adapter)
                let expected = reference.forward(ids, cache: reference.makeCache(), allLogits: true)
                for activations in ActivationPrecision.allCases {
                    let model = InferenceModel(base: stored.weights, adapter: adapter, activations: activations)
                    // one row's attention at a time, as in a one-token step (prompts' blocked attention: InferenceAttentionTests)
                    let grouped = InferenceModel.$promptAttention.withValue(.rows) {
                        FrozenMatrix.$manyRows.withValue(.blocks) { model.forward(ids, cache: model.makeCache(), allLogits: true) }
                    }
                    let steps = model.makeCache()
                    let single = ids.flatMap { model.forward([$0], cache: steps) }
                    XCTAssertTrue(grouped == single, "\(type) \(activations), adapter \(adapter != nil): grouped rows give one-token steps' bits")
                    guard activations == .float32 else {
                        XCTAssertLessThan(relative(grouped, expected), 0.1, "\(type) q8: close to the float32 path")
                        continue
                    }
                    let panels = FrozenMatrix.$manyRows.withValue(.panels) { model.forward(ids, cache: model.makeCache(), allLogits: true) }
                    XCTAssertLessThan(relative(grouped, panels), 1e-5, "\(type), adapter \(adapter != nil): blocks vs panels")
                    XCTAssertLessThan(relative(grouped, expected), 1e-5, "\(type), adapter \(adapter != nil): blocks vs the float32 model")
                }
            }
        }
    }

    func testStoredBatchedRowsEqualSingleRowSteps() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try tinyModel(.f16, in: dir), storage: .stored)
        let model = InferenceModel(base: base.weights, adapter: try randomAdapter(base))
        let prompts = [[3, 9, 12], [7, 7, 30, 2], [40]]
        var single: [[Float]] = []
        for p in prompts {
            let c = model.makeCache()
            _ = model.forward(Array(p.dropLast()).isEmpty ? [p[0]] : Array(p.dropLast()), cache: c)
            single.append(model.forward([p.last!], cache: c))
        }
        let caches = prompts.map { _ in model.makeCache() }
        for (p, c) in zip(prompts, caches) { _ = model.forward(Array(p.dropLast()).isEmpty ? [p[0]] : Array(p.dropLast()), cache: c) }
        var batched: [Float] = []
        model.forward(batch: prompts.map { $0.last! }, caches: caches, into: &batched)
        let V = base.config.vocabSize
        for i in prompts.indices { XCTAssertEqual(Array(batched[(i * V)..<((i + 1) * V)]), single[i], "row \(i)") }
    }

    func testRealModelStoredMatchesFloat32() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let f32 = try BaseModel.load(path: path, storage: .float32)
        let stored = try BaseModel.load(path: path, storage: .stored)
        XCTAssertEqual(stored.signature, f32.signature)
        let a = InferenceModel(base: f32.weights), b = InferenceModel(base: stored.weights)
        XCTAssertLessThan(b.weightBytes * 4, a.weightBytes, "Q4_1 blocks hold far less than float32")
        let ids = f32.tokenizer.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
        let la = a.forward(ids, cache: a.makeCache(), allLogits: true), lb = b.forward(ids, cache: b.makeCache(), allLogits: true)
        let r = relative(lb, la)
        print("stored vs float32 on SmolLM2: prefill logits differ by \(r) relative")
        XCTAssertLessThan(r, 1e-5)
        let request = GenerationRequest(prompt: ids, maxNewTokens: 24, stopTokens: f32.stopTokenIds)
        XCTAssertEqual(Generator.generate(b, request).tokens, Generator.generate(a, request).tokens)
        // a long prompt (several groups of rows) through the block kernels and through panels
        let long = Array(repeating: ids, count: 6).flatMap { $0 }
        let la2 = a.forward(long, cache: a.makeCache(), allLogits: true)
        for path in [ManyRowsPath.blocks, .panels] {
            let lb2 = FrozenMatrix.$manyRows.withValue(path) { b.forward(long, cache: b.makeCache(), allLogits: true) }
            let r2 = relative(lb2, la2)
            print("stored (\(path)) vs float32 on SmolLM2, \(long.count)-token prefill: logits differ by \(r2) relative")
            XCTAssertLessThan(r2, 1e-5, "\(path)")
        }
        // the named q8 mode: activations quantized per 32 values move the logits a little
        let q = InferenceModel(base: stored.weights, activations: .q8)
        var lq: [Float] = []
        let cq = q.makeCache()
        q.forward(ids, cache: cq, into: &lq)  // prefill
        let step = q.forward([ids[3]], cache: cq)
        let cf = b.makeCache()
        _ = b.forward(ids, cache: cf)
        let reference = b.forward([ids[3]], cache: cf)
        let rq = relative(step, reference)
        print("q8 activations vs float32 on SmolLM2, one decoding step: logits differ by \(rq) relative")
        XCTAssertGreaterThan(rq, 0, "q8 is a different computation")
        XCTAssertLessThan(rq, 0.1, "measured 0.051 (2026-11-25)")
    }

    /// q8 activations: a verify pass (several rows, logits at each) gives each row the bits of
    /// one-token steps, as float32 activations do, so speculative decoding is lossless in q8 too.
    func testRealModelQ8VerifyRowsAreOneRowSteps() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let stored = try BaseModel.load(path: path, storage: .stored)
        let ids = stored.tokenizer.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
        let more = stored.tokenizer.encode("The capital of France is Paris, a city")
        let adapter = try randomAdapter(stored, rank: 8, scale: 0.05, seed: 3)
        for (activations, adapter) in [(ActivationPrecision.float32, nil), (.q8, nil), (.float32, adapter), (.q8, adapter)] as [(ActivationPrecision, Adapter?)] {
            let q = InferenceModel(base: stored.weights, adapter: adapter, activations: activations)
            // One prompt pass per mode; each row count starts from it again (truncate: the slow
            // portable level spent most of this test on repeated prompt passes).
            let c1 = q.makeCache(), c2 = q.makeCache()
            _ = q.forward(ids, cache: c1)
            _ = q.forward(ids, cache: c2)
            for rows in [2, 3, 4, 5, 8] {
                c1.truncate(to: ids.count)
                c2.truncate(to: ids.count)
                var verify: [Float] = []
                q.forward(Array(more.prefix(rows)), cache: c1, logitsAt: Array(0..<rows), into: &verify)
                let V = stored.config.vocabSize
                for r in 0..<rows {
                    let step = q.forward([more[r]], cache: c2)
                    let differ = (0..<V).filter { step[$0].bitPattern != verify[r * V + $0].bitPattern }.count
                    XCTAssertEqual(differ, 0, "\(activations) adapter \(adapter != nil) \(rows) rows: row \(r) differs from its one-token step in \(differ) logits (max |d| \((0..<V).map { abs(step[$0] - verify[r * V + $0]) }.max()!))")
                }
            }
        }
    }

    /// Llama 3 RoPE scaling: both executors turn each frequency by its divisor (they agree, and
    /// differ from the unscaled model), and a GGUF's rope_freqs.weight (as make-model and
    /// llama.cpp's converter write it) reads back as the config's own divisors.
    func testLlama3RopeScalingInBothExecutorsAndFromGGUF() throws {
        let dir = TinyAssets.tempDir()
        let reference = try BaseModel.load(path: try tinyModel(.f32, in: dir))
        var scaled = reference.config
        scaled.ropeScaling = RopeScaling(kind: .llama3, factor: 8, lowFrequencyFactor: 1, highFrequencyFactor: 4, originalMaxPositionEmbeddings: 64)
        let factors = try XCTUnwrap(scaled.ropeFrequencyFactors)
        XCTAssertEqual(factors.first, 1, "short wavelengths are not scaled")
        XCTAssertEqual(factors.last, 8, "long wavelengths are divided by the factor")
        XCTAssertTrue(factors.contains { $0 > 1 && $0 < 8 }, "a smooth band between")
        let weights = try BaseWeights(config: scaled, tensors: reference.weights.tensorDictionary)
        let ids = Array(1..<40)
        let training = try LlamaModel(base: weights, adapter: nil)
        var rng = SeededRNG(seed: 0)
        let t = withNoGrad { training.logits(hidden: training.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false)) }.data
        let engine = InferenceModel(base: weights)
        let i = engine.forward(ids, cache: engine.makeCache(), allLogits: true)
        XCTAssertLessThan(relative(i, t), 1e-5, "the KV-cache pass scales RoPE as the training pass does")
        let plain = InferenceModel(base: reference.weights)
        XCTAssertGreaterThan(relative(plain.forward(ids, cache: plain.makeCache(), allLogits: true), i), 1e-3, "scaling changes the model")

        let path = dir + "/scaled.gguf"
        _ = try RandomModel.write(.init(config: scaled, type: .f32, name: "scaled", tokenizer: ModelExport.ggufMetadata(for: TinyAssets.tokenizer())), to: path)
        let loaded = try ModelLoader.load(path: path)
        let read = try XCTUnwrap(loaded.config.ropeFrequencyFactors)
        XCTAssertEqual(read.count, factors.count)
        for (a, b) in zip(read, factors) { XCTAssertEqual(a, b, accuracy: 1e-6 * b) }
    }
}
