// The no-grad decoding path: the same Llama computation as Training.LlamaModel, on plain Float
// buffers with a KV cache, LoRA merged into the weights (W + scale·B·A) once at load. Handles
// several new tokens per call (prompt prefill, and a draft's proposals verified in one pass)
// and rolling the cache back. Leaves out batching of several conversations.
//
// Dimensions: n new tokens, L tokens in the cache, D hidden, H query heads, K kv heads,
// hd head dim, F feed-forward, V vocab.
import Autograd
import Foundation
import ModelAssets
import Training

public final class InferenceModel: @unchecked Sendable {
    struct Layer {
        var inputNorm: [Float]  // [D]
        var postNorm: [Float]  // [D]
        var wq, wk, wv, wo: [Float]  // [H*hd, D], [K*hd, D], [K*hd, D], [D, H*hd]
        var bq, bk, bv: [Float]?  // [H*hd], [K*hd], [K*hd]
        var wGate, wUp, wDown: [Float]  // [F, D], [F, D], [D, F]
    }

    public let config: ModelConfig
    let layers: [Layer]
    let embed: [Float]  // [V, D]
    let head: [Float]  // [V, D]
    let finalNorm: [Float]  // [D]
    let invFreq: [Float]  // [hd/2]

    /// Takes the model's weights with any adapter merged in.
    public init(_ model: LlamaModel) {
        config = model.config
        embed = model.embedTokens.data
        head = model.lmHead.data
        finalNorm = model.finalNorm.data
        layers = model.blocks.map { b in
            Layer(inputNorm: b.inputNorm.data, postNorm: b.postAttentionNorm.data,
                  wq: b.q.mergedWeight(), wk: b.k.mergedWeight(), wv: b.v.mergedWeight(), wo: b.o.mergedWeight(),
                  bq: b.q.bias?.data, bk: b.k.bias?.data, bv: b.v.bias?.data,
                  wGate: b.gate.mergedWeight(), wUp: b.up.mergedWeight(), wDown: b.down.mergedWeight())
        }
        let hd = model.config.headDim, theta = model.config.ropeTheta
        invFreq = (0..<hd / 2).map { i in Float(1.0 / pow(theta, Double(2 * i) / Double(hd))) }
    }

    public func makeCache(capacity: Int? = nil) -> KVCache {
        KVCache(layers: config.numLayers, width: config.numKVHeads * config.headDim,
                capacity: capacity ?? config.maxPositionEmbeddings)
    }

    /// Runs `tokens` (appended after what the cache holds) and returns logits [n, V] for every
    /// new token when `allLogits`, else [1, V] for the last one.
    public func forward(_ tokens: [Int], cache: KVCache, allLogits: Bool = false) -> [Float] {
        let rows = allLogits ? tokens.count : 1
        let hn = hiddenStates(tokens, cache: cache, lastRows: rows)  // [rows, D]
        var logits = [Float](repeating: 0, count: rows * config.vocabSize)
        matmulNT(hn, head, m: rows, n: config.vocabSize, k: config.hiddenSize, into: &logits)  // [rows, V]
        return logits
    }

    /// `forward` without the output head: the final-normed hidden states [lastRows, D] of the
    /// last `lastRows` new tokens (a draft with its own, smaller head applies that itself).
    public func hiddenStates(_ tokens: [Int], cache: KVCache, lastRows: Int) -> [Float] {
        let c = config
        let n = tokens.count
        precondition(n > 0, "[InferenceModel.forward] no tokens")
        let D = c.hiddenSize, H = c.numHeads, K = c.numKVHeads, hd = c.headDim, F = c.intermediateSize
        let start = cache.count
        cache.reserve(start + n)
        var x = [Float](repeating: 0, count: n * D)  // [n, D]
        for (i, t) in tokens.enumerated() {
            x.withUnsafeMutableBufferPointer { xp in
                embed.withUnsafeBufferPointer { ep in
                    (xp.baseAddress! + i * D).update(from: ep.baseAddress! + t * D, count: D)
                }
            }
        }
        var h = [Float](repeating: 0, count: n * D)
        var q = [Float](repeating: 0, count: n * H * hd)
        var k = [Float](repeating: 0, count: n * K * hd)
        var v = [Float](repeating: 0, count: n * K * hd)
        var att = [Float](repeating: 0, count: n * H * hd)
        var g = [Float](repeating: 0, count: n * F)
        var u = [Float](repeating: 0, count: n * F)
        var o = [Float](repeating: 0, count: n * D)
        let scale = 1 / Float(hd).squareRoot()
        for (li, layer) in layers.enumerated() {
            rmsNormRows(x, layer.inputNorm, rows: n, eps: Float(c.rmsNormEps), into: &h)
            matmulNT(h, layer.wq, m: n, n: H * hd, k: D, into: &q)  // [n, H*hd]
            matmulNT(h, layer.wk, m: n, n: K * hd, k: D, into: &k)  // [n, K*hd]
            matmulNT(h, layer.wv, m: n, n: K * hd, k: D, into: &v)  // [n, K*hd]
            if let b = layer.bq { addRowBias(&q, b, rows: n) }
            if let b = layer.bk { addRowBias(&k, b, rows: n) }
            if let b = layer.bv { addRowBias(&v, b, rows: n) }
            applyRope(&q, rows: n, heads: H, start: start)
            applyRope(&k, rows: n, heads: K, start: start)
            cache.append(layer: li, keys: k, values: v, rows: n, at: start)
            // attention of each new row i (absolute position start+i) over cache rows 0...start+i
            cache.withLayer(li) { keys, values in
                let w = K * hd
                var scores = [Float](repeating: 0, count: start + n)
                for i in 0..<n {
                    let len = start + i + 1
                    for hh in 0..<H {
                        let kvh = hh / (H / K)
                        let qOff = i * H * hd + hh * hd
                        var mx = -Float.infinity
                        for j in 0..<len {
                            var s: Float = 0
                            let kOff = j * w + kvh * hd
                            for d in 0..<hd { s += q[qOff + d] * keys[kOff + d] }
                            s *= scale
                            scores[j] = s
                            mx = max(mx, s)
                        }
                        var total: Float = 0
                        for j in 0..<len {
                            let e = Foundation.exp(scores[j] - mx)
                            scores[j] = e
                            total += e
                        }
                        let inv = 1 / total
                        let outOff = i * H * hd + hh * hd
                        for d in 0..<hd { att[outOff + d] = 0 }
                        for j in 0..<len {
                            let p = scores[j] * inv
                            let vOff = j * w + kvh * hd
                            for d in 0..<hd { att[outOff + d] += p * values[vOff + d] }
                        }
                    }
                }
            }
            matmulNT(att, layer.wo, m: n, n: D, k: H * hd, into: &o)  // [n, D]
            for i in 0..<n * D { x[i] += o[i] }
            rmsNormRows(x, layer.postNorm, rows: n, eps: Float(c.rmsNormEps), into: &h)
            matmulNT(h, layer.wGate, m: n, n: F, k: D, into: &g)  // [n, F]
            matmulNT(h, layer.wUp, m: n, n: F, k: D, into: &u)  // [n, F]
            for i in 0..<n * F {
                let a = g[i]
                g[i] = a / (1 + Foundation.exp(-a)) * u[i]
            }
            matmulNT(g, layer.wDown, m: n, n: D, k: F, into: &o)  // [n, D]
            for i in 0..<n * D { x[i] += o[i] }
        }
        cache.count = start + n
        let rows = min(max(lastRows, 1), n)
        let first = n - rows
        let last = Array(x[(first * D)..<(n * D)])
        var hn = [Float](repeating: 0, count: rows * D)
        rmsNormRows(last, finalNorm, rows: rows, eps: Float(c.rmsNormEps), into: &hn)
        return hn
    }

    // MARK: kernels

    /// C[m, n] = A[m, k] · B[n, k]ᵀ. Decoding has m = 1 (or a few rows when a draft's tokens
    /// are verified): there sgemm would repack the whole weight matrix per call, so a
    /// weight-streaming kernel reads each weight row once for all m rows, on every core.
    func matmulNT(_ a: [Float], _ b: [Float], m: Int, n: Int, k: Int, into c: inout [Float]) {
        a.withUnsafeBufferPointer { ap in
            b.withUnsafeBufferPointer { bp in
                c.withUnsafeMutableBufferPointer { cp in
                    if m <= Self.streamingRows {
                        Self.streamingMatmulNT(ap.baseAddress!, bp.baseAddress!, m: m, n: n, k: k, cp.baseAddress!)
                    } else {
                        BLAS.sgemm(transA: false, transB: true, m: m, n: n, k: k, alpha: 1,
                                   a: ap.baseAddress!, lda: k, b: bp.baseAddress!, ldb: k,
                                   beta: 0, c: cp.baseAddress!, ldc: n)
                    }
                }
            }
        }
    }

    static let streamingRows = 8

    /// C[m, n] = A[m, k] · B[n, k]ᵀ for small m: output columns split over the cores in fixed
    /// chunks (results do not depend on the thread count), SIMD16 dot products.
    static func streamingMatmulNT(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, m: Int, n: Int, k: Int,
                                  _ c: UnsafeMutablePointer<Float>) {
        let chunk = 256
        let chunks = (n + chunk - 1) / chunk
        let vec = k / 16 * 16
        // chunks write disjoint columns of c; pointers cross into the workers as addresses
        let (ai, bi, cout) = (Int(bitPattern: a), Int(bitPattern: b), Int(bitPattern: c))
        DispatchQueue.concurrentPerform(iterations: chunks) { ci in
            let a = UnsafePointer<Float>(bitPattern: ai)!, b = UnsafePointer<Float>(bitPattern: bi)!
            let c = UnsafeMutablePointer<Float>(bitPattern: cout)!
            for o in (ci * chunk)..<min(n, (ci + 1) * chunk) {
                let w = b + o * k
                for r in 0..<m {
                    let x = a + r * k
                    var acc = SIMD16<Float>()
                    var i = 0
                    while i < vec {
                        let wv = UnsafeRawPointer(w + i).loadUnaligned(as: SIMD16<Float>.self)
                        let xv = UnsafeRawPointer(x + i).loadUnaligned(as: SIMD16<Float>.self)
                        acc += wv * xv
                        i += 16
                    }
                    var s = acc.sum()
                    while i < k {
                        s += w[i] * x[i]
                        i += 1
                    }
                    c[r * n + o] = s
                }
            }
        }
    }

    func rmsNormRows(_ x: [Float], _ w: [Float], rows: Int, eps: Float, into y: inout [Float]) {
        let D = w.count
        for r in 0..<rows {
            var ss: Float = 0
            for d in 0..<D { ss += x[r * D + d] * x[r * D + d] }
            let inv = 1 / (ss / Float(D) + eps).squareRoot()
            for d in 0..<D { y[r * D + d] = x[r * D + d] * inv * w[d] }
        }
    }

    func addRowBias(_ x: inout [Float], _ b: [Float], rows: Int) {
        let w = b.count
        for r in 0..<rows { for j in 0..<w { x[r * w + j] += b[j] } }
    }

    /// Hugging Face "rotate half": pairs (d, d + hd/2) of each head rotate by position·invFreq[d].
    func applyRope(_ x: inout [Float], rows: Int, heads: Int, start: Int) {
        let hd = config.headDim, half = hd / 2
        for r in 0..<rows {
            let pos = Float(start + r)
            for f in 0..<half {
                let angle = pos * invFreq[f]
                let cs = Foundation.cos(angle), sn = Foundation.sin(angle)
                for hh in 0..<heads {
                    let base = r * heads * hd + hh * hd
                    let a = x[base + f], b = x[base + f + half]
                    x[base + f] = a * cs - b * sn
                    x[base + f + half] = b * cs + a * sn
                }
            }
        }
    }
}

/// Keys and values of every layer for the tokens seen so far. `count` tokens are valid;
/// `truncate(to:)` rolls back (speculative decoding rejects a draft's tail).
public final class KVCache {
    var keys: [[Float]]  // per layer [capacity, K*hd]
    var values: [[Float]]
    let width: Int
    public private(set) var capacity: Int
    public internal(set) var count = 0

    init(layers: Int, width: Int, capacity: Int) {
        self.width = width
        self.capacity = max(capacity, 1)
        keys = Array(repeating: [Float](repeating: 0, count: self.capacity * width), count: layers)
        values = keys
    }

    func reserve(_ tokens: Int) {
        guard tokens > capacity else { return }
        var newCap = capacity
        while newCap < tokens { newCap *= 2 }
        for l in keys.indices {
            keys[l] += [Float](repeating: 0, count: (newCap - capacity) * width)
            values[l] += [Float](repeating: 0, count: (newCap - capacity) * width)
        }
        capacity = newCap
    }

    func append(layer: Int, keys k: [Float], values v: [Float], rows: Int, at start: Int) {
        keys[layer].replaceSubrange((start * width)..<((start + rows) * width), with: k[0..<(rows * width)])
        values[layer].replaceSubrange((start * width)..<((start + rows) * width), with: v[0..<(rows * width)])
    }

    func withLayer(_ layer: Int, _ body: ([Float], [Float]) -> Void) {
        body(keys[layer], values[layer])
    }

    public func truncate(to length: Int) {
        precondition(length <= count, "[KVCache.truncate] \(length) > \(count)")
        count = length
    }
}
