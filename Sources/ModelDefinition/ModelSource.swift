// One entry point for every tool that takes an adapter: a checkpoint (adapter-*.safetensors), an
// .fmadapter package or a PEFT folder, put on the loaded base after the compatibility check (both
// signatures named on a mismatch); a package's draft comes along. The executors build from this.
import Foundation
import ModelAssets

/// A base model with an optional adapter, and the draft that came with it (packages only).
public struct LoadedModel {
    public var base: BaseModel
    public var adapter: Adapter?
    /// The packaged draft (wrap it in Inference's DraftEngine for speculative decoding).
    public var draft: DraftWeights?
    /// The package's speculativeDecodingDraftTokenCount (nil without a packaged draft).
    public var draftTokenCount: Int?

    public init(base: BaseModel, adapter: Adapter? = nil, draft: DraftWeights? = nil, draftTokenCount: Int? = nil) {
        self.base = base
        self.adapter = adapter
        self.draft = draft
        self.draftTokenCount = draftTokenCount
    }

    /// Loads the adapter at `path` (any form; nil gives the bare base) onto `base`.
    public static func load(base: BaseModel, adapter path: String?) throws -> LoadedModel {
        guard let path else { return LoadedModel(base: base) }
        if Adapter.form(of: path) == .package {
            let package = try FMAdapterPackage.load(path)
            try package.requireCompatible(with: base)
            let draft = try package.draftWeights(base: base)
            return LoadedModel(base: base, adapter: package.adapter, draft: draft,
                               draftTokenCount: draft == nil ? nil : package.metadata.speculativeDecodingDraftTokenCount)
        }
        let adapter = try Adapter.load(path, base: base)
        try adapter.requireBase(base)
        return LoadedModel(base: base, adapter: adapter)
    }

    /// The adapter's digest, to compare with the one a draft was distilled from.
    public var adapterSignature: String? { adapter?.signature }
}
