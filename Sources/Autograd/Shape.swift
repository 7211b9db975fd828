// Reductions and layout ops: sum, mean, reshape, transpose (materialised), slice, concat.
// Reductions use fixed chunks combined in order, so sums do not depend on the thread count.
// Leaves out strided views: every op copies into a new contiguous tensor. Follows tinygrad's
// movement ops, with gradients routed back by the inverse copy.

extension Ops {
    /// Σ x -> scalar []; dx = g.
    static func sum<S>(_ x: TensorOf<S>) -> TensorOf<S> { reduceAll(x, mean: false) }

    /// (Σ x)/n -> scalar []; dx = g/n.
    static func mean<S>(_ x: TensorOf<S>) -> TensorOf<S> { reduceAll(x, mean: true) }

    static func reduceAll<S>(_ x: TensorOf<S>, mean: Bool) -> TensorOf<S> {
        let n = x.count
        let grain = Parallel.elementGrain
        var partials = [S](repeating: 0, count: Parallel.chunkCount(n, grain: grain))
        x.data.withUnsafeBufferPointer { xp in
            partials.withUnsafeMutableBufferPointer { pp in
                let pp = pp.baseAddress!
                Parallel.forChunks(n, grain: grain) { c, r in pp[c] = kSum(xp.baseAddress! + r.lowerBound, r.count) }
            }
        }
        var total: S = 0
        for p in partials { total += p }
        let factor: S = mean ? (n == 0 ? 0 : 1 / S(n)) : 1
        let out = [total * factor]
        guard recording(x) else { return TensorOf(result: [], data: out, inputs: [], backward: nil) }
        return TensorOf(result: [], data: out, inputs: [x]) { g in
            let gv = g[0] * factor
            x.withGrad { dx in kMap(n, dx, dx) { $0 + gv } }
        }
    }

    /// Same data, new shape (one dim may be -1); dx = g.
    static func reshape<S>(_ x: TensorOf<S>, _ shape: [Int]) -> TensorOf<S> {
        var shape = shape
        if let hole = shape.firstIndex(of: -1) {
            let known = shape.enumerated().filter { $0.offset != hole }.map(\.element).reduce(1, *)
            precondition(known > 0 && x.count % known == 0, "[reshape] cannot infer -1: \(x.shape) vs \(shape)")
            shape[hole] = x.count / known
        }
        precondition(shapeCount(shape) == x.count && shape.allSatisfy { $0 >= 0 }, "[reshape] element counts differ: \(x.shape) vs \(shape)")
        guard recording(x) else { return TensorOf(result: shape, data: x.data, inputs: [], backward: nil) }
        return TensorOf(result: shape, data: x.data, inputs: [x]) { g in
            x.withGrad { dx in kMap2(x.count, dx, g.baseAddress!, dx) { $0 + $1 } }
        }
    }

    /// Swaps two dims and materialises the result; dx = transpose(g) back.
    static func transpose<S>(_ x: TensorOf<S>, _ dim0: Int, _ dim1: Int) -> TensorOf<S> {
        let r = x.shape.count
        precondition(dim0 >= 0 && dim0 < r && dim1 >= 0 && dim1 < r, "[transpose] dims \(dim0), \(dim1) out of range for \(x.shape)")
        var outShape = x.shape
        outShape.swapAt(dim0, dim1)  // [.., d1, .., d0, ..]
        var inStrides = [Int](repeating: 1, count: r)
        for i in stride(from: r - 2, through: 0, by: -1) { inStrides[i] = inStrides[i + 1] * x.shape[i + 1] }
        inStrides.swapAt(dim0, dim1)
        let zero = [Int](repeating: 0, count: r)
        let out: [S] = makeArray(x.count) { y in
            x.data.withUnsafeBufferPointer { xp in
                forEachBroadcast(outShape, inStrides, zero) { o, i, _ in y[o] = xp[i] }
            }
        }
        guard recording(x) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [x]) { g in
            x.withGrad { dx in forEachBroadcast(outShape, inStrides, zero) { o, i, _ in dx[i] += g[o] } }
        }
    }

    /// x[..., range, ...] along `dim`; dx[range] += g.
    static func slice<S>(_ x: TensorOf<S>, dim: Int, range: Range<Int>) -> TensorOf<S> {
        precondition(dim >= 0 && dim < x.shape.count, "[slice] dim \(dim) out of range for \(x.shape)")
        precondition(range.lowerBound >= 0 && range.upperBound <= x.shape[dim], "[slice] range \(range) out of bounds for dim \(dim) of \(x.shape)")
        let outer = x.shape[..<dim].reduce(1, *), inner = x.shape[(dim + 1)...].reduce(1, *)
        let len = range.count, full = x.shape[dim]
        var outShape = x.shape
        outShape[dim] = len  // [..., len, ...]
        let block = len * inner
        let out: [S] = makeArray(outer * block) { y in
            x.data.withUnsafeBufferPointer { xp in
                for o in 0..<outer { (y + o * block).initialize(from: xp.baseAddress! + o * full * inner + range.lowerBound * inner, count: block) }
            }
        }
        guard recording(x) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [x]) { g in
            x.withGrad { dx in
                for o in 0..<outer {
                    let d = dx + o * full * inner + range.lowerBound * inner, gs = g.baseAddress! + o * block
                    for i in 0..<block { d[i] += gs[i] }
                }
            }
        }
    }

    /// Joins tensors along `dim` (all other dims equal); each input gets its slice of g.
    static func concat<S>(_ xs: [TensorOf<S>], dim: Int) -> TensorOf<S> {
        precondition(!xs.isEmpty, "[concat] needs at least one tensor")
        let first = xs[0].shape
        precondition(dim >= 0 && dim < first.count, "[concat] dim \(dim) out of range for \(first)")
        for x in xs {
            precondition(
                x.shape.count == first.count && x.shape.enumerated().allSatisfy { $0.offset == dim || $0.element == first[$0.offset] },
                "[concat] shapes differ outside dim \(dim): \(first) vs \(x.shape)")
        }
        let outer = first[..<dim].reduce(1, *), inner = first[(dim + 1)...].reduce(1, *)
        let total = xs.reduce(0) { $0 + $1.shape[dim] }
        var outShape = first
        outShape[dim] = total  // [..., Σ len, ...]
        var offsets: [Int] = []
        var acc = 0
        for x in xs { offsets.append(acc); acc += x.shape[dim] }
        let rowOut = total * inner
        let out: [S] = makeArray(outer * rowOut) { y in
            for (x, off) in zip(xs, offsets) {
                let block = x.shape[dim] * inner
                x.data.withUnsafeBufferPointer { xp in
                    for o in 0..<outer { (y + o * rowOut + off * inner).initialize(from: xp.baseAddress! + o * block, count: block) }
                }
            }
        }
        guard GradMode.enabled && xs.contains(where: { $0.requiresGrad }) else {
            return TensorOf(result: outShape, data: out, inputs: [], backward: nil)
        }
        return TensorOf(result: outShape, data: out, inputs: xs) { g in
            for (x, off) in zip(xs, offsets) where x.requiresGrad {
                let block = x.shape[dim] * inner
                x.withGrad { dx in
                    for o in 0..<outer {
                        let gs = g.baseAddress! + o * rowOut + off * inner, d = dx + o * block
                        for i in 0..<block { d[i] += gs[i] }
                    }
                }
            }
        }
    }
}

/// Σ of all elements -> scalar [].
public func sum(_ x: Tensor) -> Tensor { Ops.sum(x) }
/// Mean of all elements -> scalar [].
public func mean(_ x: Tensor) -> Tensor { Ops.mean(x) }
/// Same data in a new shape (one dim may be -1).
public func reshape(_ x: Tensor, _ shape: [Int]) -> Tensor { Ops.reshape(x, shape) }
/// Swaps dims `dim0` and `dim1`, copying into a new contiguous tensor.
public func transpose(_ x: Tensor, _ dim0: Int, _ dim1: Int) -> Tensor { Ops.transpose(x, dim0, dim1) }
/// The `range` part of `dim`.
public func slice(_ x: Tensor, dim: Int, range: Range<Int>) -> Tensor { Ops.slice(x, dim: dim, range: range) }
/// Joins tensors along `dim`.
public func concat(_ xs: [Tensor], dim: Int) -> Tensor { Ops.concat(xs, dim: dim) }
