// The .fmadapter package: writing NAME.fmadapter/ from an adapter checkpoint (and a draft
// checkpoint), and reading one back with every check a hostile folder needs (missing files,
// metadata keys, weights checksum and truncation, base signature, LoRA shapes, draft config).
// Follows Apple's adapter toolkit's export_fmadapter (metadata.json keys, the runtime's
// naming rule); the binary layout is this toolkit's own, documented in docs/fmadapter-format.md.
import Autograd
import Foundation
import ModelAssets
import Training

/// draft_config.json: the draft model's architecture and where it came from.
public struct DraftPackageConfig: Codable, Equatable, Sendable {
    public var baseModelSignature: String
    public var config: ModelConfig
    /// For a draft made from the base's layers: draft layer i came from base layer draftLayers[i].
    public var draftLayers: [Int]?
    /// The digest (`Checkpoint.adapterSignature`) of the adapter checkpoint the draft was distilled
    /// from; nil when distilled from the bare base.
    public var teacherAdapterSignature: String?
    /// Sorted token ids a restricted draft head scores; nil = the whole vocabulary. Kept here, not
    /// in the fp16 weights, because fp16 cannot hold token ids above 2048 exactly.
    public var vocabulary: [Int]?
}

/// A draft model as a package carries it.
public struct PackagedDraft: Sendable {
    public var config: DraftPackageConfig
    /// Hugging Face names of the draft model (`model.embed_tokens.weight`, `model.layers.0...`).
    public var tensors: [String: HostTensor]
}

/// What the user chooses when exporting.
public struct PackageOptions: Sendable {
    public var name: String
    public var author: String
    public var description: String
    public var license: String
    /// Tokens the draft proposes per step; written only when a draft is packaged (0 otherwise).
    public var draftTokenCount: Int
    public var creatorDefined: [String: JSONValue]

    public init(name: String, author: String = "", description: String = "", license: String = "",
                draftTokenCount: Int = 5, creatorDefined: [String: JSONValue] = [:]) {
        self.name = name
        self.author = author
        self.description = description
        self.license = license
        self.draftTokenCount = draftTokenCount
        self.creatorDefined = creatorDefined
    }
}

public struct FMAdapterPackage: Sendable {
    public static let fileExtension = "fmadapter"
    public static let metadataFile = "metadata.json"
    public static let adapterWeightsFile = "adapter_weights.bin"
    public static let draftWeightsFile = "draft_weights.bin"
    public static let draftConfigFile = "draft_config.json"

    public var path: String
    public var metadata: PackageMetadata
    public var lora: LoRAConfig
    public var baseConfig: ModelConfig
    /// Adapter tensors (fp16 values as Float) under the toolkit's names.
    public var adapterTensors: [String: HostTensor]
    public var draft: PackagedDraft?

    public var baseSignature: String { metadata.baseModelSignature }
    public var name: String { metadata.adapterName ?? "" }

    /// Whether a path names a package (a folder ending in .fmadapter, or one holding metadata.json
    /// and adapter_weights.bin), as opposed to a checkpoint file.
    public static func looksLikePackage(_ path: String) -> Bool {
        var isDir: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDir)
        if URL(fileURLWithPath: path).pathExtension == fileExtension { return !exists || isDir.boolValue }
        return exists && isDir.boolValue
    }

    // MARK: export

    /// Writes `outputDir/NAME.fmadapter/` from an adapter checkpoint and optionally a draft
    /// checkpoint, replacing an older package only once the new one is complete. `base` is
    /// needed only when the draft checkpoint leaves out tensors it shares with the base
    /// (frozen embeddings); it must be the base both were trained on. Returns the package path.
    @discardableResult
    public static func export(adapter: Checkpoint, draft: Checkpoint?, base: BaseModel? = nil,
                              options: PackageOptions, outputDir: String) throws -> String {
        try AdapterName.validate(options.name)
        guard options.draftTokenCount >= 1 || draft == nil else {
            throw ExportError.unsupported("--draft-token-count must be at least 1 when a draft is packaged (got \(options.draftTokenCount))")
        }
        let (lora, adapterTensors) = try adapterContents(of: adapter)
        if let base { try adapter.requireBase(base) }
        let sig = adapter.header.baseSignature
        var draftFiles: (config: Data, weights: Data)? = nil
        if let draft {
            let packaged = try draftContents(of: draft, adapter: adapter, base: base)
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let names = packaged.tensors.keys.sorted(by: tensorOrder)
            draftFiles = (try enc.encode(packaged.config) + Data("\n".utf8),
                          try WeightsContainer.serialize(content: .draft, baseSignature: sig, config: packaged.config.config, lora: nil,
                                                         tensors: names.map { ($0, packaged.tensors[$0]!) }, file: draft.path))
        }
        let weights = try WeightsContainer.serialize(content: .adapter, baseSignature: sig, config: adapter.header.baseConfig,
                                                     lora: lora, tensors: adapterTensors, file: adapter.path)
        let metadata = PackageMetadata(
            adapterIdentifier: PackageMetadata.identifier(name: options.name, baseSignature: sig), author: options.author,
            baseModelSignature: sig, creatorDefined: options.creatorDefined, description: options.description,
            license: options.license, loraRank: lora.rank,
            speculativeDecodingDraftTokenCount: draft == nil ? 0 : options.draftTokenCount)
        let destination = URL(fileURLWithPath: outputDir).appendingPathComponent("\(options.name).\(fileExtension)").path
        try FolderPublisher.publish(to: destination, what: "an .fmadapter package",
                                    isReplaceable: { FileManager.default.fileExists(atPath: $0 + "/" + metadataFile) }) { dir in
            try AtomicFile.write(weights, to: dir + "/" + adapterWeightsFile)
            if let draftFiles {
                try AtomicFile.write(draftFiles.weights, to: dir + "/" + draftWeightsFile)
                try AtomicFile.write(draftFiles.config, to: dir + "/" + draftConfigFile)
            }
            try AtomicFile.write(try metadata.encoded(), to: dir + "/" + metadataFile)
        }
        return destination
    }

    /// The LoRA config and tensors (in layout order) of an adapter checkpoint, refusing a draft
    /// checkpoint or one whose tensors do not match its own LoRA config.
    public static func adapterContents(of ck: Checkpoint) throws -> (LoRAConfig, [(name: String, tensor: HostTensor)]) {
        guard ck.header.content == .adapter else {
            throw ExportError.incompatible(path: ck.path, reason: "is a draft-model checkpoint, not an adapter; a draft is packaged only together with its adapter: pass the adapter checkpoint (adapter-*.safetensors) with --checkpoint and this file with --draft-checkpoint")
        }
        guard let lora = ck.header.lora else {
            throw ExportError.incompatible(path: ck.path, reason: "is an adapter checkpoint without its LoRA configuration in the header; it was not written by this toolkit's trainer")
        }
        let tensors = try LoRALayout.ordered(ck.tensors, config: ck.header.baseConfig, lora: lora) {
            ExportError.incompatible(path: ck.path, reason: $0)
        }
        return (lora, tensors)
    }

    /// The draft's config and complete weights. Tensors a draft checkpoint leaves out (frozen
    /// ones shared with the base) are taken from `base`, by `draftLayers` for layer tensors.
    static func draftContents(of ck: Checkpoint, adapter: Checkpoint, base: BaseModel?) throws -> PackagedDraft {
        guard ck.header.content == .draft else {
            throw ExportError.incompatible(path: ck.path, reason: "is an adapter checkpoint, not a draft model; pass a draft-model-*.safetensors checkpoint with --draft-checkpoint")
        }
        guard ck.header.baseSignature == adapter.header.baseSignature else {
            throw ExportError.incompatible(path: ck.path, reason: "the draft was trained for base model \(ck.header.baseSignature), but the adapter \(adapter.path) for base model \(adapter.header.baseSignature); package a draft distilled for this adapter's base")
        }
        guard let config = ck.header.draftConfig else {
            throw ExportError.incompatible(path: ck.path, reason: "is a draft checkpoint without 'draft_config' in its header; it cannot be packaged")
        }
        guard config.vocabSize == adapter.header.baseConfig.vocabSize else {
            throw ExportError.incompatible(path: ck.path, reason: "the draft's vocabulary has \(config.vocabSize) tokens but the base model's has \(adapter.header.baseConfig.vocabSize); a draft must share the base's tokenizer")
        }
        if let teacher = ck.header.teacherAdapterSignature, teacher != adapter.adapterSignature {
            throw ExportError.incompatible(path: ck.path, reason: "the draft was distilled from another adapter (signature \(teacher.prefix(12))...), not from \(adapter.path) (\(adapter.adapterSignature.prefix(12))...); a package's draft must come with its own adapter: pass the adapter checkpoint the draft was trained against, or train a draft for this adapter")
        }
        let expected = ModelLoader.expectedShapes(for: config)
        var tensors: [String: HostTensor] = [:]
        var vocabulary: [Int]? = nil
        for (name, t) in ck.tensors {
            if name == DraftModel.vocabularyTensorName {
                let ids = t.data.map { Int($0) }
                guard t.shape.count == 1, !ids.isEmpty, zip(ids, ids.dropFirst()).allSatisfy({ $0 < $1 }),
                      ids.first! >= 0, ids.last! < config.vocabSize else {
                    throw ExportError.incompatible(path: ck.path, reason: "tensor '\(name)' is not a sorted list of token ids below \(config.vocabSize)")
                }
                vocabulary = ids
                continue
            }
            guard let shape = expected[name] else {
                throw ExportError.incompatible(path: ck.path, reason: "holds tensor '\(name)', which the draft's config (\(config.numLayers) layers, hidden \(config.hiddenSize)) does not have")
            }
            guard shape == t.shape else {
                throw ExportError.incompatible(path: ck.path, reason: "tensor '\(name)' has shape \(t.shape), but the draft's config needs \(shape)")
            }
            tensors[name] = t
        }
        let missing = expected.keys.filter { tensors[$0] == nil }.sorted(by: tensorOrder)
        if let first = missing.first {
            guard let base else {
                throw ExportError.incompatible(path: ck.path, reason: "the draft checkpoint leaves out \(missing.count) tensors it shares with the base model (first: '\(first)'); pass the base model with --base-model so they can be packaged")
            }
            guard base.signature == ck.header.baseSignature else {
                throw ExportError.incompatible(path: ck.path, reason: "was trained on base model \(ck.header.baseSignature), but --base-model \(base.path) is \(base.signature)")
            }
            for name in missing {
                let source = try baseName(for: name, layers: ck.header.draftLayers, path: ck.path)
                guard let t = base.file.tensors[source], t.shape == expected[name] else {
                    throw ExportError.incompatible(path: ck.path, reason: "the draft needs '\(name)' from the base model's '\(source)', which the base \(base.path) does not have with shape \(expected[name]!)")
                }
                tensors[name] = t
            }
        }
        return PackagedDraft(
            config: DraftPackageConfig(baseModelSignature: ck.header.baseSignature, config: config,
                                       draftLayers: ck.header.draftLayers, teacherAdapterSignature: ck.header.teacherAdapterSignature,
                                       vocabulary: vocabulary),
            tensors: tensors)
    }

    /// The base tensor a draft tensor is copied from: same name, with the layer mapped by `layers`.
    static func baseName(for name: String, layers: [Int]?, path: String) throws -> String {
        let prefix = "model.layers."
        guard name.hasPrefix(prefix) else { return name }
        let rest = name.dropFirst(prefix.count)
        guard let dot = rest.firstIndex(of: "."), let i = Int(rest[..<dot]) else { return name }
        guard let layers else {
            throw ExportError.incompatible(path: path, reason: "the draft checkpoint leaves out layer tensor '\(name)' but has no 'draft_layers' map saying which base layer it came from")
        }
        guard i < layers.count else {
            throw ExportError.incompatible(path: path, reason: "'draft_layers' has \(layers.count) entries but the draft needs layer \(i)")
        }
        return prefix + String(layers[i]) + String(rest[dot...])
    }

    static func tensorOrder(_ a: String, _ b: String) -> Bool {
        func key(_ s: String) -> (Int, Int, String) {
            if s.hasPrefix("model.layers.") {
                return (1, Int(s.dropFirst(13).prefix { $0.isNumber }) ?? 0, s)
            }
            return (s.hasPrefix("model.embed") ? 0 : 2, 0, s)
        }
        return key(a) < key(b)
    }

    // MARK: load

    /// Reads and checks a package folder. Every problem names the file and says what to do.
    public static func load(_ path: String) throws -> FMAdapterPackage {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: path, isDirectory: &isDir) else {
            throw ExportError.package(path: path, reason: "no such folder")
        }
        guard isDir.boolValue else {
            throw ExportError.package(path: path, reason: "is a file; an .fmadapter package is a folder holding \(metadataFile) and \(adapterWeightsFile)")
        }
        let dir = URL(fileURLWithPath: path)
        func file(_ name: String) -> String { dir.appendingPathComponent(name).path }
        let hasDraftWeights = fm.fileExists(atPath: file(draftWeightsFile))
        let hasDraftConfig = fm.fileExists(atPath: file(draftConfigFile))
        guard fm.fileExists(atPath: file(adapterWeightsFile)) else {
            let why = hasDraftWeights ? "the package holds a draft but not the adapter it was distilled for; a draft is only usable with its adapter. " : ""
            throw ExportError.package(path: file(adapterWeightsFile), reason: "the file is missing; \(why)the package is incomplete, re-export it")
        }
        let metadata = try PackageMetadata.read(path: file(metadataFile))
        let (header, tensors) = try WeightsContainer.read(path: file(adapterWeightsFile))
        let weightsPath = file(adapterWeightsFile)
        guard header.content == .adapter, let lora = header.lora else {
            throw ExportError.package(path: weightsPath, reason: "holds \(header.content.rawValue) weights, not an adapter's")
        }
        guard header.baseSignature == metadata.baseModelSignature else {
            throw ExportError.package(path: weightsPath, reason: "was made for base model \(header.baseSignature) but \(metadataFile) says \(metadata.baseModelSignature); the files come from different exports, re-export the package")
        }
        guard lora.rank == metadata.loraRank else {
            throw ExportError.package(path: weightsPath, reason: "holds a rank-\(lora.rank) adapter but \(metadataFile) says loraRank \(metadata.loraRank); re-export the package")
        }
        _ = try LoRALayout.ordered(tensors, config: header.config, lora: lora) {
            ExportError.package(path: weightsPath, reason: $0)
        }
        var draft: PackagedDraft? = nil
        if hasDraftWeights || hasDraftConfig || metadata.speculativeDecodingDraftTokenCount > 0 {
            guard hasDraftWeights else {
                throw ExportError.package(path: file(draftWeightsFile), reason: "the file is missing (\(hasDraftConfig ? draftConfigFile + " is present" : "metadata asks for \(metadata.speculativeDecodingDraftTokenCount) draft tokens")); re-export the package")
            }
            guard hasDraftConfig else {
                throw ExportError.package(path: file(draftConfigFile), reason: "the file is missing (\(draftWeightsFile) is present); re-export the package")
            }
            guard metadata.speculativeDecodingDraftTokenCount > 0 else {
                throw ExportError.package(path: file(metadataFile), reason: "the package holds a draft but speculativeDecodingDraftTokenCount is 0; re-export the package with --draft-token-count")
            }
            draft = try loadDraft(configPath: file(draftConfigFile), weightsPath: file(draftWeightsFile),
                                  signature: metadata.baseModelSignature)
        }
        return FMAdapterPackage(path: path, metadata: metadata, lora: lora, baseConfig: header.config,
                                adapterTensors: tensors, draft: draft)
    }

    static func loadDraft(configPath: String, weightsPath: String, signature: String) throws -> PackagedDraft {
        let config: DraftPackageConfig
        do { config = try JSONDecoder().decode(DraftPackageConfig.self, from: Data(contentsOf: URL(fileURLWithPath: configPath))) } catch {
            throw ExportError.package(path: configPath, reason: "cannot be read as the draft's configuration (\(WeightsContainer.describe(error))); re-export the package")
        }
        guard config.baseModelSignature == signature else {
            throw ExportError.package(path: configPath, reason: "the draft is for base model \(config.baseModelSignature) but the package's adapter for \(signature); re-export the package")
        }
        let (header, tensors) = try WeightsContainer.read(path: weightsPath)
        guard header.content == .draft, header.config == config.config, header.baseSignature == signature else {
            throw ExportError.package(path: weightsPath, reason: "does not hold the draft described by \(URL(fileURLWithPath: configPath).lastPathComponent) (content, config or base signature differ); re-export the package")
        }
        do {
            try ModelLoader.checkShapes(tensors.map { ($0.key, $0.value.shape) }, config: config.config, path: weightsPath)
        } catch {
            throw ExportError.package(path: weightsPath, reason: "the draft's tensors do not match its configuration: \(error.localizedDescription)")
        }
        if let ids = config.vocabulary {
            guard !ids.isEmpty, zip(ids, ids.dropFirst()).allSatisfy({ $0 < $1 }), ids.first! >= 0, ids.last! < config.config.vocabSize else {
                throw ExportError.package(path: configPath, reason: "'vocabulary' is not a sorted list of token ids below \(config.config.vocabSize); re-export the package")
            }
        }
        return PackagedDraft(config: config, tensors: tensors)
    }

    // MARK: use

    /// Whether this package was made for `base` (equal base model signatures).
    public func isCompatible(with base: BaseModel) -> Bool { baseSignature == base.signature }

    /// Throws naming both signatures unless the package was made for `base`.
    public func requireCompatible(with base: BaseModel) throws {
        guard isCompatible(with: base) else {
            throw ExportError.incompatible(path: path, reason: "was made for base model \(baseSignature), but the loaded base model \(base.path) is \(base.signature); load the base model it was made for, or re-export the adapter from a checkpoint trained on this base")
        }
    }

    /// The base model with this package's adapter loaded.
    public func makeModel(base: BaseModel) throws -> LlamaModel {
        try requireCompatible(with: base)
        var rng = SeededRNG(seed: 0)
        let model = try LlamaModel(config: base.config, weights: base.file.tensors, lora: lora, rng: &rng)
        for (name, t) in model.loraParameters {
            guard let stored = adapterTensors[name], stored.shape == t.shape else {
                throw ExportError.package(path: path, reason: "has no tensor '\(name)' of shape \(t.shape) for this base; re-export the package")
            }
            t.data = stored.data
        }
        return model
    }

    /// The packaged draft as a model (nil without a draft).
    public func makeDraftModel(base: BaseModel) throws -> DraftModel? {
        guard let draft else { return nil }
        try requireCompatible(with: base)
        guard draft.config.config.vocabSize == base.config.vocabSize else {
            throw ExportError.package(path: path, reason: "its draft scores \(draft.config.config.vocabSize) tokens but the base model \(base.config.vocabSize)")
        }
        var rng = SeededRNG(seed: 0)
        let model = try LlamaModel(config: draft.config.config, weights: draft.tensors, lora: nil, rng: &rng)
        return DraftModel(model: model, layers: draft.config.draftLayers, vocabulary: draft.config.vocabulary)
    }
}
