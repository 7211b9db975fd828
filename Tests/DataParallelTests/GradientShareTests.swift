// The arithmetic of data-parallel training, in one process: the ranks' weighted share gradients
// of a batch, added in rank order, equal the whole batch's gradient (padding, fixed length,
// packing, a shared prompt prefix, batches smaller than the rank count, gradient accumulation),
// for the adapter's loss on a tiny model with a nonzero LoRA B so that every factor has a gradient.
import Autograd
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
@testable import Training
import XCTest

/// A rank of a group that never communicates (the shares are computed one rank after another here).
final class LoneRank: ProcessGroup {
    let rank: Int
    let size: Int
    init(_ rank: Int, of size: Int) {
        self.rank = rank
        self.size = size
    }
    func sum(_ values: inout [Float]) throws { XCTFail("no communication in this test") }
    func allGather(_ bytes: [UInt8]) throws -> [[UInt8]] { XCTFail("no communication in this test"); return [] }
    func broadcast(_ bytes: [UInt8], root: Int) throws -> [UInt8] { XCTFail("no communication in this test"); return [] }
}

enum ParallelFixtures {
    /// `count` conversations with a long common system prompt (so prompt-prefix sharing applies)
    /// and replies of varying length; line `invalidLine` (1-based), when given, is not JSON.
    static func writeData(_ path: String, count: Int, offset: Int = 0, invalidLine: Int? = nil) throws {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]
        var lines: [String] = []
        for i in 0..<count {
            let w = words[(i + offset) % words.count] + String(repeating: "!", count: (i + offset) % 4)
            lines.append(#"{"messages": [{"role": "system", "content": "Repeat the word in upper case."}, {"role": "user", "content": "say \#(w)"}, {"role": "assistant", "content": "\#(w.uppercased())"}]}"#)
        }
        if let invalidLine { lines[invalidLine - 1] = "{\"messages\": [" }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// ‖a − b‖ / ‖a‖ (Euclidean norms).
    static func normDifference(_ a: [Float], _ b: [Float]) -> Double {
        precondition(a.count == b.count)
        var diff = 0.0, scale = 0.0
        for i in a.indices {
            diff += Double(a[i] - b[i]) * Double(a[i] - b[i])
            scale += Double(a[i]) * Double(a[i])
        }
        return scale > 0 ? (diff / scale).squareRoot() : diff.squareRoot()
    }

    /// Largest |a − b| over largest |a|.
    static func relativeDifference(_ a: [Float], _ b: [Float]) -> Float {
        precondition(a.count == b.count)
        var diff: Float = 0, scale: Float = 0
        for i in a.indices {
            diff = max(diff, abs(a[i] - b[i]))
            scale = max(scale, abs(a[i]))
        }
        return scale > 0 ? diff / scale : diff
    }
}

final class GradientShareTests: XCTestCase {
    func testRankSharesAddUpToTheBatchGradient() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        try ParallelFixtures.writeData(dir + "/train.jsonl", count: 9)
        for (pack, fixed, share) in [(false, false, true), (false, false, false), (true, false, false), (false, true, false)] {
            let settings = DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 256, fixedSizedSequences: fixed,
                                        packSequences: pack, skipInvalid: false, batchSize: 4, seed: 5, sharePrefix: share)
            let data = try DataPreparation.prepare(settings, base: base)
            var rng = SeededRNG(seed: 2)
            let model = try LlamaModel(weights: base.weights, lora: LoRAConfig(rank: 4, alpha: 8, targets: LoRATarget.allCases, dropout: 0), rng: &rng)
            for (name, p) in model.loraParameters where name.contains("lora_B") {
                p.data = (0..<p.count).map { _ in rng.uniform(-0.05, 0.05) }
            }
            let objective = AdapterObjective(model: model)
            let params = objective.parameters.map(\.tensor)
            let batches = (0..<data.train.batchCount(epoch: 0)).map { data.train.batch(epoch: 0, index: $0) }
            if share { XCTAssert(batches.contains { $0.segmentIds.first == Batch.sharedSegment }, "no batch shares its prefix") }
            if !pack { XCTAssertEqual(batches.last?.rowSamples.flatMap { $0 }.count, 1, "the last batch should hold one sample") }
            // One optimizer step over all batches (gradient accumulation), in one process...
            for p in params { p.grad = nil }
            var unused = SeededRNG(seed: 0)
            for b in batches { scale(objective.loss(b, rng: &unused, training: true), 1 / Float(batches.count)).backward() }
            let whole = params.map { $0.grad! }
            for ranks in [2, 3, 5] {
                // ...and as `ranks` ranks, each rank's gradients kept, then added in rank order.
                var sum: [[Float]]? = nil
                for r in 0..<ranks {
                    for p in params { p.grad = nil }
                    var step = SharedStep(group: LoneRank(r, of: ranks), micro: batches.count)
                    var stepRNG = SeededRNG(seed: 0)
                    for b in batches { step.accumulate(objective, b, rng: &stepRNG) }
                    let g = params.map { $0.grad ?? [Float](repeating: 0, count: $0.count) }
                    sum = sum.map { zip($0, g).map { zip($0, $1).map { $0 + $1 } } } ?? g
                }
                for (i, p) in objective.parameters.enumerated() {
                    let d = ParallelFixtures.relativeDifference(whole[i], sum![i])
                    XCTAssertLessThan(d, 1e-5, "pack=\(pack) fixed=\(fixed) share=\(share), \(ranks) ranks: \(p.name) differs by \(d)")
                }
            }
        }
    }
}

/// A group whose gathers return what the test says the other ranks sent.
final class ScriptedGroup: ProcessGroup {
    let rank = 0
    let size: Int
    let others: [String]
    init(others: [String]) {
        self.others = others
        size = others.count + 1
    }
    func sum(_ values: inout [Float]) throws {}
    func allGather(_ bytes: [UInt8]) throws -> [[UInt8]] { [bytes] + others.map { Array($0.utf8) } }
    func broadcast(_ bytes: [UInt8], root: Int) throws -> [UInt8] { bytes }
}

final class GroupSetupTests: XCTestCase {
    struct Failure: LocalizedError {
        var errorDescription: String? { "train.jsonl:4: malformed JSON" }
    }

    func testEveryRankFailingAlikeIsOneMessage() {
        XCTAssertThrowsError(try GroupSetup.agree(ScriptedGroup(others: ["Etrain.jsonl:4: malformed JSON"]), key: "", error: Failure())) {
            XCTAssertEqual(($0 as? SharedError)?.message, "train.jsonl:4: malformed JSON")
        }
    }

    func testOneRankFailingIsNamed() {
        XCTAssertThrowsError(try GroupSetup.agree(ScriptedGroup(others: ["Kdata 1", "Ebase.gguf: no such file"]), key: "data 1", error: nil)) {
            XCTAssertEqual(($0 as? SharedError)?.message, "base.gguf: no such file (on rank 2)")
        }
    }

    func testRanksWithOtherDataAreRefused() {
        XCTAssertNoThrow(try GroupSetup.agree(ScriptedGroup(others: ["Kdata 1", "Kdata 1"]), key: "data 1", error: nil))
        XCTAssertThrowsError(try GroupSetup.agree(ScriptedGroup(others: ["Kdata 2"]), key: "data 1", error: nil)) {
            XCTAssert(($0 as? SharedError)?.message.hasPrefix("rank 1 prepared a different run than rank 0") == true, "\($0)")
        }
    }
}
