// The models a server offers: the base, and every adapter in an adapters folder (checkpoints
// `*.safetensors`, `.fmadapter` packages, PEFT folders), each by its name without extension.
// The folder is scanned again when a request needs it (at most once per `rescanInterval`), so
// adapters added, replaced or removed are seen without a restart; an entry is loaded again only
// when its size or modification time changed. An adapter that cannot be used on the loaded base
// (another base's signature, a draft checkpoint, a damaged file) is listed as refused with the
// loader's reason, never served. Requests in flight keep the adapter they started with.
import Foundation
import Inference
import ModelAssets
import ModelDefinition

public final class AdapterCatalog: @unchecked Sendable {
    /// A servable model: the base (no adapter) or an adapter over it.
    public struct Model: Sendable {
        public let id: String
        /// The adapter's file or folder (nil for the base).
        public let path: String?
        /// Seconds since 1970 when the file was last written (OpenAI's `created`).
        public let created: Int
        public let adapter: RowAdapter?
        /// Speculative decoding's draft for this model's replies, and γ (nil: none).
        public let draft: (drafter: Drafter, tokens: Int)?
    }

    /// An adapter in the folder that cannot be served, and why.
    public struct Refusal: Error, Sendable, Equatable {
        public let id: String
        public let path: String
        public let reason: String
    }

    public let base: BaseModel
    public let baseID: String
    public let folder: String?
    public let rescanInterval: Double
    private let baseCreated: Int
    private let adapterPrecision: InferenceModel.WeightPrecision
    /// Which drafts replies get: `auto` a package's own, `ngram` prompt lookup for every model, `none`.
    private let drafts: DraftSelection
    private let baseDraft: (drafter: Drafter, tokens: Int)?
    private let lock = NSLock()
    private var lastScan = -Double.infinity
    /// By path: what was found there last, with the fingerprint it was loaded at.
    private var entries: [String: (fingerprint: String, result: Result<Model, Refusal>)] = [:]

    /// `baseID` names the base in requests; `folder` (optional) holds the adapters, whose factors
    /// are kept at `adapterPrecision` (`RowAdapter.precision`).
    /// `drafts`: `auto` serves a package's replies with its own draft, `ngram` every model's with
    /// prompt lookup, `none` without (a checkpoint given in it is not used: each adapter has its own).
    public init(base: BaseModel, baseID: String, folder: String?, rescanInterval: Double = 1,
                adapterPrecision: InferenceModel.WeightPrecision = .float32,
                drafts: DraftSelection = DraftSelection()) throws(ServerError) {
        self.base = base
        self.adapterPrecision = adapterPrecision
        var drafts = drafts
        drafts.checkpoint = nil
        if drafts.kind == .model { drafts.kind = .auto }  // a package's own where it has one
        self.drafts = drafts
        baseDraft = drafts.kind == .ngram ? (.ngram(drafts.ngram), drafts.tokens ?? DraftSelection.defaultTokens) : nil
        self.baseID = baseID
        self.folder = folder
        self.rescanInterval = rescanInterval
        let attributes = try? FileManager.default.attributesOfItem(atPath: base.path)
        baseCreated = Int((attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)
        if let folder {
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDir), isDir.boolValue else {
                throw .invalidRequest("the adapters folder \(folder) does not exist or is not a folder; create it or pass another --adapters")
            }
        }
        scanIfDue(force: true)
    }

    /// Every servable model (the base first, then adapters by id) and every refused adapter.
    public func listing() -> (models: [Model], refused: [Refusal]) {
        lock.withLock {
            scanIfDue(force: false)
            var models = [Model(id: baseID, path: nil, created: baseCreated, adapter: nil, draft: baseDraft)]
            var refused: [Refusal] = []
            for (_, e) in entries {
                switch e.result {
                case .success(let m): models.append(m)
                case .failure(let r): refused.append(r)
                }
            }
            return (Array(models[..<1]) + models.dropFirst().sorted { $0.id < $1.id }, refused.sorted { $0.id < $1.id })
        }
    }

    /// The model `id` names: the base, or an adapter of the folder (scanned again if due).
    public func model(_ id: String) throws(ServerError) -> Model {
        let (models, refused) = listing()
        if let m = models.first(where: { $0.id == id }) { return m }
        if let r = refused.first(where: { $0.id == id }) { throw .refusedModel(id, reason: r.reason) }
        throw .unknownModel(id, known: models.map(\.id))
    }

    // MARK: scanning

    /// The id an adapter at `name` (a folder entry) is served under: its name without extension.
    static func id(of name: String) -> String {
        for ext in [".safetensors", ".fmadapter"] where name.hasSuffix(ext) && name.count > ext.count {
            return String(name.dropLast(ext.count))
        }
        return name
    }

    /// Size and modification times of a file, or of a folder's direct contents.
    static func fingerprint(_ path: String) -> String? {
        let fm = FileManager.default
        guard let a = try? fm.attributesOfItem(atPath: path) else { return nil }
        func stamp(_ a: [FileAttributeKey: Any]) -> String {
            "\((a[.size] as? NSNumber)?.intValue ?? 0)@\((a[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)"
        }
        guard a[.type] as? FileAttributeType == .typeDirectory else { return stamp(a) }
        let children = ((try? fm.contentsOfDirectory(atPath: path)) ?? []).sorted()
        return stamp(a) + children.map { c in "|" + c + ":" + ((try? fm.attributesOfItem(atPath: path + "/" + c)).map(stamp) ?? "?") }.joined()
    }

    /// Whether a folder entry is meant as an adapter (anything else in the folder is ignored).
    static func looksLikeAdapter(_ path: String) -> Bool {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else { return false }
        if !isDir.boolValue { return path.hasSuffix(".safetensors") }
        return PEFTFormat.folder(of: path) != nil || path.hasSuffix(".fmadapter")
            || FileManager.default.fileExists(atPath: path + "/metadata.json")
    }

    /// Called with the lock held.
    private func scanIfDue(force: Bool) {
        guard let folder else { return }
        let now = ProcessInfo.processInfo.systemUptime
        guard force || now - lastScan >= rescanInterval else { return }
        lastScan = now
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        var seen: [String: (fingerprint: String, result: Result<Model, Refusal>)] = [:]
        var ids: Set<String> = [baseID]
        for name in names {
            let path = folder + "/" + name
            guard Self.looksLikeAdapter(path), let print = Self.fingerprint(path) else { continue }
            let id = Self.id(of: name)
            if let old = entries[path], old.fingerprint == print {
                seen[path] = old
            } else {
                seen[path] = (print, load(path: path, id: id))
            }
            if ids.contains(id), case .success = seen[path]!.result {
                seen[path] = (print, .failure(Refusal(id: id, path: path, reason: "another model is served under the name '\(id)'; rename \(name)")))
            }
            ids.insert(id)
        }
        entries = seen
    }

    private func load(path: String, id: String) -> Result<Model, Refusal> {
        do {
            let loaded = try LoadedModel.load(base: base, adapter: path)
            guard let adapter = loaded.adapter else {
                return .failure(Refusal(id: id, path: path, reason: "\(path) holds no adapter"))
            }
            let attributes = try? FileManager.default.attributesOfItem(atPath: path)
            let created = Int((attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)
            let draft = try drafts.resolve(loaded)
            return .success(Model(id: id, path: path, created: created, adapter: RowAdapter(adapter, config: base.config, precision: adapterPrecision),
                                  draft: draft.map { ($0.drafter, $0.tokens) }))
        } catch {
            return .failure(Refusal(id: id, path: path, reason: error.localizedDescription))
        }
    }
}
