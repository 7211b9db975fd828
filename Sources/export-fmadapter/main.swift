// export-fmadapter: package a trained adapter (and its draft) as NAME.fmadapter/, or export it
// as a PEFT folder or a llama.cpp LoRA GGUF; plus `inspect`, `list`, `remove-obsolete` (package
// housekeeping), `fuse` (merge into a standalone model) and `logits` (our logits as JSON, for
// scripts/fixtures/check_peft_export.py). Thin: parse flags, call Export, print.
import ArgumentParser
import CLISupport
import Export
import Foundation
import ModelAssets
import ModelDefinition
import Training

enum ExportFormat: String, ExpressibleByArgument, CaseIterable {
    case fmadapter, peft, gguf
}

extension FusedFormat: ExpressibleByArgument {}

func printErr(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

struct ExportFMAdapter: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export-fmadapter",
        abstract: "Package a trained adapter for deployment, export it to other formats, and manage packages.",
        discussion: """
            Without a subcommand, exports (see 'export-fmadapter export --help'). Package layout: \
            docs/fmadapter-format.md.
            """,
        subcommands: [ExportCommand.self, Inspect.self, List.self, RemoveObsolete.self, FuseCommand.self, Logits.self],
        defaultSubcommand: ExportCommand.self)
}

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write DIR/NAME.fmadapter/ (or, with --format, a PEFT folder DIR/NAME/ or a llama.cpp LoRA DIR/NAME.gguf).",
        discussion: """
            The package holds metadata.json, adapter_weights.bin (fp16, checksummed) and, with \
            --draft-checkpoint, draft_weights.bin and draft_config.json. An older package of the same \
            name is replaced only after the new one is complete.
            """)

    @Option(help: "Adapter name: letters, digits and underscores only (the runtime's rule).")
    var adapterName: String

    @Option(help: "The adapter. For the package (--format fmadapter): an adapter checkpoint (adapter-*.safetensors); for --format peft or gguf, any form: \(AdapterForms.phrase).")
    var checkpoint: String

    @Option(help: "Draft model checkpoint (draft-model-*.safetensors) to package with the adapter.")
    var draftCheckpoint: String?

    @Option(help: "Folder to write into (created if missing).")
    var outputDir: String

    @Option(help: "Package author.")
    var author: String = ""

    @Option(help: "Package description.")
    var description: String = ""

    @Option(help: "Package license.")
    var license: String = ""

    @Option(help: "Tokens the draft proposes per speculative step (written only with a draft).")
    var draftTokenCount: Int = 5

    @Option(help: "A JSON object stored as creatorDefined in metadata.json.")
    var creatorDefined: String?

    @Option(help: "fmadapter (the package), peft (adapter_model.safetensors + adapter_config.json) or gguf (llama.cpp LoRA adapter).")
    var format: ExportFormat = .fmadapter

    @Option(help: "Base model; only needed when the draft checkpoint leaves out weights it shares with the base. When given, the adapter must have been trained on it.")
    var baseModel: String?

    func validate() throws {
        guard AdapterName.isValid(adapterName) else {
            throw ValidationError(ExportError.invalidName(adapterName).errorDescription!)
        }
        guard draftTokenCount >= 1 else { throw ValidationError("--draft-token-count must be at least 1") }
        if draftCheckpoint != nil && format != .fmadapter {
            throw ValidationError("--draft-checkpoint is only packaged with --format fmadapter; PEFT and GGUF adapters carry no draft")
        }
    }

    func run() throws {
        FullCopyReport.install()
        switch format {
        case .fmadapter:
            let creator = try creatorDefined.map { try MetadataValue.parseObject($0, what: "--creator-defined") } ?? [:]
            let adapter = try Checkpoint.load(checkpoint, moments: false)
            let draft = try draftCheckpoint.map { try Checkpoint.load($0, moments: false) }
            let base = try baseModel.map { try BaseModel.load(path: $0, storage: .stored) }
            let options = PackageOptions(name: adapterName, author: author, description: description, license: license,
                                         draftTokenCount: draftTokenCount, creatorDefined: creator)
            let path = try FMAdapterPackage.export(adapter: adapter, draft: draft, base: base, options: options, outputDir: outputDir)
            print(path)
        case .peft:
            // a PEFT folder written elsewhere records no base: its shapes are checked against --base-model
            let base = try baseModel.map { try BaseModel.load(path: $0, storage: .stored) }
            let weights = try Adapter.load(checkpoint, base: base)
            if let base { try weights.requireBase(base) }
            let folder = URL(fileURLWithPath: outputDir).appendingPathComponent(adapterName).path
            try PEFTAdapter.write(weights, to: folder, baseModelName: baseModel)
            print(folder)
        case .gguf:
            let base = try baseModel.map { try BaseModel.load(path: $0, storage: .stored) }
            let weights = try Adapter.load(checkpoint, base: base)
            if let base { try weights.requireBase(base) }
            try FileManager.default.createDirectory(atPath: outputDir, withIntermediateDirectories: true)
            let path = URL(fileURLWithPath: outputDir).appendingPathComponent(adapterName + ".gguf").path
            try GGUFLoRAAdapter.write(weights, to: path)
            print(path)
        }
    }
}

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a package and print its metadata; with a base model, whether it is compatible (exit status 1 if not).")

    @Argument(help: "The .fmadapter package folder.")
    var package: String

    @Option(name: [.customLong("base-model"), .customLong("model")], help: "Base model (.gguf or Hugging Face folder) to check compatibility with.")
    var baseModel: String?

    func run() throws {
        let p = try FMAdapterPackage.load(package)
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try enc.encode(p.metadata), as: UTF8.self))
        print("adapter: rank \(p.lora.rank), alpha \(p.lora.alpha), targets \(p.lora.targets.map(\.rawValue).joined(separator: ",")), \(p.adapterTensors.count) tensors, base \(p.baseConfig.architecture.rawValue) with \(p.baseConfig.numLayers) layers")
        if let d = p.draft {
            print("draft: \(d.config.config.numLayers) layers, hidden \(d.config.config.hiddenSize), \(d.parameterCount) parameters" + (d.config.draftLayers.map { ", from base layers \($0)" } ?? ""))
        } else {
            print("draft: none")
        }
        print("checksums: ok")
        if let baseModel {
            let base = try BaseModel.load(path: baseModel, storage: .stored)
            if p.isCompatible(with: base) {
                print("compatible with \(base.path): yes (signature \(base.signature))")
            } else {
                print("compatible with \(base.path): no (package made for \(p.baseSignature), this base is \(base.signature))")
                throw ExitCode(1)
            }
        }
    }
}

/// A base model signature, given directly or computed from a base model.
struct SignatureOptions: ParsableArguments {
    @Option(name: [.customLong("base-model"), .customLong("model")], help: "Base model (.gguf or Hugging Face folder); default: the fetched SmolLM2 or $ADAPTER_BASE_MODEL.")
    var baseModel: String?

    @Option(help: "Base model signature (hex) instead of loading a base model: packages recording exactly this signature match (a loaded base also matches the ones it signed in the older v1 encoding).")
    var signature: String?

    /// Which recorded base signatures count as this base's.
    func resolve() throws -> (String) -> Bool {
        if let signature {
            let s = signature.lowercased()
            return { $0 == s }
        }
        let base = try BaseModel.load(path: try BaseModel.resolvePath(baseModel), storage: .stored)
        return base.recognizes
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the identifiers of the packages in a folder that are compatible with the base model.")

    @Argument(help: "Folder holding .fmadapter packages.")
    var folder: String

    @OptionGroup var base: SignatureOptions

    @Flag(help: "List every package with its status instead of the compatible identifiers only.")
    var all = false

    func run() throws {
        let recognizes = try base.resolve()
        for e in try PackageCatalog.scan(folder) {
            if let m = e.metadata {
                let ok = e.isCompatible(recognizedBy: recognizes)
                if all { print("\(ok ? "compatible  " : "incompatible") \(m.adapterIdentifier)  \(e.path)") }
                else if ok { print(m.adapterIdentifier) }
            } else {
                printErr("unreadable: \(e.problem ?? e.path)")
            }
        }
    }
}

struct RemoveObsolete: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove-obsolete",
        abstract: "Delete the packages in a folder that were made for another base model (unreadable ones are left alone).")

    @Argument(help: "Folder holding .fmadapter packages.")
    var folder: String

    @OptionGroup var base: SignatureOptions

    @Flag(help: "Only print what would be removed.")
    var dryRun = false

    func run() throws {
        let recognizes = try base.resolve()
        if dryRun {
            for e in try PackageCatalog.scan(folder) where e.metadata != nil && !e.isCompatible(recognizedBy: recognizes) {
                print("would remove \(e.path)")
            }
            return
        }
        let removed = try PackageCatalog.removeObsoleteAdapters(in: folder, recognizedBy: recognizes)
        for p in removed { print("removed \(p)") }
        printErr("\(removed.count) obsolete package(s) removed")
    }
}

struct FuseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fuse",
        abstract: "Merge an adapter into the base weights and write a standalone model that needs no adapter.")

    @OptionGroup var model: BaseModelOptions

    @Option(help: "The adapter to merge: \(AdapterForms.phrase).")
    var checkpoint: String

    @Option(help: "Output: a .gguf file for gguf-f32/gguf-f16, a folder for safetensors.")
    var output: String

    @Option(help: "gguf-f32, gguf-f16 or safetensors (a Hugging Face folder with config.json and tokenizer files).")
    var format: FusedFormat = .ggufF32

    func run() throws {
        let loaded = try model.load(adapter: checkpoint)
        try Fuse.write(base: loaded.base, adapter: loaded.adapter!, format: format, to: output)
        print(output)
    }
}

struct Logits: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the logits of the base model (with an adapter) for a text or ids as JSON, for outside checks.")

    @OptionGroup var model: BaseModelOptions

    @Option(help: "Adapter: \(AdapterForms.phrase) (omit for the bare base).")
    var checkpoint: String?

    @Option(help: "Text to tokenize (no chat template).")
    var text: String?

    @Option(help: "Comma-separated token ids instead of --text.")
    var ids: String?

    @Option(help: "Output JSON file.")
    var output: String

    func validate() throws {
        guard (text == nil) != (ids == nil) else { throw ValidationError("give --text or --ids (one of them)") }
    }

    func run() throws {
        let loaded = try model.load(adapter: checkpoint)
        let base = loaded.base
        let tokens: [Int]
        if let ids {
            tokens = try ids.split(separator: ",").map {
                guard let v = Int($0.trimmingCharacters(in: .whitespaces)), v >= 0, v < base.config.vocabSize else {
                    throw ValidationError("--ids: '\($0)' is not a token id below \(base.config.vocabSize)")
                }
                return v
            }
        } else {
            tokens = base.tokenizer.encode(text!)
        }
        guard !tokens.isEmpty else { throw ValidationError("no tokens to run") }
        let logits = LogitsDump.logits(loaded, ids: tokens)
        try AtomicFile.write(LogitsDump.json(ids: tokens, logits: logits, vocabSize: base.config.vocabSize, source: checkpoint ?? base.path), to: output)
        printErr("wrote logits for \(tokens.count) tokens to \(output)")
    }
}

ExportFMAdapter.main()
