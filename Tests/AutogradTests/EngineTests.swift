// Engine behaviour beyond gradients: frozen tensors get no grad, LoRA with B = 0 equals the base
// layer, no-grad scopes, accumulation, plain-loop twins of every BLAS-backed routine and of the
// SIMD kernels, and bit-identical results across runs and thread counts.
import Foundation
import XCTest
@testable import Autograd

func fleaf(_ shape: [Int], _ rng: inout SeededRNG, grad: Bool = false, scale: Float = 1) -> Tensor {
    Tensor(shape: shape, data: rng.uniformArray(count: shape.reduce(1, *), -scale, scale), requiresGrad: grad)
}

func assertClose(_ a: [Float], _ b: [Float], tol: Float, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(a.count, b.count, message, file: file, line: line)
    var worst: Float = 0
    for (x, y) in zip(a, b) { worst = max(worst, abs(x - y) / max(1, abs(y))) }
    XCTAssertLessThan(worst, tol, message, file: file, line: line)
}

/// Plain-loop causal attention (the twin of the blocked BLAS version).
func naiveAttention(q: [Float], k: [Float], v: [Float], batch: Int, t: Int, heads: Int, kvHeads: Int, hd: Int, seg: [Int32]?) -> [Float] {
    var out = [Float](repeating: 0, count: batch * t * heads * hd)
    let qw = heads * hd, kw = kvHeads * hd
    for b in 0..<batch {
        for h in 0..<heads {
            let kh = h / (heads / kvHeads)
            for i in 0..<t {
                var scores = [Double](repeating: -.infinity, count: t)
                for j in 0...i where seg == nil || seg![b * t + i] == seg![b * t + j] || seg![b * t + j] == sharedSegment {
                    var s = 0.0
                    for d in 0..<hd { s += Double(q[(b * t + i) * qw + h * hd + d]) * Double(k[(b * t + j) * kw + kh * hd + d]) }
                    scores[j] = s / Double(hd).squareRoot()
                }
                let m = scores.max()!
                let e = scores.map { $0 == -.infinity ? 0 : Foundation.exp($0 - m) }
                let z = e.reduce(0, +)
                for d in 0..<hd {
                    var acc = 0.0
                    for j in 0..<t { acc += e[j] / z * Double(v[(b * t + j) * kw + kh * hd + d]) }
                    out[(b * t + i) * qw + h * hd + d] = Float(acc)
                }
            }
        }
    }
    return out
}

final class EngineTests: XCTestCase {
    func testFrozenWeightsGetNoGradAndLoRAWithZeroBEqualsBase() {
        var rng = SeededRNG(seed: 1)
        let w = fleaf([6, 5], &rng), bias = fleaf([6], &rng)
        let lora = LoRALinear(weight: w, bias: bias, rank: 2, alpha: 4, rng: &rng)
        XCTAssertEqual(lora.scale, 2)
        XCTAssertEqual(lora.b.data, [Float](repeating: 0, count: 12))
        let bound = 1 / Float(5).squareRoot()
        XCTAssertTrue(lora.a.data.allSatisfy { abs($0) <= bound })
        let x = fleaf([4, 5], &rng, grad: true)
        let y = lora(x)
        XCTAssertEqual(y.data, linear(x, weight: w, bias: bias).data, "B = 0 must equal the base layer bit for bit")
        sum(mul(y, y)).backward()
        XCTAssertNil(w.grad)
        XCTAssertNil(bias.grad)
        XCTAssertNotNil(lora.a.grad)
        XCTAssertNotNil(lora.b.grad)
        XCTAssertNotNil(x.grad)
        // matmul with a frozen operand: only the trainable side gets a gradient.
        let a = fleaf([3, 4], &rng, grad: true), frozen = fleaf([4, 2], &rng)
        sum(matmul(a, frozen)).backward()
        XCTAssertNil(frozen.grad)
        XCTAssertNotNil(a.grad)
    }

    func testFusedMatchesAdapterOutput() {
        var rng = SeededRNG(seed: 2)
        let w = fleaf([7, 6], &rng)
        let a = fleaf([3, 6], &rng, grad: true), b = fleaf([7, 3], &rng, grad: true)
        let lora = LoRALinear(weight: w, bias: nil, a: a, b: b, alpha: 6)
        let x = fleaf([5, 6], &rng)
        assertClose(linear(x, weight: lora.fused()).data, lora(x).data, tol: 1e-5, "fused")
    }

    func testNoGradScopeAndAccumulation() {
        let x = Tensor(shape: [3], data: [1, 2, 3], requiresGrad: true)
        let y = withNoGrad { scale(x, 2) }
        XCTAssertFalse(y.requiresGrad)
        XCTAssertTrue(scale(x, 2).requiresGrad)
        sum(scale(x, 2)).backward()
        sum(scale(x, 2)).backward()
        XCTAssertEqual(x.grad, [4, 4, 4], "gradients accumulate across backward calls")
        let c = Tensor(shape: [2], data: [1, 2])
        XCTAssertFalse(scale(c, 2).requiresGrad)
    }

    func testDropoutWithLoRAIsDeterministicPerSeed() {
        var rng = SeededRNG(seed: 3)
        let lora = LoRALinear(weight: fleaf([4, 8], &rng), bias: nil, rank: 2, alpha: 2, rng: &rng)
        lora.dropout = 0.5
        let x = fleaf([3, 8], &rng)
        var r1 = SeededRNG(seed: 11), r2 = SeededRNG(seed: 11)
        XCTAssertEqual(lora(x, rng: &r1).data, lora(x, rng: &r2).data)
        XCTAssertEqual(r1, r2)
        let saved = try! JSONEncoder().encode(r1)
        var restored = try! JSONDecoder().decode(SeededRNG.self, from: saved)
        XCTAssertEqual(restored.next(), r1.next())
    }

    func testGemmMatchesPlainLoops() {
        var rng = SeededRNG(seed: 4)
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let m = 7, n = 5, k = 9, pad = 3
            let lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad
            let a = rng.uniformArray(count: (ta ? k : m) * lda, -1, 1), b = rng.uniformArray(count: (tb ? n : k) * ldb, -1, 1)
            var c1 = rng.uniformArray(count: m * ldc, -1, 1), c2 = c1
            BLAS.sgemm(transA: ta, transB: tb, m: m, n: n, k: k, alpha: 0.5, a: a, lda: lda, b: b, ldb: ldb, beta: 2, c: &c1, ldc: ldc)
            BLAS.gemmReference(transA: ta, transB: tb, m: m, n: n, k: k, alpha: Float(0.5), a: a, lda: lda, b: b, ldb: ldb, beta: 2, c: &c2, ldc: ldc)
            assertClose(c1, c2, tol: 1e-5, "sgemm tA=\(ta) tB=\(tb)")
            let ad = a.map(Double.init), bd = b.map(Double.init)
            var d1 = c1.map(Double.init), d2 = d1
            BLAS.dgemm(transA: ta, transB: tb, m: m, n: n, k: k, alpha: 0.5, a: ad, lda: lda, b: bd, ldb: ldb, beta: 2, c: &d1, ldc: ldc)
            BLAS.gemmReference(transA: ta, transB: tb, m: m, n: n, k: k, alpha: 0.5, a: ad, lda: lda, b: bd, ldb: ldb, beta: 2, c: &d2, ldc: ldc)
            for (x, y) in zip(d1, d2) { XCTAssertEqual(x, y, accuracy: 1e-12) }
        }
    }

    /// OpenBLAS runs kernels the CPU can run at its best, not the SSE3 fallback it takes for a
    /// CPU model it does not know (adapter_blas_select_core).
    func testBLASRunsTheCPUsKernels() {
        let core = BLAS.coreName
        print("OpenBLAS core: \(core); this CPU's best: \(BLAS.preferredCore ?? "neither SkylakeX nor Haswell")")
        if BLAS.preferredCore != nil, ProcessInfo.processInfo.environment["OPENBLAS_CORETYPE"] == nil {
            XCTAssertNotEqual(core, "Prescott", "the CPU has AVX2, so OpenBLAS's Prescott kernels mean its detection failed and was not fixed up")
        }
        // ADAPTER_CPU_LEVEL below the CPU's best: that level's kernels, as CBlockKernels' (BlockKernelTests)
        if let want = BLAS.levelCore, ProcessInfo.processInfo.environment["OPENBLAS_CORETYPE"] == nil {
            print("OpenBLAS core for ADAPTER_CPU_LEVEL=\(ProcessInfo.processInfo.environment["ADAPTER_CPU_LEVEL"] ?? ""): \(want)")
            XCTAssertEqual(core, want, "ADAPTER_CPU_LEVEL selects OpenBLAS's kernels for its level")
        }
    }

    func testLinearAndMatmulMatchPlainLoops() {
        var rng = SeededRNG(seed: 5)
        let x = fleaf([6, 4], &rng), w = fleaf([3, 4], &rng), bias = fleaf([3], &rng)
        var expected = [Float](repeating: 0, count: 18)
        for i in 0..<6 { for o in 0..<3 { var s = bias.data[o]; for j in 0..<4 { s += x.data[i * 4 + j] * w.data[o * 4 + j] }; expected[i * 3 + o] = s } }
        assertClose(linear(x, weight: w, bias: bias).data, expected, tol: 1e-5, "linear")
        let a = fleaf([2, 3, 4], &rng), b = fleaf([2, 4, 5], &rng)
        var mm = [Float](repeating: 0, count: 30)
        for g in 0..<2 { for i in 0..<3 { for j in 0..<5 { var s: Float = 0; for p in 0..<4 { s += a.data[g * 12 + i * 4 + p] * b.data[g * 20 + p * 5 + j] }; mm[g * 15 + i * 5 + j] = s } } }
        assertClose(matmul(a, b).data, mm, tol: 1e-5, "batched matmul")
    }

    func testAttentionMatchesPlainLoops() {
        var rng = SeededRNG(seed: 6)
        let batch = 2, t = 150, heads = 6, kvHeads = 2, hd = 5
        let q = fleaf([batch * t, heads * hd], &rng, scale: 2), k = fleaf([batch * t, kvHeads * hd], &rng, scale: 2), v = fleaf([batch * t, kvHeads * hd], &rng)
        var seg = [Int32]()
        for i in 0..<(batch * t) { seg.append(Int32(i < 40 ? 0 : (i < 170 ? 1 : (i < 290 ? 2 : 7)))) }
        // Row 2 starts with a shared prefix of 30 tokens that segments 4 and 5 both see.
        var shared = seg
        for i in t..<(batch * t) { shared[i] = i < t + 30 ? sharedSegment : (i < t + 100 ? 4 : 5) }
        // Row 1 interleaves segments 1-3 in runs of 7 with a shared token every 25: query blocks
        // (of 32 rows here) see keys in runs with gaps.
        var interleaved = seg
        for i in 0..<t { interleaved[i] = i % 25 == 3 ? sharedSegment : Int32(1 + (i / 7) % 3) }
        for s in [nil, seg, shared] {
            let got = causalAttention(q: q, k: k, v: v, batch: batch, heads: heads, kvHeads: kvHeads, segmentIds: s)
            let want = naiveAttention(q: q.data, k: k.data, v: v.data, batch: batch, t: t, heads: heads, kvHeads: kvHeads, hd: hd, seg: s)
            assertClose(got.data, want, tol: 2e-5, "attention segments=\(s != nil)")
        }
        let got = Ops.causalAttention(q: q, k: k, v: v, batch: batch, heads: heads, kvHeads: kvHeads, segmentIds: interleaved, blockRows: 32)
        let want = naiveAttention(q: q.data, k: k.data, v: v.data, batch: batch, t: t, heads: heads, kvHeads: kvHeads, hd: hd, seg: interleaved)
        assertClose(got.data, want, tol: 2e-5, "attention, interleaved segments in blocks of 32")
    }

    func testKernelsMatchPlainLoops() {
        var rng = SeededRNG(seed: 7)
        let x = rng.uniformArray(count: 1000, -30, 30) + [-200, -88, 88, 0]
        var y = [Float](repeating: 0, count: x.count)
        Kernels.exp(x, &y, count: x.count)
        for (a, b) in zip(x, y) { XCTAssertEqual(b, Foundation.exp(a), accuracy: max(1e-37, 3e-7 * Foundation.exp(a))) }
        Kernels.silu(x, &y, count: x.count)
        for (a, b) in zip(x, y) { XCTAssertEqual(b, a / (1 + Foundation.exp(-a)), accuracy: 1e-5 * max(1, abs(a))) }
        let row = rng.uniformArray(count: 37, -5, 5)
        var sm = [Float](repeating: 0, count: 37)
        let lse = Kernels.softmaxRow(row, &sm, count: 37)
        let z = row.map { Foundation.exp(Double($0)) }.reduce(0, +)
        XCTAssertEqual(Double(lse), Foundation.log(z), accuracy: 1e-5)
        for (a, b) in zip(row, sm) { XCTAssertEqual(Double(b), Foundation.exp(Double(a)) / z, accuracy: 1e-6) }
        let rows = rng.uniformArray(count: 3 * 21, -2, 2), w = rng.uniformArray(count: 21, -1, 1)
        var out = [Float](repeating: 0, count: rows.count)
        Kernels.rmsNormRows(rows, weight: w, &out, rows: 3, dim: 21, eps: 1e-5)
        for r in 0..<3 {
            let ms = (0..<21).map { Double(rows[r * 21 + $0] * rows[r * 21 + $0]) }.reduce(0, +) / 21
            for j in 0..<21 { XCTAssertEqual(Double(out[r * 21 + j]), Double(rows[r * 21 + j]) / (ms + 1e-5).squareRoot() * Double(w[j]), accuracy: 1e-5) }
        }
    }

    /// A small transformer block + loss, returning the loss, output and every gradient.
    func blockRun(seed: UInt64) -> [[Float]] {
        var rng = SeededRNG(seed: seed)
        let t = 200, d = 64, heads = 4, kvHeads = 2, hd = 16, ffn = 96, vocab = 300
        let x = fleaf([t, d], &rng, grad: true)
        let norm = fleaf([d], &rng, grad: true)
        func proj(_ o: Int, _ i: Int) -> LoRALinear {
            let l = LoRALinear(weight: fleaf([o, i], &rng, scale: 0.2), bias: nil, rank: 4, alpha: 8, rng: &rng)
            l.b.data = rng.uniformArray(count: l.b.count, -0.1, 0.1)
            return l
        }
        let wq = proj(heads * hd, d), wk = proj(kvHeads * hd, d), wv = proj(kvHeads * hd, d), wo = proj(d, heads * hd)
        let gate = proj(ffn, d), up = proj(ffn, d), down = proj(d, ffn), head = fleaf([vocab, d], &rng)
        let positions = (0..<t).map { $0 % 77 }
        let seg = (0..<t).map { Int32($0 / 77) }
        let h0 = rmsNorm(x, weight: norm, eps: 1e-5)
        let q = rope(wq(h0), heads: heads, positions: positions, base: 10_000)
        let k = rope(wk(h0), heads: kvHeads, positions: positions, base: 10_000)
        let att = causalAttention(q: q, k: k, v: wv(h0), batch: 1, heads: heads, kvHeads: kvHeads, segmentIds: seg)
        let h1 = x + wo(att)
        let h2 = rmsNorm(h1, weight: norm, eps: 1e-5)
        let out = h1 + down(swiglu(gate: gate(h2), up: up(h2)))
        let logits = linear(out, weight: head)
        let targets = (0..<t).map { ($0 * 7) % vocab }
        let loss = crossEntropy(logits: logits, targets: targets, mask: (0..<t).map { $0 % 3 != 0 })
            + scale(divergence(student: logits, teacher: scale(logits, 0.5), kind: .reverse), 0.1)
        loss.backward()
        var result = [loss.data, out.data, x.grad!, norm.grad!]
        for l in [wq, wk, wv, wo, gate, up, down] { result += [l.a.grad!, l.b.grad!] }
        return result
    }

    func testBitIdenticalAcrossRunsAndThreadCounts() {
        let first = blockRun(seed: 8)
        XCTAssertEqual(first, blockRun(seed: 8), "two runs differ")
        let one = withThreads(1) { blockRun(seed: 8) }
        let two = withThreads(2) { blockRun(seed: 8) }
        let differing = (0..<one.count).filter { one[$0] != two[$0] }
        XCTAssertEqual(differing, [], "1 vs 2 threads differ in results \(differing) (0 loss, 1 output, 2 dx, 3 dnorm, then dA, dB per layer)")
        XCTAssertTrue(one == first, "1 thread differs from the default")
        // gemm alone, one thread vs two
        var rng = SeededRNG(seed: 1)
        for (m, n, k) in [(200, 64, 64), (200, 300, 64), (64, 64, 200), (200, 4, 64), (128, 128, 16)] {
            let a = rng.uniformArray(count: m * k, -1, 1), b = rng.uniformArray(count: k * n, -1, 1)
            func run() -> [Float] { var c = [Float](repeating: 0, count: m * n); BLAS.sgemm(transA: false, transB: false, m: m, n: n, k: k, alpha: 1, a: a, lda: k, b: b, ldb: n, beta: 0, c: &c, ldc: n); return c }
            XCTAssertTrue(withThreads(1) { run() } == withThreads(2) { run() }, "sgemm \(m)x\(n)x\(k) differs between 1 and 2 threads")
        }
    }

    func testRopeTableGivesTheDirectAngles() {
        // the shared angle table, grown past its first size and used by two head sizes, rotates
        // by exactly cos/sin(pos·base^(−2i/hd)) computed directly in Double
        var rng = SeededRNG(seed: 11)
        for (hd, positions) in [(8, [0, 3, 1023, 1024, 5000]), (6, [7, 70_000, 2])] {
            let heads = 2, half = hd / 2, base: Float = 10_000
            let x = fleaf([positions.count, heads * hd], &rng)
            let y = rope(x, heads: heads, positions: positions, base: base)
            for (row, p) in positions.enumerated() {
                for h in 0..<heads {
                    for i in 0..<half {
                        let theta = Double(p) * (1 / Foundation.pow(Double(base), Double(2 * i) / Double(hd)))
                        let c = Float(Foundation.cos(theta)), s = Float(Foundation.sin(theta))
                        let o = row * heads * hd + h * hd
                        let x1 = x.data[o + i], x2 = x.data[o + i + half]
                        XCTAssertEqual(y.data[o + i], x1 * c - x2 * s, "hd \(hd) position \(p) i \(i)")
                        XCTAssertEqual(y.data[o + i + half], x2 * c + x1 * s, "hd \(hd) position \(p) i \(i)")
                    }
                }
            }
        }
    }
}

/// A frozen weight held as a plain array (the interface ModelDefinition's stored matrices serve).
private struct ArrayWeight: FrozenLinearWeight {
    let rows: Int, columns: Int, values: [Float]
    func multiply(_ x: UnsafePointer<Float>, m: Int, into y: UnsafeMutablePointer<Float>, ldy: Int) {
        values.withUnsafeBufferPointer { w in
            BLAS.sgemm(transA: false, transB: true, m: m, n: rows, k: columns, alpha: 1, a: x, lda: columns,
                       b: w.baseAddress!, ldb: columns, beta: 0, c: y, ldc: ldy)
        }
    }
    func multiplyAccumulate(_ dy: UnsafePointer<Float>, m: Int, ldDy: Int, into dx: UnsafeMutablePointer<Float>, ldx: Int) {
        values.withUnsafeBufferPointer { w in
            BLAS.sgemm(transA: false, transB: false, m: m, n: columns, k: rows, alpha: 1, a: dy, lda: ldDy,
                       b: w.baseAddress!, ldb: columns, beta: 1, c: dx, ldc: ldx)
        }
    }
    func unpackRows(_ r: Range<Int>, into out: UnsafeMutablePointer<Float>) {
        values.withUnsafeBufferPointer { out.update(from: $0.baseAddress! + r.lowerBound * columns, count: r.count * columns) }
    }
}

final class FrozenHeadLossTests: XCTestCase {
    /// The frozen head's one-pass loss (online log-sum-exp and online softmax-weighted rows over
    /// vocabulary panels) equals the tensor head's, loss and input gradient, with several panels
    /// whose later ones raise a row's maximum (the running sums are rescaled) and targets in each.
    func testFrozenHeadCrossEntropyEqualsTensorHeadOverManyPanels() {
        var rng = SeededRNG(seed: 11)
        let d = 64, v = 40_000, m = 6
        XCTAssertGreaterThan(v, 2 * Ops.headPanelRows(vocabulary: v, hidden: d), "at least three panels")
        var w = rng.uniformArray(count: v * d, -0.5, 0.5)
        for c in 0..<d { w[(v - 7) * d + c] = 3 }  // a last-panel row that dominates some rows' logits
        let targets = [0, v / 2, v - 1, 17, v - 7, 3 * v / 4]
        let h1 = fleaf([m, d], &rng, grad: true), h2 = Tensor(shape: [m, d], data: h1.data, requiresGrad: true)
        let reference = Ops.linearCrossEntropy(hidden: h1, weight: Tensor(shape: [v, d], data: w), targets: targets)
        let frozen = linearCrossEntropy(hidden: h2, frozen: ArrayWeight(rows: v, columns: d, values: w), targets: targets)
        XCTAssertEqual(frozen.data[0], reference.data[0], accuracy: 1e-5 * abs(reference.data[0]))
        scale(reference, 3).backward()
        scale(frozen, 3).backward()
        assertClose(h2.grad!, h1.grad!, tol: 1e-5, "input gradient")
        let noGrad = withNoGrad { linearCrossEntropy(hidden: h2, frozen: ArrayWeight(rows: v, columns: d, values: w), targets: targets) }
        XCTAssertEqual(noGrad.data[0], frozen.data[0], "the loss does not depend on whether a gradient is kept")
    }
}
