// A GGUF file's tokenizer: `tokenizer.ggml.*` and `tokenizer.chat_template` read into
// TokenizerData, with every key checked (types, counts, ids in range). Byte-level BPE ("gpt2") and
// SentencePiece BPE ("llama": tokens, scores, token types) are accepted; other kinds are refused by
// name. Keys follow llama.cpp's LLM_KV table (gguf-py constants).
import Foundation

extension TokenizerData {
    /// `tokenizer.ggml.*` and `tokenizer.chat_template` as `TokenizerData`.
    /// `tokenizer.ggml.model` "gpt2" (or absent) is byte-level BPE, "llama" SentencePiece BPE; any
    /// other kind (WordPiece "bert", Unigram "t5", RWKV ...) is refused, since it would otherwise be
    /// tokenized wrongly without any error.
    public init(gguf file: GGUFFile) throws {
        var model = "gpt2"
        if file.metadata["tokenizer.ggml.model"] != nil {
            model = try file.string("tokenizer.ggml.model")
            guard model == "gpt2" || model == "llama" else {
                throw ModelAssetsError.invalidConfig(
                    path: file.path, field: "tokenizer.ggml.model",
                    reason: "tokenizer '\(model)' is not supported; supported: 'gpt2' (byte-level BPE: SmolLM, Llama 3, Qwen2 ...) and 'llama' (SentencePiece BPE: Llama 2, Gemma, Phi-3 ...)")
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
        self.model = model
        self.unknownTokenId = try optionalID("tokenizer.ggml.unknown_token_id")
        func optionalBool(_ key: String) throws -> Bool? {
            guard let v = file.metadata[key] else { return nil }
            guard let b = v.boolValue else {
                throw ModelAssetsError.malformed(path: file.path, item: "key '\(key)'", reason: "expected a boolean")
            }
            return b
        }
        addBOS = try optionalBool("tokenizer.ggml.add_bos_token")
        addEOS = try optionalBool("tokenizer.ggml.add_eos_token")
        addSpacePrefix = try optionalBool("tokenizer.ggml.add_space_prefix")
        if model == "llama" {
            guard let v = file.metadata["tokenizer.ggml.scores"] else {
                throw ModelAssetsError.missingKey(path: file.path, key: "tokenizer.ggml.scores")
            }
            let floats = (v.arrayValue ?? []).compactMap { $0.doubleValue.map(Float.init) }
            guard floats.count == tokens.count, v.arrayValue?.count == tokens.count else {
                throw ModelAssetsError.malformed(
                    path: file.path, item: "key 'tokenizer.ggml.scores'", reason: "expected \(tokens.count) float scores, one per token")
            }
            scores = floats
            guard types != nil else {
                throw ModelAssetsError.missingKey(path: file.path, key: "tokenizer.ggml.token_type")
            }
        }
    }
}
