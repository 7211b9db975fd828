// `bench engine`: one SmolLM2-135M-shaped decoder layer (RMSNorm, GQA attention with RoPE,
// SwiGLU MLP) with LoRA on all 7 projections over frozen base weights, T tokens in one row.
// Prints forward and forward+backward times, the matmul GFLOP/s they achieve, and OpenBLAS
// sgemm GFLOP/s on the same projection shapes measured in the same run.
import ArgumentParser
import Autograd
import Foundation

struct EngineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "engine",
        abstract: "Time one LoRA decoder layer forward and backward against OpenBLAS's sgemm on the same shapes.")
    @Option(help: "Tokens per step (one sequence).") var tokens = 1024
    @Option(help: "Hidden size D.") var hidden = 576
    @Option(help: "MLP inner size.") var ffn = 1536
    @Option(help: "Query heads.") var heads = 9
    @Option(help: "Key/value heads.") var kvHeads = 3
    @Option(help: "LoRA rank on every projection.") var rank = 32
    @Option(help: "Timed repetitions (the best and the median are printed).") var iterations = 7
    @Option(help: "Threads for kernels and OpenBLAS (default: all cores).") var threads: Int?
    @Option(help: "Blocks the deterministic sgemm splits a product into (default: by core count, 2 to 4).") var gemmBlocks: Int?

    func run() throws {
        if let gemmBlocks { BLAS.gemmBlocks = gemmBlocks }
        if let threads { withThreads(threads) { measure() } } else { measure() }
    }

    func timeInterleaved(_ bodies: [() -> Void]) -> [(best: Double, median: Double)] {
        for body in bodies { body() }  // warm-up
        var times = [[Double]](repeating: [], count: bodies.count)
        for _ in 0..<iterations {
            for (i, body) in bodies.enumerated() {
                let start = DispatchTime.now().uptimeNanoseconds
                body()
                times[i].append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            }
        }
        return times.map { t in let t = t.sorted(); return (t[0], t[t.count / 2]) }
    }

    func measure() {
        let t = tokens, d = hidden, hd = hidden / heads
        var rng = SeededRNG(seed: 2024)
        func frozen(_ shape: [Int], _ s: Float) -> Tensor {
            Tensor(shape: shape, data: rng.normalArray(count: shape.reduce(1, *), std: s))
        }
        // (in, out) of q, k, v, o, gate, up, down
        let shapes = [(d, heads * hd), (d, kvHeads * hd), (d, kvHeads * hd), (heads * hd, d), (d, ffn), (d, ffn), (ffn, d)]
        let layers = shapes.map { (i, o) -> LoRALinear in
            let l = LoRALinear(weight: frozen([o, i], 0.02), bias: nil, rank: rank, alpha: Float(2 * rank), rng: &rng)
            l.b.data = rng.normalArray(count: l.b.count, std: 0.01)  // as after some training
            return l
        }
        let attnNorm = Tensor(shape: [d], data: [Float](repeating: 1, count: d))
        let mlpNorm = Tensor(shape: [d], data: [Float](repeating: 1, count: d))
        let x = Tensor(shape: [t, d], data: rng.normalArray(count: t * d), requiresGrad: true)
        let upstream = rng.normalArray(count: t * d)
        let positions = Array(0..<t)

        func layer() -> Tensor {
            let h = rmsNorm(x, weight: attnNorm, eps: 1e-5)  // [T,D]
            let q = rope(layers[0](h), heads: heads, positions: positions, base: 100_000)  // [T,H·hd]
            let k = rope(layers[1](h), heads: kvHeads, positions: positions, base: 100_000)  // [T,K·hd]
            let a = causalAttention(q: q, k: k, v: layers[2](h), batch: 1, heads: heads, kvHeads: kvHeads)
            let x1 = x + layers[3](a)
            let h2 = rmsNorm(x1, weight: mlpNorm, eps: 1e-5)
            return x1 + layers[6](swiglu(gate: layers[4](h2), up: layers[5](h2)))  // [T,D]
        }

        // Matmul FLOPs one step needs (causal attention counts only the visible half).
        var fwdFlops = 0.0, bwdFlops = 0.0
        for (i, o) in shapes {
            fwdFlops += 2 * Double(t * i * o) + 2 * Double(t * rank * (i + o))
            bwdFlops += 2 * Double(t * i * o) + 4 * Double(t * rank * (i + o))  // dX only for W
        }
        let causal = 2 * Double(hd * heads) * Double(t * (t + 1) / 2)
        fwdFlops += 2 * causal
        bwdFlops += 4 * causal

        let fwdBody = { _ = layer() }
        let stepBody = {
            x.grad = nil
            for l in layers { l.a.grad = nil; l.b.grad = nil }
            layer().backward(gradient: upstream)
        }

        // Where the time goes: causal attention alone on this layer's q, k, v shapes.
        let qa = Tensor(shape: [t, heads * hd], data: rng.normalArray(count: t * heads * hd), requiresGrad: true)
        let ka = Tensor(shape: [t, kvHeads * hd], data: rng.normalArray(count: t * kvHeads * hd), requiresGrad: true)
        let va = Tensor(shape: [t, kvHeads * hd], data: rng.normalArray(count: t * kvHeads * hd), requiresGrad: true)
        let attnUpstream = rng.normalArray(count: t * heads * hd)
        let attnFwdBody = { _ = causalAttention(q: qa, k: ka, v: va, batch: 1, heads: heads, kvHeads: kvHeads) }
        let attnStepBody = {
            qa.grad = nil; ka.grad = nil; va.grad = nil
            causalAttention(q: qa, k: ka, v: va, batch: 1, heads: heads, kvHeads: kvHeads).backward(gradient: attnUpstream)
        }

        // OpenBLAS on the same projection shapes: y = x·Wᵀ (NT) and dX = dY·W (NN).
        var buffers: [([Float], [Float], [Float], [Float])] = shapes.map { (i, o) in
            (rng.normalArray(count: t * i), rng.normalArray(count: o * i), [Float](repeating: 0, count: t * o), [Float](repeating: 0, count: t * i))
        }
        var gemmFlops = 0.0
        for (i, o) in shapes { gemmFlops += 4 * Double(t * i * o) }
        // The library as shipped: one sgemm call per product, OpenBLAS's own threads (all cores).
        func gemmPass(_ call: (Bool, Bool, Int, Int, Int, UnsafePointer<Float>, Int, UnsafePointer<Float>, Int, UnsafeMutablePointer<Float>, Int) -> Void) {
            for (n, (i, o)) in shapes.enumerated() {
                let xs = buffers[n].0, w = buffers[n].1
                call(false, true, t, o, i, xs, i, w, i, &buffers[n].2, o)
                let y = buffers[n].2
                call(false, false, t, i, o, y, o, w, i, &buffers[n].3, i)
            }
        }
        let libraryThreads = threads ?? ProcessInfo.processInfo.activeProcessorCount
        let gemmBody = {
            BLAS.libraryThreads = libraryThreads
            defer { BLAS.libraryThreads = 1 }
            gemmPass { ta, tb, m, n, k, a, lda, b, ldb, c, ldc in
                BLAS.librarySgemm(transA: ta, transB: tb, m: m, n: n, k: k, alpha: 1, a: a, lda: lda, b: b, ldb: ldb, beta: 0, c: c, ldc: ldc)
            }
        }
        // This module's deterministic blocked sgemm (single-threaded OpenBLAS per block).
        let oursBody = {
            gemmPass { ta, tb, m, n, k, a, lda, b, ldb, c, ldc in
                BLAS.sgemm(transA: ta, transB: tb, m: m, n: n, k: k, alpha: 1, a: a, lda: lda, b: b, ldb: ldb, beta: 0, c: c, ldc: ldc)
            }
        }
        // The LoRA terms alone (the rank-r products of one step, forward and backward, as the op
        // runs them): d = s·x·Aᵀ, y += d·Bᵀ; dB += dyᵀ·d, g = s·dy·B, dA += gᵀ·x, dx += g·A.
        var loraFlops = 0.0
        for (i, o) in shapes { loraFlops += 2 * Double(t * rank * (i + o)) * 3 }
        var loraBuffers: [([Float], [Float], [Float], [Float], [Float], [Float])] = shapes.map { (i, o) in
            (rng.normalArray(count: t * i), rng.normalArray(count: rank * i), rng.normalArray(count: o * rank),
             [Float](repeating: 0, count: t * rank), rng.normalArray(count: t * o), [Float](repeating: 0, count: t * i))
        }
        var loraGrads = shapes.map { (i, o) in ([Float](repeating: 0, count: rank * i), [Float](repeating: 0, count: o * rank)) }
        let loraBody = {
            for (n, (i, o)) in shapes.enumerated() {
                let (xs, a, b) = (loraBuffers[n].0, loraBuffers[n].1, loraBuffers[n].2)
                BLAS.sgemm(transA: false, transB: true, m: t, n: rank, k: i, alpha: 1, a: xs, lda: i, b: a, ldb: i, beta: 0, c: &loraBuffers[n].3, ldc: rank)
                let dn = loraBuffers[n].3
                BLAS.sgemm(transA: false, transB: true, m: t, n: o, k: rank, alpha: 1, a: dn, lda: rank, b: b, ldb: rank, beta: 1, c: &loraBuffers[n].4, ldc: o)
                let dy = loraBuffers[n].4
                BLAS.sgemm(transA: true, transB: false, m: o, n: rank, k: t, alpha: 1, a: dy, lda: o, b: dn, ldb: rank, beta: 1, c: &loraGrads[n].1, ldc: rank)
                BLAS.sgemm(transA: false, transB: false, m: t, n: rank, k: o, alpha: 1, a: dy, lda: o, b: b, ldb: rank, beta: 0, c: &loraBuffers[n].3, ldc: rank)
                let g = loraBuffers[n].3
                BLAS.sgemm(transA: true, transB: false, m: rank, n: i, k: t, alpha: 1, a: g, lda: rank, b: xs, ldb: i, beta: 1, c: &loraGrads[n].0, ldc: i)
                BLAS.sgemm(transA: false, transB: false, m: t, n: i, k: rank, alpha: 1, a: g, lda: rank, b: a, ldb: i, beta: 1, c: &loraBuffers[n].5, ldc: i)
            }
        }
        // Interleaved rounds (each body once per round, best per body), so a burst of load from
        // elsewhere on a shared machine hits every figure alike instead of one of them.
        let times = timeInterleaved([fwdBody, stepBody, attnFwdBody, attnStepBody, gemmBody, oursBody, loraBody])
        let (fwd, step, attnFwd, attnStep, gemm, ours) = (times[0], times[1], times[2], times[3], times[4], times[5])
        let lora = times[6]
        let gemmRate = gemmFlops / gemm.best / 1e9
        let fwdRate = fwdFlops / fwd.best / 1e9
        let stepRate = (fwdFlops + bwdFlops) / step.best / 1e9
        func ms(_ s: Double) -> String { String(format: "%.1f ms", s * 1e3) }
        print("layer: T=\(t) D=\(d) FFN=\(ffn) heads=\(heads)/\(kvHeads) hd=\(hd) LoRA r=\(rank) on 7 projections, frozen base; threads=\(threads.map(String.init) ?? "all") (gemm threads \(BLAS.threads), blocks \(BLAS.gemmBlocks))")
        print(String(format: "matmul FLOPs per step: forward %.2f G, backward %.2f G", fwdFlops / 1e9, bwdFlops / 1e9))
        print("forward:          best \(ms(fwd.best)), median \(ms(fwd.median))  -> \(String(format: "%.1f", fwdRate)) GFLOP/s")
        print("forward+backward: best \(ms(step.best)), median \(ms(step.median))  -> \(String(format: "%.1f", stepRate)) GFLOP/s")
        print("OpenBLAS sgemm (library threading), same projection shapes (NT + NN): best \(ms(gemm.best)) -> \(String(format: "%.1f", gemmRate)) GFLOP/s")
        print("Autograd blocked sgemm (deterministic), same shapes: best \(ms(ours.best)) -> \(String(format: "%.1f", gemmFlops / ours.best / 1e9)) GFLOP/s")
        print(String(format: "  of which attention: forward %@ (%.1f GFLOP/s), forward+backward %@ (%.1f GFLOP/s)",
                     ms(attnFwd.best), 2 * causal / attnFwd.best / 1e9, ms(attnStep.best), 6 * causal / attnStep.best / 1e9))
        print(String(format: "  of which LoRA rank-%d products (forward and backward, all 7): %@ (%.1f GFLOP/s)",
                     rank, ms(lora.best), loraFlops / lora.best / 1e9))
        print(String(format: "ratio forward+backward / sgemm: %.0f%%  (forward / sgemm: %.0f%%)", 100 * stepRate / gemmRate, 100 * fwdRate / gemmRate))
        measureLoops()
    }

    /// What one parallel loop costs: a sum over 2^17 floats per chunk (about 12 µs on one
    /// core here), two chunks, on the engine's worker pool, on one thread, and on
    /// DispatchQueue.concurrentPerform (what the engine used before the pool).
    func measureLoops() {
        let perChunk = 1 << 17, chunks = 2, loops = 200
        let data = [Float](repeating: 1, count: perChunk * chunks)
        var sums = [Float](repeating: 0, count: chunks)
        data.withUnsafeBufferPointer { x in
            sums.withUnsafeMutableBufferPointer { out in
                let (xp, op) = (UncheckedPointer(x.baseAddress!), UncheckedPointer(out.baseAddress!))
                let chunk: @Sendable (Int) -> Void = { c in
                    var acc = SIMD16<Float>()
                    var i = c * perChunk
                    while i < (c + 1) * perChunk {
                        acc += UnsafeRawPointer(xp.pointer + i).loadUnaligned(as: SIMD16<Float>.self)
                        i += 16
                    }
                    op.pointer[c] = acc.sum()
                }
                let times = timeInterleaved([
                    { for _ in 0..<loops { WorkerPool.forEach(chunks, chunk) } },
                    { for _ in 0..<loops { for c in 0..<chunks { chunk(c) } } },
                    { for _ in 0..<loops { DispatchQueue.concurrentPerform(iterations: chunks, execute: chunk) } },
                ])
                let us = times.map { $0.best / Double(loops) * 1e6 }
                print(String(format: "parallel loop, %d chunks of %d floats summed: worker pool %.0f µs, one thread %.0f µs (%.2fx), concurrentPerform %.0f µs (%.2fx)",
                             chunks, perChunk, us[0], us[1], us[1] / us[0], us[2], us[1] / us[2]))
            }
        }
    }
}

/// A raw pointer the loop bodies may capture (each chunk writes its own element).
struct UncheckedPointer: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<Float>
    init(_ p: UnsafePointer<Float>) { pointer = UnsafeMutablePointer(mutating: p) }
    init(_ p: UnsafeMutablePointer<Float>) { pointer = p }
}

