// Batching: padding to the longest row and to a fixed length, packing with segment ids and
// restarting positions (segments never cross), seeded shuffles, and a cursor restored
// mid-epoch reproducing the remaining batches exactly, also through Codable.
import DataSchema
import Foundation
import XCTest

final class BatchingTests: XCTestCase {
    /// Example i has length lengths[i]; token values encode (example, position).
    func examples(_ lengths: [Int]) -> [TrainingExample] {
        lengths.enumerated().map { i, n in
            TrainingExample(sampleIndex: i, line: i + 1,
                            inputs: (0..<n).map { 1000 * (i + 1) + $0 },
                            targets: (0..<n).map { 1000 * (i + 1) + $0 + 1 },
                            targetMask: (0..<n).map { $0 % 2 == 0 })
        }
    }

    func testSplitMix64IsStable() {
        var rng = SplitMix64(seed: 1234567)
        XCTAssertEqual([rng.next(), rng.next(), rng.next()],
                       [6457827717110365317, 3203168211198807973, 9817491932198370423])
        XCTAssertEqual(SplitMix64.permutation(count: 10, seed: 7).sorted(), Array(0..<10))
        XCTAssertEqual(SplitMix64.permutation(count: 10, seed: 7), SplitMix64.permutation(count: 10, seed: 7))
        XCTAssertNotEqual(SplitMix64.permutation(count: 10, seed: 7), SplitMix64.permutation(count: 10, seed: 8))
    }

    /// Examples with a common unmasked prefix of `shared` tokens, then their own tokens.
    func prefixed(_ rests: [Int], shared: Int) -> [TrainingExample] {
        rests.enumerated().map { i, rest in
            let n = shared + rest
            return TrainingExample(sampleIndex: i, line: i + 1,
                                   inputs: (0..<n).map { $0 < shared ? 7 + $0 : 1000 * (i + 1) + $0 },
                                   targets: (0..<n).map { $0 < shared - 1 ? 8 + $0 : 1000 * (i + 1) + $0 + 1 },
                                   targetMask: (0..<n).map { $0 >= shared })
        }
    }

    func testSharePrefixPutsTheCommonPrefixOnceThenEachRest() throws {
        let options = BatchOptions(batchSize: 3, layout: .sharePrefix, shuffle: false, padTokenId: -1)
        var batcher = try Batcher(examples: prefixed([2, 3, 1, 4], shared: 4), options: options)
        let first = try XCTUnwrap(batcher.next())
        XCTAssertEqual(first.batchSize, 1)
        XCTAssertEqual(first.length, 4 + 2 + 3 + 1)
        XCTAssertEqual(first.inputIds, [7, 8, 9, 10, 1004, 1005, 2004, 2005, 2006, 3004])
        XCTAssertEqual(first.segmentIds, [-1, -1, -1, -1, 1, 1, 2, 2, 2, 3])
        XCTAssertEqual(first.positions, [0, 1, 2, 3, 4, 5, 4, 5, 6, 4])
        XCTAssertEqual(first.lossMask, [false, false, false, false, true, true, true, true, true, true])
        XCTAssertEqual(first.targets.suffix(6), [1005, 1006, 2005, 2006, 2007, 3005])
        XCTAssertEqual(first.targetTokenCount, 6)
        XCTAssertEqual(first.rowSamples, [[0, 1, 2]])
        XCTAssertEqual(Batch.sharedSegment, -1)
        // One example left: nothing to share, a plain row.
        let last = try XCTUnwrap(batcher.next())
        XCTAssertEqual(last.batchSize, 1)
        XCTAssertEqual(last.segmentIds, [1, 1, 1, 1, 1, 1, 1, 1])
    }

    func testSharePrefixFallsBackToPaddingWhenTooLittleIsShared() throws {
        // 1 shared token of 3 × 11: sharing would save 2 of 33 tokens, below a quarter.
        let options = BatchOptions(batchSize: 3, layout: .sharePrefix, shuffle: false, padTokenId: -1)
        var batcher = try Batcher(examples: prefixed([10, 10, 10], shared: 1), options: options)
        let batch = try XCTUnwrap(batcher.next())
        XCTAssertEqual(batch.batchSize, 3)
        XCTAssertFalse(batch.segmentIds.contains(Batch.sharedSegment))
        // A prefix with a loss position is never shared, nor is a whole example.
        var masked = prefixed([1, 1], shared: 6)
        masked[1].targetMask[2] = true
        XCTAssertEqual(Batcher.commonPrefix(masked), 2)
        XCTAssertEqual(Batcher.commonPrefix(prefixed([0, 5], shared: 6)), 5)
    }

    func testPadToLongest() throws {
        var batcher = try Batcher(examples: examples([3, 5, 2]), options: BatchOptions(batchSize: 2, shuffle: false, padTokenId: -1))
        let first = try XCTUnwrap(batcher.next())
        XCTAssertEqual(first.batchSize, 2)
        XCTAssertEqual(first.length, 5)
        XCTAssertEqual(first.inputIds, [1000, 1001, 1002, -1, -1, 2000, 2001, 2002, 2003, 2004])
        XCTAssertEqual(first.targets, [1001, 1002, 1003, -1, -1, 2001, 2002, 2003, 2004, 2005])
        XCTAssertEqual(first.lossMask, [true, false, true, false, false, true, false, true, false, true])
        XCTAssertEqual(first.segmentIds, [1, 1, 1, 0, 0, 1, 1, 1, 1, 1])
        XCTAssertEqual(first.positions, [0, 1, 2, 0, 0, 0, 1, 2, 3, 4])
        XCTAssertEqual(first.targetTokenCount, 5)
        let last = try XCTUnwrap(batcher.next())
        XCTAssertEqual(last.batchSize, 1)   // the last batch is smaller, never dropped
        XCTAssertEqual(last.length, 2)
        XCTAssertNil(batcher.next())
        XCTAssertEqual(batcher.cursor.epoch, 1)
        XCTAssertEqual(batcher.cursor.index, 0)
    }

    func testPadToFixedRefusesLongerExamples() throws {
        var batcher = try Batcher(examples: examples([3, 2]), options: BatchOptions(batchSize: 4, layout: .padToFixed(6), shuffle: false))
        let batch = try XCTUnwrap(batcher.next())
        XCTAssertEqual(batch.length, 6)
        XCTAssertEqual(batch.inputIds.count, 12)
        XCTAssertThrowsError(try Batcher(examples: examples([3, 9]), options: BatchOptions(batchSize: 1, layout: .padToFixed(6)))) { error in
            XCTAssertTrue((error as? DataSchemaError)?.errorDescription?.contains("line 2) has 9 positions, more than the row length 6") ?? false)
        }
    }

    func testPackingKeepsSamplesApart() throws {
        let lengths = [5, 3, 7, 2, 2, 8, 1, 4, 6, 3, 3, 5]
        let data = examples(lengths)
        var batcher = try Batcher(examples: data, options: BatchOptions(batchSize: 2, layout: .pack(10), seed: 42))
        var seen: [Int] = []
        while let batch = batcher.next() {
            XCTAssertEqual(batch.length, 10)
            for r in 0..<batch.batchSize {
                let row = r * batch.length
                var expectedPosition = 0
                var previousSegment: Int32 = 1
                var segmentsInRow: [Int32] = []
                for t in 0..<batch.length {
                    let seg = batch.segmentIds[row + t]
                    if seg == 0 {
                        XCTAssertFalse(batch.lossMask[row + t])
                        continue
                    }
                    if segmentsInRow.last != seg {
                        XCTAssertFalse(segmentsInRow.contains(seg), "segment ids repeat in a row")
                        segmentsInRow.append(seg)
                        expectedPosition = 0
                        XCTAssertGreaterThanOrEqual(seg, previousSegment)
                    }
                    previousSegment = seg
                    // Every token of a segment comes from one example, at its own position.
                    let sample = batch.rowSamples[r][Int(seg) - 1]
                    XCTAssertEqual(batch.positions[row + t], expectedPosition)
                    XCTAssertEqual(batch.inputIds[row + t], 1000 * (sample + 1) + expectedPosition)
                    XCTAssertEqual(batch.targets[row + t], 1000 * (sample + 1) + expectedPosition + 1)
                    expectedPosition += 1
                }
                // Padding only at the end of the row.
                let firstPad = (0..<batch.length).first { batch.segmentIds[row + $0] == 0 } ?? batch.length
                XCTAssertTrue((firstPad..<batch.length).allSatisfy { batch.segmentIds[row + $0] == 0 })
                XCTAssertEqual(segmentsInRow.count, batch.rowSamples[r].count)
                seen += batch.rowSamples[r]
            }
        }
        XCTAssertEqual(seen.sorted(), Array(0..<lengths.count), "every example exactly once per epoch")
    }

    func testShuffleIsSeededAndDiffersByEpoch() throws {
        let data = examples(Array(repeating: 2, count: 20))
        func epochOrders(seed: UInt64) throws -> [[Int]] {
            var batcher = try Batcher(examples: data, options: BatchOptions(batchSize: 3, seed: seed))
            var epochs: [[Int]] = [[], []]
            for e in 0..<2 {
                while let b = batcher.next() { epochs[e] += b.rowSamples.flatMap { $0 } }
            }
            return epochs
        }
        let a = try epochOrders(seed: 5)
        XCTAssertEqual(a, try epochOrders(seed: 5))
        XCTAssertNotEqual(a, try epochOrders(seed: 6))
        XCTAssertNotEqual(a[0], a[1])
        XCTAssertEqual(a[0].sorted(), Array(0..<20))
    }

    func testRestoredCursorReproducesTheRemainingBatches() throws {
        let data = examples([5, 3, 7, 2, 2, 8, 1, 4, 6, 3, 3, 5, 9, 2])
        let options = BatchOptions(batchSize: 2, layout: .pack(12), seed: 99)
        var reference = try Batcher(examples: data, options: options)
        var all: [Batch] = []
        for _ in 0..<3 { while let b = reference.next() { all.append(b) } }

        var first = try Batcher(examples: data, options: options)
        var consumed: [Batch] = []
        _ = first.next().map { consumed.append($0) }
        _ = first.next().map { consumed.append($0) }
        let saved = try JSONEncoder().encode(first.cursor)
        let cursor = try JSONDecoder().decode(DataCursor.self, from: saved)
        XCTAssertEqual(cursor, first.cursor)
        XCTAssertEqual(cursor.epoch, 0)

        var resumed = try Batcher(examples: data, options: options, cursor: cursor)
        var rest: [Batch] = []
        for _ in 0..<3 { while let b = resumed.next() { rest.append(b) } }
        XCTAssertEqual(consumed + rest, all)

        XCTAssertThrowsError(try Batcher(examples: Array(data.dropLast()), options: options, cursor: cursor)) { error in
            XCTAssertTrue((error as? DataSchemaError)?.errorDescription?.contains("saved for 14 examples but the data has 13") ?? false)
        }
        let perEpoch = (0..<3).map { reference.batchCount(epoch: $0) }
        XCTAssertEqual(perEpoch.reduce(0, +), all.count)
    }
}
