// Row lookups: embedding (token ids into a [V,D] table) and gatherRows (pick rows of [N,D],
// e.g. the loss positions before the output head). Backward scatter-adds in id order, so
// repeated ids accumulate deterministically. Leaves out padding_idx and max_norm.
// Follows torch.nn.functional.embedding / index_select.

extension Ops {
    /// y[n] = table[ids[n]]; [V,D] -> [N,D]. d table[ids[n]] += g[n] (only if table requires grad).
    static func gatherRows<S>(_ table: TensorOf<S>, _ ids: [Int], op: String) -> TensorOf<S> {
        precondition(table.shape.count == 2, "[\(op)] table must be 2-D, got \(table.shape)")
        let rows = table.shape[0], d = table.shape[1]
        for id in ids { precondition(id >= 0 && id < rows, "[\(op)] id \(id) out of range for table \(table.shape)") }
        let outShape = [ids.count, d]  // [N,D]
        let out: [S] = makeArray(ids.count * d) { y in
            table.data.withUnsafeBufferPointer { tp in
                for (n, id) in ids.enumerated() { (y + n * d).initialize(from: tp.baseAddress! + id * d, count: d) }
            }
        }
        guard recording(table) else { return TensorOf(result: outShape, data: out, inputs: [], backward: nil) }
        return TensorOf(result: outShape, data: out, inputs: [table]) { g in
            table.withGrad { dt in
                for (n, id) in ids.enumerated() {
                    let dst = dt + id * d, src = g.baseAddress! + n * d
                    for j in 0..<d { dst[j] += src[j] }
                }
            }
        }
    }
}

/// Embedding lookup: weight [V,D], ids [N] -> [N,D]; backward scatter-adds into weight.
public func embedding(_ weight: Tensor, ids: [Int]) -> Tensor { Ops.gatherRows(weight, ids, op: "embedding") }
/// Picks rows: x [N,D] -> [M,D]; backward scatter-adds into x.
public func gatherRows(_ x: Tensor, _ rows: [Int]) -> Tensor { Ops.gatherRows(x, rows, op: "gatherRows") }
