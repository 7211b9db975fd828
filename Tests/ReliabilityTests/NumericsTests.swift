// Numerics at the edges (issue #10, part 4): softmax and log-softmax of logits that overflow a
// naive exp (±1e30, ±88.8, Float.greatestFiniteMagnitude), cross-entropy where the target's
// probability underflows to zero (log of zero), distillation divergences on extreme logits, and
// empty loss masks (a batch with no assistant tokens) in the loss and in the full model.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
@testable import Training
import XCTest

final class NumericsTests: XCTestCase {
    let extremes: [Float] = [1e30, 0, -1e30, 88.8, -88.8, 1e4, -1e4, 3,
                             Float.greatestFiniteMagnitude, -Float.greatestFiniteMagnitude, 0, 1, -5, 7, 2, 0,
                             100, 100, 100, 100, -100, -100, -100, -100]

    func testSoftmaxOfOverflowingLogitsIsFiniteAndSumsToOne() {
        for width in [3, 8, 24] {  // below, at and above the 16-lane SIMD width
            let rows = extremes.count / width
            let x = Tensor(shape: [rows, width], data: Array(extremes.prefix(rows * width)), requiresGrad: true)
            let y = softmax(x)
            XCTAssert(y.data.allSatisfy { $0.isFinite && $0 >= 0 && $0 <= 1 }, "width \(width): \(y.data)")
            for r in 0..<rows {
                XCTAssertEqual(y.data[(r * width)..<((r + 1) * width)].reduce(0, +), 1, accuracy: 1e-5, "row \(r) of width \(width)")
            }
            let ls = logSoftmax(x)
            XCTAssert(ls.data.allSatisfy { !$0.isNaN && $0 <= 0 }, "log-softmax must not be NaN: \(ls.data)")
            let loss = crossEntropy(logits: y, targets: Array(repeating: 0, count: rows))
            loss.backward()
            XCTAssert(x.grad!.allSatisfy { $0.isFinite }, "softmax backward: \(x.grad!)")
        }
    }

    func testCrossEntropyWhenTheTargetsProbabilityUnderflowsToZero() {
        // p(target) = e^-2e30 = 0 in Float: a naive log(softmax) is log(0) = -inf.
        let x = Tensor(shape: [2, 3], data: [1e30, -1e30, 0, 100, -100, 0], requiresGrad: true)
        let loss = crossEntropy(logits: x, targets: [1, 1])
        XCTAssert(loss.data[0].isFinite, "loss \(loss.data[0])")
        XCTAssertEqual(loss.data[0], (2e30 + 200) / 2, accuracy: 1e25)
        loss.backward()
        XCTAssert(x.grad!.allSatisfy { $0.isFinite }, "\(x.grad!)")
        XCTAssertEqual(x.grad![0], 0.5, accuracy: 1e-6)   // (softmax - onehot) / rows
        XCTAssertEqual(x.grad![1], -0.5, accuracy: 1e-6)
    }

    func testEmptyMaskGivesZeroLossAndZeroGradient() {
        let x = Tensor(shape: [3, 5], data: (0..<15).map { Float($0) / 3 }, requiresGrad: true)
        let loss = crossEntropy(logits: x, targets: [0, 1, 2], mask: [false, false, false])
        XCTAssertEqual(loss.data, [0])
        loss.backward()
        XCTAssertEqual(x.grad!, Array(repeating: 0, count: 15))
        let t = Tensor(shape: [3, 5], data: (0..<15).map { Float(15 - $0) })
        for kind in Divergence.allCases {
            let s = Tensor(shape: [3, 5], data: x.data, requiresGrad: true)
            let d = divergence(student: s, teacher: t, kind: kind, mask: [false, false, false])
            XCTAssertEqual(d.data, [0], "\(kind)")
            d.backward()
            XCTAssertEqual(s.grad!, Array(repeating: 0, count: 15), "\(kind)")
        }
    }

    func testDivergencesOfExtremeLogitsAreFinite() {
        let s = Tensor(shape: [2, 4], data: [1e30, -1e30, 0, 5, 88.8, -88.8, 1e4, -1e4], requiresGrad: true)
        let t = Tensor(shape: [2, 4], data: [-1e30, 1e30, 3, 0, -1e4, 1e4, 88.8, -88.8])
        for kind in Divergence.allCases {
            s.grad = nil
            let d = divergence(student: s, teacher: t, kind: kind)
            XCTAssertFalse(d.data[0].isNaN, "\(kind): \(d.data)")
            d.backward()
            XCTAssert(s.grad!.allSatisfy { !$0.isNaN }, "\(kind): \(s.grad!)")
        }
    }

    /// A batch with no assistant tokens through the whole model: loss 0, every LoRA gradient 0.
    func testModelLossWithNoAssistantTokensIsZeroNotNaN() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        var rng = SeededRNG(seed: 5)
        let model = try LlamaModel(weights: base.weights,
                                   lora: LoRAConfig(rank: 2, alpha: 4, targets: [.q, .v], dropout: 0), rng: &rng)
        for p in model.loraParameters { for i in 0..<p.tensor.count { p.tensor.data[i] = 0.01 } }  // B != 0
        let ids = [1, 40, 41, 42, 2, 43]
        let layout = ForwardLayout(batch: 2, positions: [0, 1, 2, 0, 1, 2], segmentIds: nil)
        let loss = model.loss(inputs: ids, targets: ids, lossMask: Array(repeating: false, count: 6), layout: layout,
                              rng: &rng, training: true)
        XCTAssertEqual(loss.data, [0])
        loss.backward()
        for p in model.loraParameters {
            XCTAssert((p.tensor.grad ?? []).allSatisfy { $0 == 0 }, "\(p.name) got a gradient from an empty mask")
        }
    }
}
