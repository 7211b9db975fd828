// One entry point for what `generate --checkpoint` accepts: an adapter checkpoint
// (adapter-*.safetensors) or an .fmadapter package, put on the loaded base model after the
// compatibility check (both signatures named on a mismatch); a package's draft comes along.
// Leaves speculative decoding itself to Inference.
import Foundation
import ModelAssets
import Training

/// A base model with an adapter applied, and the draft model that came with it (packages only).
public struct LoadedAdapter {
    public var model: LlamaModel
    /// The packaged draft (wrap it in Inference's DraftEngine for speculative decoding).
    public var draft: DraftModel?
    /// The package's speculativeDecodingDraftTokenCount (nil without a packaged draft).
    public var draftTokenCount: Int?
    /// The package, when the source was one.
    public var package: FMAdapterPackage?
    /// The checkpoint, when the source was one.
    public var checkpoint: Checkpoint?
}

public enum AdapterSource {
    /// Loads `path` (checkpoint file or package folder) onto `base`; nil gives the bare base.
    public static func load(_ path: String?, base: BaseModel) throws -> LoadedAdapter {
        guard let path else {
            return LoadedAdapter(model: try LlamaModel.load(base: base, adapter: nil), draft: nil, draftTokenCount: nil, package: nil, checkpoint: nil)
        }
        if FMAdapterPackage.looksLikePackage(path) {
            let package = try FMAdapterPackage.load(path)
            let draft = try package.makeDraftModel(base: base)
            return LoadedAdapter(model: try package.makeModel(base: base), draft: draft,
                                 draftTokenCount: draft == nil ? nil : package.metadata.speculativeDecodingDraftTokenCount,
                                 package: package, checkpoint: nil)
        }
        let checkpoint = try Checkpoint.load(path)
        return LoadedAdapter(model: try LlamaModel.load(base: base, adapter: checkpoint), draft: nil, draftTokenCount: nil,
                             package: nil, checkpoint: checkpoint)
    }
}
