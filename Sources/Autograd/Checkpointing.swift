// Activation checkpointing: run a piece of the network without keeping its intermediate
// results, and recompute them when the backward pass reaches it. Memory for a transformer
// then holds one block input per layer plus one block's activations at a time, for about
// one extra forward pass of compute. Randomness inside `body` (dropout) must replay the same
// way on the recompute; callers give `body` its own copy of the generator state.
// Leaves out nested checkpoint policies and offloading. Follows torch.utils.checkpoint.

extension Ops {
    /// y = body(x), recorded as one tape node. Forward runs `body` with grad mode off; backward
    /// runs it again with grad on, from a fresh leaf holding x's values, and backpropagates
    /// through that: `parameters` (the trainable tensors `body` reads besides x) accumulate
    /// their gradients as usual, and x gets the fresh leaf's gradient.
    static func checkpointed<S>(
        _ x: TensorOf<S>, parameters: [TensorOf<S>], _ body: @escaping (TensorOf<S>) -> TensorOf<S>
    ) -> TensorOf<S> {
        guard GradMode.enabled, x.requiresGrad || parameters.contains(where: { $0.requiresGrad }) else { return body(x) }
        let y = withNoGrad { body(x) }
        return TensorOf(result: y.shape, data: y.data, inputs: [x] + parameters) { g in
            let input = TensorOf<S>(shape: x.shape, data: x.data, requiresGrad: x.requiresGrad)
            let again = GradMode.$enabled.withValue(true) { body(input) }
            precondition(again.shape == y.shape, "[checkpointed] the recomputed result has shape \(again.shape), the first \(y.shape): body must be deterministic")
            again.backward(gradient: Array(g))
            if x.requiresGrad, let dx = input.grad {
                dx.withUnsafeBufferPointer { dp in x.withGrad { gx in kMap2(x.count, gx, dp.baseAddress!, gx) { $0 + $1 } } }
            }
        }
    }
}

/// Runs `body(x)` without keeping its intermediate results; the backward pass recomputes them.
/// `parameters`: the trainable tensors `body` uses besides `x`. `body` must compute the same
/// values when called again (give it a copy of any random generator state).
public func checkpointed(_ x: Tensor, parameters: [Tensor], _ body: @escaping (Tensor) -> Tensor) -> Tensor {
    Ops.checkpointed(x, parameters: parameters, body)
}
