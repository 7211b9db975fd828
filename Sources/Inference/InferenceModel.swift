// The no-grad decoding path: the same computation as Training's LlamaModel for every described
// architecture (the block's norms, q/k norms, NoPE layers, scale factors, partial rotary, LongRoPE,
// (1 + w) norms, the gate's activation and sliding-window layers with their own RoPE base from the config and its description), built from the same model definition (BaseWeights, Adapter) and sharing its
// kernels (RMSNorm, the RoPE table, SwiGLU), on plain Float buffers with a KV cache. Float32
// weights get the adapter merged in (W + scale·B·A) once at load; weights kept as their file stores them are multiplied from the
// blocks (FrozenMatrix) and the adapter's low-rank path x·Aᵀ·Bᵀ·scale is added per row. Handles
// several new tokens per call (prompt prefill, and a draft's proposals verified in one pass),
// one new token for each of several conversations per call (batched decoding: the rows share
// the weight stream, each keeps its own cache), and rolling a cache back.
// Decoding is weight-bandwidth bound: q/k/v and gate/up are stacked so each layer streams its
// weights in four passes, and a row's arithmetic never depends on the other rows of the pass
// (m ≤ streamingRows, and for stored matrices whatever m when their products go through the
// block kernels in groups: FrozenMatrix.manyRows), so a verified or batched row gives the bits a
// single-row step gives.
// A speculative draft may hold its weights in fp16 (half the bytes per step); the target never does.
//
// Dimensions: n new tokens, L tokens in the cache, D hidden, H query heads, K kv heads,
// G = H/K query heads per kv head, hd head dim, F feed-forward, V vocab, Q = (H+2K)·hd.
import Autograd
import CBlockKernels
import Foundation
import ModelAssets
import ModelDefinition
import Synchronization

public final class InferenceModel: @unchecked Sendable {
    /// How the projection and head weights are held. float32 gives the reference numbers (the
    /// training model's, PyTorch's); float16 halves the bytes streamed per decoding step at
    /// about 1e-3 relative error, for a speculative draft, whose numbers only choose proposals
    /// that the float32 target then checks (the output does not change).
    public enum WeightPrecision: String, Sendable, CaseIterable {
        case float32, float16
    }

    struct Layer {
        /// The norm weights in NormSlot.allCases order; nil where the architecture has none.
        var norms: [[Float]?]  // [D], q/k: [hd] per head or [H*hd] / [K*hd]
        /// Whether q and k are rotated (false on NoPE layers).
        var rotates: Bool
        /// Whether the layer uses the sliding layers' RoPE table (Gemma 3's local base).
        var localRope = false
        var wqkv: Weights  // [Q, D]: q rows [H*hd], then k [K*hd], then v [K*hd]
        var bqkv: [Float]?  // [Q] (zeros where a projection has no bias)
        var wo: Weights  // [D, H*hd]
        var wGateUp: Weights  // [2F, D]: gate rows, then up rows
        var wDown: Weights  // [D, F]
        /// The adapter's low-rank terms, added per row (stored weights only; float32 ones merge it).
        var lora: [LowRank] = []
    }

    /// One projection's adapter term: y[:, offset..<offset+out] += scale·(x·Aᵀ)·Bᵀ, for the
    /// projection whose input is `input` (0: the normed residual of q/k/v, 1: attention output,
    /// 2: the normed residual of gate/up, 3: the SwiGLU activation). B is held transposed, so
    /// the up-projection adds one row of Bᵀ per rank component (bk_lowrank_up).
    struct LowRank {
        let input: Int
        let offset: Int
        let a: [Float]  // [r, in]
        let bt: [Float]  // [r, out]: B transposed
        let rank: Int
        let scale: Float
        /// The factors rounded to float16 instead (a row adapter kept at half precision; then
        /// `a` and `bt` are empty): half the bytes each row's term streams.
        let half: (a: [Float16], bt: [Float16])?

        /// From the adapter's factors A [r, in] and B [out, r].
        init(input: Int, offset: Int, a: [Float], b: [Float], rank: Int, scale: Float, precision: WeightPrecision = .float32) {
            self.input = input
            self.offset = offset
            self.rank = rank
            self.scale = scale
            let out = b.count / rank
            let bt = [Float](unsafeUninitializedCapacity: b.count) { buf, count in
                for o in 0..<out { for j in 0..<rank { buf[j * out + o] = b[o * rank + j] } }
                count = b.count
            }
            if precision == .float16 {
                self.a = []
                self.bt = []
                half = (a.map { Float16($0) }, bt.map { Float16($0) })
            } else {
                self.a = a
                self.bt = bt
                half = nil
            }
        }

        var inputs: Int { (half?.a.count ?? a.count) / rank }
        var outputs: Int { (half?.bt.count ?? bt.count) / rank }
    }

    public let config: ModelConfig
    public let precision: WeightPrecision
    /// What stored weights are multiplied with (float32 gives the reference numbers).
    public let activations: ActivationPrecision
    /// How the caches `makeCache` makes store keys and values.
    public let kvCache: KVCachePrecision
    /// Positions beyond its window a sliding layer of `makeCache`'s caches keeps (nil: every
    /// position, as a global layer: the unbounded reference the tests compare with).
    public let slidingMargin: Int?
    let layers: [Layer]
    let embed: FrozenMatrix  // [V, D]
    let head: Weights  // [V, D]
    /// The final norm's weight; apply it with `finalNormRows` (which adds Granite's logits scaling).
    let finalNorm: [Float]  // [D]
    /// RoPE's per-frequency divisors (scaling), computed once.
    let ropeFactors: [Double]?
    /// Each layer's attention window (Gemma 3's sliding layers), nil for full attention.
    let windows: [Int?]

    /// The base weights with `adapter` (when given): merged into the projections it targets
    /// when they are float32, added per row as its low-rank term when they are stored.
    public init(base: BaseWeights, adapter: Adapter? = nil, precision: WeightPrecision = .float32,
                activations: ActivationPrecision = .float32, kvCache: KVCachePrecision = .float32,
                slidingMargin: Int? = KVCache.defaultSlidingMargin) {
        let c = base.config
        config = c
        self.precision = precision
        self.activations = activations
        self.kvCache = kvCache
        self.slidingMargin = slidingMargin
        embed = base.embedding
        head = Weights(base.head, precision)
        // Gemma's (1 + w) norms: the offset added once here (the weights stay Hugging Face's w)
        let offset = c.definition.normWeightOffset
        func shifted(_ w: [Float]?) -> [Float]? { offset == 0 ? w : w.map { $0.map { $0 + offset } } }
        finalNorm = shifted(base.finalNorm)!
        ropeFactors = c.ropeFrequencyFactors
        windows = (0..<c.numLayers).map { c.window(layer: $0) }
        let qw = c.queryDim, kw = c.keyValueDim
        layers = base.layers.enumerated().map { i, l in
            var bias: [Float]? = nil
            if l.bias(.q) != nil || l.bias(.k) != nil || l.bias(.v) != nil {
                bias = (l.bias(.q) ?? [Float](repeating: 0, count: qw)) + (l.bias(.k) ?? [Float](repeating: 0, count: kw))
                    + (l.bias(.v) ?? [Float](repeating: 0, count: kw))
            }
            func stack(_ targets: [LoRATarget]) -> Weights {
                let ms = targets.map { l.projection($0) }
                if ms.contains(where: \.isStored) { return .frozen(ms) }
                return Weights(targets.flatMap { t in adapter?.merged(l.projection(t), layer: i, target: t) ?? l.projection(t).values }, precision)
            }
            var layer = Layer(norms: NormSlot.allCases.map { shifted(l.norm($0)) }, rotates: c.rope(layer: i) == .full,
                              localRope: c.ropeTheta(layer: i) != c.ropeTheta || c.ropeFrequencyFactors(layer: i) != c.ropeFrequencyFactors,
                              wqkv: stack([.q, .k, .v]), bqkv: bias,
                              wo: stack([.o]), wGateUp: stack([.gate, .up]), wDown: stack([.down]))
            if let adapter {
                let offsets: [LoRATarget: (input: Int, offset: Int, weights: Weights)] = [
                    .q: (0, 0, layer.wqkv), .k: (0, qw, layer.wqkv), .v: (0, qw + kw, layer.wqkv), .o: (1, 0, layer.wo),
                    .gate: (2, 0, layer.wGateUp), .up: (2, c.intermediateSize, layer.wGateUp), .down: (3, 0, layer.wDown)]
                for t in adapter.lora.targets {
                    guard let (a, b) = adapter.factors(layer: i, target: t), let place = offsets[t], case .frozen = place.weights else { continue }
                    layer.lora.append(LowRank(input: place.input, offset: place.offset, a: a.data, b: b.data, rank: adapter.lora.rank, scale: adapter.scale))
                }
            }
            return layer
        }
    }

    /// Bytes of weights this model holds or streams (stored matrices as stored).
    public var weightBytes: Int { embed.heldBytes + head.heldBytes(sharing: embed) + projectionBytes }

    /// Bytes a one-token decoding step reads from the weights: every projection and the head
    /// (the embedding contributes one row).
    public var bytesPerToken: Int { head.heldBytes() + embed.heldBytes / max(embed.rows, 1) + projectionBytes }

    /// Bytes of every layer's projections.
    var projectionBytes: Int {
        layers.reduce(0) { $0 + $1.wqkv.heldBytes() + $1.wo.heldBytes() + $1.wGateUp.heldBytes() + $1.wDown.heldBytes() }
    }

    /// A loaded model (base and optional adapter) on the KV-cache path.
    public convenience init(_ model: LoadedModel, precision: WeightPrecision = .float32, activations: ActivationPrecision = .float32,
                            kvCache: KVCachePrecision = .float32, slidingMargin: Int? = KVCache.defaultSlidingMargin) {
        self.init(base: model.base.weights, adapter: model.adapter, precision: precision, activations: activations, kvCache: kvCache,
                  slidingMargin: slidingMargin)
    }

    /// A cache with room for `capacity` positions (default: the model's context) whose sliding
    /// layers keep at most their window + `slidingMargin` positions.
    public func makeCache(capacity: Int? = nil) -> KVCache {
        KVCache(layers: config.numLayers, width: config.numKVHeads * config.headDim,
                capacity: capacity ?? config.maxPositionEmbeddings, precision: kvCache, windows: windows, slidingMargin: slidingMargin)
    }

    /// Runs `tokens` (appended after what the cache holds) and returns logits [n, V] for every
    /// new token when `allLogits`, else [1, V] for the last one.
    public func forward(_ tokens: [Int], cache: KVCache, allLogits: Bool = false) -> [Float] {
        var logits: [Float] = []
        forward(tokens, cache: cache, allLogits: allLogits, into: &logits)
        return logits
    }

    /// `forward` writing into `logits` (resized to [rows, V]), so a decode loop reuses one buffer.
    public func forward(_ tokens: [Int], cache: KVCache, allLogits: Bool = false, into logits: inout [Float]) {
        precondition(!tokens.isEmpty, "[InferenceModel.forward] no tokens")
        let ws = cache.workspace
        let x = runBlocks(tokens, [Segment(cache: cache, firstRow: 0, rows: tokens.count)], ws,
                          outputRows: allLogits ? nil : [tokens.count - 1])  // [rows, D]
        outputHead(x, rows: allLogits ? tokens.count : 1, ws: ws, into: &logits)  // [rows, V]
    }

    /// `forward` with logits only for the new tokens at `rows` (increasing indices into `tokens`):
    /// [rows.count, V]. A verify pass needs the rows that check a proposal, not the rows of
    /// tokens a grammar forced (the output head is a fifth of a SmolLM2 row's work).
    public func forward(_ tokens: [Int], cache: KVCache, logitsAt rows: [Int], into logits: inout [Float]) {
        precondition(!tokens.isEmpty && !rows.isEmpty && zip(rows, rows.dropFirst()).allSatisfy { $0 < $1 }
                     && rows.first! >= 0 && rows.last! < tokens.count, "[InferenceModel.forward] rows \(rows) of \(tokens.count) tokens")
        let ws = cache.workspace
        let x = runBlocks(tokens, [Segment(cache: cache, firstRow: 0, rows: tokens.count, undoable: true)], ws, outputRows: rows)  // [rows, D]
        outputHead(x, rows: rows.count, ws: ws, into: &logits)  // [rows, V]
    }

    /// Final hidden states (after the final norm) of every new token, [n, D]: the teacher's
    /// targets when a draft is distilled.
    public func hiddenStates(_ tokens: [Int], cache: KVCache) -> [Float] {
        precondition(!tokens.isEmpty, "[InferenceModel.hiddenStates] no tokens")
        let ws = cache.workspace
        let x = runBlocks(tokens, [Segment(cache: cache, firstRow: 0, rows: tokens.count)], ws)  // [n, D]
        return [Float](unsafeUninitializedCapacity: tokens.count * config.hiddenSize) { buf, initialized in
            finalNormRows(x, rows: tokens.count, into: buf.baseAddress!)
            initialized = tokens.count * config.hiddenSize
        }
    }

    /// One new token for each of several conversations: `tokens[b]` is appended to `caches[b]`
    /// and row b of `logits` ([B, V]) is its next-token logits, the same bits as
    /// `forward([tokens[b]], cache: caches[b])` (each row's arithmetic is its own; B up to
    /// `streamingRows` per weight pass, more in groups). The caches must be distinct.
    public func forward(batch tokens: [Int], caches: [KVCache], into logits: inout [Float]) {
        forwardBatch(tokens, caches: caches, adapters: nil, into: &logits)
    }

    /// The batched pass behind `forward(batch:caches:)` and `forward(batch:caches:adapters:)`:
    /// groups of up to `streamingRows` rows, each group one stream of the weights; `adapters`
    /// (one per row, or nil for none at all) adds each row's own low-rank terms.
    func forwardBatch(_ tokens: [Int], caches: [KVCache], adapters: [RowAdapter?]?, into logits: inout [Float]) {
        precondition(tokens.count == caches.count && !tokens.isEmpty && (adapters.map { $0.count == tokens.count } ?? true),
                     "[InferenceModel.forward(batch:)] \(tokens.count) tokens, \(caches.count) caches, \(adapters?.count ?? 0) adapters")
        precondition(Set(caches.map(ObjectIdentifier.init)).count == caches.count, "[InferenceModel.forward(batch:)] a cache appears twice")
        let V = config.vocabSize, B = tokens.count
        if logits.count != B * V { logits = [Float](repeating: 0, count: B * V) }
        var first = 0
        while first < B {
            let g = min(Self.streamingRows, B - first)
            let ws = caches[first].workspace
            let segments = (0..<g).map { Segment(cache: caches[first + $0], firstRow: $0, rows: 1, undoable: true) }
            let x = runBlocks(Array(tokens[first..<(first + g)]), segments, ws, rowAdapters: adapters.map { Array($0[first..<(first + g)]) })  // [g, D]
            let hn = ws.hn.ensure(g * config.hiddenSize)
            finalNormRows(x, rows: g, into: hn)  // [g, D]
            logits.withUnsafeMutableBufferPointer { lp in
                head.matmulNT(hn, m: g, n: V, k: config.hiddenSize, lp.baseAddress! + first * V, activations)  // [g, V]
            }
            first += g
        }
    }

    /// `forward` without the output head: the final-normed hidden states [lastRows, D] of the
    /// last `lastRows` new tokens (a draft with its own, smaller head applies that itself).
    public func hiddenStates(_ tokens: [Int], cache: KVCache, lastRows: Int) -> [Float] {
        precondition(!tokens.isEmpty, "[InferenceModel.forward] no tokens")
        let D = config.hiddenSize, n = tokens.count
        let rows = min(max(lastRows, 1), n)
        let x = runBlocks(tokens, [Segment(cache: cache, firstRow: 0, rows: n)], cache.workspace, outputRows: Array((n - rows)..<n))  // [rows, D]
        var hn = [Float](repeating: 0, count: rows * D)
        hn.withUnsafeMutableBufferPointer { finalNormRows(x, rows: rows, into: $0.baseAddress!) }
        return hn
    }

    /// Final norm and output head of `rows` residual rows [rows, D] -> logits [rows, V].
    func outputHead(_ x: UnsafePointer<Float>, rows: Int, ws: Workspace, into logits: inout [Float]) {
        let D = config.hiddenSize, V = config.vocabSize
        let hn = ws.hn.ensure(rows * D)
        finalNormRows(x, rows: rows, into: hn)  // [rows, D]
        if logits.count != rows * V { logits = [Float](repeating: 0, count: rows * V) }
        logits.withUnsafeMutableBufferPointer { lp in
            head.matmulNT(hn, m: rows, n: V, k: D, lp.baseAddress!, activations)  // [rows, V]
        }
    }

    // MARK: the blocks

    /// Rows `firstRow ..< firstRow + rows` of a pass are new tokens of `cache`, appended after
    /// what it holds (positions cache.count ...).
    /// How a segment's new rows attend to its cache: `auto` (blocked products from
    /// `Attention.blockedRows` rows: a prompt's prefill), `rows` (one row at a time, SIMD over the
    /// head dim: the bits of one-token steps whatever the rows), `blocked` (every segment).
    public enum PromptAttention: String, Sendable, CaseIterable {
        case auto, rows, blocked

        func isBlocked(rows: Int) -> Bool {
            switch self {
            case .auto: rows >= Attention.blockedRows
            case .rows: false
            case .blocked: true
            }
        }
    }

    /// New rows of one segment from which `auto` runs its attention as blocked products.
    public static let blockedAttentionRows = 32

    /// The attention path of the passes run in this task (tests and `bench decode` compare them).
    @TaskLocal public static var promptAttention: PromptAttention = .auto

    struct Segment {
        let cache: KVCache
        let firstRow: Int
        let rows: Int
        /// The pass may be rolled back whole (a verify pass): its sliding layers keep its first
        /// row's window even when it is longer than their margin (KVCache.begin).
        var undoable = false
    }

    /// Runs the new rows of every segment through all blocks, appending their keys and values
    /// to the segments' caches; returns the residual stream [n, D] (in `ws`, valid until its next use).
    /// `rowAdapters`, when given, holds one entry per new row: that row's own adapter (or nil),
    /// whose low-rank terms are added to the row after the base product (RowAdapter).
    /// `outputRows` (increasing indices into `tokens`), when given, are the only rows the caller
    /// reads: the last layer runs past its attention for them alone (every row's keys and values,
    /// all the cache keeps, come before; llama.cpp skips the same rows) and the result is their
    /// residual rows [outputRows.count, D], in that order. A prompt's prefill wants one row: this
    /// leaves out the last layer's output projection and feed-forward for the others (~1/L of the
    /// prompt's work for L layers).
    func runBlocks(_ tokens: [Int], _ segments: [Segment], _ ws: Workspace, rowAdapters: [RowAdapter?]? = nil,
                   outputRows: [Int]? = nil) -> UnsafeMutablePointer<Float> {
        let c = config
        let n = tokens.count
        if let outputRows {
            precondition(!outputRows.isEmpty && zip(outputRows, outputRows.dropFirst()).allSatisfy { $0 < $1 }
                         && outputRows.first! >= 0 && outputRows.last! < n, "[InferenceModel.runBlocks] output rows \(outputRows) of \(n) tokens")
        }
        let D = c.hiddenSize, H = c.numHeads, K = c.numKVHeads, hd = c.headDim, F = c.intermediateSize
        let Q = (H + 2 * K) * hd, half = c.rotaryDim / 2, eps = Float(c.rmsNormEps)
        // per row: its segment and absolute position; rotary cos/sin [n, hd/2] shared by all layers
        var rowSegment = [Int](repeating: 0, count: n)
        var rowPosition = [Int](repeating: 0, count: n)
        var maxLength = 0
        for (si, s) in segments.enumerated() {
            s.cache.begin(adding: s.rows, undoable: s.undoable)
            for r in s.firstRow..<(s.firstRow + s.rows) {
                rowSegment[r] = si
                rowPosition[r] = s.cache.count + r - s.firstRow
                maxLength = max(maxLength, rowPosition[r] + 1)
            }
        }
        let x = ws.x.ensure(n * D), h = ws.h.ensure(n * D), qkv = ws.qkv.ensure(n * Q), att = ws.att.ensure(n * H * hd)
        let gu = ws.gu.ensure(n * 2 * F), act = ws.act.ensure(n * F), o = ws.o.ensure(n * D)
        let cosT = ws.cos.ensure(max(1, n * half)), sinT = ws.sin.ensure(max(1, n * half))
        for (r, t) in tokens.enumerated() { embed.dequantizeRows(t..<(t + 1), into: x + r * D) }  // [n, D]
        if let e = c.embeddingScale {  // Granite's multiplier, Gemma's √hidden
            for i in 0..<(n * D) { x[i] *= e }
        }
        let residual = c.multipliers.map { Float($0.residual) } ?? 1
        if c.ropeScaling?.kind == .longrope {
            // LongRoPE: each row by its own segment's reach (short factors until the conversation
            // passes the original context, long ones from the pass that does, as transformers picks
            // them per call), cos and sin times the attention factor (rotated dims only).
            for (si, s) in segments.enumerated() {
                let (factors, af) = c.rope(reaching: s.cache.count + s.rows)
                RopeTable.shared.withAngles(base: Float(c.ropeTheta), headDim: c.rotaryDim, positions: s.cache.count + s.rows, factors: factors) { ct, st in
                    for r in s.firstRow..<(s.firstRow + s.rows) where rowSegment[r] == si {
                        let at = rowPosition[r] * half
                        for f in 0..<half {
                            cosT[r * half + f] = Float(ct[at + f]) * Float(af)
                            sinT[r * half + f] = Float(st[at + f]) * Float(af)
                        }
                    }
                }
            }
        } else {
            RopeTable.shared.withAngles(base: Float(c.ropeTheta), headDim: c.rotaryDim, positions: maxLength, factors: ropeFactors) { ct, st in  // [P, rd/2]
                for r in 0..<n {
                    let at = rowPosition[r] * half
                    for f in 0..<half {
                        cosT[r * half + f] = Float(ct[at + f])
                        sinT[r * half + f] = Float(st[at + f])
                    }
                }
            }
        }
        // the sliding layers' own table (Gemma 3: local base, no scaling), when some layer uses it
        let localLayer = layers.firstIndex { $0.localRope }
        let cosL = ws.cosLocal.ensure(max(1, n * half)), sinL = ws.sinLocal.ensure(max(1, n * half))
        if let li = localLayer {
            RopeTable.shared.withAngles(base: Float(c.ropeTheta(layer: li)), headDim: c.rotaryDim, positions: maxLength,
                                        factors: c.ropeFrequencyFactors(layer: li)) { ct, st in  // [P, rd/2]
                for r in 0..<n {
                    let at = rowPosition[r] * half
                    for f in 0..<half {
                        cosL[r * half + f] = Float(ct[at + f])
                        sinL[r * half + f] = Float(st[at + f])
                    }
                }
            }
        }
        let attention = Attention(n: n, H: H, K: K, hd: hd, width: K * hd, Q: Q, maxLength: maxLength,
                                  scale: c.attentionScale ?? 1 / Float(hd).squareRoot(), windows: windows,
                                  rowSegment: rowSegment, rowPosition: rowPosition, caches: segments.map(\.cache),
                                  blocked: segments.filter { Self.promptAttention.isBlocked(rows: $0.rows) }.map { $0.firstRow..<($0.firstRow + $0.rows) })
        let perHead = c.definition.qkNorm == .perHead
        for (li, layer) in layers.enumerated() {
            normRows(x, layer.norms[NormSlot.attentionInput.index], rows: n, eps: eps, into: h)  // [n, D]
            layer.wqkv.matmulNT(h, m: n, n: Q, k: D, qkv, activations)  // [n, Q]
            addLowRank(layer, input: 0, h, rows: n, into: qkv, width: Q)
            if let rowAdapters { addRowLowRank(rowAdapters, layer: li, input: 0, h, rows: n, into: qkv, width: Q) }
            if let b = layer.bqkv {
                for r in 0..<n { for j in 0..<Q { qkv[r * Q + j] += b[j] } }
            }
            // q and k norms (in place; per head, or over the whole projection), then rotate q and k
            // (Hugging Face "rotate half": pairs (d, d + rd/2) of the first rd = rotaryDim dims by
            // position·invFreq[d], the rest untouched; not on NoPE layers) and append k and v to the
            // row's cache. Row by row, each row's bits its own: a prompt's rows on every core.
            let qkNorms = [(layer.norms[NormSlot.query.index], 0, H), (layer.norms[NormSlot.key.index], H * hd, K)]
            let (cosR, sinR) = layer.localRope ? (cosL, sinL) : (cosT, sinT)
            for s in segments { s.cache.enter(layer: li) }
            WorkerPool.forChunks(n, grain: Self.rowsPerChunk) { rows in
                for r in rows {
                    let row = qkv + r * Q
                    for case let (w?, offset, heads) in qkNorms {
                        rmsNormRows(row + offset, w, rows: perHead ? heads : 1, eps: eps, into: row + offset)
                    }
                    for hh in 0..<(layer.rotates ? H + K : 0) {
                        let base = row + hh * hd
                        for f in 0..<half {
                            let cs = cosR[r * half + f], sn = sinR[r * half + f]
                            let a = base[f], b = base[f + half]
                            base[f] = a * cs - b * sn
                            base[f + half] = b * cs + a * sn
                        }
                    }
                    segments[rowSegment[r]].cache.store(layer: li, position: rowPosition[r], keys: row + H * hd, values: row + (H + K) * hd)
                }
            }
            attention.run(layer: li, qkv: qkv, into: att, ws: ws)  // [n, H*hd]
            for s in segments { s.cache.leave(layer: li) }
            // the last layer past its attention: only the rows the caller reads (outputRows),
            // gathered in place (outputRows[k] >= k, and every later source row lies past k)
            var m = n, adapters = rowAdapters
            if li == layers.count - 1, let outputRows, outputRows.count < n {
                for (k, r) in outputRows.enumerated() where k != r {
                    (att + k * H * hd).update(from: att + r * H * hd, count: H * hd)
                    (x + k * D).update(from: x + r * D, count: D)
                }
                m = outputRows.count
                adapters = rowAdapters.map { a in outputRows.map { a[$0] } }
            }
            layer.wo.matmulNT(att, m: m, n: D, k: H * hd, o, activations)  // [m, D]
            addLowRank(layer, input: 1, att, rows: m, into: o, width: D)
            if let adapters { addRowLowRank(adapters, layer: li, input: 1, att, rows: m, into: o, width: D) }
            addResidual(o, layer.norms[NormSlot.attentionOutput.index], rows: m, scale: residual, into: x)
            normRows(x, layer.norms[NormSlot.feedForwardInput.index], rows: m, eps: eps, into: h)
            layer.wGateUp.matmulNT(h, m: m, n: 2 * F, k: D, gu, activations)  // [m, 2F]
            addLowRank(layer, input: 2, h, rows: m, into: gu, width: 2 * F)
            if let adapters { addRowLowRank(adapters, layer: li, input: 2, h, rows: m, into: gu, width: 2 * F) }
            // row by row, so each row's bits do not depend on n; the rows on every core (8 rows
            // of SmolLM2 were ~4% of a batched pass on one core)
            let gelu = c.definition.activation == .geluTanh
            WorkerPool.forEach(m) { r in
                let g = gu + r * 2 * F
                if gelu {
                    Kernels.geluTanhGated(gate: g, up: g + F, out: act + r * F, count: F)  // Gemma's gate, as in training
                } else {
                    bk_swiglu(g, g + F, act + r * F, F)  // training's SwiGLU to ~1e-7, each value alone
                }
            }
            layer.wDown.matmulNT(act, m: m, n: D, k: F, o, activations)  // [m, D]
            addLowRank(layer, input: 3, act, rows: m, into: o, width: D)
            if let adapters { addRowLowRank(adapters, layer: li, input: 3, act, rows: m, into: o, width: D) }
            addResidual(o, layer.norms[NormSlot.feedForwardOutput.index], rows: m, scale: residual, into: x)
        }
        for s in segments { s.cache.finish() }
        return x
    }

    /// y[:, offset..<offset+out] += scale·(x·Aᵀ)·Bᵀ for each adapter term of `layer` fed by `input`
    /// (x [n, in], y [n, width]); the terms spread over the cores (`addLowRank(_:_:into:width:)`).
    func addLowRank(_ layer: Layer, input: Int, _ x: UnsafePointer<Float>, rows n: Int, into y: UnsafeMutablePointer<Float>,
                    width: Int) {
        let rows = Array(0..<n)[...]
        let items = layer.lora.filter { $0.input == input }.map { (term: $0, rows: rows) }
        if !items.isEmpty { Self.addLowRank(items, x, into: y, width: width) }
    }

    /// Each item's term added to its rows, the items run on every core; when there are fewer
    /// items than cores each is split by rows (a row stays whole). Distinct terms of one input
    /// write distinct columns and distinct adapters distinct rows, and a row's arithmetic does not
    /// depend on the others (`addLowRank(_:rows:_:into:width:)`), so the split changes no bit.
    static func addLowRank(_ items: [(term: LowRank, rows: ArraySlice<Int>)], _ x: UnsafePointer<Float>,
                           into y: UnsafeMutablePointer<Float>, width: Int) {
        var items = items
        let cores = WorkerPool.threads  // not ProcessInfo: on Linux each call reads the cgroup files
        if items.count < cores {
            items = items.flatMap { item -> [(term: LowRank, rows: ArraySlice<Int>)] in
                let parts = min(item.rows.count, (cores + items.count - 1) / items.count)
                let size = (item.rows.count + parts - 1) / parts
                return stride(from: item.rows.startIndex, to: item.rows.endIndex, by: size).map {
                    (item.term, item.rows[$0..<min($0 + size, item.rows.endIndex)])
                }
            }
        }
        if items.count == 1 {
            addLowRank(items[0].term, rows: items[0].rows, x, into: y, width: width)
            return
        }
        WorkerPool.forEach(items.count) { i in addLowRank(items[i].term, rows: items[i].rows, x, into: y, width: width) }
    }

    /// y[row, offset..<offset+out] += scale·(x[row]·Aᵀ)·Bᵀ for `rows` of x [*, in] and y [*, width]:
    /// the rows gathered, one product with A for all of them (A read once), then Bᵀ's rows added
    /// per rank component (bk_lowrank_up). Every row gets the bits it gets alone, whatever the
    /// other rows: the block kernels' products and bk_lowrank_up are row-independent.
    static func addLowRank<Rows: Collection<Int>>(_ t: LowRank, rows: Rows, _ x: UnsafePointer<Float>,
                                                  into y: UnsafeMutablePointer<Float>, width: Int) {
        let r = t.rank, inDim = t.inputs, out = t.outputs, m = rows.count
        if m == 0 { return }
        let first = rows.first!
        let contiguous = zip(rows, first...).allSatisfy { $0 == $1 }
        withUnsafeTemporaryAllocation(of: Float.self, capacity: (contiguous ? 0 : m * inDim) + m * r) { scratch in
            let down = scratch.baseAddress!, gathered = down + m * r
            let xs: UnsafePointer<Float>
            if contiguous {
                xs = x + first * inDim
            } else {
                for (k, row) in rows.enumerated() { (gathered + k * inDim).update(from: x + row * inDim, count: inDim) }
                xs = UnsafePointer(gathered)
            }
            func products(_ type: UInt32, _ a: UnsafeRawPointer, _ bt: UnsafeRawPointer, bytes: Int) {
                streamProduct(type, a, rowBytes: inDim * bytes, xs, m: m, n: r, k: inDim, down, serial: true)  // [m, r]
                for j in 0..<(m * r) { down[j] *= t.scale }
                let half: Int32 = type == BKType.f16 ? 1 : 0
                if contiguous {
                    bk_lowrank_up(down, m, r, bt, half, out, 0, out, y + first * width + t.offset, width)
                } else {
                    for (k, row) in rows.enumerated() { bk_lowrank_up(down + k * r, 1, r, bt, half, out, 0, out, y + row * width + t.offset, width) }
                }
            }
            if let half = t.half {
                half.a.withUnsafeBytes { a in half.bt.withUnsafeBytes { bt in products(BKType.f16, a.baseAddress!, bt.baseAddress!, bytes: 2) } }
            } else {
                t.a.withUnsafeBytes { a in t.bt.withUnsafeBytes { bt in products(BKType.f32, a.baseAddress!, bt.baseAddress!, bytes: 4) } }
            }
        }
    }

    /// Causal attention of each new row over its own cache (rows 0 ... its position), SIMD over
    /// the head dim, a kv head's query heads and a segment's rows together (bk_attend_rows: the
    /// bits of each one alone); items run on every core when there is enough work. The rows of
    /// a segment with at least `blockedRows` new rows (a prompt's prefill) go as blocked products
    /// instead: for each query head and block of `blockRows` rows, scores = scale·Q·Kᵀ over the keys
    /// up to the block's last row and out = softmax(scores)·V, two products (one row at a time
    /// read every key and value again for each row: at 1,024 prompt tokens attention was a third
    /// of SmolLM2's prefill): bk_gemm on AVX-512 (Q·Kᵀ with K's rows, P·V with V's columns; no
    /// copies of K and V, where sgemm's took ~1.5% of a Qwen3-0.6B prefill: 407 -> 422 tokens/s),
    /// sgemm below. Same values to float rounding (another order of the sums).
    struct Attention {
        let n, H, K, hd, width, Q, maxLength: Int
        /// The scores' scale: 1/√hd, or Granite's attention multiplier.
        let scale: Float
        /// Each layer's window: a row at position p sees keys p − window < j ≤ p (nil: all j ≤ p).
        let windows: [Int?]
        let rowSegment, rowPosition: [Int]
        let caches: [KVCache]
        /// Rows of the segments whose attention runs as blocked products.
        let blocked: [Range<Int>]

        static let blockedRows = InferenceModel.blockedAttentionRows
        /// Query rows per product.
        static let blockRows = 64
        /// Blocked attentions run (segments × layers), so tests can tell which path ran: on
        /// AVX-512 a head dim below 16 gives the blocked path the bits of one row at a time.
        static let blockedRuns = Atomic<Int>(0)

        func run(layer li: Int, qkv: UnsafeMutablePointer<Float>, into att: UnsafeMutablePointer<Float>, ws: Workspace) {
            for rows in blocked { runBlocked(rows, layer: li, qkv: qkv, into: att) }
            // a window no row's keys reach past masks nothing (Phi-4-mini's 262,144; any window early
            // on): such a layer's rows share their pieces as a full layer's do
            let G = H / K, window = windows[li].flatMap { $0 < maxLength ? $0 : nil }
            let perRow = blocked.isEmpty ? Array(0..<n) : (0..<n).filter { r in !blocked.contains { $0.contains(r) } }
            if perRow.isEmpty { return }
            // items: (consecutive rows of one segment, kv head), each one bk_attend_rows call for its
            // rows' G query heads, so the rows and heads share every key and value read (a verify
            // pass's rows see one cache). A segment's rows are split in as many pieces as give every
            // core two items where its kv heads alone would not.
            // Every core from 2^14 scores·head dims on (Qwen3-0.6B: 8 positions; was 2^18, 128
            // positions, which left one core idle through a short reply's attention): Zen 3,
            // `bench decode --prompt-tokens 1 --gen-tokens 128 --activations q8`, Qwen3-0.6B Q4_K,
            // 11 interleaved rounds, mean 38.9 -> 40.1 tokens/s.
            var work = 0
            for r in perRow { work += (rowPosition[r] + 1) * H * hd }
            let cores = work >= 1 << 14 ? WorkerPool.threads : 1
            var pieces: [Range<Int>] = []
            var start = 0
            while start < perRow.count {
                var end = start + 1
                while end < perRow.count && rowSegment[perRow[end]] == rowSegment[perRow[start]] && perRow[end] == perRow[end - 1] + 1 { end += 1 }
                // a sliding layer's rows each see their own keys (one row per piece)
                let split = window != nil ? end - start : Swift.min(end - start, Swift.max(1, (2 * cores + K - 1) / K))
                let size = (end - start + split - 1) / split
                for a in stride(from: start, to: end, by: size) { pieces.append(a..<Swift.min(end, a + size)) }
                start = end
            }
            let items = pieces.count * K
            let chunks = Swift.min(items, cores == 1 ? 1 : 4 * cores)
            let most = pieces.map(\.count).max()!
            let scores = ws.scores.ensure(chunks * most * G * maxLength)
            // each cache's rows of this layer, slot 0 holding position `first` (a sliding layer's oldest kept)
            let views = caches.map { $0.view(layer: li) }
            let keys = views.map { UnsafeRawPointer($0.keys) }, values = views.map { UnsafeRawPointer($0.values) }
            let half: Int32 = caches.first?.precision == .float16 ? 1 : 0, size = half == 1 ? 2 : 4
            precondition(caches.allSatisfy { ($0.precision == .float16) == (half == 1) }, "[Attention] caches of mixed precision")
            WorkerPool.forEach(chunks) { ci in
                let sc = scores + ci * most * G * maxLength
                var item = ci
                withUnsafeTemporaryAllocation(of: Int.self, capacity: most) { lengths in
                    while item < items {
                        let piece = pieces[item / K], kvh = item % K
                        let r0 = perRow[piece.lowerBound], s = rowSegment[r0]
                        for (i, r) in perRow[piece].enumerated() { lengths[i] = rowPosition[r] + 1 }
                        // a sliding layer's one row reads the keys of its window only
                        let first = window.map { Swift.max(0, rowPosition[r0] + 1 - $0) } ?? 0
                        lengths[0] -= first
                        precondition(first >= views[s].first, "[Attention] layer \(li) reads position \(first); the cache holds from \(views[s].first)")
                        let at = ((first - views[s].first) * width + kvh * hd) * size
                        bk_attend_rows(qkv + r0 * Q + kvh * G * hd, Q, piece.count, G, lengths.baseAddress!,
                                       keys[s] + at, values[s] + at, half, width, hd, scale, sc,
                                       att + r0 * H * hd + kvh * G * hd, H * hd)
                        item += chunks
                    }
                }
            }
        }

        /// Attention of the consecutive new rows `rows` of one segment (positions p0 ..< p0 + rows.count
        /// after the p0 its cache held), as blocked products on every core: (query head, block of
        /// rows) tasks, the longest first; each writes its own rows of `att`.
        func runBlocked(_ rows: Range<Int>, layer li: Int, qkv: UnsafeMutablePointer<Float>, into att: UnsafeMutablePointer<Float>) {
            Self.blockedRuns.add(1, ordering: .relaxed)
            let cache = caches[rowSegment[rows.lowerBound]]
            let view = cache.view(layer: li)
            let length = rowPosition[rows.upperBound - 1] + 1  // keys the last row sees
            /// The first key a row at `position` sees (a sliding layer's window; 0 on a global layer).
            func firstKey(_ position: Int) -> Int { windows[li].map { Swift.max(0, position + 1 - $0) } ?? 0 }
            let oldest = firstKey(rowPosition[rows.lowerBound])  // keys the first row sees, from here on
            precondition(oldest >= view.first, "[Attention] layer \(li) reads position \(oldest); the cache holds from \(view.first)")
            let G = H / K
            // float32 keys and values of positions base ..< length [length - base, width]: the cache's
            // own rows, or widened from float16 once per layer
            var widened: UnsafeMutablePointer<Float>? = nil
            defer { widened?.deallocate() }
            let keys: UnsafePointer<Float>, values: UnsafePointer<Float>, base: Int
            if cache.precision == .float32 {
                keys = UnsafePointer(view.keys.assumingMemoryBound(to: Float.self))
                values = UnsafePointer(view.values.assumingMemoryBound(to: Float.self))
                base = view.first
            } else {
                let n = (length - oldest) * width, from = (oldest - view.first) * width
                let w = UnsafeMutablePointer<Float>.allocate(capacity: 2 * n)
                widened = w
                let k16 = view.keys.assumingMemoryBound(to: Float16.self) + from, v16 = view.values.assumingMemoryBound(to: Float16.self) + from
                WorkerPool.forEach(2) { half in
                    let src = half == 0 ? k16 : v16, dst = w + half * n
                    for i in 0..<n { dst[i] = Float(src[i]) }
                }
                keys = UnsafePointer(w)
                values = UnsafePointer(w + n)
                base = oldest
            }
            let blocks = (rows.count + Self.blockRows - 1) / Self.blockRows
            let gemm = FrozenMatrix.usesGemm  // bk_gemm, or OpenBLAS below AVX-512
            WorkerPool.forEach(H * blocks) { task in
                let b = blocks - 1 - task % blocks, h = task / blocks, kvh = h / G  // later blocks see more keys: first
                let r0 = rows.lowerBound + b * Self.blockRows, bq = Swift.min(Self.blockRows, rows.upperBound - r0)
                // the block's keys: from its first row's first key to its last row (a sliding
                // layer's block reads its window, not every position before it)
                let k0 = firstKey(rowPosition[r0]), seen = rowPosition[r0 + bq - 1] + 1 - k0
                let at = (k0 - base) * width + kvh * hd
                let q = qkv + r0 * Q + h * hd, out = att + r0 * H * hd + h * hd
                /// Each row's scores out of its keys (0), softmax over the rest.
                func softmaxRows(_ p: UnsafeMutablePointer<Float>, scaled: Bool) {
                    for i in 0..<bq {
                        let row = p + i * seen, position = rowPosition[r0 + i]
                        let first = firstKey(position) - k0, visible = position + 1 - k0  // out of a sliding layer's window: 0
                        bk_softmax(row + first, visible - first, scaled ? scale : 1)
                        row.update(repeating: 0, count: first)
                        (row + visible).update(repeating: 0, count: seen - visible)
                    }
                }
                if gemm {  // CBlockKernels' bk_gemm: Q·Kᵀ with K's rows, P·V with V's columns
                    let packedQ = bk_gemm_packed_floats(bq, hd), packedP = bk_gemm_packed_floats(bq, seen)
                    let scratch = bk_gemm_scratch_floats(bq, Swift.max(seen, hd))
                    withUnsafeTemporaryAllocation(of: Float.self, capacity: bq * seen + packedQ + packedP + scratch) { buffer in
                        let p = buffer.baseAddress!, pq = p + bq * seen, pp = pq + packedQ, work = pp + packedP
                        bk_gemm_pack(q, Q, bq, hd, 0, 1, pq)
                        bk_gemm(pq, bq, hd, keys + at, width, 1, seen, p, seen, work)  // [bq, seen]
                        softmaxRows(p, scaled: true)
                        bk_gemm_pack(p, seen, bq, seen, 0, 1, pp)
                        bk_gemm(pp, bq, seen, values + at, 1, width, hd, out, H * hd, work)  // [bq, hd]
                    }
                    return
                }
                withUnsafeTemporaryAllocation(of: Float.self, capacity: bq * seen) { buffer in
                    let p = buffer.baseAddress!
                    Float.gemmOnThisThread(transA: false, transB: true, m: bq, n: seen, k: hd, alpha: scale,
                                           a: q, lda: Q, b: keys + at, ldb: width, beta: 0, c: p, ldc: seen)  // [bq, seen]
                    softmaxRows(p, scaled: false)
                    Float.gemmOnThisThread(transA: false, transB: false, m: bq, n: hd, k: seen, alpha: 1,
                                           a: p, lda: seen, b: values + at, ldb: width, beta: 0, c: out, ldc: H * hd)  // [bq, hd]
                }
            }
        }
    }

    // MARK: kernels

    /// C[m, n] = A[m, k] · B[n, k]ᵀ. Decoding has m = 1 (or a few rows when a draft's tokens
    /// are verified or conversations are batched): there sgemm would repack the whole weight
    /// matrix per call, so the block kernels' F32 product reads each weight row once for all m rows.
    static func matmulNT(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, m: Int, n: Int, k: Int,
                         _ c: UnsafeMutablePointer<Float>) {
        if m <= streamingRows {
            streamProduct(BKType.f32, b, rowBytes: k * 4, a, m: m, n: n, k: k, c)
        } else {
            BLAS.sgemm(transA: false, transB: true, m: m, n: n, k: k, alpha: 1, a: a, lda: k, b: b, ldb: k,
                       beta: 0, c: c, ldc: n)
        }
    }

    /// Rows up to which the streaming kernel is used (beyond, sgemm's blocking wins).
    static let streamingRows = 16

    /// C[m, n] = A[m, k] · W[n, k]ᵀ for small m, W rows of a float type the block kernels read
    /// (F32, F16; `rowBytes` apart): output rows in chunks of 128 over the cores (one thread when
    /// the matrix is small or `serial`). Every output's operations are fixed whatever m, the
    /// chunking or the thread count, so a batched row gives the bits of a one-row step.
    static func streamProduct(_ type: UInt32, _ w: UnsafeRawPointer, rowBytes: Int, _ a: UnsafePointer<Float>, m: Int, n: Int, k: Int,
                              _ c: UnsafeMutablePointer<Float>, serial: Bool = false) {
        let chunk = 128, chunks = (n + chunk - 1) / chunk
        let one = serial || n * k < 1 << 16
        WorkerPool.forEach(one ? 1 : chunks) { first in
            let (n0, n1) = one ? (0, n) : (first * chunk, Swift.min(n, first * chunk + chunk))
            let rc = bk_matmul_nt(type, a, m, k, w, rowBytes, n0, n1, c, n)
            precondition(rc == 0, "[InferenceModel] bk_matmul_nt returned \(rc) for type \(type), \(m)x\(k) by \(n)x\(k)")
        }
    }

    /// y = norm(x) when the block has a norm there (`w`), else a copy of x: [rows, D].
    func normRows(_ x: UnsafePointer<Float>, _ w: [Float]?, rows: Int, eps: Float, into y: UnsafeMutablePointer<Float>) {
        guard let w else { return y.update(from: x, count: rows * config.hiddenSize) }
        rmsNormRows(x, w, rows: rows, eps: eps, into: y)
    }

    /// x += r·norm(y) for a sublayer's output y [rows, D] (normed in place when the block has a
    /// norm after the sublayer, OLMo 2's; r is Granite's residual multiplier, else 1).
    func addResidual(_ y: UnsafeMutablePointer<Float>, _ w: [Float]?, rows: Int, scale r: Float, into x: UnsafeMutablePointer<Float>) {
        if let w { rmsNormRows(y, w, rows: rows, into: y) }
        let D = config.hiddenSize
        WorkerPool.forChunks(rows, grain: Self.rowsPerChunk) { chunk in
            let range = (chunk.lowerBound * D)..<(chunk.upperBound * D)
            if r == 1 {
                for i in range { x[i] += y[i] }
            } else {
                for i in range { x[i] += y[i] * r }
            }
        }
    }

    /// Rows per parallel chunk of the row-wise steps between the products (q/k norms, rotation,
    /// cache stores, residual adds): one chunk, run inline, for a decoding step.
    static let rowsPerChunk = 16

    /// The final norm of `rows` residual rows, divided by Granite's logits scaling: what the
    /// output head multiplies (as Training's `hiddenStates`).
    func finalNormRows(_ x: UnsafePointer<Float>, rows: Int, into y: UnsafeMutablePointer<Float>) {
        rmsNormRows(x, finalNorm, rows: rows, into: y)
        guard let m = config.multipliers, m.logits != 1 else { return }
        let s = Float(1 / m.logits)
        for i in 0..<(rows * config.hiddenSize) { y[i] *= s }
    }

    /// RMSNorm of `rows` rows by `w`: the training path's kernel (each row's bits its own).
    func rmsNormRows(_ x: UnsafePointer<Float>, _ w: [Float], rows: Int, eps: Float? = nil, into y: UnsafeMutablePointer<Float>) {
        w.withUnsafeBufferPointer { wp in
            Kernels.rmsNormRows(x, weight: wp.baseAddress!, y, rows: rows, dim: w.count, eps: eps ?? Float(config.rmsNormEps))
        }
    }
}

/// ggml type ids of the float weights the block kernels stream (CBlockKernels.h).
enum BKType {
    static let f32: UInt32 = 0
    static let f16: UInt32 = 1
}

/// A weight matrix [n, k]: float32 or float16 values, or frozen matrices kept as their file
/// stores them whose outputs lie side by side (q|k|v, gate|up).
enum Weights {
    case float32([Float])
    case float16([Float16])
    case frozen([FrozenMatrix])

    init(_ values: [Float], _ precision: InferenceModel.WeightPrecision) {
        switch precision {
        case .float32: self = .float32(values)
        case .float16: self = .float16(values.map { Float16($0) })
        }
    }

    /// A whole base matrix: stored ones stay as stored, float32 ones follow `precision`.
    init(_ m: FrozenMatrix, _ precision: InferenceModel.WeightPrecision) {
        self = m.isStored ? .frozen([m]) : Weights(m.values, precision)
    }

    /// Bytes held (a head that is the embedding itself, stored, counts once via `sharing`).
    func heldBytes(sharing embed: FrozenMatrix? = nil) -> Int {
        switch self {
        case .float32(let v): return v.count * 4
        case .float16(let v): return v.count * 2
        case .frozen(let ms):
            if let embed, ms.count == 1, case .stored(let a, _) = ms[0].storage, case .stored(let b, _) = embed.storage, a.bytes == b.bytes { return 0 }
            return ms.reduce(0) { $0 + $1.heldBytes }
        }
    }

    /// Weight rows widened to float32 at a time when float16 weights meet many input rows.
    static let widenedRows = 256

    /// C[m, n] = A[m, k] · selfᵀ. float16 weights stream for up to `streamingRows` input rows
    /// (decoding); for more (a prompt's prefill) they are widened to float32 `widenedRows` weight
    /// rows at a time and multiplied with sgemm, which is many times faster there. Frozen matrices
    /// multiply from their blocks (FrozenMatrix.multiply), each into its own columns of C.
    func matmulNT(_ a: UnsafePointer<Float>, m: Int, n: Int, k: Int, _ c: UnsafeMutablePointer<Float>,
                  _ activations: ActivationPrecision = .float32) {
        switch self {
        case .float32(let f32):
            f32.withUnsafeBufferPointer { InferenceModel.matmulNT(a, $0.baseAddress!, m: m, n: n, k: k, c) }
        case .frozen(let ms):
            precondition(ms.reduce(0) { $0 + $1.rows } == n, "[Weights] frozen matrices give \(ms.map(\.rows)) outputs, expected \(n)")
            FrozenMatrix.multiply(ms, a, m: m, into: c, ldy: n, activations: activations)
        case .float16(let f16):
            if m > InferenceModel.streamingRows {
                let block = Self.widenedRows
                let wide = UnsafeMutablePointer<Float>.allocate(capacity: min(block, n) * k)
                defer { wide.deallocate() }
                f16.withUnsafeBufferPointer { bp in
                    var first = 0
                    while first < n {
                        let rows = min(block, n - first)
                        let src = bp.baseAddress! + first * k
                        for i in 0..<(rows * k) { wide[i] = Float(src[i]) }
                        BLAS.sgemm(transA: false, transB: true, m: m, n: rows, k: k, alpha: 1, a: a, lda: k, b: wide, ldb: k,
                                   beta: 0, c: c + first, ldc: n)
                        first += rows
                    }
                }
                return
            }
            f16.withUnsafeBufferPointer { bp in
                var first = 0
                while first < m {
                    let rows = min(InferenceModel.streamingRows, m - first)
                    InferenceModel.streamProduct(BKType.f16, bp.baseAddress!, rowBytes: k * 2, a + first * k, m: rows, n: n, k: k, c + first * n)
                    first += rows
                }
            }
        }
    }
}

/// A Float scratch buffer that grows on demand and is reused (its contents are not kept);
/// 64-byte aligned (AlignedFloats), as the kernels that read and write it want.
final class ScratchBuffer {
    private var memory: AlignedFloats
    private var capacity: Int
    init() {
        capacity = 16
        memory = AlignedFloats(capacity)
    }
    deinit { memory.deallocate() }
    func ensure(_ count: Int) -> UnsafeMutablePointer<Float> {
        if count > capacity {
            memory.deallocate()
            capacity = max(count, capacity * 2)
            memory = AlignedFloats(capacity)
        }
        return memory.pointer
    }
}

/// The scratch buffers of one forward pass, kept with a cache so a decode step allocates nothing
/// big (and two caches can run on two threads).
final class Workspace {
    let x = ScratchBuffer(), h = ScratchBuffer(), qkv = ScratchBuffer(), att = ScratchBuffer()
    let gu = ScratchBuffer(), act = ScratchBuffer(), o = ScratchBuffer(), hn = ScratchBuffer()
    let cos = ScratchBuffer(), sin = ScratchBuffer(), scores = ScratchBuffer()
    /// The sliding layers' RoPE table (Gemma 3's local base).
    let cosLocal = ScratchBuffer(), sinLocal = ScratchBuffer()
}
