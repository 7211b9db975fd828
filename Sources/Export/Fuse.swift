// `fuse`: merging an adapter into its base (W + scale·B·A per adapted projection, the model
// definition's Adapter.merged) and writing a standalone model that needs no adapter, streamed one
// tensor at a time (a quantized base is never held as float32): GGUF (F32 or F16 matrices,
// tokenizer and chat template carried over) or a Hugging Face folder (config.json,
// model.safetensors, tokenizer.json/tokenizer_config.json). Quantized output is left out.
// GGUF layout follows convert_hf_to_gguf.py through ModelExport; tokenizer.json follows HF tokenizers.
import Autograd
import Foundation
import ModelAssets
import ModelDefinition

public enum FusedFormat: String, CaseIterable, Sendable {
    case ggufF32 = "gguf-f32"
    case ggufF16 = "gguf-f16"
    case safetensors
}

public enum Fuse {
    /// Every base weight under its Hugging Face name, with the adapter merged into the
    /// projections it adapts. Throws unless the adapter was trained on `base`. Holds the whole
    /// model as float32: `write` streams instead.
    public static func mergedTensors(base: BaseModel, adapter: Adapter) throws -> [String: HostTensor] {
        try adapter.requireBase(base)
        return try adapter.merged(into: base.weights).tensorDictionary
    }

    /// Every tensor of the merged model, produced when written: adapted projections merged then
    /// (W + scale·B·A, one at a time), the rest read from the base as it holds them.
    static func mergedSources(base: BaseWeights, adapter: Adapter) -> [(name: String, shape: [Int], source: ModelExport.Source)] {
        var adapted: [String: (layer: Int, target: LoRATarget)] = [:]
        for i in base.layers.indices { for t in adapter.lora.targets { adapted[TensorTable.weight(layer: i, target: t)] = (i, t) } }
        return base.namedWeights.map { name, weight in
            guard let (i, t) = adapted[name], case .matrix(let m) = weight else { return (name, weight.shape, .weight(weight)) }
            return (name, weight.shape, .computed { HostTensor(shape: m.shape, data: adapter.merged(m, layer: i, target: t)) })
        }
    }

    /// Writes the merged model to `path` (a .gguf file, or a folder for `.safetensors`), atomically,
    /// one tensor at a time: memory holds one merged projection or one slice of a base matrix
    /// beside the base as loaded, never a float32 copy of the model.
    public static func write(base: BaseModel, adapter: Adapter, format: FusedFormat, to path: String) throws {
        try adapter.requireBase(base)
        let tensors = mergedSources(base: base.weights, adapter: adapter)
        switch format {
        case .ggufF32, .ggufF16:
            guard let tokenizer = try base.ggufTokenizerData() else {
                throw ExportError.unsupported("\(base.path) is a Hugging Face folder; fusing it into GGUF would need its tokenizer converted, which is not implemented — use --format safetensors, or fuse onto the GGUF base")
            }
            try ModelExport.streamGGUF(config: base.config, tensors: tensors, tokenizer: tokenizer, to: path,
                                       matrixType: format == .ggufF32 ? .f32 : .f16)
        case .safetensors:
            try FolderPublisher.publish(to: path, what: "a Hugging Face model folder",
                                        isReplaceable: { FileManager.default.fileExists(atPath: $0 + "/config.json") }) { dir in
                try ModelExport.streamHuggingFaceFolder(config: base.config, tensors: tensors, to: dir)
                try writeTokenizerFiles(of: base, into: dir)
            }
        }
    }

    /// Copies a Hugging Face base's tokenizer files, or writes them from a GGUF base's metadata.
    static func writeTokenizerFiles(of base: BaseModel, into dir: String) throws {
        switch base.file.tokenizer {
        case .huggingFace(let folder, _):
            for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json", "generation_config.json"] {
                let src = folder + "/" + name
                guard let data = FileManager.default.contents(atPath: src) else { continue }
                try AtomicFile.write(data, to: dir + "/" + name)
            }
        case .gguf:
            let files = try TokenizerFiles.make(from: try base.ggufTokenizerData()!, preTokenizer: base.tokenizer.preTokenizer)
            try AtomicFile.write(files.tokenizerJSON, to: dir + "/tokenizer.json")
            try AtomicFile.write(files.tokenizerConfigJSON, to: dir + "/tokenizer_config.json")
        }
    }
}

/// tokenizer.json and tokenizer_config.json for a BPE tokenizer held as GGUF metadata (byte-level or
/// SentencePiece), in the pipelines BPETokenizer.load(tokenizerJSON:) and Hugging Face tokenizers both read.
enum TokenizerFiles {
    static func make(from t: TokenizerData, preTokenizer: PreTokenizer) throws -> (tokenizerJSON: Data, tokenizerConfigJSON: Data) {
        if t.model == "llama" { return try makeSentencePiece(from: t) }
        var vocab: [String: MetadataValue] = [:]
        for (id, token) in t.tokens.enumerated() where vocab[token] == nil { vocab[token] = .int(id) }
        var specialIds: [Int] = []
        if let types = t.tokenTypes {
            specialIds = types.enumerated().filter { $0.element == 3 || $0.element == 4 }.map(\.offset)
        } else {
            specialIds = Array(Set([t.bosTokenId, t.eosTokenId, t.padTokenId].compactMap { $0 })).sorted()
        }
        let added: [MetadataValue] = specialIds.map { id in
            .object(["id": .int(id), "content": .string(t.tokens[id]), "single_word": .bool(false), "lstrip": .bool(false),
                     "rstrip": .bool(false), "normalized": .bool(false), "special": .bool(true)])
        }
        func byteLevel(_ useRegex: Bool) -> MetadataValue {
            .object(["type": .string("ByteLevel"), "add_prefix_space": .bool(false), "trim_offsets": .bool(true), "use_regex": .bool(useRegex)])
        }
        let pre: MetadataValue
        switch preTokenizer {
        case .gpt2:
            pre = byteLevel(true)
        case .smollm:
            pre = .object(["type": .string("Sequence"), "pretokenizers": .array([
                .object(["type": .string("Digits"), "individual_digits": .bool(true)]), byteLevel(true)])])
        case .llama3, .qwen2, .gpt4o:
            pre = .object(["type": .string("Sequence"), "pretokenizers": .array([
                .object(["type": .string("Split"), "pattern": .object(["Regex": .string(preTokenizer.pattern)]),
                         "behavior": .string("Isolated"), "invert": .bool(false)]), byteLevel(false)])])
        }
        let root: [String: MetadataValue] = [
            "version": .string("1.0"), "truncation": .null, "padding": .null,
            "added_tokens": .array(added),
            "normalizer": preTokenizer == .qwen2 ? .object(["type": .string("NFC")]) : .null,
            "pre_tokenizer": pre,
            "post_processor": postProcessor(t, around: byteLevel(false)),
            "decoder": byteLevel(true),
            "model": .object([
                "type": .string("BPE"), "dropout": .null, "unk_token": .null, "continuing_subword_prefix": .null,
                "end_of_word_suffix": .null, "fuse_unk": .bool(false), "byte_fallback": .bool(false),
                "ignore_merges": .bool(preTokenizer == .llama3),
                "vocab": .object(vocab), "merges": .array(t.merges.map { .string($0) }),
            ]),
        ]
        return try encoded(root, config: tokenizerConfig(t))
    }

    /// A post_processor that has transformers add to text what llama.cpp adds (BOS when
    /// `addsBOSToText`, EOS when add_eos_token): a TemplateProcessing after `inner` (Llama 3's
    /// Sequence[ByteLevel, TemplateProcessing] form), or `inner` alone when nothing is added.
    /// transformers 5 goes by this, not by tokenizer_config.json's add_bos_token.
    static func postProcessor(_ t: TokenizerData, around inner: MetadataValue?) -> MetadataValue {
        var specials: [String: MetadataValue] = [:]
        func piece(_ id: Int, _ typeId: Int) -> MetadataValue {
            let name = t.tokens[id]
            specials[name] = .object(["id": .string(name), "ids": .array([.int(id)]), "tokens": .array([.string(name)])])
            return .object(["SpecialToken": .object(["id": .string(name), "type_id": .int(typeId)])])
        }
        func template(_ sequence: String, _ typeId: Int) -> [MetadataValue] {
            var out: [MetadataValue] = []
            if t.addsBOSToText, let b = t.bosTokenId { out.append(piece(b, typeId)) }
            out.append(.object(["Sequence": .object(["id": .string(sequence), "type_id": .int(typeId)])]))
            if t.addEOS == true, let e = t.eosTokenId { out.append(piece(e, typeId)) }
            return out
        }
        let single = template("A", 0), pair = single + template("B", 1)
        guard !specials.isEmpty else { return inner ?? .null }
        let processing: MetadataValue = .object(["type": .string("TemplateProcessing"), "single": .array(single),
                                                 "pair": .array(pair), "special_tokens": .object(specials)])
        guard let inner else { return processing }
        return .object(["type": .string("Sequence"), "processors": .array([inner, processing])])
    }

    /// tokenizer_config.json's keys every vocabulary writes: the fast tokenizer class, the named
    /// special tokens the vocabulary has, its chat template.
    static func tokenizerConfig(_ t: TokenizerData) -> [String: MetadataValue] {
        var config: [String: MetadataValue] = [
            "tokenizer_class": .string("PreTrainedTokenizerFast"), "clean_up_tokenization_spaces": .bool(false),
            "model_max_length": .int(1_000_000),
        ]
        if let id = t.bosTokenId { config["bos_token"] = .string(t.tokens[id]) }
        if let id = t.eosTokenId { config["eos_token"] = .string(t.tokens[id]) }
        if let id = t.padTokenId { config["pad_token"] = .string(t.tokens[id]) }
        if let template = t.chatTemplate { config["chat_template"] = .string(template) }
        // what llama.cpp adds to text, spelled so transformers adds the same (it rebuilds the
        // post_processor from these two when either is set)
        config["add_bos_token"] = .bool(t.addsBOSToText && t.bosTokenId != nil)
        config["add_eos_token"] = .bool(t.addEOS == true && t.eosTokenId != nil)
        return config
    }

    /// tokenizer.json and tokenizer_config.json as written: sorted keys, slashes unescaped.
    static func encoded(_ root: [String: MetadataValue], config: [String: MetadataValue]) throws -> (tokenizerJSON: Data, tokenizerConfigJSON: Data) {
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try enc.encode(root), try enc.encode(config))
    }

    /// A SentencePiece vocabulary (GGUF "llama") as Llama 2's tokenizer.json spells it: BPE with byte
    /// fallback, merges in score order, the Prepend/Replace "▁" normalizers (Replace alone without
    /// add_space_prefix, as Gemma's), and the Replace/ByteFallback/Fuse/Strip decoder. Control tokens
    /// are special added tokens, user-defined ones plain added tokens.
    static func makeSentencePiece(from t: TokenizerData) throws -> (tokenizerJSON: Data, tokenizerConfigJSON: Data) {
        let types = t.tokenTypes ?? []
        var vocab: [String: MetadataValue] = [:]
        for (id, token) in t.tokens.enumerated() where vocab[token] == nil { vocab[token] = .int(id) }
        let added: [MetadataValue] = types.enumerated().filter { $0.element == 3 || $0.element == 4 }.map { id, type in
            .object(["id": .int(id), "content": .string(t.tokens[id]), "single_word": .bool(false), "lstrip": .bool(false),
                     "rstrip": .bool(false), "normalized": .bool(false), "special": .bool(type == 3)])
        }
        let prefix = t.addSpacePrefix ?? true
        let replace: MetadataValue = .object(["type": .string("Replace"), "pattern": .object(["String": .string(" ")]), "content": .string("▁")])
        let normalizer: MetadataValue = prefix
            ? .object(["type": .string("Sequence"), "normalizers": .array([.object(["type": .string("Prepend"), "prepend": .string("▁")]), replace])])
            : replace
        var decoders: [MetadataValue] = [
            .object(["type": .string("Replace"), "pattern": .object(["String": .string("▁")]), "content": .string(" ")]),
            .object(["type": .string("ByteFallback")]), .object(["type": .string("Fuse")]),
        ]
        if prefix { decoders.append(.object(["type": .string("Strip"), "content": .string(" "), "start": .int(1), "stop": .int(0)])) }
        let unk = t.unknownTokenId ?? types.firstIndex(of: 2)
        let root: [String: MetadataValue] = [
            "version": .string("1.0"), "truncation": .null, "padding": .null,
            "added_tokens": .array(added), "normalizer": normalizer, "pre_tokenizer": .null, "post_processor": postProcessor(t, around: nil),
            "decoder": .object(["type": .string("Sequence"), "decoders": .array(decoders)]),
            "model": .object([
                "type": .string("BPE"), "dropout": .null, "unk_token": unk.map { .string(t.tokens[$0]) } ?? .null,
                "continuing_subword_prefix": .null, "end_of_word_suffix": .null, "fuse_unk": .bool(true),
                "byte_fallback": .bool(true), "ignore_merges": .bool(false), "vocab": .object(vocab),
                "merges": .array(try t.sentencePieceMerges().map { .array([.string($0.left), .string($0.right)]) }),
            ]),
        ]
        var config = tokenizerConfig(t)
        if let id = unk { config["unk_token"] = .string(t.tokens[id]) }
        return try encoded(root, config: config)
    }
}
