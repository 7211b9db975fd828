// AdamW over the trainable tensors only, global-norm gradient clipping, and the learning-rate
// schedules. Each follows its PyTorch / transformers counterpart step for step
// (torch.optim.AdamW, torch.nn.utils.clip_grad_norm_, transformers' get_*_schedule_with_warmup),
// so a PEFT run with the same settings is a reference (Tests/TrainingTests/Fixtures).
import Autograd
import Foundation

/// AdamW with decoupled weight decay: p ← p·(1 − lr·wd) − lr·m̂/(√v̂ + ε).
public struct AdamW: Sendable {
    public var beta1: Float = 0.9
    public var beta2: Float = 0.999
    public var eps: Float = 1e-8
    public var weightDecay: Float
    /// Optimiser steps taken so far (the bias corrections use step + 1 on the next update).
    public var step: Int = 0
    /// First and second moments, one array per parameter in the order given to `update`.
    public var m: [[Float]]
    public var v: [[Float]]

    public init(parameterSizes: [Int], weightDecay: Float) {
        self.weightDecay = weightDecay
        m = parameterSizes.map { [Float](repeating: 0, count: $0) }
        v = m
    }

    /// One update of every parameter from its `grad` at learning rate `lr`. A parameter whose
    /// grad is nil (it took no part in the loss) is left alone, as torch does.
    public mutating func update(_ params: [Tensor], lr: Float) {
        precondition(params.count == m.count, "[AdamW] \(params.count) parameters, moments for \(m.count)")
        step += 1
        let bc1 = 1 - Float(pow(Double(beta1), Double(step)))
        let bc2 = 1 - Float(pow(Double(beta2), Double(step)))
        let stepSize = lr / bc1
        let bc2Sqrt = bc2.squareRoot()
        let decay = 1 - lr * weightDecay
        let (b1, b2, eps) = (beta1, beta2, eps)
        for (i, p) in params.enumerated() {
            guard let g = p.grad else { continue }
            precondition(g.count == m[i].count, "[AdamW] parameter \(i) has \(g.count) values, moments \(m[i].count)")
            m[i].withUnsafeMutableBufferPointer { mp in
                v[i].withUnsafeMutableBufferPointer { vp in
                    p.data.withUnsafeMutableBufferPointer { pp in
                        g.withUnsafeBufferPointer { gp in
                            for j in 0..<gp.count {
                                let gj = gp[j]
                                mp[j] = b1 * mp[j] + (1 - b1) * gj
                                vp[j] = b2 * vp[j] + (1 - b2) * gj * gj
                                let denom = vp[j].squareRoot() / bc2Sqrt + eps
                                pp[j] = pp[j] * decay - stepSize * mp[j] / denom
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The global L2 norm of all gradients (before clipping), computed in Double.
public func gradientNorm(_ params: [Tensor]) -> Float {
    var total = 0.0
    for p in params {
        guard let g = p.grad else { continue }
        var s = 0.0
        for x in g { s += Double(x) * Double(x) }
        total += s
    }
    return Float(total.squareRoot())
}

/// Scales every gradient by min(1, maxNorm / (norm + 1e-6)), as clip_grad_norm_. Returns the
/// norm before clipping.
@discardableResult
public func clipGradients(_ params: [Tensor], maxNorm: Float) -> Float {
    let norm = gradientNorm(params)
    let coef = min(1, maxNorm / (norm + 1e-6))
    guard coef < 1 else { return norm }
    for p in params where p.grad != nil {
        p.grad!.withUnsafeMutableBufferPointer { gp in
            for j in 0..<gp.count { gp[j] *= coef }
        }
    }
    return norm
}

/// Learning-rate schedules after a linear warmup from 0, as transformers defines them.
public enum LRSchedule: String, CaseIterable, Codable, Sendable {
    case cosine, linear, constant

    /// The multiplier of the base learning rate for the optimiser step `step` (0-based).
    public func factor(step: Int, warmupSteps: Int, totalSteps: Int) -> Float {
        if step < warmupSteps { return Float(step) / Float(max(1, warmupSteps)) }
        let progress = Double(step - warmupSteps) / Double(max(1, totalSteps - warmupSteps))
        switch self {
        case .constant: return 1
        case .linear: return Float(max(0, Double(totalSteps - step) / Double(max(1, totalSteps - warmupSteps))))
        case .cosine: return Float(max(0, 0.5 * (1 + cos(Double.pi * progress))))
        }
    }
}
