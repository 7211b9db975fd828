// The .fmadapter package read back with every check a hostile folder needs (missing files,
// metadata keys, weights checksum and truncation, base signature, LoRA shapes, draft config),
// as an Adapter and DraftWeights. Writing a package is Export's (PackageExport.swift).
// Follows Apple's adapter toolkit's export_fmadapter (metadata.json keys, the runtime's
// naming rule); the binary layout is this toolkit's own, documented in docs/fmadapter-format.md.
import Foundation
import ModelAssets

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

    public init(baseModelSignature: String, config: ModelConfig, draftLayers: [Int]?, teacherAdapterSignature: String?, vocabulary: [Int]?) {
        self.baseModelSignature = baseModelSignature
        self.config = config
        self.draftLayers = draftLayers
        self.teacherAdapterSignature = teacherAdapterSignature
        self.vocabulary = vocabulary
    }
}

/// A draft model as a package carries it.
public struct PackagedDraft: Sendable {
    public var config: DraftPackageConfig
    /// Every tensor under the draft model's Hugging Face names (`model.embed_tokens.weight`,
    /// `model.layers.0...`) as held: read from a package, matrices stay the fp16 values of the
    /// memory-mapped draft_weights.bin (a draft's embedding is as big as the base's).
    public var weights: [String: NamedWeight]

    /// A draft of float32 tensors (being exported).
    public init(config: DraftPackageConfig, tensors: [String: HostTensor]) {
        self.config = config
        weights = tensors.mapValues { t in
            t.shape.count == 2 ? .matrix(FrozenMatrix(rows: t.shape[0], columns: t.shape[1], values: t.data)) : .vector(t.data)
        }
    }

    public init(config: DraftPackageConfig, weights: [String: NamedWeight]) {
        self.config = config
        self.weights = weights
    }

    /// The tensors as float32 (stored matrices dequantized: a full copy each).
    public var tensors: [String: HostTensor] { weights.mapValues(\.tensor) }

    /// How many values the draft holds.
    public var parameterCount: Int { weights.values.reduce(0) { $0 + $1.shape.reduce(1, *) } }

    /// The draft's weights: matrices as held, vectors as float32.
    func baseWeights() throws -> BaseWeights {
        var tensors: [String: HostTensor] = [:], matrices: [String: FrozenMatrix] = [:]
        for (name, w) in weights {
            switch w {
            case .matrix(let m): matrices[name] = m
            case .vector(let v): tensors[name] = HostTensor(shape: [v.count], data: v)
            }
        }
        return try BaseWeights(config: config.config, tensors: tensors, matrices: matrices)
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

    // MARK: load

    /// Reads and checks a package folder. Every problem names the file and says what to do.
    public static func load(_ path: String) throws -> FMAdapterPackage {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: path, isDirectory: &isDir) else {
            throw ModelError.package(path: path, reason: "no such folder")
        }
        guard isDir.boolValue else {
            throw ModelError.package(path: path, reason: "is a file; an .fmadapter package is a folder holding \(metadataFile) and \(adapterWeightsFile)")
        }
        let dir = URL(fileURLWithPath: path)
        func file(_ name: String) -> String { dir.appendingPathComponent(name).path }
        let hasDraftWeights = fm.fileExists(atPath: file(draftWeightsFile))
        let hasDraftConfig = fm.fileExists(atPath: file(draftConfigFile))
        guard fm.fileExists(atPath: file(adapterWeightsFile)) else {
            let why = hasDraftWeights ? "the package holds a draft but not the adapter it was distilled for; a draft is only usable with its adapter. " : ""
            throw ModelError.package(path: file(adapterWeightsFile), reason: "the file is missing; \(why)the package is incomplete, re-export it")
        }
        let metadata = try PackageMetadata.read(path: file(metadataFile))
        let (header, tensors) = try WeightsContainer.read(path: file(adapterWeightsFile))
        let weightsPath = file(adapterWeightsFile)
        guard header.content == .adapter, let lora = header.lora else {
            throw ModelError.package(path: weightsPath, reason: "holds \(header.content.rawValue) weights, not an adapter's")
        }
        guard header.baseSignature == metadata.baseModelSignature else {
            throw ModelError.package(path: weightsPath, reason: "was made for base model \(header.baseSignature) but \(metadataFile) says \(metadata.baseModelSignature); the files come from different exports, re-export the package")
        }
        guard lora.rank == metadata.loraRank else {
            throw ModelError.package(path: weightsPath, reason: "holds a rank-\(lora.rank) adapter but \(metadataFile) says loraRank \(metadata.loraRank); re-export the package")
        }
        _ = try TensorTable.orderedLoRA(tensors, config: header.config, lora: lora) {
            ModelError.package(path: weightsPath, reason: $0)
        }
        var draft: PackagedDraft? = nil
        if hasDraftWeights || hasDraftConfig || metadata.speculativeDecodingDraftTokenCount > 0 {
            guard hasDraftWeights else {
                throw ModelError.package(path: file(draftWeightsFile), reason: "the file is missing (\(hasDraftConfig ? draftConfigFile + " is present" : "metadata asks for \(metadata.speculativeDecodingDraftTokenCount) draft tokens")); re-export the package")
            }
            guard hasDraftConfig else {
                throw ModelError.package(path: file(draftConfigFile), reason: "the file is missing (\(draftWeightsFile) is present); re-export the package")
            }
            guard metadata.speculativeDecodingDraftTokenCount > 0 else {
                throw ModelError.package(path: file(metadataFile), reason: "the package holds a draft but speculativeDecodingDraftTokenCount is 0; re-export the package with --draft-token-count")
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
            throw ModelError.package(path: configPath, reason: "cannot be read as the draft's configuration (\(WeightsContainer.describe(error))); re-export the package")
        }
        guard config.baseModelSignature == signature else {
            throw ModelError.package(path: configPath, reason: "the draft is for base model \(config.baseModelSignature) but the package's adapter for \(signature); re-export the package")
        }
        let (header, tensors) = try WeightsContainer.readStored(path: weightsPath)
        guard header.content == .draft, header.config == config.config, header.baseSignature == signature else {
            throw ModelError.package(path: weightsPath, reason: "does not hold the draft described by \(URL(fileURLWithPath: configPath).lastPathComponent) (content, config or base signature differ); re-export the package")
        }
        do {
            try TensorTable.check(tensors.map { ($0.key, $0.value.shape) }, config: config.config, path: weightsPath)
        } catch {
            throw ModelError.package(path: weightsPath, reason: "the draft's tensors do not match its configuration: \(error.localizedDescription)")
        }
        if let ids = config.vocabulary {
            guard !ids.isEmpty, zip(ids, ids.dropFirst()).allSatisfy({ $0 < $1 }), ids.first! >= 0, ids.last! < config.config.vocabSize else {
                throw ModelError.package(path: configPath, reason: "'vocabulary' is not a sorted list of token ids below \(config.config.vocabSize); re-export the package")
            }
        }
        // matrices stay fp16 in the mapped file; norms and biases are read as float32
        return PackagedDraft(config: config, weights: tensors.mapValues { t in
            guard t.shape.count == 2 else {
                return .vector([Float](unsafeUninitializedCapacity: t.shape[0]) { b, n in
                    t.dequantizeRows(0..<1, into: b.baseAddress!)
                    n = t.shape[0]
                })
            }
            return .matrix(FrozenMatrix(stored: t))
        })
    }

    // MARK: use

    /// Whether this package was made for `base` (`BaseModel.recognizes` its base signature).
    public func isCompatible(with base: BaseModel) -> Bool { base.recognizes(baseSignature) }

    /// Throws naming both signatures unless the package was made for `base`.
    public func requireCompatible(with base: BaseModel) throws {
        guard isCompatible(with: base) else {
            throw ModelError.incompatible(path: path, reason: "was made for base model \(baseSignature), but the loaded base model \(base.path) is \(base.signature); load the base model it was made for, or re-export the adapter from a checkpoint trained on this base")
        }
    }

    /// The package's adapter.
    public var adapter: Adapter {
        let ordered = TensorTable.loraTensors(config: baseConfig, lora: lora).map { ($0.name, adapterTensors[$0.name]!) }
        return Adapter(source: path, lora: lora, baseConfig: baseConfig, baseSignature: baseSignature, tensors: ordered)
    }

    /// The packaged draft (nil without one), refused unless the package was made for `base`.
    public func draftWeights(base: BaseModel) throws -> DraftWeights? {
        guard let draft else { return nil }
        try requireCompatible(with: base)
        guard draft.config.config.vocabSize == base.config.vocabSize else {
            throw ModelError.package(path: path, reason: "its draft scores \(draft.config.config.vocabSize) tokens but the base model \(base.config.vocabSize)")
        }
        return DraftWeights(weights: try draft.baseWeights(), layers: draft.config.draftLayers,
                            vocabulary: draft.config.vocabulary, teacherAdapterSignature: draft.config.teacherAdapterSignature)
    }
}
