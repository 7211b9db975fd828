// Pathological inputs end in errors, not exhaustion (issue #10, part 3): a 1 GB JSONL line is
// rejected by a child process whose peak memory stays near the line-size bound; a GGUF claiming
// 2^40 tensors (or metadata entries, or array elements) fails before any allocation, also in a
// child; a sample of 100k tokens (words, and one 100k-byte word) is truncated and counted, or
// rejected with its reason, in bounded time.
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition
import TestSupport
@testable import Training
import XCTest
#if canImport(Glibc)
import Glibc
#endif

final class LimitsTests: XCTestCase {
    func testOneGigabyteJSONLLineIsRejectedWithBoundedMemory() throws {
        let tool = try ChildProcess.tool("adapter-data")
        let dir = TinyAssets.tempDir()
        let path = dir + "/huge.jsonl"
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }  // sparse, but not everywhere
        // A sparse 1 GiB line (no disk space used), then one valid sample.
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(ftruncate(fd, 1 << 30), 0)
        let tail = "\n" + #"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "HI"}]}"# + "\n"
        XCTAssertEqual(lseek(fd, 0, SEEK_END), 1 << 30)
        _ = tail.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
        let t0 = Date()
        let r = ChildProcess.start(tool, ["validate", path], logPath: dir + "/validate.log").waitMeasuringPeak(executable: tool)
        print("1 GiB line: exit \(r.status), peak memory \(r.peakBytes >> 20) MiB, \(String(format: "%.1f", Date().timeIntervalSince(t0))) s")
        XCTAssertNotEqual(r.status, 0, r.output)
        XCTAssert(r.output.contains("\(path):1: line is 1073741824 bytes, more than the 67108864-byte limit"), r.output)
        XCTAssert(r.output.contains("read 2 samples: 1 accepted, 1 rejected"), r.output)
        XCTAssertGreaterThan(r.peakBytes, 0, "the child's memory was never sampled")
        XCTAssertLessThan(r.peakBytes, 400 << 20, "the reader must not hold the line (limit 64 MiB)")
    }

    /// GGUF bytes: magic, version 3, the two counts, then `rest`.
    func gguf(tensors: UInt64, kvs: UInt64, rest: [UInt8] = []) -> Data {
        var out = Array("GGUF".utf8)
        func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
        withUnsafeBytes(of: UInt32(3).littleEndian) { out += $0 }
        u64(tensors)
        u64(kvs)
        return Data(out + rest)
    }

    func testGGUFClaimingTwoToTheFortyTensorsFailsBeforeAllocating() throws {
        let dir = TinyAssets.tempDir()
        var key = Array("tokenizer.ggml.tokens".utf8)
        key = withUnsafeBytes(of: UInt64(key.count).littleEndian, Array.init) + key
        let arrayOfStrings = key + withUnsafeBytes(of: UInt32(9).littleEndian, Array.init) + withUnsafeBytes(of: UInt32(8).littleEndian, Array.init)
            + withUnsafeBytes(of: UInt64(1 << 40).littleEndian, Array.init)
        let cases: [(String, Data, String)] = [
            ("tensors", gguf(tensors: 1 << 40, kvs: 0), "1099511627776 tensor descriptors"),
            ("metadata", gguf(tensors: 0, kvs: 1 << 40), "1099511627776 metadata entries"),
            ("array", gguf(tensors: 0, kvs: 1, rest: arrayOfStrings), "1099511627776 elements of key 'tokenizer.ggml.tokens'"),
        ]
        for (name, bytes, expected) in cases {
            let path = dir + "/\(name).gguf"
            try bytes.write(to: URL(fileURLWithPath: path))
            XCTAssertThrowsError(try BaseModel.load(path: path)) { e in
                let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
                XCTAssert(text.contains(path) && text.contains(expected), text)
            }
        }
        // The same through train-adapter, measuring the child's peak memory.
        let trainer = try ChildProcess.tool("train-adapter")
        try TinyAssets.writeData(dir + "/train.jsonl", count: 2)
        let r = ChildProcess.start(trainer, ["--base-model", dir + "/tensors.gguf", "--train-data", dir + "/train.jsonl", "--checkpoint-dir", dir + "/run"],
                                   logPath: dir + "/train.log").waitMeasuringPeak(executable: trainer)
        XCTAssertNotEqual(r.status, 0, r.output)
        XCTAssert(r.output.contains("tensor descriptors"), r.output)
        XCTAssertGreaterThan(r.peakBytes, 0, "the child's memory was never sampled")
        XCTAssertLessThan(r.peakBytes, 300 << 20, "peak \(r.peakBytes >> 20) MiB")
        print("GGUF claiming 2^40 tensors via train-adapter: peak memory \(r.peakBytes >> 20) MiB")
    }

    func testSampleOfHundredThousandTokensIsTruncatedOrRejectedQuickly() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        let words = String(repeating: "alpha ", count: 100_000)
        let oneWord = String(repeating: "ab", count: 50_000)  // a single 100k-byte pre-token: the long-word BPE path
        func line(user: String, assistant: String) -> String {
            #"{"messages": [{"role": "user", "content": "\#(user)"}, {"role": "assistant", "content": "\#(assistant)"}]}"#
        }
        let text = [line(user: "hi", assistant: words), line(user: words, assistant: "OK"), line(user: "x", assistant: oneWord)]
            .joined(separator: "\n") + "\n"
        try text.write(toFile: dir + "/long.jsonl", atomically: true, encoding: .utf8)
        let t0 = Date()
        let data = try DataReader.read(path: dir + "/long.jsonl")
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 256)
        let full = try encoder.encodeFull(data.samples[0].messages)
        XCTAssertGreaterThanOrEqual(full.fullTokenCount, 99_000, "the sample really is about 100k tokens")
        let encoded = try encoder.encode(data, skipInvalid: true)
        let seconds = Date().timeIntervalSince(t0)
        print("100k-token samples: encoded in \(String(format: "%.2f", seconds)) s; \(encoded.summary)")
        XCTAssertLessThan(seconds, 30)
        XCTAssertEqual(encoded.examples.count, 2)
        XCTAssert(encoded.examples.allSatisfy { $0.count <= 256 })
        XCTAssertEqual(encoded.summary.truncated, 3)
        XCTAssertEqual(encoded.issues.count, 1)
        XCTAssert(encoded.issues.first?.description.contains("long.jsonl:2: no assistant token is left after truncating") ?? false,
                  "\(encoded.issues)")
    }
}
