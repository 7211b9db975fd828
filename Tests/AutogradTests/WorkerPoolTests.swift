// The resident worker pool behind every parallel loop: each index runs exactly once for any
// count (including past one publication's 2^20 chunks), loops started inside a chunk or from
// other threads at the same time run correctly, and a pool with more workers than cores works.
import Foundation
import Synchronization
import XCTest
@testable import Autograd

final class WorkerPoolTests: XCTestCase {
    /// Counts how often each index ran.
    private func runCounts(_ pool: WorkerPool, count: Int, helpers: Int) -> [Int] {
        let hits = UnsafeMutablePointer<Int>.allocate(capacity: max(count, 1))
        hits.initialize(repeating: 0, count: max(count, 1))
        defer { hits.deallocate() }
        pool.run(count, helpers: helpers) { i in hits[i] += 1 }
        return Array(UnsafeBufferPointer(start: hits, count: count))
    }

    func testEveryIndexRunsExactlyOnce() {
        for workers in [1, 3] {
            let pool = WorkerPool(workers: workers)
            for count in [0, 1, 2, 3, 7, 64, 1000] {
                for helpers in [0, 1, workers] {
                    for round in 0..<50 {
                        let hits = runCounts(pool, count: count, helpers: helpers)
                        let wrong = hits.indices.filter { hits[$0] != 1 }
                        XCTAssertEqual(wrong, [], "workers \(workers), count \(count), helpers \(helpers), round \(round): indices not run exactly once")
                    }
                }
            }
        }
    }

    func testMoreChunksThanOneLoopHolds() {
        let pool = WorkerPool(workers: 1)
        let count = (1 << 20) + 37
        let hits = runCounts(pool, count: count, helpers: 1)
        XCTAssertEqual(hits.count, count)
        XCTAssertTrue(hits.allSatisfy { $0 == 1 }, "an index past 2^20 chunks did not run exactly once")
    }

    func testLoopsAfterWorkersFellAsleep() {
        // past the spin time the workers sleep on their semaphores and must wake for the next loop
        let pool = WorkerPool(workers: 1)
        for _ in 0..<3 {
            Thread.sleep(forTimeInterval: Double(WorkerPool.spinNanoseconds) * 2e-9)
            let hits = runCounts(pool, count: 100, helpers: 1)
            XCTAssertTrue(hits.allSatisfy { $0 == 1 }, "a loop after the workers slept lost or repeated an index")
        }
    }

    func testNestedAndConcurrentLoops() {
        let pool = WorkerPool(workers: 1)
        // a loop inside a chunk runs on the thread that started it
        let outer = 8, inner = 50
        let hits = UnsafeMutablePointer<Int>.allocate(capacity: outer * inner)
        hits.initialize(repeating: 0, count: outer * inner)
        defer { hits.deallocate() }
        pool.run(outer, helpers: 1) { o in pool.run(inner, helpers: 1) { i in hits[o * inner + i] += 1 } }
        XCTAssertTrue(UnsafeBufferPointer(start: hits, count: outer * inner).allSatisfy { $0 == 1 }, "nested loops lost or repeated an index")
        // loops started from several threads at once (through the shared pool, as the kernels do)
        let totals = Mutex<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            var sums = 0
            for _ in 0..<200 {
                let partials = UnsafeMutablePointer<Int>.allocate(capacity: 10)
                partials.initialize(repeating: 0, count: 10)
                WorkerPool.forEach(10) { i in partials[i] = i + t }
                sums += (0..<10).reduce(0) { $0 + partials[$1] }
                partials.deallocate()
            }
            totals.withLock { $0.append(sums) }
        }
        XCTAssertEqual(totals.withLock { $0.sorted() }, (0..<4).map { t in 200 * (45 + 10 * t) })
    }
}
