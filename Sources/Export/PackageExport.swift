// Writing an .fmadapter package: NAME.fmadapter/ from an adapter checkpoint (and a draft
// checkpoint), published only once complete. Reading one back is the model definition's
// (FMAdapterPackage.load). Follows Apple's adapter toolkit's export_fmadapter.
import Foundation
import ModelAssets
import ModelDefinition
import Training

/// What the user chooses when exporting.
public struct PackageOptions: Sendable {
    public var name: String
    public var author: String
    public var description: String
    public var license: String
    /// Tokens the draft proposes per step; written only when a draft is packaged (0 otherwise).
    public var draftTokenCount: Int
    public var creatorDefined: [String: MetadataValue]

    public init(name: String, author: String = "", description: String = "", license: String = "",
                draftTokenCount: Int = 5, creatorDefined: [String: MetadataValue] = [:]) {
        self.name = name
        self.author = author
        self.description = description
        self.license = license
        self.draftTokenCount = draftTokenCount
        self.creatorDefined = creatorDefined
    }
}

extension FMAdapterPackage {
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
        var draftFiles: (config: Data, draft: PackagedDraft, path: String)? = nil
        if let draft {
            let packaged = try draftContents(of: draft, adapter: adapter, base: base)
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            draftFiles = (try enc.encode(packaged.config) + Data("\n".utf8), packaged, draft.path)
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
                // streamed: the draft's embedding (the base's, as big) is converted a slice at a time
                let d = draftFiles.draft
                try WeightsContainer.write(to: dir + "/" + draftWeightsFile, content: .draft, baseSignature: sig, config: d.config.config,
                                           lora: nil, tensors: d.weights.keys.sorted(by: TensorTable.order).map { ($0, d.weights[$0]!) },
                                           file: draftFiles.path)
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
        return (lora, try Adapter.fromCheckpoint(ck.file).tensors)
    }

    /// The draft's config and complete weights. Tensors a draft checkpoint leaves out (frozen
    /// ones shared with the base) are taken from `base`, by `draftLayers` for layer tensors.
    static func draftContents(of ck: Checkpoint, adapter: Checkpoint, base: BaseModel?) throws -> PackagedDraft {
        guard ck.header.content == .draft else {
            throw ExportError.incompatible(path: ck.path, reason: "is an adapter checkpoint, not a draft model; pass a draft-model-*.safetensors checkpoint with --draft-checkpoint")
        }
        // Equal signatures, or the two encodings of one base's (a draft signed before v2 beside
        // a newer adapter), which only a loaded base can tell.
        let sameBase = ck.header.baseSignature == adapter.header.baseSignature
            || (base.map { $0.recognizes(ck.header.baseSignature) && $0.recognizes(adapter.header.baseSignature) } ?? false)
        guard sameBase else {
            throw ExportError.incompatible(path: ck.path, reason: "the draft was trained for base model \(ck.header.baseSignature), but the adapter \(adapter.path) for base model \(adapter.header.baseSignature); package a draft distilled for this adapter's base (or pass --base-model when both were trained on it at different toolkit versions)")
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
        let expected = TensorTable.shapes(for: config)
        var tensors: [String: NamedWeight] = [:]
        var vocabulary: [Int]? = nil
        for (name, t) in ck.tensors {
            if name == DraftWeights.vocabularyTensorName {
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
            tensors[name] = t.shape.count == 2 ? .matrix(FrozenMatrix(rows: t.shape[0], columns: t.shape[1], values: t.data)) : .vector(t.data)
        }
        let missing = expected.keys.filter { tensors[$0] == nil }.sorted(by: TensorTable.order)
        if let first = missing.first {
            guard let base else {
                throw ExportError.incompatible(path: ck.path, reason: "the draft checkpoint leaves out \(missing.count) tensors it shares with the base model (first: '\(first)'); pass the base model with --base-model so they can be packaged")
            }
            guard base.recognizes(ck.header.baseSignature) else {
                throw ExportError.incompatible(path: ck.path, reason: "was trained on base model \(ck.header.baseSignature), but --base-model \(base.path) is \(base.signature)")
            }
            let held = Dictionary(uniqueKeysWithValues: base.weights.namedWeights.map { ($0.name, $0.weight) })
            for name in missing {
                let source = try baseName(for: name, layers: ck.header.draftLayers, path: ck.path)
                guard let w = held[source], w.shape == expected[name] else {
                    throw ExportError.incompatible(path: ck.path, reason: "the draft needs '\(name)' from the base model's '\(source)', which the base \(base.path) does not have with shape \(expected[name]!)")
                }
                tensors[name] = w  // as the base holds it: written a slice at a time
            }
        }
        return PackagedDraft(
            config: DraftPackageConfig(baseModelSignature: adapter.header.baseSignature, config: config,
                                       draftLayers: ck.header.draftLayers, teacherAdapterSignature: ck.header.teacherAdapterSignature,
                                       vocabulary: vocabulary),
            weights: tensors)
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
}
