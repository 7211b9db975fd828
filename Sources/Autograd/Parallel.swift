// Deterministic parallel loops: work is cut into chunks whose boundaries depend only on the
// problem size (never on the thread count), so every chunk computes the same bits whether one
// or many threads run it; reductions combine per-chunk partials in chunk order.
// The chunks run on a small pool of resident workers that spin briefly between loops (see
// `WorkerPool`). Leaves out work stealing and nested parallelism (a loop started inside a
// chunk runs on the thread that started it). Follows the OpenMP "parallel for" model.
import Foundation
import Synchronization

enum Parallel {
    /// Scoped by `withThreads`; defaults to every active core.
    @TaskLocal static var maxThreads: Int = ProcessInfo.processInfo.activeProcessorCount

    /// Number of chunks for `count` items of `grain` items each (at least one).
    @inline(__always)
    static func chunkCount(_ count: Int, grain: Int) -> Int { max(1, (count + grain - 1) / grain) }

    /// Calls `body(chunkIndex, range)` for fixed chunks of `0..<count`.
    @inline(__always)
    static func forChunks(_ count: Int, grain: Int, _ body: (Int, Range<Int>) -> Void) {
        // Chunks write disjoint outputs; the caller guarantees it. One chunk, or one thread, runs inline.
        WorkerPool.forEach(chunkCount(count, grain: grain)) { c in body(c, (c * grain)..<min(count, (c + 1) * grain)) }
    }

    /// Element grain for streaming kernels: about 64 KiB of Float per chunk, a multiple of 16.
    static let elementGrain = 16_384
    /// Row grain so one chunk holds about `elementGrain` elements.
    @inline(__always)
    static func rowGrain(rowLength: Int) -> Int { max(1, elementGrain / max(rowLength, 1)) }
}

/// Resident worker threads (one fewer than the cores) for `forEach` loops.
///
/// Why not `DispatchQueue.concurrentPerform`: on Linux its workers are woken per call, and on
/// a 2-core VM a 2-way loop of 0.3 ms halves ran no faster than one thread (the calling thread
/// finished both halves before a worker arrived); 1.4 ms halves ran 1.2x. Training makes
/// thousands of such loops per step. Here the workers spin on one atomic word for a short while
/// after each loop (`spinNanoseconds`), so the next loop starts on every core at once; then
/// they sleep on a semaphore. A 2-way loop of 12 µs halves runs 1.7x faster than one thread
/// here, and 0.7x with concurrentPerform (`bench engine` prints both on its last line).
///
/// Protocol: one 64-bit word holds generation (16 bits) | helpers allowed (8) | chunks (20) |
/// next unclaimed chunk (20). A loop publishes a new word; every participant (the caller and
/// the allowed workers) claims chunk indices by compare-and-swap on the whole word, so a claim
/// made against an older loop fails. The caller returns once `finished` counts every chunk, so
/// a claimed chunk's body is alive while it runs. One loop at a time: a loop started while one
/// runs (nested in a chunk, or from another thread) runs on its own thread.
public final class WorkerPool: @unchecked Sendable {
    /// The process's pool: one worker per active core beyond the first.
    static let shared = WorkerPool(workers: max(0, ProcessInfo.processInfo.activeProcessorCount - 1))

    /// How long an idle worker keeps polling before it sleeps (a training step's loops follow
    /// each other within microseconds; the optimizer step and data loading are longer gaps).
    static let spinNanoseconds: UInt64 = 2_000_000

    private static let chunkBits: UInt64 = 20, chunkMask: UInt64 = (1 << 20) - 1
    private static let maxChunks = Int(chunkMask)

    private let state = Atomic<UInt64>(0)
    private let finished = Atomic<Int>(0)
    private let busy = Atomic<Bool>(false)
    /// Bit w set: worker w is about to sleep or sleeps on `wakeups[w]`.
    private let sleeping = Atomic<UInt64>(0)
    private let wakeups: [DispatchSemaphore]
    private let workers: Int
    /// The running loop's body; written only while no chunk can be claimed.
    nonisolated(unsafe) private var job: ((Int) -> Void)?
    private var generation: UInt64 = 0

    init(workers: Int) {
        self.workers = min(workers, 63)
        wakeups = (0..<self.workers).map { _ in DispatchSemaphore(value: 0) }
        for w in 0..<self.workers {
            let thread = Thread { self.workerLoop(w) }  // a pool and its threads live as long as the process
            thread.stackSize = 8 << 20
            thread.name = "autograd-worker-\(w + 1)"
            thread.start()
        }
    }

    /// Threads a loop runs on (every active core, or what `withThreads` scopes).
    public static var threads: Int { Parallel.maxThreads }

    /// Calls `body(i)` for every i in 0..<count on the calling thread and up to
    /// `withThreads`' count − 1 workers, each index exactly once, in no fixed order; returns
    /// when all have run. Iterations must write disjoint memory (not checked).
    public static func forEach(_ count: Int, _ body: (Int) -> Void) {
        shared.run(count, helpers: min(shared.workers, Parallel.maxThreads - 1), body)
    }

    /// Calls `body(range)` for the fixed chunks of `grain` items of 0..<count (`Parallel.forChunks`:
    /// boundaries from count and grain alone), on every core; one chunk runs inline.
    public static func forChunks(_ count: Int, grain: Int, _ body: (Range<Int>) -> Void) {
        Parallel.forChunks(count, grain: grain) { _, range in body(range) }
    }

    func run(_ count: Int, helpers: Int, _ body: (Int) -> Void) {
        if count <= 0 { return }
        if count == 1 || helpers <= 0
            || !busy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged {
            for i in 0..<count { body(i) }
            return
        }
        defer { busy.store(false, ordering: .releasing) }
        var start = 0
        while start < count {
            let n = min(count - start, Self.maxChunks)
            let offset = start
            withoutActuallyEscaping(body) { escaping in
                job = offset == 0 ? escaping : { escaping($0 + offset) }
                loop(chunks: n, helpers: helpers)
                job = nil
            }
            start += n
        }
    }

    /// Publishes one loop of `chunks`, works on it, and waits for the rest.
    private func loop(chunks: Int, helpers: Int) {
        finished.store(0, ordering: .relaxed)
        generation = generation % 0xFFFF + 1  // 1 ... 65535; workers start having seen 0
        let word = generation << 48 | UInt64(helpers) << 40 | UInt64(chunks) << Self.chunkBits
        state.store(word, ordering: .sequentiallyConsistent)
        let allowed: UInt64 = (1 << UInt64(helpers)) - 1
        let asleep = sleeping.bitwiseAnd(~allowed, ordering: .sequentiallyConsistent).oldValue & allowed
        for w in 0..<helpers where asleep & (1 << UInt64(w)) != 0 { wakeups[w].signal() }
        var done = 0
        while let index = claim() { job.unsafelyUnwrapped(index); done += 1 }
        var spins = 0
        if finished.add(done, ordering: .acquiringAndReleasing).newValue == chunks { return }
        while finished.load(ordering: .acquiring) != chunks {
            spins += 1
            if spins & 1023 == 0 { sched_yield() }
        }
    }

    /// Claims the next chunk of the current loop, or nil when none is left.
    @inline(__always)
    private func claim(generation expected: UInt64? = nil, worker: Int = -1) -> Int? {
        var word = state.load(ordering: .acquiring)
        while true {
            if let expected, word >> 48 != expected { return nil }
            if worker >= 0 && Int((word >> 40) & 0xFF) <= worker { return nil }
            let chunks = (word >> Self.chunkBits) & Self.chunkMask, next = word & Self.chunkMask
            if next >= chunks { return nil }
            let (exchanged, original) = state.compareExchange(
                expected: word, desired: word + 1, ordering: .acquiringAndReleasing)
            if exchanged { return Int(next) }
            word = original
        }
    }

    private func workerLoop(_ w: Int) {
        var seen: UInt64 = 0
        while true {
            let word = waitForLoop(after: seen, worker: w)
            let generation = word >> 48
            seen = generation
            var done = 0
            while let index = claim(generation: generation, worker: w) { runChunk(index); done += 1 }
            if done > 0 { finished.add(done, ordering: .releasing) }
        }
    }

    /// Runs one claimed chunk; the body's reference is dropped on return, before the chunk is counted.
    @inline(never)
    private func runChunk(_ index: Int) { job.unsafelyUnwrapped(index) }

    /// Polls for a loop newer than `seen`, then sleeps until the next one is published.
    private func waitForLoop(after seen: UInt64, worker w: Int) -> UInt64 {
        let start = DispatchTime.now().uptimeNanoseconds, bit: UInt64 = 1 << UInt64(w)
        var spins = 0
        while true {
            let word = state.load(ordering: .acquiring)
            if word >> 48 != seen { return word }
            spins += 1
            if spins & 255 == 0, DispatchTime.now().uptimeNanoseconds - start > Self.spinNanoseconds { break }
        }
        while true {
            sleeping.bitwiseOr(bit, ordering: .sequentiallyConsistent)
            let word = state.load(ordering: .sequentiallyConsistent)
            if word >> 48 != seen {
                // The publisher may already have taken the flag and signalled: consume that signal.
                if sleeping.bitwiseAnd(~bit, ordering: .sequentiallyConsistent).oldValue & bit == 0 { wakeups[w].wait() }
                return word
            }
            wakeups[w].wait()
            let woken = state.load(ordering: .acquiring)
            if woken >> 48 != seen { return woken }
        }
    }
}

/// Seconds on the monotonic clock: the one timer every module and tool reads (steps, tokens/s,
/// benchmarks), unaffected by wall-clock changes.
public func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}
