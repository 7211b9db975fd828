// The tokenizer and chat template of a base model without loading its weights (GGUF metadata
// only, or the folder's tokenizer.json), for tools that only count or show tokens.
import Foundation
import ModelAssets
import ModelDefinition
import Training

extension BaseModelOptions {
    public func loadTokenizer() throws -> (path: String, tokenizer: BPETokenizer, template: ChatTemplateSource) {
        let path = try BaseModel.resolvePath(baseModel)
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw ModelAssetsError.io(path: path, reason: "no such file or folder")
        }
        let tokenizer: BPETokenizer
        if isDir.boolValue {
            let json = URL(fileURLWithPath: path).appendingPathComponent("tokenizer.json")
            tokenizer = try BPETokenizer.load(tokenizerJSON: json)
        } else {
            tokenizer = try BPETokenizer(data: try TokenizerData(gguf: try GGUFFile(path: path)))
        }
        return (path, tokenizer, .model(tokenizer))
    }
}
