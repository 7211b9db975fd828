// Everything a command needs from the base model in one value: the frozen weights, its
// signature, tokenizer and chat template; and where the default model lives when no path is given.
// Leaves adapters to Adapter and ModelSource.
import Foundation
import ModelAssets

public struct BaseModel {
    public static let defaultFileName = "SmolLM2-135M-Instruct.Q4_1.gguf"

    public let file: BaseModelFile
    /// The frozen weights both executors read.
    public let weights: BaseWeights
    /// The signature in today's encoding: what new checkpoints, packages and adapters record.
    public let signature: String
    public let tokenizer: BPETokenizer
    /// The chat template prompts are rendered with: the model's own unless replaced
    /// (`--chat-template`), a built-in one when the model ships none (its origin says so).
    public var template: ChatTemplateSource
    private let legacy = LegacySignature()

    /// Whether `recorded` (the base signature a checkpoint, package or adapter carries) names this
    /// base: today's signature, or the v1 encoding's, which everything made before 2026-11-26
    /// carries. v1 is computed only when a recorded signature is not today's (once per process,
    /// and cached per file like today's), so a matching artifact costs nothing extra.
    public func recognizes(_ recorded: String) -> Bool {
        if recorded == signature { return true }
        return recorded == legacy.value { SignatureCache.signature(of: file, encoding: .v1) }
    }

    public var config: ModelConfig { file.config }
    public var path: String { file.path }

    /// Ids that end an assistant turn (EOS, and the end-of-turn tokens the template writes).
    public var stopTokenIds: Set<Int> { template.stopTokenIds(tokenizer) }

    /// Loads the base at `path` (a .gguf file or a Hugging Face folder). With `.stored`, a GGUF's
    /// matrices stay in their blocks, memory-mapped; `.float32` dequantizes everything (the
    /// reference path). The signature is computed from the float32 values either way (cached
    /// per file for big models, see SignatureCache).
    public static func load(path: String, storage: BaseWeightStorage = .float32) throws -> BaseModel {
        let (file, ggufTokenizer) = try ModelLoader.loadWithTokenizerData(path: path, storage: storage)
        let tokenizer: BPETokenizer
        switch file.tokenizer {
        case .gguf:
            tokenizer = try BPETokenizer(data: ggufTokenizer!)
        case .huggingFace(let folder, let json):
            guard let json else {
                throw ModelError.invalidConfig("\(folder) has no tokenizer.json; the toolkit needs the model's byte-level BPE tokenizer")
            }
            tokenizer = try BPETokenizer.load(tokenizerJSON: URL(fileURLWithPath: json))
        }
        guard tokenizer.vocabularySize <= file.config.vocabSize else {
            throw ModelError.invalidConfig("\(path): the tokenizer has \(tokenizer.vocabularySize) tokens but the model's vocabulary is \(file.config.vocabSize)")
        }
        return BaseModel(file: file, weights: try BaseWeights(file: file), signature: SignatureCache.signature(of: file), tokenizer: tokenizer,
                         template: .model(tokenizer))
    }

    /// A GGUF base's tokenizer metadata read again from its file (export writes it out; a loaded
    /// base does not hold it twice), nil for a Hugging Face folder. Throws when the file's tokenizer
    /// is no longer the one loaded: the file was replaced on disk since, and its metadata would
    /// not belong with the weights in use.
    public func ggufTokenizerData() throws -> TokenizerData? {
        guard let data = try file.tokenizer.ggufData() else { return nil }
        guard tokenizer.isBuilt(from: data) else {
            throw ModelError.invalidConfig("\(path) changed on disk after it was loaded: its tokenizer is no longer the one in use, so its metadata cannot be written beside the loaded weights; run the command again")
        }
        return data
    }

    /// The default model's path: $ADAPTER_BASE_MODEL, else assets/<default> in the current folder
    /// or in a parent of the executable's folder (a checkout's .build/release/..). Nil when absent.
    public static func defaultPath() -> String? {
        let fm = FileManager.default
        if let env = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], !env.isEmpty { return env }
        var candidates = [fm.currentDirectoryPath + "/assets/" + defaultFileName]
        var dir = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<6 {
            candidates.append(dir.appendingPathComponent("assets/" + defaultFileName).path)
            dir = dir.deletingLastPathComponent()
        }
        return candidates.first { fm.fileExists(atPath: $0) }
    }

    /// Resolves a user's `--base-model` (or the default) to a path, with an instruction when missing.
    public static func resolvePath(_ given: String?) throws -> String {
        if let given { return given }
        guard let p = defaultPath() else {
            throw ModelError.invalidConfig("no base model given and the default (\(defaultFileName)) is not fetched; run scripts/fetch-model.sh, or pass --base-model PATH (a .gguf file or a Hugging Face folder), or set ADAPTER_BASE_MODEL")
        }
        return p
    }
}

/// v1 signature of one loaded base, computed on first use.
private final class LegacySignature: @unchecked Sendable {
    private let lock = NSLock()
    private var computed: String?

    func value(_ compute: () -> String) -> String {
        lock.lock()
        defer { lock.unlock() }
        if let computed { return computed }
        let s = compute()
        computed = s
        return s
    }
}
