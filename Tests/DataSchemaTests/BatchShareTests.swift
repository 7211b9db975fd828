// A batch's shares for data-parallel training: for every layout (padding, fixed length, packing,
// a shared prompt prefix) and every part count, the shares hold each sample exactly once with
// its tokens, targets, mask and positions unchanged, count the batch's loss positions between
// them, and the parts beyond the rows or samples there are (a last batch smaller than N) are empty.
import DataSchema
import Foundation
import XCTest

final class BatchShareTests: XCTestCase {
    func examples(_ lengths: [Int], shared: Int = 0) -> [TrainingExample] {
        lengths.enumerated().map { i, rest in
            let n = shared + rest
            return TrainingExample(sampleIndex: i, line: i + 1,
                                   inputs: (0..<n).map { $0 < shared ? 7 + $0 : 1000 * (i + 1) + $0 },
                                   targets: (0..<n).map { $0 < shared ? 8 + $0 : 1000 * (i + 1) + $0 + 1 },
                                   targetMask: (0..<n).map { $0 >= shared && $0 % 3 != 1 })
        }
    }

    /// Each sample of a batch as (sample index, [(input, target, mask, position)]), in order.
    func samples(_ b: Batch) -> [[[Int]]] {
        var out: [[[Int]]] = []
        for r in 0..<b.batchSize {
            let row = (r * b.length)..<((r + 1) * b.length)
            var prefix: [[Int]] = []
            var current: [[Int]] = []
            var seg: Int32 = 0
            for i in row {
                let item = [b.inputIds[i], b.targets[i], b.lossMask[i] ? 1 : 0, b.positions[i]]
                if b.segmentIds[i] == Batch.sharedSegment { prefix.append(item); continue }
                if b.segmentIds[i] != seg {
                    if !current.isEmpty { out.append(current) }
                    current = prefix
                    seg = b.segmentIds[i]
                }
                if seg != 0 { current.append(item) }
            }
            if !current.isEmpty && seg != 0 { out.append(current) }
        }
        return out
    }

    func check(_ batch: Batch, parts: Int, file: StaticString = #filePath, line: UInt = #line) {
        let shares = (0..<parts).map { batch.share(rank: $0, of: parts) }
        let present = shares.compactMap { $0 }
        XCTAssertEqual(present.flatMap { samples($0) }, samples(batch), "\(parts) parts", file: file, line: line)
        XCTAssertEqual(present.flatMap { $0.rowSamples.flatMap { $0 } }, batch.rowSamples.flatMap { $0 }, file: file, line: line)
        XCTAssertEqual(present.reduce(0) { $0 + $1.targetTokenCount }, batch.targetTokenCount, file: file, line: line)
        for s in present {
            XCTAssertEqual(s.targetTokenCount, s.lossMask.filter { $0 }.count, file: file, line: line)
            XCTAssertEqual(s.inputIds.count, s.batchSize * s.length, file: file, line: line)
        }
        // Empty parts only after the non-empty ones, and only when there is too little to go round.
        let units = batch.segmentIds.first == Batch.sharedSegment ? batch.rowSamples[0].count : batch.batchSize
        XCTAssertEqual(present.count, min(parts, units), file: file, line: line)
        XCTAssert(shares.prefix(present.count).allSatisfy { $0 != nil }, file: file, line: line)
    }

    func testSharesHoldEverySampleOnceInEveryLayout() throws {
        let layouts: [(BatchOptions.Layout, [TrainingExample])] = [
            (.padToLongest, examples([5, 9, 3, 7, 2, 8, 4])),
            (.padToFixed(12), examples([5, 9, 3, 7, 2, 8, 4])),
            (.pack(12), examples([5, 9, 3, 7, 2, 8, 4, 6, 1, 5, 3, 2, 7])),
            (.sharePrefix, examples([3, 5, 2, 4, 6, 1, 3], shared: 8)),
        ]
        for (layout, ex) in layouts {
            for batchSize in [1, 2, 3, 5] {
                var batcher = try Batcher(examples: ex, options: BatchOptions(batchSize: batchSize, layout: layout, shuffle: true, seed: 4, padTokenId: -1))
                while let b = batcher.next() {
                    for parts in 1...6 { check(b, parts: parts) }
                }
            }
        }
    }

    func testSharedPrefixShareKeepsThePrefixAndRenumbersSegments() throws {
        var batcher = try Batcher(examples: examples([2, 3, 1, 4], shared: 6),
                                  options: BatchOptions(batchSize: 4, layout: .sharePrefix, shuffle: false, padTokenId: -1))
        let b = try XCTUnwrap(batcher.next())
        XCTAssertEqual(b.segmentIds.first, Batch.sharedSegment)
        let second = try XCTUnwrap(b.share(rank: 1, of: 2))  // samples 2 and 3
        XCTAssertEqual(second.rowSamples, [[2, 3]])
        XCTAssertEqual(second.segmentIds, [-1, -1, -1, -1, -1, -1, 1, 2, 2, 2, 2])
        XCTAssertEqual(second.positions, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9])
        XCTAssertEqual(Array(second.inputIds.prefix(6)), Array(b.inputIds.prefix(6)))
        XCTAssertNil(b.share(rank: 4, of: 5), "four samples cannot fill five parts")
    }

    func testRowsAreTrimmedToTheLongestKeptRow() throws {
        var batcher = try Batcher(examples: examples([9, 2, 3]), options: BatchOptions(batchSize: 3, shuffle: false, padTokenId: -1))
        let b = try XCTUnwrap(batcher.next())
        XCTAssertEqual(b.length, 9)
        let rest = try XCTUnwrap(b.share(rank: 1, of: 2))  // row 2 alone (the longer part goes first)
        XCTAssertEqual(rest.batchSize, 1)
        XCTAssertEqual(rest.length, 3)
        XCTAssertEqual(Batch.shareRange(count: 3, rank: 0, of: 2), 0..<2)
        XCTAssertEqual((0..<4).map { Batch.shareRange(count: 10, rank: $0, of: 4).count }, [3, 3, 2, 2])
    }
}
