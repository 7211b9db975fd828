// Finite-difference gradient checks for every op, in one table. The engine is generic over the
// scalar, so the checks run in Double: central differences with h = 1e-5 have error ~1e-10,
// far below the 1e-6 tolerance, so float rounding cannot hide a wrong gradient.
// Each case: random inputs, a random upstream gradient g, loss = Σ g ⊙ f(inputs).
import XCTest
@testable import Autograd

typealias DT = TensorOf<Double>

/// A random Double tensor.
func dleaf(_ shape: [Int], _ rng: inout SeededRNG, grad: Bool = true, scale: Double = 1) -> DT {
    let n = shape.reduce(1, *)
    return DT(shape: shape, data: (0..<n).map { _ in (rng.nextDouble() * 2 - 1) * scale }, requiresGrad: grad)
}

struct GradCase {
    let name: String
    let inputs: [DT]
    let f: ([DT]) -> DT
}

func gradCases() -> [GradCase] {
    var r = SeededRNG(seed: 42)
    var cases: [GradCase] = []
    func add(_ name: String, _ inputs: [DT], _ f: @escaping ([DT]) -> DT) { cases.append(GradCase(name: name, inputs: inputs, f: f)) }

    // matmul: all four transpose variants, non-square, size-1 dims, batched.
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = dleaf(ta ? [4, 3] : [3, 4], &r), b = dleaf(tb ? [5, 4] : [4, 5], &r)
        add("matmul tA=\(ta) tB=\(tb)", [a, b]) { Ops.matmul($0[0], $0[1], transposeA: ta, transposeB: tb) }
    }
    add("matmul [1,3]x[3,1]", [dleaf([1, 3], &r), dleaf([3, 1], &r)]) { Ops.matmul($0[0], $0[1]) }
    add("matmul frozen B", [dleaf([2, 3], &r), dleaf([3, 4], &r, grad: false)]) { Ops.matmul($0[0], $0[1]) }
    add("matmul batched", [dleaf([2, 3, 4], &r), dleaf([2, 4, 1], &r)]) { Ops.matmul($0[0], $0[1]) }
    add("matmul batched tA tB", [dleaf([3, 4, 2], &r), dleaf([3, 5, 4], &r)]) { Ops.matmul($0[0], $0[1], transposeA: true, transposeB: true) }
    // linear
    add("linear bias", [dleaf([5, 3], &r), dleaf([2, 3], &r), dleaf([2], &r)]) { Ops.linear($0[0], weight: $0[1], bias: $0[2]) }
    add("linear N=1 no bias", [dleaf([1, 4], &r), dleaf([3, 4], &r)]) { Ops.linear($0[0], weight: $0[1]) }
    add("linear frozen weight", [dleaf([3, 4], &r), dleaf([2, 4], &r, grad: false), dleaf([2], &r, grad: false)]) {
        Ops.linear($0[0], weight: $0[1], bias: $0[2])
    }
    // broadcasting binary ops
    add("add same", [dleaf([3, 4], &r), dleaf([3, 4], &r)]) { Ops.binary($0[0], $0[1], .add, "add") }
    add("add [3,4]+[4]", [dleaf([3, 4], &r), dleaf([4], &r)]) { Ops.binary($0[0], $0[1], .add, "add") }
    add("add [3,1]+[1,4]", [dleaf([3, 1], &r), dleaf([1, 4], &r)]) { Ops.binary($0[0], $0[1], .add, "add") }
    add("add [2,3,4]+[3,1]", [dleaf([2, 3, 4], &r), dleaf([3, 1], &r)]) { Ops.binary($0[0], $0[1], .add, "add") }
    add("sub same", [dleaf([3, 4], &r), dleaf([3, 4], &r)]) { Ops.binary($0[0], $0[1], .sub, "sub") }
    add("sub [4]-[2,4]", [dleaf([4], &r), dleaf([2, 4], &r)]) { Ops.binary($0[0], $0[1], .sub, "sub") }
    add("mul same", [dleaf([2, 5], &r), dleaf([2, 5], &r)]) { Ops.binary($0[0], $0[1], .mul, "mul") }
    add("mul [2,1,3]*[4,1]", [dleaf([2, 1, 3], &r), dleaf([4, 1], &r)]) { Ops.binary($0[0], $0[1], .mul, "mul") }
    add("mul scalar []", [dleaf([3, 2], &r), dleaf([], &r)]) { Ops.binary($0[0], $0[1], .mul, "mul") }
    add("scale", [dleaf([3, 5], &r)]) { Ops.scale($0[0], 0.7) }
    // reductions and layout
    add("sum", [dleaf([3, 7], &r)]) { Ops.sum($0[0]) }
    add("mean", [dleaf([2, 1, 5], &r)]) { Ops.mean($0[0]) }
    add("reshape", [dleaf([2, 6], &r)]) { Ops.reshape($0[0], [3, -1]) }
    add("transpose 2-D", [dleaf([3, 5], &r)]) { Ops.transpose($0[0], 0, 1) }
    add("transpose 3-D 0,2", [dleaf([2, 3, 4], &r)]) { Ops.transpose($0[0], 0, 2) }
    add("slice dim 1", [dleaf([3, 5], &r)]) { Ops.slice($0[0], dim: 1, range: 1..<4) }
    add("slice dim 0 size 1", [dleaf([4, 2, 3], &r)]) { Ops.slice($0[0], dim: 0, range: 2..<3) }
    add("concat dim 0", [dleaf([2, 3], &r), dleaf([1, 3], &r)]) { Ops.concat($0, dim: 0) }
    add("concat dim 1 three", [dleaf([2, 1], &r), dleaf([2, 3], &r, grad: false), dleaf([2, 2], &r)]) { Ops.concat($0, dim: 1) }
    // lookups
    add("embedding repeated ids", [dleaf([5, 3], &r)]) { Ops.gatherRows($0[0], [1, 3, 1, 0, 1], op: "embedding") }
    add("gatherRows", [dleaf([4, 3], &r)]) { Ops.gatherRows($0[0], [2, 2, 0], op: "gatherRows") }
    // norms, rope
    add("rmsNorm", [dleaf([3, 5], &r), dleaf([5], &r)]) { Ops.rmsNorm($0[0], weight: $0[1], eps: 1e-5) }
    add("rmsNorm [1,1]", [dleaf([1, 1], &r), dleaf([1], &r)]) { Ops.rmsNorm($0[0], weight: $0[1], eps: 1e-5) }
    add("rmsNorm D=37 frozen w", [dleaf([2, 37], &r), dleaf([37], &r, grad: false)]) { Ops.rmsNorm($0[0], weight: $0[1], eps: 1e-6) }
    // Gemma's (1 + w)
    add("rmsNorm offset 1", [dleaf([3, 5], &r), dleaf([5], &r)]) { Ops.rmsNorm($0[0], weight: $0[1], eps: 1e-6, offset: 1) }
    // per-head q/k norm (Qwen3): [N, H·hd] seen as [N, H, hd], one weight of hd for every head
    add("rmsNorm per head [3,4,6] via reshape", [dleaf([3, 24], &r), dleaf([6], &r)]) {
        Ops.reshape(Ops.rmsNorm(Ops.reshape($0[0], [3, 4, 6]), weight: $0[1], eps: 1e-6), [3, 24])
    }
    add("rope odd positions", [dleaf([3, 12], &r)]) { Ops.rope($0[0], heads: 2, positions: [1, 3, 7], base: 10_000) }
    add("rope hd=2 T=1", [dleaf([1, 2], &r)]) { Ops.rope($0[0], heads: 1, positions: [5], base: 100_000) }
    // Phi-4-mini: 6 of 8 dims turn (the rest pass through), LongRoPE divisors and attention factor
    add("rope partial rotary, factors, attention factor", [dleaf([3, 16], &r)]) {
        Ops.rope($0[0], heads: 2, positions: [0, 4, 9], base: 10_000, factors: [1, 1.5, 3], rotaryDim: 6, attentionFactor: 1.19)
    }
    // a fused module's LoRA B sliced per projection: the gradient of the whole B through the slice
    add("slice rows of B [7,2] rows 2..<5", [dleaf([7, 2], &r)]) { Ops.slice($0[0], dim: 0, range: 2..<5) }
    // attention: GQA + segments, T = 1, odd head dims, several query blocks
    add("attention GQA segments hd=3", [dleaf([6, 12], &r), dleaf([6, 6], &r), dleaf([6, 6], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 2, heads: 4, kvHeads: 2, segmentIds: [0, 0, 1, 5, 5, 5])
    }
    add("attention shared prefix, blocks of 2", [dleaf([8, 6], &r), dleaf([8, 3], &r), dleaf([8, 3], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 1, heads: 2, kvHeads: 1,
                            segmentIds: [sharedSegment, sharedSegment, sharedSegment, 1, 1, 2, 2, 2], blockRows: 2)
    }
    add("attention interleaved segments, blocks of 2 (key runs with gaps)", [dleaf([8, 6], &r), dleaf([8, 3], &r), dleaf([8, 3], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 1, heads: 2, kvHeads: 1,
                            segmentIds: [1, 2, 1, sharedSegment, 3, 2, 3, 1], blockRows: 2)
    }
    add("attention T=1 hd=5", [dleaf([2, 10], &r), dleaf([2, 5], &r), dleaf([2, 5], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 2, heads: 2, kvHeads: 1)
    }
    add("attention blocks of 2, segments, frozen v", [dleaf([7, 6], &r), dleaf([7, 3], &r), dleaf([7, 3], &r, grad: false)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 1, heads: 2, kvHeads: 1, segmentIds: [3, 3, 3, 1, 1, 2, 2], blockRows: 2)
    }
    add("attention MHA blocks of 3", [dleaf([10, 8], &r), dleaf([10, 8], &r), dleaf([10, 8], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 2, heads: 2, kvHeads: 2, blockRows: 3)
    }
    // Gemma 3's sliding window: keys 3 or more positions back masked, across blocks of 2; with
    // packed segments and their restarting positions
    add("attention window 3, GQA, blocks of 2", [dleaf([14, 8], &r), dleaf([14, 4], &r), dleaf([14, 4], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 2, heads: 2, kvHeads: 1, window: 3, blockRows: 2)
    }
    add("attention window 2, segments, positions", [dleaf([7, 6], &r), dleaf([7, 3], &r), dleaf([7, 3], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 1, heads: 2, kvHeads: 1, segmentIds: [3, 3, 3, 3, 1, 1, 1],
                            window: 2, positions: [0, 1, 2, 3, 0, 1, 2], blockRows: 2)
    }
    // Granite's attention multiplier in place of 1/√hd
    add("attention scale 0.09, GQA, blocks of 2", [dleaf([6, 8], &r), dleaf([6, 4], &r), dleaf([6, 4], &r)]) {
        Ops.causalAttention(q: $0[0], k: $0[1], v: $0[2], batch: 2, heads: 2, kvHeads: 1, scale: 0.09, blockRows: 2)
    }
    // activations, softmax
    add("silu", [dleaf([3, 19], &r, scale: 4)]) { Ops.silu($0[0]) }
    add("swiglu", [dleaf([2, 17], &r, scale: 3), dleaf([2, 17], &r)]) { Ops.swiglu(gate: $0[0], up: $0[1]) }
    // Gemma's gate: GELU with PyTorch's tanh approximation
    add("geluTanhGated", [dleaf([2, 17], &r, scale: 3), dleaf([2, 17], &r)]) { Ops.geluTanhGated(gate: $0[0], up: $0[1]) }
    add("softmax", [dleaf([3, 18], &r, scale: 3)]) { Ops.softmax($0[0]) }
    add("softmax [2,1]", [dleaf([2, 1], &r)]) { Ops.softmax($0[0]) }
    add("logSoftmax", [dleaf([2, 20], &r, scale: 3)]) { Ops.logSoftmax($0[0]) }
    // losses
    add("crossEntropy", [dleaf([4, 19], &r, scale: 3)]) { Ops.crossEntropy(logits: $0[0], targets: [3, 0, 18, 3]) }
    add("crossEntropy mask", [dleaf([4, 5], &r, scale: 3)]) { Ops.crossEntropy(logits: $0[0], targets: [1, -100, 4, 2], mask: [true, false, true, false]) }
    add("crossEntropy all masked", [dleaf([2, 5], &r)]) { Ops.crossEntropy(logits: $0[0], targets: [0, 0], mask: [false, false]) }
    for kind in Divergence.allCases {
        add("divergence \(kind)", [dleaf([3, 21], &r, scale: 2), dleaf([3, 21], &r, grad: false, scale: 2)]) {
            Ops.divergence(student: $0[0], teacher: $0[1], kind: kind)
        }
        add("divergence \(kind) mask", [dleaf([3, 6], &r, scale: 2), dleaf([3, 6], &r, grad: false, scale: 2)]) {
            Ops.divergence(student: $0[0], teacher: $0[1], kind: kind, mask: [false, true, true])
        }
    }
    // output head + cross-entropy fused; frozen head (9 rows: chunks of 8 and 1), trainable head
    add("linearCrossEntropy", [dleaf([9, 4], &r), dleaf([6, 4], &r, grad: false)]) {
        Ops.linearCrossEntropy(hidden: $0[0], weight: $0[1], targets: [0, 5, 2, 2, 1, 3, 4, 5, 0])
    }
    add("linearCrossEntropy trainable head", [dleaf([3, 4], &r), dleaf([6, 4], &r)]) {
        Ops.linearCrossEntropy(hidden: $0[0], weight: $0[1], targets: [1, 5, 0])
    }
    // preference training: each row's target log-probability under a frozen head (21 = 16 + 5
    // columns: the SIMD loop and its tail), sums of rows into sequences, and the pair losses
    add("tokenLogProbs", [dleaf([5, 4], &r, scale: 2), dleaf([21, 4], &r, grad: false, scale: 2)]) { a in
        a[1].data.withUnsafeBufferPointer { w in
            Ops.tokenLogProbs(hidden: a[0], vocabulary: 21, targets: [0, 20, 7, 7, 16]) { rows, out in
                out.update(from: w.baseAddress! + rows.lowerBound * 4, count: rows.count * 4)
            }
        }
    }
    add("segmentSums", [dleaf([7], &r)]) { Ops.segmentSums($0[0], segments: [0, -1, 1, 1, 0, 2, -1], count: 3) }
    let reference = (0..<6).map { _ in r.nextDouble() * 4 - 2 }, lengths = [3, 5, 2, 4, 1, 6]
    for kind in [PreferenceLossKind.sigmoid(beta: 0.7, labelSmoothing: 0), .sigmoid(beta: 0.3, labelSmoothing: 0.2), .ipo(beta: 0.4)] {
        add("preferenceLoss \(kind)", [dleaf([6], &r, scale: 3)]) {
            Ops.preferenceLoss(policy: $0[0], reference: reference, lengths: lengths, nll: nil, nllDivisor: 1, pairDivisor: 5, kind: kind)
        }
    }
    // ORPO needs log-probabilities (< 0): policy = −x² − 0.3 per token of each reply
    add("preferenceLoss orpo", [dleaf([6], &r), dleaf([3], &r, scale: 5)]) { a in
        let perToken = Ops.binary(Ops.scale(Ops.binary(a[0], a[0], .mul, "mul"), -1), DT(shape: [], data: [0.3]), .sub, "sub")
        let policy = Ops.binary(perToken, DT(shape: [6], data: lengths.map(Double.init)), .mul, "mul")
        return Ops.preferenceLoss(policy: policy, reference: nil, lengths: lengths, nll: a[1], nllDivisor: 17, pairDivisor: 3,
                                  kind: .orpo(lambda: 0.8))
    }
    // activation checkpointing around a small block (x and a trainable weight)
    add("checkpointed", [dleaf([3, 4], &r), dleaf([5, 4], &r)]) { a in
        Ops.checkpointed(a[0], parameters: [a[1]]) { x in Ops.swiglu(gate: Ops.linear(x, weight: a[1]), up: Ops.linear(x, weight: a[1])) }
    }
    // dropout (a fresh generator per call, so every evaluation draws the same mask)
    add("dropout", [dleaf([4, 9], &r)]) { var g = SeededRNG(seed: 9); return Ops.dropout($0[0], p: 0.3, rng: &g) }
    // LoRALinear: frozen W, b; trainable A, B (B random so A's gradient is not zero)
    add("LoRALinear", [dleaf([3, 5], &r), dleaf([4, 5], &r, grad: false), dleaf([4], &r, grad: false), dleaf([2, 5], &r), dleaf([4, 2], &r)]) {
        Ops.loraLinear($0[0], weight: $0[1], bias: $0[2], a: $0[3], b: $0[4], scale: 1.5, loraInput: $0[0])
    }
    // The fused op also carries W's and b's gradients when they train; rank 1, one row
    add("LoRALinear trainable W, b", [dleaf([1, 3], &r), dleaf([2, 3], &r), dleaf([2], &r), dleaf([1, 3], &r), dleaf([2, 1], &r)]) {
        Ops.loraLinear($0[0], weight: $0[1], bias: $0[2], a: $0[3], b: $0[4], scale: 2, loraInput: $0[0])
    }
    add("LoRALinear dropout", [dleaf([3, 5], &r), dleaf([4, 5], &r, grad: false), dleaf([2, 5], &r), dleaf([4, 2], &r)]) {
        var g = SeededRNG(seed: 3)
        let xd = Ops.dropout($0[0], p: 0.25, rng: &g)
        return Ops.loraLinear($0[0], weight: $0[1], bias: nil, a: $0[2], b: $0[3], scale: 0.5, loraInput: xd)
    }
    return cases
}

final class GradientCheckTests: XCTestCase {
    func testEveryOpAgainstFiniteDifferences() {
        var rng = SeededRNG(seed: 1234)
        let h = 1e-5
        for c in gradCases() {
            for x in c.inputs { x.grad = nil }
            let out = c.f(c.inputs)
            let g = (0..<out.count).map { _ in rng.nextDouble() * 2 - 1 }
            XCTAssertTrue(out.requiresGrad, "\(c.name): result should require grad")
            out.backward(gradient: g)
            func loss() -> Double {
                let y = withNoGrad { c.f(c.inputs) }
                XCTAssertFalse(y.requiresGrad, "\(c.name): no-grad result requires grad")
                return zip(y.data, g).reduce(0) { $0 + $1.0 * $1.1 }
            }
            for (index, x) in c.inputs.enumerated() {
                guard x.requiresGrad else {
                    XCTAssertNil(x.grad, "\(c.name): frozen input \(index) got a gradient")
                    continue
                }
                guard let analytic = x.grad else { XCTFail("\(c.name): input \(index) has no gradient"); continue }
                var worst = 0.0
                for e in 0..<x.count {
                    let original = x.data[e]
                    x.data[e] = original + h
                    let plus = loss()
                    x.data[e] = original - h
                    let minus = loss()
                    x.data[e] = original
                    let numeric = (plus - minus) / (2 * h)
                    let err = abs(numeric - analytic[e]) / max(1, abs(numeric))
                    worst = max(worst, err)
                }
                XCTAssertLessThan(worst, 1e-6, "\(c.name): input \(index) \(x.shape) max error \(worst)")
            }
        }
    }

    func testAllMaskedCrossEntropyIsZeroWithZeroGradient() {
        let logits = Tensor(shape: [2, 3], data: [1, 2, 3, 4, 5, 6], requiresGrad: true)
        let loss = crossEntropy(logits: logits, targets: [0, 1], mask: [false, false])
        XCTAssertEqual(loss.data, [0])
        loss.backward()
        XCTAssertEqual(logits.grad, [Float](repeating: 0, count: 6))
        for kind in Divergence.allCases {
            let s = Tensor(shape: [1, 3], data: [1, 2, 3], requiresGrad: true)
            let d = divergence(student: s, teacher: Tensor(shape: [1, 3], data: [3, 2, 1]), kind: kind, mask: [false])
            XCTAssertEqual(d.data, [0])
            d.backward()
            XCTAssertEqual(s.grad, [0, 0, 0])
        }
    }
}
