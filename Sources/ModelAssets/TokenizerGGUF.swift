// A GGUF file's tokenizer: `tokenizer.ggml.*` and `tokenizer.chat_template` read into
// TokenizerData, with every key checked (types, counts, ids in range). Only byte-level BPE is
// accepted. Keys follow llama.cpp's LLM_KV table (gguf-py constants).
import Foundation

extension TokenizerData {
    /// `tokenizer.ggml.*` and `tokenizer.chat_template` as `TokenizerData`.
    /// Only byte-level BPE (`tokenizer.ggml.model` "gpt2", or absent) is accepted: a SentencePiece
    /// vocabulary would otherwise be tokenized wrongly without any error.
    public init(gguf file: GGUFFile) throws {
        if file.metadata["tokenizer.ggml.model"] != nil {
            let model = try file.string("tokenizer.ggml.model")
            guard model == "gpt2" else {
                throw ModelAssetsError.invalidConfig(
                    path: file.path, field: "tokenizer.ggml.model",
                    reason: "tokenizer '\(model)' is not supported; only byte-level BPE ('gpt2': SmolLM, Llama 3, Qwen2, Mistral Nemo ...) is")
            }
        }
        let tokens = try file.stringArray("tokenizer.ggml.tokens")
        var merges: [String] = []
        if file.metadata["tokenizer.ggml.merges"] != nil { merges = try file.stringArray("tokenizer.ggml.merges") }
        var types: [Int32]?
        if let v = file.metadata["tokenizer.ggml.token_type"] {
            guard let ints = v.intArray, ints.allSatisfy({ Int(Int32.min)...Int(Int32.max) ~= $0 }) else {
                throw ModelAssetsError.malformed(path: file.path, item: "key 'tokenizer.ggml.token_type'", reason: "expected an array of integers")
            }
            guard ints.count == tokens.count else {
                throw ModelAssetsError.malformed(
                    path: file.path, item: "key 'tokenizer.ggml.token_type'", reason: "has \(ints.count) entries for \(tokens.count) tokens")
            }
            types = ints.map { Int32($0) }
        }
        func optionalID(_ key: String) throws -> Int? {
            guard file.metadata[key] != nil else { return nil }
            let id = try file.int(key)
            guard id >= 0, id < tokens.count else {
                throw ModelAssetsError.malformed(path: file.path, item: "key '\(key)'", reason: "token id \(id) is outside the \(tokens.count)-token vocabulary")
            }
            return id
        }
        let pre = file.metadata["tokenizer.ggml.pre"] == nil ? "default" : try file.string("tokenizer.ggml.pre")
        let template = file.metadata["tokenizer.chat_template"] == nil ? nil : try file.string("tokenizer.chat_template")
        self.init(
            tokens: tokens, merges: merges, tokenTypes: types, preTokenizer: pre,
            bosTokenId: try optionalID("tokenizer.ggml.bos_token_id"), eosTokenId: try optionalID("tokenizer.ggml.eos_token_id"),
            padTokenId: try optionalID("tokenizer.ggml.padding_token_id"), chatTemplate: template)
    }
}
