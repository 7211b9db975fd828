// Tensor and tape: a contiguous row-major tensor that remembers the op that made it, and
// reverse-mode `backward()` whose traversal state (topological order, visited set) lives only
// inside that call, as in micrograd. Leaves out views, strides and devices; grad mode is a
// closure-scoped task-local (`withNoGrad`), never a global switch.

/// A contiguous row-major tensor over `Scalar` (Float for training, Double for checks).
public final class TensorOf<Scalar: TensorScalar> {
    public let shape: [Int]
    /// Row-major values, `count == shape.reduce(1, *)`.
    public var data: [Scalar]
    /// Filled by `backward()`, only for leaves with `requiresGrad`; accumulates across calls.
    /// Intermediate results drop their gradient once it has been passed to their inputs.
    public var grad: [Scalar]?
    /// Leaves: as given. Results: grad mode on and some input requires grad.
    public let requiresGrad: Bool

    /// Inputs that require grad (empty for leaves).
    let parents: [TensorOf<Scalar>]
    /// Given this tensor's gradient, accumulates into the parents' gradients.
    let backwardFn: ((UnsafeBufferPointer<Scalar>) -> Void)?

    public init(shape: [Int], data: [Scalar], requiresGrad: Bool = false) {
        precondition(shape.allSatisfy { $0 >= 0 }, "[Tensor] negative dimension in \(shape)")
        precondition(
            data.count == shape.reduce(1, *),
            "[Tensor] data count \(data.count) does not match shape \(shape)")
        _ = Memory.keepFreedPages
        self.shape = shape
        self.data = data
        self.requiresGrad = requiresGrad
        self.parents = []
        self.backwardFn = nil
    }

    /// A result of an op; records the tape edge only when grad mode is on and an input needs it.
    init(
        result shape: [Int], data: [Scalar], inputs: [TensorOf<Scalar>],
        backward: ((UnsafeBufferPointer<Scalar>) -> Void)?
    ) {
        self.shape = shape
        self.data = data
        let parents = inputs.filter { $0.requiresGrad }
        let tracked = backward != nil && !parents.isEmpty && GradMode.enabled
        self.requiresGrad = tracked
        self.parents = tracked ? parents : []
        self.backwardFn = tracked ? backward : nil
    }

    public static func zeros(_ shape: [Int], requiresGrad: Bool = false) -> TensorOf {
        TensorOf(shape: shape, data: [Scalar](repeating: 0, count: shape.reduce(1, *)), requiresGrad: requiresGrad)
    }

    public var count: Int { data.count }

    /// Runs `body` on this tensor's gradient buffer, allocating zeros first if needed.
    /// Backward functions accumulate into it (gemm with beta = 1, +=).
    @inline(__always)
    func withGrad(_ body: (UnsafeMutablePointer<Scalar>) -> Void) {
        if grad == nil { grad = [Scalar](repeating: 0, count: data.count) }
        grad!.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
    }

    /// Backpropagates from a scalar (shape [] or [1]) with seed 1.
    public func backward() {
        precondition(count == 1, "[backward] needs a scalar (shape [] or [1]), got \(shape)")
        backward(gradient: [1])
    }

    /// Backpropagates `gradient` (same count as this tensor) to every leaf that requires grad.
    public func backward(gradient: [Scalar]) {
        precondition(
            gradient.count == count,
            "[backward] gradient count \(gradient.count) vs tensor shape \(shape)")
        guard requiresGrad else { return }
        // Topological order, built here and discarded (iterative DFS, post-order).
        var order: [TensorOf] = []
        var visited = Set<ObjectIdentifier>()
        var stack: [(TensorOf, Int)] = [(self, 0)]
        visited.insert(ObjectIdentifier(self))
        while let (node, next) = stack.popLast() {
            if next < node.parents.count {
                stack.append((node, next + 1))
                let p = node.parents[next]
                if visited.insert(ObjectIdentifier(p)).inserted { stack.append((p, 0)) }
            } else {
                order.append(node)
            }
        }
        if backwardFn == nil {
            withGrad { g in for i in 0..<gradient.count { g[i] += gradient[i] } }
        } else {
            grad = gradient
        }
        for node in order.reversed() {
            guard let fn = node.backwardFn else { continue }
            guard let g = node.grad else { continue }
            node.grad = nil  // intermediate: pass on and release
            g.withUnsafeBufferPointer { fn($0) }
        }
    }
}

/// The Float tensor the toolkit trains with.
public typealias Tensor = TensorOf<Float>

enum GradMode {
    @TaskLocal static var enabled: Bool = true
}

/// Runs `body` with gradient recording off: results made inside require no grad and keep no tape.
public func withNoGrad<R>(_ body: () throws -> R) rethrows -> R {
    try GradMode.$enabled.withValue(false) { try body() }
}

/// True when an op's result will be recorded on the tape.
@inline(__always)
func recording<S>(_ inputs: TensorOf<S>?...) -> Bool {
    GradMode.enabled && inputs.contains { $0?.requiresGrad == true }
}

@inline(__always)
func shapeCount(_ shape: [Int]) -> Int { shape.reduce(1, *) }
