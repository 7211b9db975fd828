// `bench kernels`: micro-benchmark of CBlockKernels' bk_matmul_nt on SmolLM2-135M's and a 1B model's matrix
// shapes, per ggml type and feature level: m = 1 time, GB/s of weight bytes, GFLOP/s on 1 and 2
// threads, m = 4 and m = 8 cost relative to m = 1, beside the machine's streaming-read bandwidth;
// float activations (bk_matmul_nt), q8 activations (bk_quantize_q8 + bk_matmul_nt_q8) and, for
// the K-quants, q8k activations (bk_quantize_q8k + bk_matmul_nt_q8k).
// Weights are random blocks (timing does not depend on values); whole-model runs are left out.
import ArgumentParser
import Autograd
import CBlockKernels
import Foundation
import ModelAssets

struct KernelsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kernels",
        abstract: "Time block-format matrix-vector products (bk_matmul_nt) per type, CPU level and shape.")

    @Option(parsing: .upToNextOption, help: "Types to time (default: all of them).") var types: [TypeName] = TypeName.allCases
    @Option(parsing: .upToNextOption, help: "Weight shapes as k x n (default: all).") var shapes: [Shape] = Shape.allCases
    @Option(parsing: .upToNextOption, help: "Levels to time, 0 portable ... 3 avx512vnni (default: every level this CPU runs).")
    var levels: [Int32] = []
    @Option(help: "Milliseconds of timed calls per figure (each figure is the fastest call).") var budget = 200.0
    @Option(help: "MiB of distinct weight copies the cold figures cycle through (more than the last-level cache).")
    var coldMegabytes = 256
    @Flag(help: "Skip the cold (weights from DRAM) figures.") var hotOnly = false
    @Option(parsing: .upToNextOption, help: "Activation modes: float (bk_matmul_nt), q8 (quantized activations; not for F32/F16/BF16), q8k (per-256 activations; K-quants).")
    var modes: [Mode] = Mode.allCases
    @Flag(help: "Also time bk_dequantize_rows (the panels prefill and training multiply with sgemm), one thread.")
    var dequantize = false

    func validate() throws {
        for level in levels where bk_level_supported(level) == 0 {
            throw ValidationError("level \(level) is not run by this CPU (best: \(bk_best_level())); pick from 0...\(bk_best_level())")
        }
        guard budget > 0, coldMegabytes > 0 else { throw ValidationError("--budget and --cold-megabytes must be positive") }
    }

    func run() throws {
        let levels = self.levels.isEmpty ? Array(0...bk_best_level()) : self.levels
        let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }.map { $0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces) }
        print("CPU: \(cpu ?? "unknown"), \(ProcessInfo.processInfo.activeProcessorCount) cores; best level \(name(bk_best_level()))")
        let read1 = streamingRead(threads: 1), read2 = streamingRead(threads: 2)
        print(String(format: "memory: streaming read of 512 MiB: %.1f GB/s on 1 thread, %.1f GB/s on 2", read1, read2))
        print("hot: one matrix called repeatedly (cache-resident when it fits); cold: each call reads another copy among \(coldMegabytes) MiB.")
        print("times are the fastest call of ~\(Int(budget)) ms of calls per figure, taken in interleaved rounds; GB/s counts weight bytes;")
        print("m4, m8: time of 4 / 8 activation rows over 1 row; 2T splits output rows over 2 threads.")
        if dequantize { timeDequantize(levels) }
        print("")
        let header = "type  mode  level      k x n        MiB | hot 1T: us    GB/s GFLOP/s  m4   m8 | hot 2T: us    GB/s  m4   m8 | cold 1T: us   GB/s | cold 2T: us   GB/s  m4   m8"
        print(header)
        for typeName in types {
            let type = typeName.type
            for shape in shapes {
                let (k, n) = shape.kn
                let (blockSize, typeSize) = type.blockGeometry
                guard k % blockSize == 0 else {
                    print(pad(type.name, 6) + "      n/a        " + pad(shape.rawValue, 12) + " k = \(k) is not a multiple of the \(blockSize)-value block")
                    continue
                }
                let rowBytes = k / blockSize * typeSize
                let matrixBytes = n * rowBytes
                let copies = hotOnly ? 1 : max(3, coldMegabytes << 20 / matrixBytes)
                let pool = WeightPool(type: type, rowBytes: rowBytes, rows: n, copies: copies)
                defer { pool.deallocate() }
                let x = UnsafeMutablePointer<Float>.allocate(capacity: 8 * k)
                defer { x.deallocate() }
                for i in 0..<(8 * k) { x[i] = Float(i % 17) / 17 - 0.5 }
                let y = UnsafeMutablePointer<Float>.allocate(capacity: 8 * n)
                defer { y.deallocate() }
                let xq = UnsafeMutableRawPointer.allocate(byteCount: max(bk_q8_bytes(8, k), bk_q8k_bytes(8, k)), alignment: 64)
                defer { xq.deallocate() }
                for mode in modes where mode == .float || (mode == .q8 && blockSize > 1) || (mode == .q8k && [.q4_K, .q5_K, .q6_K].contains(type)) {
                for level in levels {
                    var figures = [Figure(m: 1, threads: 1), Figure(m: 4, threads: 1), Figure(m: 8, threads: 1),
                                   Figure(m: 1, threads: 2), Figure(m: 4, threads: 2), Figure(m: 8, threads: 2)]
                    if !hotOnly {
                        figures += [Figure(m: 1, threads: 1, cold: true), Figure(m: 1, threads: 2, cold: true),
                                    Figure(m: 4, threads: 2, cold: true), Figure(m: 8, threads: 2, cold: true)]
                    }
                    let t = measure(figures, level: level, type: type, mode: mode, x: x, xq: xq, k: k, pool: pool, n: n, y: y)
                    let gb = Double(matrixBytes) / 1e9, flop = 2 * Double(n * k)
                    var line = pad(type.name, 6) + pad(mode.rawValue, 6) + pad(name(level), 11) + pad(shape.rawValue, 10)
                        + String(format: "%7.2f |", Double(matrixBytes) / 1_048_576)
                        + String(format: " %9.1f %7.1f %7.1f %4.2f %4.2f |", t[0] * 1e6, gb / t[0], flop / t[0] / 1e9, t[1] / t[0], t[2] / t[0])
                        + String(format: " %9.1f %7.1f %4.2f %4.2f |", t[3] * 1e6, gb / t[3], t[4] / t[3], t[5] / t[3])
                    if !hotOnly {
                        line += String(format: " %10.1f %6.1f | %10.1f %6.1f %4.2f %4.2f", t[6] * 1e6, gb / t[6], t[7] * 1e6, gb / t[7],
                                       t[8] / t[7], t[9] / t[7])
                    }
                    print(line)
                }
                }
            }
        }
    }

    func name(_ level: Int32) -> String { String(cString: bk_level_name(level)) }

    /// bk_dequantize_rows of 64 rows x 2048 (512 KiB of floats: written to L2), per type and level:
    /// GB/s of float32 written and of block bytes read.
    func timeDequantize(_ levels: [Int32]) {
        print("")
        print("dequantize_rows, 64 rows x 2048 per call, one thread: GB/s of floats written (of blocks read)")
        let rows = 64, k = 2048
        let out = UnsafeMutablePointer<Float>.allocate(capacity: rows * k)
        defer { out.deallocate() }
        for typeName in types {
            let type = typeName.type
            let (blockSize, typeSize) = type.blockGeometry
            let rowBytes = k / blockSize * typeSize
            let pool = WeightPool(type: type, rowBytes: rowBytes, rows: rows, copies: 1)
            defer { pool.deallocate() }
            var line = pad(type.name, 6)
            for level in levels {
                var best = Double.infinity, spent = 0.0
                while spent < budget / 1000 {
                    let start = DispatchTime.now().uptimeNanoseconds
                    let rc = bk_dequantize_rows_at(level, type.rawValue, pool.copy(0), rowBytes, 0, rows, k, out)
                    precondition(rc == 0, "[bench kernels] bk_dequantize_rows_at returned \(rc)")
                    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                    best = min(best, seconds)
                    spent += seconds
                }
                line += String(format: " %@ %5.1f (%4.1f)", name(level), Double(rows * k * 4) / best / 1e9, Double(rows * rowBytes) / best / 1e9)
            }
            print(line)
        }
    }

    struct Figure {
        var m: Int, threads: Int, cold = false
    }

    /// The fastest call of each figure. Figures are timed in interleaved rounds (a burst of calls
    /// each, ~`budget` ms per figure in all), so load from elsewhere on a shared machine hits
    /// every figure alike. Output rows are split into 4 chunks per thread (whole groups of 4
    /// rows) over the worker pool; cold calls walk through the pool's copies. In q8 mode each
    /// call first quantizes the m activation rows on the calling thread, as a model would.
    func measure(_ figures: [Figure], level: Int32, type: GGMLType, mode: Mode, x: UnsafePointer<Float>,
                 xq: UnsafeMutableRawPointer, k: Int, pool: WeightPool, n: Int, y: UnsafeMutablePointer<Float>) -> [Double] {
        var copy = 1  // cold calls cycle through copies 1 ..< copies; copy 0 is the hot figures' (and cached)
        func call(_ f: Figure) {
            let w = pool.copy(f.cold ? copy : 0)
            if f.cold { copy = copy + 1 < pool.copies ? copy + 1 : 1 }
            if mode != .float {
                let rc = mode == .q8 ? bk_quantize_q8_at(level, x, f.m, k, xq) : bk_quantize_q8k_at(level, x, f.m, k, xq)
                precondition(rc == 0, "[bench kernels] quantizing for \(mode) returned \(rc) for k=\(k)")
            }
            let chunks = f.threads == 1 ? 1 : min(4 * f.threads, (n + 3) / 4)
            let grain = ((n + chunks - 1) / chunks + 3) / 4 * 4
            withThreads(f.threads) {
                WorkerPool.forEach(chunks) { c in
                    let n0 = min(n, c * grain), n1 = min(n, n0 + grain)
                    let rc = switch mode {
                    case .q8: bk_matmul_nt_q8_at(level, type.rawValue, xq, f.m, k, w, pool.rowBytes, n0, n1, y, n)
                    case .q8k: bk_matmul_nt_q8k_at(level, type.rawValue, xq, f.m, k, w, pool.rowBytes, n0, n1, y, n)
                    case .float: bk_matmul_nt_at(level, type.rawValue, x, f.m, k, w, pool.rowBytes, n0, n1, y, n)
                    }
                    precondition(rc == 0, "[bench kernels] \(mode) product returned \(rc) for \(type) k=\(k)")
                }
            }
        }
        var best = [Double](repeating: .infinity, count: figures.count)
        var spent = 0.0, rounds = 0
        for f in figures { call(f) }  // warm-up
        while spent < budget / 1000 * Double(figures.count) || rounds < 3 {
            for (i, f) in figures.enumerated() {
                var burst = 0.0, calls = 0
                while burst < 0.002 || calls < 3 {
                    let start = DispatchTime.now().uptimeNanoseconds
                    call(f)
                    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                    best[i] = min(best[i], seconds)
                    burst += seconds
                    calls += 1
                }
                spent += burst
            }
            rounds += 1
        }
        return best
    }

    /// GB/s of a streaming read over 512 MiB (XOR of 64-byte vectors), split over `threads`, best of 5.
    func streamingRead(threads: Int) -> Double {
        let bytes = 512 << 20
        let words = UnsafeMutablePointer<SIMD16<UInt32>>.allocate(capacity: bytes / 64)
        defer { words.deallocate() }
        for i in 0..<(bytes / 64) { words[i] = SIMD16(repeating: UInt32(truncatingIfNeeded: i)) }
        let chunks = 16, per = bytes / 64 / chunks
        var best = Double.infinity
        var sink = SIMD16<UInt32>()
        for _ in 0..<5 {
            var partial = [SIMD16<UInt32>](repeating: .zero, count: chunks)
            let start = DispatchTime.now().uptimeNanoseconds
            partial.withUnsafeMutableBufferPointer { out in
                withThreads(threads) {
                    WorkerPool.forEach(chunks) { c in
                        var a = SIMD16<UInt32>(), b = SIMD16<UInt32>()
                        var i = c * per
                        while i < (c + 1) * per {
                            a ^= words[i]
                            b ^= words[i + 1]
                            i += 2
                        }
                        out[c] = a ^ b
                    }
                }
            }
            best = min(best, Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            for p in partial { sink ^= p }
        }
        if sink == SIMD16(repeating: 1) { print("") }  // keeps the reads
        return Double(bytes) / best / 1e9
    }
}

// The flags' value types, named inside the command (one module holds every subcommand).
extension KernelsCommand {
    enum Shape: String, CaseIterable, ExpressibleByArgument {
        case attention = "576x576", keyValue = "576x192", gateUp = "576x1536", down = "1536x576", head = "576x49152"
        case large = "2048x8192", largeDown = "8192x2048"
        case qwen3GateUp = "1024x3072", qwen3Down = "3072x1024"  // Qwen3-0.6B's MLP: four or twelve super-blocks a row

        /// (k inputs, n outputs): a weight matrix of n rows of k values.
        var kn: (k: Int, n: Int) {
            let parts = rawValue.split(separator: "x").map { Int($0)! }
            return (parts[0], parts[1])
        }
    }

    enum TypeName: String, CaseIterable, ExpressibleByArgument {
        case f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_NL, q2_K, q3_K, q4_K, q5_K, q6_K
        var type: GGMLType {
            switch self {
            case .f32: .f32
            case .f16: .f16
            case .bf16: .bf16
            case .q8_0: .q8_0
            case .q4_0: .q4_0
            case .q4_1: .q4_1
            case .q5_0: .q5_0
            case .q5_1: .q5_1
            case .iq4_NL: .iq4_NL
            case .q2_K: .q2_K
            case .q3_K: .q3_K
            case .q4_K: .q4_K
            case .q5_K: .q5_K
            case .q6_K: .q6_K
            }
        }
    }

    enum Mode: String, CaseIterable, ExpressibleByArgument {
        case float, q8, q8k
    }
}

/// `copies` back-to-back copies of one random weight matrix of `type` (finite fp16 scales).
final class WeightPool {
    let rowBytes: Int, copies: Int, matrixBytes: Int
    let base: UnsafeMutableRawPointer

    init(type: GGMLType, rowBytes: Int, rows: Int, copies: Int) {
        self.rowBytes = rowBytes
        self.copies = copies
        matrixBytes = rowBytes * rows
        base = UnsafeMutableRawPointer.allocate(byteCount: matrixBytes * copies, alignment: 64)
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        let first = base.assumingMemoryBound(to: UInt8.self)
        for i in 0..<matrixBytes {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            first[i] = UInt8(truncatingIfNeeded: state)
        }
        // moderate finite values where the type has fp16 (or float) fields
        let (_, typeSize) = type.blockGeometry
        let halfAt: [Int] = switch type {
        case .q8_0, .q4_0, .q5_0, .iq4_NL: [0]
        case .q4_1, .q5_1, .q4_K, .q5_K: [0, 2]
        case .q2_K: [80, 82]
        case .q3_K: [108]
        case .q6_K: [208]
        case .f16, .bf16: [0]
        default: []
        }
        let moderate: UInt16 = type == .bf16 ? 0x3C00 : 0x2C00  // 2^-7 in bf16, 2^-4 in f16
        for block in 0..<(matrixBytes / typeSize) {
            let p = base + block * typeSize
            if type == .f32 {
                p.storeBytes(of: Float(block % 13) / 13 - 0.5, as: Float.self)
            } else {
                for f in halfAt { p.storeBytes(of: moderate | UInt16(block % 97), toByteOffset: f, as: UInt16.self) }
            }
        }
        for c in 1..<copies { (base + c * matrixBytes).copyMemory(from: base, byteCount: matrixBytes) }
    }

    func copy(_ index: Int) -> UnsafeRawPointer { UnsafeRawPointer(base + index * matrixBytes) }

    func deallocate() { base.deallocate() }
}

