// make-model: writes a GGUF file of a published architecture's shape with seeded random weights
// in a chosen block type, so models too big to download here can be measured. Thin: parse flags,
// copy the tokenizer, call ModelAssets.RandomModel.write, report on stderr. Trained weights are
// not made here. Names, keys and layouts follow llama.cpp's convert_hf_to_gguf.py (see RandomModel).
import ArgumentParser
import Foundation
import ModelAssets
import ModelDefinition
#if canImport(Glibc)
import Glibc
#endif

extension PublishedShape: ExpressibleByArgument {}

enum BlockType: String, CaseIterable, ExpressibleByArgument {
    case q4_K, q4_K_M, q4_0, q4_1, q5_0, q5_1, iq4_NL, q2_K, q3_K, q5_K, q6_K, q8_0, f16, bf16, f32

    var mix: RandomModel.Mix { self == .q4_K_M ? .q4KM : .uniform }

    var ggml: GGMLType {
        switch self {
        case .q4_K, .q4_K_M: .q4_K
        case .q4_0: .q4_0
        case .q4_1: .q4_1
        case .q5_0: .q5_0
        case .q5_1: .q5_1
        case .iq4_NL: .iq4_NL
        case .q2_K: .q2_K
        case .q3_K: .q3_K
        case .q5_K: .q5_K
        case .q6_K: .q6_K
        case .q8_0: .q8_0
        case .f16: .f16
        case .bf16: .bf16
        case .f32: .f32
        }
    }
}

enum Vocabulary: String, CaseIterable, ExpressibleByArgument {
    case published, tokenizer
}

func printErr(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

/// SIGINT / SIGTERM ask the writer to stop at its next progress report, so that the temporary
/// file (gigabytes) is removed; a second signal exits at once.
nonisolated(unsafe) private var stopRequests: sig_atomic_t = 0

func installStopHandler() {
    let handler: @convention(c) (Int32) -> Void = { sig in
        stopRequests += 1
        if stopRequests > 1 { _exit(128 + sig) }
    }
    signal(SIGINT, handler)
    signal(SIGTERM, handler)
}

struct MakeModel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-model",
        abstract: "Write a GGUF model of a published architecture's shape with random weights.",
        discussion: """
            Shapes (numbers from each config.json): llama-3.2-1b and llama-3.2-3b (meta-llama/Llama-3.2-*, \
            llama3 RoPE scaling written as llama.cpp's converter does: a rope_freqs.weight tensor), \
            qwen2.5-0.5b (Qwen/Qwen2.5-0.5B, q/k/v biases), smollm2-135m (HuggingFaceTB/SmolLM2-135M-Instruct), \
            qwen3-0.6b, qwen3-1.7b, qwen3-4b (Qwen/Qwen3-*, per-head q/k norms), smollm3-3b (HuggingFaceTB/SmolLM3-3B, \
            no RoPE on every 4th layer), granite-3.1-2b (ibm-granite/granite-3.1-2b-base, embedding/residual/attention/logits \
            scales), olmo-2-1b (allenai/OLMo-2-0425-1B, norms after each sublayer, whole-projection q/k norms), \
            phi-4-mini (microsoft/Phi-4-mini-instruct: fused qkv and gate/up as attn_qkv and ffn_up, 96 of 128 head \
            dims rotated, LongRoPE factor lists as rope_factors_long/short tensors), phi-3-mini \
            (microsoft/Phi-3-mini-4k-instruct, its 32,064-token vocabulary: pass --tokenizer-from a GGUF of at most that many tokens), \
            gemma-3-270m and gemma-3-1b (google/gemma-3-*, four norms per block stored as 1 + w as llama.cpp's converter \
            stores them, GELU-tanh gate, 512-token windows on 5 of every 6 layers). \
            Tensor names, metadata keys and the q/k row order are llama.cpp's for each architecture. Weights are seeded random values \
            (std 0.02), norms are 1; norms, biases and rope factors stay F32. Every matrix is stored as --type \
            (q4_K_M: llama-quantize's mix, Q4_K with Q6_K for the head or tied embedding and for attn_v and ffn_down \
            in the first and last eighth of the layers and every third between), \
            except that a K-quant cannot hold rows whose length is not a multiple of 256 (Qwen2.5-0.5B's 896, \
            SmolLM2's 576): those matrices fall back as llama-quantize's do, q4_K to Q5_0, q5_K to Q5_1, q6_K \
            to Q8_0, q2_K and q3_K to IQ4_NL (F16 for rows that are not even a multiple of 32). The output lists every fallback. Progress goes to stderr.
            """)

    @Option(help: "Architecture whose shape to write (its config.json's numbers; see above).")
    var shape: PublishedShape

    @Option(help: "Block type of the matrices. K-quants fall back to Q5_0, Q5_1, Q8_0 or IQ4_NL for rows that are not a multiple of 256 values (see above).")
    var type: BlockType

    @Option(help: "The .gguf file to write (written under a temporary name and renamed when complete).")
    var output: String

    @Option(help: "Seed of the random weights; the same seed, shape and type give the same file.")
    var seed: UInt64 = 0

    @Option(help: "GGUF file whose tokenizer metadata (tokenizer.*) is copied; byte-level BPE only. Default: the fetched SmolLM2 file ($ADAPTER_BASE_MODEL, or assets/SmolLM2-135M-Instruct.Q4_1.gguf).")
    var tokenizerFrom: String?

    @Option(help: "published: pad the tokenizer's vocabulary to the architecture's published size with unused [PAD<id>] tokens, so the embedding and head have the published shape and llama.cpp's vocabulary check passes; tokenizer: keep the tokenizer's own size.")
    var vocabulary: Vocabulary = .published

    @Option(help: "Threads generating and quantizing (default: all cores).")
    var threads: Int?

    func validate() throws {
        if let threads, threads < 1 { throw ValidationError("--threads must be at least 1") }
        let folder = URL(fileURLWithPath: output).deletingLastPathComponent().path
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("the folder of --output (\(folder)) does not exist; create it first")
        }
        if let tokenizerFrom, !FileManager.default.fileExists(atPath: tokenizerFrom) {
            throw ValidationError("--tokenizer-from \(tokenizerFrom) does not exist; pass a .gguf file with tokenizer metadata")
        }
    }

    func run() throws {
        let start = Date()
        guard let tokenizerPath = tokenizerFrom ?? BaseModel.defaultPath() else {
            throw ValidationError("no --tokenizer-from given and the SmolLM2 GGUF is not fetched; run scripts/fetch-model.sh, set ADAPTER_BASE_MODEL, or pass --tokenizer-from FILE.gguf")
        }
        let tokenizerFile = try GGUFFile(path: tokenizerPath)
        let tokenCount = try tokenizerFile.stringArray("tokenizer.ggml.tokens").count
        var config = shape.config
        if vocabulary == .tokenizer { config.vocabSize = tokenCount }
        let tokenizer = try RandomModel.tokenizerMetadata(from: tokenizerFile, vocabularySize: config.vocabSize)
        let options = RandomModel.Options(
            config: config, type: type.ggml, mix: type.mix, seed: seed, name: "\(shape.rawValue) shape, random weights (make-model, seed \(seed))",
            tokenizer: tokenizer, declaresHeadDim: shape.declaresHeadDim,
            threads: threads ?? ProcessInfo.processInfo.activeProcessorCount)

        printErr("make-model: \(shape.rawValue) (\(shape.repository)) as \(type == .q4_K_M ? "Q4_K_M" : type.ggml.name), seed \(seed) -> \(output)")
        printErr("tokenizer: \(tokenCount) tokens from \(tokenizerPath)"
            + (config.vocabSize > tokenCount ? ", padded to \(config.vocabSize) with unused [PAD<id>] tokens" : ""))
        let plan = try RandomModel.plan(config: config, type: type.ggml, mix: type.mix)
        let fallbacks = plan.filter { $0.fallbackFrom != nil }
        if let first = fallbacks.first, let from = first.fallbackFrom {
            let lengths = Set(fallbacks.map { $0.shape[1] }).sorted().map(String.init).joined(separator: ", ")
            printErr("fallback: \(fallbacks.count) of \(plan.filter { $0.role == .matrix }.count) matrices have rows of \(lengths) values, "
                + "not a multiple of \(from.name)'s 256: stored as \(first.type.name), as llama-quantize does")
        }
        let width = String(plan.count).count
        func mb(_ bytes: Int) -> String { String(format: "%.1f", Double(bytes) / 1e6) }
        installStopHandler()
        let summary = try RandomModel.write(options, to: output) { p in
            if stopRequests > 0 {
                printErr("make-model: stopped by a signal; \(output) was not written")
                throw ExitCode(130)
            }
            guard p.tensorDone else { return }
            let index = String(p.tensorIndex + 1).leftPadded(to: width)
            let note = p.tensor.fallbackFrom.map { " (fallback from \($0.name))" } ?? ""
            printErr("[\(index)/\(p.tensorCount)] \(p.tensor.name) \(p.tensor.type.name) \(p.tensor.shape)\(note)  \(mb(p.bytesWritten)) / \(mb(p.fileSize)) MB")
        }
        var counts: [String: Int] = [:]
        for t in summary.tensors { counts[t.type.name, default: 0] += 1 }
        let mix = counts.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        let seconds = Date().timeIntervalSince(start)
        printErr("wrote \(output): \(mb(summary.fileSize)) MB (\(summary.fileSize) bytes), \(summary.parameterCount) parameters, "
            + "\(summary.tensors.count) tensors (\(mix)) in \(String(format: "%.1f", seconds)) s")
    }
}

extension String {
    func leftPadded(to width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}

MakeModel.main()
