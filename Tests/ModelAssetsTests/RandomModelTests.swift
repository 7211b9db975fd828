// The library behind make-model on tiny shapes: metadata and tensors as llama.cpp's converter
// writes them (names, shapes, types, fallbacks, rope_freqs, q/k permutation), the toolkit's loader
// reading a Qwen2-shaped file back, seeded determinism, the padded vocabulary tokenizing as the
// original, and the published shapes' parameter counts.
import Foundation
import ModelDefinition
import XCTest
@testable import ModelAssets

final class RandomModelTests: XCTestCase {
    private var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("random-model-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    // MARK: fixtures

    /// A byte-level BPE vocabulary: 2 specials, the 256 byte symbols (GPT-2's map), 8 merges = 266 tokens.
    static func tinyTokenizer() -> TokenizerData {
        var printable = Set<Int>()
        for r in [33...126, 161...172, 174...255] { for b in r { printable.insert(b) } }
        var bytes: [String] = []
        var n = 0
        for b in 0..<256 {
            if printable.contains(b) { bytes.append(String(UnicodeScalar(UInt8(b)))) } else {
                bytes.append(String(UnicodeScalar(UInt32(256 + n))!))
                n += 1
            }
        }
        let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"]
        let tokens = ["<|endoftext|>", "<|im_end|>"] + bytes + merges.map { $0.replacingOccurrences(of: " ", with: "") }
        var types = [Int32](repeating: 1, count: tokens.count)
        types[0] = 3
        types[1] = 3
        return TokenizerData(tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: "gpt2",
                             bosTokenId: 0, eosTokenId: 1, padTokenId: nil, chatTemplate: "{{ messages }}")
    }

    /// A GGUF holding only tokenizer metadata.
    static func tokenizerFile(_ data: TokenizerData = tinyTokenizer(), extra: [(String, GGUFValue)] = [],
                              dropping: Set<String> = []) throws -> GGUFFile {
        var w = GGUFWriter()
        for (k, v) in ModelExport.ggufMetadata(for: data) where !dropping.contains(k) { try w.set(k, v) }
        for (k, v) in extra { try w.set(k, v) }
        return try GGUFFile(data: w.serialized(), path: "tokenizer.gguf")
    }

    static let llama3Scaling = RopeScaling(kind: .llama3, factor: 32, lowFrequencyFactor: 1, highFrequencyFactor: 4, originalMaxPositionEmbeddings: 8192)

    /// Llama 3.2 in miniature: rows of 256 and 512 (K-quant-sized), llama3 RoPE scaling, tied head.
    static func tinyLlama(vocab: Int = 320) throws -> ModelConfig {
        try ModelConfig(architecture: .llama, hiddenSize: 256, intermediateSize: 512, numLayers: 2, numHeads: 4, numKVHeads: 2,
                        headDim: 64, vocabSize: vocab, ropeTheta: 500_000, ropeScaling: llama3Scaling, rmsNormEps: 1e-5,
                        tieWordEmbeddings: true, attentionBias: false, maxPositionEmbeddings: 131_072)
    }

    /// Qwen2 in miniature: rows of 128 (too short for K-quants), q/k/v biases, an untied head.
    static func tinyQwen(vocab: Int = 266) throws -> ModelConfig {
        try ModelConfig(architecture: .qwen2, hiddenSize: 128, intermediateSize: 256, numLayers: 2, numHeads: 2, numKVHeads: 1,
                        headDim: 64, vocabSize: vocab, ropeTheta: 1_000_000, rmsNormEps: 1e-6, tieWordEmbeddings: false,
                        attentionBias: true, maxPositionEmbeddings: 4096)
    }

    /// The config as GGUF stores it: the epsilon is a float32.
    static func asStored(_ config: ModelConfig) -> ModelConfig {
        var c = config
        c.rmsNormEps = Double(Float(c.rmsNormEps))
        return c
    }

    private func write(_ config: ModelConfig, _ type: GGMLType, seed: UInt64 = 0, declaresHeadDim: Bool = false,
                       name: String = "m.gguf", progress: (RandomModel.Progress) throws -> Void = { _ in }) throws -> (String, RandomModel.Summary) {
        let tokenizer = try RandomModel.tokenizerMetadata(from: Self.tokenizerFile(), vocabularySize: config.vocabSize)
        let options = RandomModel.Options(config: config, type: type, seed: seed, name: "tiny", tokenizer: tokenizer,
                                          declaresHeadDim: declaresHeadDim, threads: 2)
        let path = dir.appendingPathComponent(name).path
        return (path, try RandomModel.write(options, to: path, progress: progress))
    }

    // MARK: Llama-shaped file

    func testLlamaShapedFileHasTheConvertersMetadataAndTensors() throws {
        let config = try Self.tinyLlama()
        let (path, summary) = try write(config, .q4_K, declaresHeadDim: true)
        let file = try GGUFFile(path: path)
        XCTAssertEqual(file.metadataKeys.first, "general.architecture")
        let expected: [String: GGUFValue] = [
            "general.architecture": .string("llama"), "general.type": .string("model"), "general.name": .string("tiny"),
            "llama.block_count": .uint32(2), "llama.context_length": .uint32(131_072), "llama.embedding_length": .uint32(256),
            "llama.feed_forward_length": .uint32(512), "llama.attention.head_count": .uint32(4), "llama.attention.head_count_kv": .uint32(2),
            "llama.rope.freq_base": .float32(500_000), "llama.attention.layer_norm_rms_epsilon": .float32(1e-5),
            "llama.rope.dimension_count": .uint32(64), "llama.vocab_size": .uint32(320),
            "llama.attention.key_length": .uint32(64), "llama.attention.value_length": .uint32(64),
            "general.file_type": .uint32(14), "general.quantization_version": .uint32(2),
        ]
        for (k, v) in expected { XCTAssertEqual(file.metadata[k], v, k) }
        XCTAssertNil(file.metadata["llama.rope.scaling.type"], "llama3 scaling is carried by rope_freqs.weight, as the converter writes it")

        var names = ["rope_freqs.weight", "token_embd.weight"]
        for l in 0..<2 {
            names += ["attn_norm", "ffn_down", "ffn_gate", "ffn_up", "ffn_norm", "attn_k", "attn_output", "attn_q", "attn_v"].map { "blk.\(l).\($0).weight" }
        }
        names.append("output_norm.weight")
        XCTAssertEqual(file.tensors.map(\.name), names)
        XCTAssertEqual(summary.tensors.map(\.name), names)
        XCTAssertEqual(file.tensorInfo(named: "rope_freqs.weight")?.type, .f32)
        XCTAssertEqual(file.tensorInfo(named: "rope_freqs.weight")?.shape, [32])
        XCTAssertEqual(file.tensorInfo(named: "token_embd.weight")?.shape, [320, 256])
        XCTAssertEqual(file.tensorInfo(named: "token_embd.weight")?.type, .q4_K)
        XCTAssertEqual(file.tensorInfo(named: "blk.1.ffn_down.weight")?.shape, [256, 512])
        XCTAssertEqual(file.tensorInfo(named: "blk.1.attn_k.weight")?.shape, [128, 256])
        XCTAssertEqual(file.tensorInfo(named: "blk.1.ffn_norm.weight")?.type, .f32)
        XCTAssertEqual(try file.dequantize("blk.0.attn_norm.weight").data, [Float](repeating: 1, count: 256))
        XCTAssertEqual(summary.parameterCount, TensorTable.shapes(for: config).values.reduce(0) { $0 + $1.reduce(1, *) })
        XCTAssertEqual(summary.fileSize, try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)

        var readBack = try ModelConfig.fromGGUF(file, hasOutputTensor: false)
        XCTAssertNil(readBack.ropeScaling)  // the toolkit's reader does not take rope_freqs yet
        readBack.ropeScaling = config.ropeScaling
        XCTAssertEqual(readBack, Self.asStored(config))
    }

    /// convert_hf_to_gguf.py's formula in Double: 1 below original/high, factor above original/low, blended between.
    func testRopeFrequencyFactorsFollowTheConverter() throws {
        let config = try Self.tinyLlama()
        let (path, _) = try write(config, .f16)
        let stored = try GGUFFile(path: path).dequantize("rope_freqs.weight").data
        XCTAssertEqual(stored, RandomModel.ropeFrequencyFactors(config))
        for (i, f) in stored.enumerated() {
            let freq = 1 / pow(500_000.0, Double(2 * i) / 64)
            let wavelength = 2 * Double.pi / freq
            let want: Double
            if wavelength < 8192.0 / 4 { want = 1 } else if wavelength > 8192.0 / 1 { want = 32 } else {
                let smooth = (8192 / wavelength - 1) / (4 - 1)
                want = 1 / ((1 - smooth) / 32 + smooth)
            }
            XCTAssertEqual(Double(f), want, accuracy: want * 1e-5, "factor \(i)")
        }
        XCTAssertEqual(stored.first, 1)
        XCTAssertEqual(stored.last, 32)
        XCTAssertNil(RandomModel.ropeFrequencyFactors(try Self.tinyQwen()))
    }

    /// The generator makes Hugging Face rows; q and k are stored with the converter's permutation,
    /// which the loader's RoPELayout.unpermuteFromGGUF undoes.
    func testQAndKRowsArePermutedAsTheConverterDoes() throws {
        let config = try Self.tinyLlama()
        let (path, _) = try write(config, .f32, seed: 9)
        let file = try GGUFFile(path: path)
        for (name, heads) in [("blk.1.attn_q.weight", 4), ("blk.1.attn_k.weight", 2), ("blk.1.attn_v.weight", 0), ("token_embd.weight", 0)] {
            let stored = try file.dequantize(name)
            let hf = heads > 0 ? RoPELayout.unpermuteFromGGUF(stored, heads: heads) : stored
            let (rows, k) = (stored.shape[0], stored.shape[1])
            var want = [Float](repeating: 0, count: rows * k)
            want.withUnsafeMutableBufferPointer { b in
                for r in 0..<rows { SeededNormal.fillRow(seed: 9, tensor: name, row: r, std: RandomModel.weightStd, count: k, into: b.baseAddress! + r * k) }
            }
            XCTAssertEqual(hf.data, want, name)
            if heads > 0 { XCTAssertNotEqual(stored.data, want, "\(name) must be permuted") }
        }
    }

    // MARK: Qwen2-shaped file

    func testQwenShapedFileFallsBackAndLoadsWithTheToolkitsLoader() throws {
        let config = try Self.tinyQwen()
        let (path, summary) = try write(config, .q4_K, seed: 3)
        for t in summary.tensors where t.role == .matrix {
            let rowLength = t.shape[1]
            XCTAssertEqual(t.type, rowLength % 256 == 0 ? .q4_K : .q5_0, t.name)
            XCTAssertEqual(t.fallbackFrom, rowLength % 256 == 0 ? nil : .q4_K, t.name)
        }
        XCTAssertEqual(summary.tensors.first { $0.name == "blk.0.ffn_down.weight" }?.type, .q4_K)
        XCTAssertEqual(summary.tensors.first { $0.name == "output.weight" }?.type, .q5_0)
        let model = try ModelLoader.load(path: path)
        XCTAssertEqual(model.config, Self.asStored(config))
        let bias = try XCTUnwrap(model.tensors["model.layers.1.self_attn.k_proj.bias"])
        var want = [Float](repeating: 0, count: 64)
        SeededNormal.fillRow(seed: 3, tensor: "blk.1.attn_k.bias", row: 0, std: RandomModel.weightStd, count: 64, into: &want)
        XCTAssertEqual(bias.data, want, "Qwen2 is not permuted")
        XCTAssertEqual(model.tensors["model.layers.0.input_layernorm.weight"]?.data, [Float](repeating: 1, count: 128))
        guard let tokenizer = try model.tokenizer.ggufData() else { return XCTFail("tokenizer from GGUF expected") }
        XCTAssertEqual(tokenizer, Self.tinyTokenizer())
    }

    func testStoredTypeFollowsLlamaQuantizesFallback() {
        XCTAssertEqual(RandomModel.storedType(for: .q4_K, rowLength: 896), .q5_0)  // as llama-quantize
        XCTAssertEqual(RandomModel.storedType(for: .q5_K, rowLength: 576), .q5_1)
        XCTAssertEqual(RandomModel.storedType(for: .q6_K, rowLength: 896), .q8_0)
        XCTAssertEqual(RandomModel.storedType(for: .q3_K, rowLength: 896), .iq4_NL)
        XCTAssertEqual(RandomModel.storedType(for: .q2_K, rowLength: 576), .iq4_NL)
        XCTAssertEqual(RandomModel.storedType(for: .q5_K, rowLength: 80), .f16)  // not even a multiple of 32
        XCTAssertEqual(RandomModel.storedType(for: .q5_0, rowLength: 96), .q5_0)
        XCTAssertEqual(RandomModel.storedType(for: .q4_K, rowLength: 4864), .q4_K)
        XCTAssertEqual(RandomModel.storedType(for: .q4_K, rowLength: 48), .f16)  // not even a multiple of 32
        XCTAssertEqual(RandomModel.storedType(for: .q4_0, rowLength: 96), .q4_0)
        XCTAssertEqual(RandomModel.storedType(for: .bf16, rowLength: 7), .bf16)
        XCTAssertThrowsError(try RandomModel.plan(config: try Self.tinyLlama(), type: .iq2_XXS))
    }

    /// llama-quantize's Q4_K_M for the published shapes, the layer lists worked out by hand from
    /// llama-quant.cpp's use_more_bits (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2).
    func testQ4KMMixGivesQ6KWhereLlamaQuantizeDoes() throws {
        func q6Layers(_ plan: [RandomModel.PlannedTensor], _ kind: String) -> [Int] {
            plan.filter { $0.name.hasSuffix(".\(kind).weight") && $0.type == .q6_K }
                .map { Int($0.name.split(separator: ".")[1])! }.sorted()
        }
        let oneB = try RandomModel.plan(config: PublishedShape.llama3_2_1b.config, type: .q4_K, mix: .q4KM)
        XCTAssertEqual(q6Layers(oneB, "attn_v"), [0, 1, 4, 7, 10, 13, 14, 15])
        XCTAssertEqual(q6Layers(oneB, "ffn_down"), [0, 1, 4, 7, 10, 13, 14, 15])
        XCTAssertEqual(oneB.first { $0.name == "token_embd.weight" }?.type, .q6_K, "the tied head is the embedding")
        XCTAssertEqual(Set(oneB.filter { $0.role == .matrix }.map(\.type)), [.q4_K, .q6_K])
        XCTAssertTrue(oneB.filter { $0.name.contains("attn_q") || $0.name.contains("ffn_gate") }.allSatisfy { $0.type == .q4_K })
        let threeB = try RandomModel.plan(config: PublishedShape.llama3_2_3b.config, type: .q4_K, mix: .q4KM)
        XCTAssertEqual(q6Layers(threeB, "ffn_down"), [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27])
        var untied = PublishedShape.llama3_2_1b.config
        untied.tieWordEmbeddings = false
        let plan = try RandomModel.plan(config: untied, type: .q4_K, mix: .q4KM)
        XCTAssertEqual(plan.first { $0.name == "output.weight" }?.type, .q6_K)
        XCTAssertEqual(plan.first { $0.name == "token_embd.weight" }?.type, .q4_K)
        XCTAssertThrowsError(try RandomModel.plan(config: untied, type: .q5_K, mix: .q4KM), "the mix is over Q4_K only")
        XCTAssertEqual(try RandomModel.plan(config: untied, type: .q4_K).filter { $0.type == .q6_K }.count, 0)
    }

    // MARK: determinism, progress, generator

    func testSameSeedGivesTheSameFileAndAnotherSeedOtherWeights() throws {
        let config = try Self.tinyLlama()
        let (a, _) = try write(config, .q6_K, seed: 5, name: "a.gguf")
        let (b, _) = try write(config, .q6_K, seed: 5, name: "b.gguf")
        let (c, _) = try write(config, .q6_K, seed: 6, name: "c.gguf")
        let bytesA = try Data(contentsOf: URL(fileURLWithPath: a))
        XCTAssertEqual(bytesA, try Data(contentsOf: URL(fileURLWithPath: b)))
        XCTAssertNotEqual(try GGUFFile(path: a).rawBytes(of: "blk.0.attn_q.weight"), try GGUFFile(path: c).rawBytes(of: "blk.0.attn_q.weight"))
    }

    func testProgressReportsEveryTensorEndingAtTheFileSize() throws {
        var events: [RandomModel.Progress] = []
        let (_, summary) = try write(try Self.tinyLlama(), .q8_0) { events.append($0) }
        XCTAssertEqual(events.filter(\.tensorDone).map(\.tensor.name), summary.tensors.map(\.name))
        XCTAssertEqual(events.last?.bytesWritten, summary.fileSize)
        XCTAssertEqual(zip(events, events.dropFirst()).allSatisfy { $0.bytesWritten <= $1.bytesWritten }, true)
    }

    func testAStopRequestFromProgressLeavesNoFile() throws {
        struct Stop: Error {}
        let path = dir.appendingPathComponent("stopped.gguf").path
        var calls = 0
        XCTAssertThrowsError(try write(try Self.tinyLlama(), .q4_K, name: "stopped.gguf") { _ in
            calls += 1
            if calls == 3 { throw Stop() }
        }) { XCTAssertTrue($0 is Stop, "\($0)") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [], "the temporary file is removed")
    }

    func testGeneratorIsSeededNormalWithTheRequestedStd() {
        let n = 200_000
        var x = [Float](repeating: 0, count: n)
        SeededNormal.fillRow(seed: 1, tensor: "t", row: 4, std: 0.02, count: n, into: &x)
        let mean = x.reduce(0, +) / Float(n)
        let std = (x.map { ($0 - mean) * ($0 - mean) }.reduce(0, +) / Float(n)).squareRoot()
        XCTAssertLessThan(abs(mean), 3 * 0.02 / Float(n).squareRoot() * 1.5)
        XCTAssertEqual(std, 0.02, accuracy: 0.02 * 0.01)
        XCTAssertLessThanOrEqual(x.map(abs).max()!, 0.02 * 3.4642)  // sum of four uniforms: bounded at 2√3 std
        var again = [Float](repeating: 0, count: 100), other = again
        SeededNormal.fillRow(seed: 1, tensor: "t", row: 4, std: 0.02, count: 100, into: &again)
        SeededNormal.fillRow(seed: 1, tensor: "t", row: 5, std: 0.02, count: 100, into: &other)
        XCTAssertEqual(again, Array(x.prefix(100)))
        XCTAssertNotEqual(other, again)
    }

    // MARK: vocabulary

    func testPaddedVocabularyHasUnusedPadTokens() throws {
        let meta = try RandomModel.tokenizerMetadata(from: Self.tokenizerFile(), vocabularySize: 300)
        let values = Dictionary(meta, uniquingKeysWith: { a, _ in a })
        let tokens = try XCTUnwrap(values["tokenizer.ggml.tokens"]?.stringArray)
        XCTAssertEqual(tokens.count, 300)
        XCTAssertEqual(Array(tokens.prefix(266)), Self.tinyTokenizer().tokens)
        XCTAssertEqual(tokens[266], "[PAD266]")
        XCTAssertEqual(tokens[299], "[PAD299]")
        let types = try XCTUnwrap(values["tokenizer.ggml.token_type"]?.intArray)
        XCTAssertEqual(Array(types.suffix(34)), [Int](repeating: 5, count: 34))
        XCTAssertEqual(Array(types.prefix(2)), [3, 3])
        XCTAssertEqual(values["tokenizer.ggml.merges"], .array(elementType: .string, values: Self.tinyTokenizer().merges.map { .string($0) }))
        XCTAssertEqual(meta.map(\.0).filter { !$0.hasPrefix("tokenizer.") }, [])

        // without token types (they are created), with scores (padded with -1000)
        let scores = GGUFValue.array(elementType: .float32, values: [GGUFValue](repeating: .float32(0), count: 266))
        let bare = try Self.tokenizerFile(extra: [("tokenizer.ggml.scores", scores)], dropping: ["tokenizer.ggml.token_type"])
        let padded = Dictionary(try RandomModel.tokenizerMetadata(from: bare, vocabularySize: 270), uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(padded["tokenizer.ggml.token_type"]?.intArray, [Int](repeating: 1, count: 266) + [5, 5, 5, 5])
        XCTAssertEqual(padded["tokenizer.ggml.scores"]?.arrayValue?.suffix(4).map(\.doubleValue), [-1000, -1000, -1000, -1000])

        XCTAssertThrowsError(try RandomModel.tokenizerMetadata(from: Self.tokenizerFile(), vocabularySize: 265)) { error in
            guard case ModelAssetsError.invalidConfig(_, "tokenizer.ggml.tokens", _) = error else { return XCTFail("\(error)") }
        }
        var w = GGUFWriter()  // a SentencePiece vocabulary is refused, as the toolkit's loader refuses it
        try w.set("tokenizer.ggml.model", .string("llama"))
        try w.set("tokenizer.ggml.tokens", .array(elementType: .string, values: [.string("a")]))
        XCTAssertThrowsError(try RandomModel.tokenizerMetadata(from: GGUFFile(data: w.serialized(), path: "spm.gguf"), vocabularySize: 8))
    }

    func testPaddedVocabularyTokenizesLikeTheOriginal() throws {
        let original = try BPETokenizer(data: Self.tinyTokenizer())
        let (path, _) = try write(try Self.tinyLlama(vocab: 320), .q8_0)
        let padded = try BPETokenizer(data: TokenizerData(gguf: GGUFFile(path: path)))
        XCTAssertEqual(padded.vocabularySize, 320)
        for text in ["the inner sea", " then on and on<|im_end|>", "héllo wörld 123 \n\t", "[PAD300] [PAD266]"] {
            XCTAssertEqual(padded.encode(text), original.encode(text), text)
        }
        XCTAssertEqual(padded.decode([300]), "[PAD300]")
        XCTAssertFalse(padded.isSpecial(300))
    }

    /// The real SmolLM2 tokenizer padded to Llama 3.2's 128,256 tokens; skipped without the model.
    func testRealSmolLM2VocabularyPaddedToLlamaSize() throws {
        var path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"] ?? ""
        if !FileManager.default.fileExists(atPath: path) {
            path = FileManager.default.currentDirectoryPath + "/assets/SmolLM2-135M-Instruct.Q4_1.gguf"
        }
        guard FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("the SmolLM2 GGUF is not fetched (scripts/fetch-model.sh or ADAPTER_BASE_MODEL); the tiny-vocabulary padding test still runs")
        }
        let source = try GGUFFile(path: path)
        let original = try BPETokenizer(data: TokenizerData(gguf: source))
        var w = GGUFWriter()
        for (k, v) in try RandomModel.tokenizerMetadata(from: source, vocabularySize: 128_256) { try w.set(k, v) }
        let paddedFile = try GGUFFile(data: w.serialized(), path: "padded.gguf")
        XCTAssertEqual(paddedFile.metadataKeys, source.metadataKeys.filter { $0.hasPrefix("tokenizer.") })
        let padded = try BPETokenizer(data: TokenizerData(gguf: paddedFile))
        XCTAssertEqual(padded.vocabularySize, 128_256)
        XCTAssertEqual(padded.specialTokenIds, original.specialTokenIds)
        for text in ["Hello, world! How are you today?", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n", "def f(x):\n    return x ** 2  # 42"] {
            XCTAssertEqual(padded.encode(text), original.encode(text), text)
        }
    }

    // MARK: published shapes

    func testPublishedShapesHaveTheirPublishedParameterCounts() {
        func parameters(_ shape: PublishedShape) -> Int {
            TensorTable.shapes(for: shape.config).values.reduce(0) { $0 + $1.reduce(1, *) }
        }
        // Model cards: Llama 3.2 1B "1.23B", 3B "3.21B", Qwen2.5-0.5B "0.49B"; SmolLM2-135M 134,515,008 (transformers' count).
        XCTAssertEqual(parameters(.llama3_2_1b), 1_235_814_400)
        XCTAssertEqual(parameters(.llama3_2_3b), 3_212_749_824)
        XCTAssertEqual(parameters(.qwen2_5_0_5b), 494_032_768)
        XCTAssertEqual(parameters(.smollm2_135m), 134_515_008)
        XCTAssertEqual(PublishedShape.llama3_2_3b.config.queryDim, 3072)
        XCTAssertEqual(PublishedShape.qwen2_5_0_5b.config.keyValueDim, 128)
        XCTAssertTrue([PublishedShape.llama3_2_1b, .llama3_2_3b, .qwen2_5_0_5b, .smollm2_135m].allSatisfy { $0.config.tieWordEmbeddings })
    }

    /// The shapes of the other described architectures. Model cards: Qwen3-0.6B "0.6B" (0.44B
    /// without embeddings), Qwen3-1.7B "1.7B" (1.4B), Qwen3-4B "4.0B" (3.6B), SmolLM3-3B "3.08B",
    /// granite-3.1-2b "2.53B", OLMo-2-0425-1B "1.48B" (untied, the only one).
    func testOtherArchitecturesPublishedShapes() {
        func parameters(_ shape: PublishedShape) -> Int {
            TensorTable.shapes(for: shape.config).values.reduce(0) { $0 + $1.reduce(1, *) }
        }
        XCTAssertEqual(parameters(.qwen3_0_6b), 596_049_920)
        XCTAssertEqual(parameters(.qwen3_1_7b), 1_720_574_976)
        XCTAssertEqual(parameters(.qwen3_4b), 4_022_468_096)
        XCTAssertEqual(parameters(.smollm3_3b), 3_075_098_624)
        XCTAssertEqual(parameters(.granite3_1_2b), 2_533_525_504)
        XCTAssertEqual(parameters(.olmo2_1b), 1_484_916_736)
        XCTAssertEqual(PublishedShape.qwen3_0_6b.config.queryDim, 2048)
        XCTAssertEqual(PublishedShape.smollm3_3b.config.noRopeLayers, [3, 7, 11, 15, 19, 23, 27, 31, 35])
        XCTAssertEqual(PublishedShape.allCases.filter { !$0.config.tieWordEmbeddings }, [.olmo2_1b, .phi3_mini])
        // Phi-4-mini "3.8B" (tied), Phi-3-mini "3.8B" (untied)
        XCTAssertEqual(parameters(.phi4_mini), 3_836_021_760)
        XCTAssertEqual(parameters(.phi3_mini), 3_821_079_552)
        XCTAssertEqual(PublishedShape.phi4_mini.config.rotaryDim, 96)
        XCTAssertEqual(PublishedShape.phi3_mini.config.window(layer: 31), 2047)
        for shape in PublishedShape.allCases { XCTAssertNoThrow(try ModelExport.checkGGUFExpressible(shape.config), shape.rawValue) }
    }

    func testTokenizerOfTheWrongSizeIsRefusedBeforeWriting() throws {
        let config = try Self.tinyLlama(vocab: 320)
        let tokenizer = try RandomModel.tokenizerMetadata(from: Self.tokenizerFile(), vocabularySize: 300)
        let path = dir.appendingPathComponent("wrong.gguf").path
        XCTAssertThrowsError(try RandomModel.write(.init(config: config, type: .q8_0, name: "x", tokenizer: tokenizer), to: path)) { error in
            guard case ModelAssetsError.invalidConfig(_, "tokenizer.ggml.tokens", _) = error else { return XCTFail("\(error)") }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }
}
