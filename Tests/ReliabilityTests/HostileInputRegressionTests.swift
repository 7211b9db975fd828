// Regression tests for the hostile-input bugs found while fuzzing the parsers (scripts/fuzz.sh)
// and reviewing them for issue #10. Each failed (trap, hang or silent misuse) before its fix.
import Autograd
import DataSchema
@testable import Export
import Foundation
import ModelAssets
@testable import ModelDefinition
import TestSupport
@testable import Training
import XCTest

final class HostileInputRegressionTests: XCTestCase {
    // MARK: JSON schemas in samples (tools, response_format)

    /// `{"not": {"$ref": "#"}}` and `{"allOf": [{"$ref": "#"}]}` recursed until the stack overflowed.
    func testCircularSchemaIsAViolationNotAStackOverflow() throws {
        for text in [##"{"not": {"$ref": "#"}}"##, ##"{"allOf": [{"$ref": "#"}]}"##,
                     ##"{"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"oneOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}"##] {
            let schema = try JSONSchema(try JSONValue.parse(text))
            let violations = schema.validate(.object([]))
            XCTAssert(violations.contains { $0.message.contains("the schema is circular") }, "\(text): \(violations)")
        }
        // Recursion that descends into the value stays allowed.
        let tree = try JSONSchema(try JSONValue.parse(##"{"$defs": {"n": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"}"##))
        XCTAssertEqual(tree.validate(try JSONValue.parse(##"{"kids": [{"kids": []}, {"kids": [{}]}]}"##)), [])
        XCTAssertFalse(tree.validate(try JSONValue.parse(##"{"kids": [1]}"##)).isEmpty)
    }

    /// Shared $refs doubled in allOf at each of 40 levels meant 2^40 steps: a hang.
    func testExponentialSchemaStopsAtTheStepBudget() throws {
        var defs: [String] = []
        for i in 0..<40 { defs.append(##""d\##(i)": {"allOf": [{"$ref": "#/$defs/d\##(i + 1)"}, {"$ref": "#/$defs/d\##(i + 1)"}]}"##) }
        defs.append(##""d40": {"type": "string"}"##)
        let schema = try JSONSchema(try JSONValue.parse(##"{"$defs": {\##(defs.joined(separator: ", "))}, "$ref": "#/$defs/d0"}"##))
        let t0 = Date()
        let violations = schema.validate(try JSONValue.parse("1"))
        XCTAssertLessThan(Date().timeIntervalSince(t0), 10)
        XCTAssert(violations.contains { $0.message.contains("steps to check this value") }, "\(violations)")
    }

    /// Through the reader: a tool whose parameter schema is circular rejects its sample with the reason.
    func testSampleWithCircularToolSchemaIsRejectedWithItsLine() throws {
        let line = ##"{"messages": [{"role": "system", "content": "", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {"$ref": "#"}}}}]}, {"role": "user", "content": "go"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]}"##
        let set = try DataReader.read(bytes: Array((line + "\n").utf8), file: "t.jsonl", options: ReadOptions(skipInvalid: true))
        XCTAssertEqual(set.summary.rejected, 1)
        XCTAssert(set.issues.first?.description.contains("t.jsonl:1:") ?? false, "\(set.issues)")
        XCTAssert(set.issues.contains { $0.message.contains("circular") }, "\(set.issues)")
    }

    // MARK: tokenizer.json

    /// Found by fuzz-tokenizer-json (a timeout): one vocabulary id mutated to 500529 sized the id
    /// table by it; an id near the 10M bound cost ~1 GB and seconds from a file of a few KB.
    func testTokenizerJSONWithAHugeIdGapIsRefused() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../TokenizerTests/Fixtures/tiny_llama3/tokenizer.json").standardized
        var root = try JSONSerialization.jsonObject(with: Data(contentsOf: fixture)) as! [String: Any]
        var model = root["model"] as! [String: Any]
        var vocab = model["vocab"] as! [String: Any]
        vocab["zzz"] = 9_999_999
        model["vocab"] = vocab
        root["model"] = model
        let dir = TinyAssets.tempDir()
        let path = dir + "/tokenizer.json"
        try JSONSerialization.data(withJSONObject: root).write(to: URL(fileURLWithPath: path))
        let t0 = Date()
        XCTAssertThrowsError(try BPETokenizer.load(tokenizerJSON: URL(fileURLWithPath: path))) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(path) && text.contains("ids reach 9999999"), text)
        }
        XCTAssertLessThan(Date().timeIntervalSince(t0), 2)
        // The fixture itself (dense ids, added tokens after the vocabulary) still loads.
        XCTAssertNoThrow(try BPETokenizer.load(tokenizerJSON: fixture))
    }

    // MARK: .fmadapter weights container

    /// A tensor offset near Int.max overflowed `offset + 2 * count` (a trap in debug builds, an
    /// out-of-bounds read under -Ounchecked).
    func testWeightsTensorOffsetNearIntMaxIsRefused() throws {
        let cfg = try TinyAssets.config(vocab: 300)
        for offset in [Int.max - 1, Int.max / 2 + 1, -2] {
            let header = WeightsHeader(content: .adapter, dtype: "F16", baseSignature: "abcdef0", config: cfg,
                                       lora: LoRAConfig(rank: 2, alpha: 2, targets: [.q]), dataLength: 4,
                                       tensors: [.init(name: "x", shape: [2], offset: offset)])
            let enc = JSONEncoder()
            enc.outputFormatting = [.sortedKeys]
            let json = try enc.encode(header)
            var bytes = WeightsContainer.magic
            WeightsContainer.appendLE(&bytes, WeightsContainer.version)
            WeightsContainer.appendLE(&bytes, UInt32(json.count))
            bytes += json
            bytes += [UInt8](repeating: 0, count: WeightsContainer.roundUp(bytes.count, WeightsContainer.alignment) - bytes.count)
            bytes += [0, 60, 0, 60]  // two fp16 ones
            bytes += Array(SHA256.hash(data: bytes))
            XCTAssertThrowsError(try WeightsContainer.parse(Data(bytes), path: "w.bin")) { e in
                let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
                XCTAssert(text.contains("w.bin") && text.contains("reaches past"), text)
            }
        }
    }

    // MARK: checkpoints

    func tinyParams() throws -> (BaseModel, [(name: String, tensor: Tensor)], LoRAConfig) {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir))
        let lora = LoRAConfig(rank: 2, alpha: 4, targets: [.q, .v])
        var rng = SeededRNG(seed: 1)
        let model = try LlamaModel(weights: try BaseWeights(config: base.config, tensors: base.file.tensors), lora: lora, rng: &rng)
        return (base, model.loraParameters, lora)
    }

    func header(_ base: BaseModel, _ lora: LoRAConfig, state: TrainerState) -> CheckpointHeader {
        CheckpointHeader(content: .adapter, baseSignature: base.signature, baseConfig: base.config, lora: lora, state: state,
                         options: TrainingOptions(), dataFingerprint: "00", label: "interrupted")
    }

    /// A negative data position made a resumed loop ask for batch -3 (an index trap).
    func testCheckpointWithNegativePositionIsRefusedOnLoad() throws {
        let (base, params, lora) = try tinyParams()
        var state = TrainerState(seed: 1)
        state.batchIndex = -3
        let path = TinyAssets.tempDir() + "/adapter-interrupted.safetensors"
        try Checkpoint.write(to: path, header: header(base, lora, state: state), params: params,
                             optimizer: AdamW(parameterSizes: params.map(\.tensor.count), weightDecay: 0))
        XCTAssertThrowsError(try Checkpoint.load(path)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(path) && text.contains("'batchIndex' is -3"), text)
        }
    }

    /// Optimizer moments of the wrong length were copied into AdamW as they were; the next
    /// update then read past them.
    func testCheckpointWithMisshapenOptimizerMomentsIsRefusedOnRestore() throws {
        let (base, params, lora) = try tinyParams()
        var w = SafetensorsWriter(metadata: try header(base, lora, state: TrainerState(seed: 1)).metadata())
        for (i, p) in params.enumerated() {
            try w.add(p.name, HostTensor(shape: p.tensor.shape, data: p.tensor.data))
            let n = i == 0 ? 3 : p.tensor.count
            try w.add(Checkpoint.mPrefix + p.name, HostTensor(shape: i == 0 ? [3] : p.tensor.shape, data: Array(repeating: 0, count: n)))
            if i != 1 { try w.add(Checkpoint.vPrefix + p.name, HostTensor(shape: p.tensor.shape, data: Array(repeating: 0, count: p.tensor.count))) }
        }
        let path = TinyAssets.tempDir() + "/adapter-epoch1.safetensors"
        try w.write(to: path)
        let ck = try Checkpoint.load(path)
        XCTAssertThrowsError(try ck.restore(into: params, weightDecay: 0)) { e in
            let text = (e as? LocalizedError)?.errorDescription ?? "\(e)"
            XCTAssert(text.contains(path) && text.contains("AdamW moments of '\(params[0].name)'"), text)
        }
    }
}
