// Deterministic parallel loops: work is cut into chunks whose boundaries depend only on the
// problem size (never on the thread count), so every chunk computes the same bits whether one
// or many threads run it; reductions combine per-chunk partials in chunk order.
// Leaves out work stealing and nested parallelism. Follows the GCD concurrentPerform model.
import Dispatch
import Foundation

enum Parallel {
    /// Scoped by `withThreads`; defaults to every active core.
    @TaskLocal static var maxThreads: Int = ProcessInfo.processInfo.activeProcessorCount

    /// Number of chunks for `count` items of `grain` items each (at least one).
    @inline(__always)
    static func chunkCount(_ count: Int, grain: Int) -> Int { max(1, (count + grain - 1) / grain) }

    /// Calls `body(chunkIndex, range)` for fixed chunks of `0..<count`.
    @inline(__always)
    static func forChunks(_ count: Int, grain: Int, _ body: (Int, Range<Int>) -> Void) {
        let chunks = chunkCount(count, grain: grain)
        if chunks == 1 || maxThreads == 1 {
            for c in 0..<chunks { body(c, (c * grain)..<min(count, (c + 1) * grain)) }
            return
        }
        // Chunks write disjoint outputs; the caller guarantees it, so the body is not checked for Sendable.
        withoutActuallyEscaping(body) { escaping in
            let box = UncheckedSendable(escaping)
            DispatchQueue.concurrentPerform(iterations: chunks) { c in
                box.value(c, (c * grain)..<min(count, (c + 1) * grain))
            }
        }
    }

    /// Element grain for streaming kernels: about 64 KiB of Float per chunk, a multiple of 16.
    static let elementGrain = 16_384
    /// Row grain so one chunk holds about `elementGrain` elements.
    @inline(__always)
    static func rowGrain(rowLength: Int) -> Int { max(1, elementGrain / max(rowLength, 1)) }
}

struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
