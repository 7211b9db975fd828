// Reads a Hugging Face tokenizer.json (BPE model) into a BPETokenizer, plus bos/eos/pad and the
// chat template from tokenizer_config.json / chat_template.jinja / config.json beside it.
// Accepted pipelines: ByteLevel(use_regex), Sequence[Digits(individual), ByteLevel], and
// Sequence[Split(Llama-3 / Qwen2 / GPT-4o / GPT-2 regex, Isolated), ByteLevel(use_regex: false)]; normalizer
// none or NFC. SentencePiece-style: BPE(byte_fallback) with Metaspace, or with the normalizers
// Replace(" "->"▁") and Prepend("▁") (decoder Replace/ByteFallback/Fuse/Strip). Anything else is
// refused by name. The post_processor (TemplateProcessing, ByteLevel, Roberta/BertProcessing, a
// Sequence of them) gives what `encodeText` adds; transformers 5 drops tokenizer_config.json's
// add_bos_token / add_eos_token when a tokenizer.json is there (tokenization_utils_base.py), so they
// do not change it. Reference: HF tokenizers' serialization format.
import Foundation

extension BPETokenizer {
    /// Loads `tokenizer.json`; a `tokenizer_config.json`, `chat_template.jinja` or `config.json`
    /// in the same folder supplies bos/eos/pad and the chat template when present.
    public static func load(tokenizerJSON url: URL) throws -> BPETokenizer {
        let path = url.path
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw ModelAssetsError.io(path: path, reason: "cannot read tokenizer.json (\(error.localizedDescription))")
        }
        let root: [String: Any]
        do {
            guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw ModelAssetsError.malformed(path: path, item: "top level", reason: "not a JSON object")
            }
            root = object
        } catch let error as ModelAssetsError {
            throw error
        } catch {
            throw ModelAssetsError.malformed(path: path, item: "JSON", reason: "not valid JSON (\(error.localizedDescription))")
        }
        var parts = try parseTokenizerJSON(root, path: path)
        try readSiblingConfig(folder: url.deletingLastPathComponent(), into: &parts)
        return try BPETokenizer(parts: parts)
    }

    static func parseTokenizerJSON(_ root: [String: Any], path: String) throws -> Parts {
        guard let model = root["model"] as? [String: Any] else {
            throw ModelAssetsError.missingKey(path: path, key: "model")
        }
        let type = model["type"] as? String ?? "BPE"
        guard type == "BPE" else {
            throw ModelAssetsError.invalidConfig(path: path, field: "model.type", reason: "'\(type)' is not supported; only BPE tokenizers are (byte-level: GPT-2, SmolLM, Llama-3, Qwen2, GPT-4o/Phi-4-mini; SentencePiece-style with byte fallback: Llama 2, Gemma, Phi-3)")
        }
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if let value = model[key] as? String, !value.isEmpty {
                throw ModelAssetsError.invalidConfig(path: path, field: "model.\(key)", reason: "'\(value)' is not supported; byte-level BPE uses none")
            }
        }
        if let dropout = model["dropout"] as? Double, dropout > 0 {
            throw ModelAssetsError.invalidConfig(path: path, field: "model.dropout", reason: "BPE dropout \(dropout) is not supported; set it to null")
        }
        guard let vocab = model["vocab"] as? [String: Any] else {
            throw ModelAssetsError.missingKey(path: path, key: "model.vocab")
        }

        var added: [(content: String, id: Int)] = []
        var special = Set<Int>()
        if let list = root["added_tokens"] {
            guard let list = list as? [[String: Any]] else {
                throw ModelAssetsError.malformed(path: path, item: "added_tokens", reason: "not a list of objects")
            }
            for (i, entry) in list.enumerated() {
                guard let id = intValue(entry["id"]), id >= 0, let content = entry["content"] as? String, !content.isEmpty else {
                    throw ModelAssetsError.malformed(path: path, item: "added_tokens[\(i)]", reason: "needs a non-negative integer 'id' and a non-empty 'content'")
                }
                added.append((content, id))
                if entry["special"] as? Bool == true { special.insert(id) }
            }
        }

        var maxId = -1
        var pairs: [(String, Int)] = []
        pairs.reserveCapacity(vocab.count)
        for (token, value) in vocab {
            guard let id = intValue(value), id >= 0 else {
                throw ModelAssetsError.malformed(path: path, item: "model.vocab[\"\(token)\"]", reason: "id is not a non-negative integer")
            }
            pairs.append((token, id))
            maxId = max(maxId, id)
        }
        for (_, id) in added { maxId = max(maxId, id) }
        guard maxId < 10_000_000 else {
            throw ModelAssetsError.malformed(path: path, item: "model.vocab", reason: "token id \(maxId) is implausibly large")
        }
        // The id table is sized by the largest id: a few bytes naming id 9,999,999 would cost
        // gigabytes and seconds. Real vocabularies are dense; allow at most as many unused ids as used ones.
        let used = Set(pairs.map(\.1)).union(added.map(\.id)).count
        guard maxId + 1 - used <= max(used, 1024) else {
            throw ModelAssetsError.malformed(path: path, item: "model.vocab", reason: "ids reach \(maxId) but only \(used) are used; a byte-level BPE vocabulary numbers its tokens 0, 1, 2, ... without large gaps")
        }
        var tokens = [String?](repeating: nil, count: maxId + 1)
        for (token, id) in pairs {
            if let existing = tokens[id] {
                throw ModelAssetsError.malformed(path: path, item: "model.vocab", reason: "tokens '\(existing)' and '\(token)' share id \(id)")
            }
            tokens[id] = token
        }
        for (content, id) in added where tokens[id] == nil { tokens[id] = content }

        guard let mergeList = model["merges"] as? [Any] else {
            throw ModelAssetsError.missingKey(path: path, key: "model.merges")
        }
        var merges: [(left: String, right: String)] = []
        merges.reserveCapacity(mergeList.count)
        for (i, m) in mergeList.enumerated() {
            if let line = m as? String {
                let halves = line.split(separator: " ", omittingEmptySubsequences: false)
                guard halves.count == 2, !halves[0].isEmpty, !halves[1].isEmpty else {
                    throw ModelAssetsError.malformed(path: path, item: "model.merges[\(i)]", reason: "'\(line)' is not two tokens separated by one space")
                }
                merges.append((String(halves[0]), String(halves[1])))
            } else if let pair = m as? [Any], pair.count == 2, let l = pair[0] as? String, let r = pair[1] as? String {
                merges.append((l, r))
            } else {
                throw ModelAssetsError.malformed(path: path, item: "model.merges[\(i)]", reason: "expected \"left right\" or [left, right]")
            }
        }

        let (textPrefix, textSuffix) = try parsePostProcessor(root["post_processor"], path: path, vocab: vocab, added: added)

        if var sp = try parseSentencePiece(root, path: path) {
            sp.byteFallback = model["byte_fallback"] as? Bool ?? false
            sp.fusesUnknown = model["fuse_unk"] as? Bool ?? false
            if let unk = model["unk_token"] as? String {
                guard let id = intValue(vocab[unk]) else {
                    throw ModelAssetsError.malformed(path: path, item: "model.unk_token", reason: "'\(unk)' is not in model.vocab")
                }
                sp.unknownTokenId = id
            }
            if model["ignore_merges"] as? Bool == true {
                throw ModelAssetsError.invalidConfig(path: path, field: "model.ignore_merges", reason: "ignore_merges with a SentencePiece-style pipeline is not supported")
            }
            return Parts(
                source: path, tokens: tokens, merges: merges, mergesKey: "model.merges", addedTokens: added, specialIds: special,
                preTokenizer: .gpt2, ignoreMerges: false, nfc: false, bos: nil, eos: nil, pad: nil, chatTemplate: nil,
                sentencePiece: sp, textPrefix: textPrefix, textSuffix: textSuffix)
        }
        if model["byte_fallback"] as? Bool == true {
            throw ModelAssetsError.invalidConfig(
                path: path, field: "model.byte_fallback",
                reason: "byte fallback needs a SentencePiece-style pipeline (a Metaspace pre-tokenizer, or a Replace \" \"->\"▁\" normalizer), but normalizer is \(describe(root["normalizer"] ?? NSNull())) and pre_tokenizer \(describe(root["pre_tokenizer"] ?? NSNull()))")
        }
        let nfc = try parseNormalizer(root["normalizer"], path: path)
        let pre = try parsePreTokenizer(root["pre_tokenizer"], path: path)
        return Parts(
            source: path, tokens: tokens, merges: merges, mergesKey: "model.merges", addedTokens: added, specialIds: special,
            preTokenizer: pre, ignoreMerges: model["ignore_merges"] as? Bool ?? false, nfc: nfc,
            bos: nil, eos: nil, pad: nil, chatTemplate: nil,
            textPrefix: textPrefix, textSuffix: textSuffix)
    }

    /// The special-token ids a post_processor puts before and after a single text: TemplateProcessing's
    /// `single` (its SpecialToken pieces around `$A`, ids from `special_tokens`), RobertaProcessing and
    /// BertProcessing (cls ... sep), ByteLevel (nothing), or a Sequence of these. Others are refused by name.
    static func parsePostProcessor(_ node: Any?, path: String, vocab: [String: Any], added: [(content: String, id: Int)]) throws -> (prefix: [Int], suffix: [Int]) {
        guard let node, !(node is NSNull) else { return ([], []) }
        func refuse(_ why: String) -> ModelAssetsError {
            .invalidConfig(path: path, field: "post_processor", reason: "\(describe(node)) is not supported (\(why)); supported: TemplateProcessing with special tokens around $A, ByteLevel, RobertaProcessing, BertProcessing, or a Sequence of these")
        }
        guard let obj = node as? [String: Any], let type = obj["type"] as? String else { throw refuse("not an object with a type") }
        switch type {
        case "ByteLevel":
            return ([], [])
        case "Sequence":
            var prefix: [Int] = [], suffix: [Int] = []
            for p in obj["processors"] as? [Any] ?? [] {
                let (a, b) = try parsePostProcessor(p, path: path, vocab: vocab, added: added)
                prefix = a + prefix  // a later processor wraps what the earlier ones made
                suffix += b
            }
            return (prefix, suffix)
        case "RobertaProcessing", "BertProcessing":
            func id(_ key: String) throws -> Int {
                guard let pair = obj[key] as? [Any], pair.count == 2, let n = intValue(pair[1]) else { throw refuse("'\(key)' is not [token, id]") }
                return n
            }
            return ([try id("cls")], [try id("sep")])
        case "TemplateProcessing":
            guard let single = obj["single"] as? [[String: Any]] else { throw refuse("'single' is not a list") }
            let specials = obj["special_tokens"] as? [String: Any] ?? [:]
            var prefix: [Int] = [], suffix: [Int] = [], sawText = false
            for piece in single {
                if let seq = piece["Sequence"] as? [String: Any] {
                    guard seq["id"] as? String == "A", !sawText else { throw refuse("'single' holds a sequence other than one $A") }
                    sawText = true
                } else if let sp = piece["SpecialToken"] as? [String: Any], let name = sp["id"] as? String {
                    let ids: [Int]
                    if let entry = specials[name] as? [String: Any], let list = entry["ids"] as? [Any] {
                        ids = list.compactMap { intValue($0) }
                    } else if let n = intValue(vocab[name]) ?? added.first(where: { $0.content == name })?.id {
                        ids = [n]
                    } else {
                        throw refuse("special token '\(name)' has no id in special_tokens or the vocabulary")
                    }
                    if sawText { suffix += ids } else { prefix += ids }
                } else {
                    throw refuse("a 'single' piece is neither a Sequence nor a SpecialToken")
                }
            }
            guard sawText else { throw refuse("'single' has no $A") }
            return (prefix, suffix)
        default:
            throw refuse("unknown type '\(type)'")
        }
    }

    static let supportedSentencePiece = """
        normalizer null with pre_tokenizer Metaspace(replacement "▁", prepend_scheme always/first/never, split), \
        or normalizer Replace(" " -> "▁") / Sequence[Prepend("▁"), Replace(" " -> "▁")] with pre_tokenizer null or Split(" "); \
        decoder Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", start n, stop 0)?]
        """

    /// The SentencePiece options a tokenizer.json asks for, or nil when its pipeline is not
    /// SentencePiece-style (no Metaspace and no Replace " "->"▁"). Byte fallback, fuse_unk and the
    /// unknown token come from the model and are filled in by the caller.
    static func parseSentencePiece(_ root: [String: Any], path: String) throws -> SentencePieceOptions? {
        func isReplaceSpace(_ o: [String: Any]) -> Bool {
            o["type"] as? String == "Replace" && (o["pattern"] as? [String: Any])?["String"] as? String == " "
                && o["content"] as? String == "▁"
        }
        func isPrepend(_ o: [String: Any]) -> Bool { o["type"] as? String == "Prepend" && o["prepend"] as? String == "▁" }
        // Normalizer: what it does to spaces. Another normalizer alone (NFC ...) is the byte-level path's.
        var replaces = false, prepends = false
        let normalizer = root["normalizer"]
        if let n = normalizer as? [String: Any] {
            var list = [n]
            if n["type"] as? String == "Sequence" { list = n["normalizers"] as? [[String: Any]] ?? [] }
            let known = list.filter { isReplaceSpace($0) || isPrepend($0) }
            if known.isEmpty { return nil }
            guard known.count == list.count, list.contains(where: isReplaceSpace) else {
                throw ModelAssetsError.invalidConfig(path: path, field: "normalizer", reason: "\(describe(n)) is not supported (supported: \(supportedSentencePiece))")
            }
            replaces = true
            prepends = list.contains(where: isPrepend)
        } else if normalizer != nil && !(normalizer is NSNull) {
            return nil
        }
        var options = SentencePieceOptions(prefix: prepends ? .everyPiece : .never, byteFallback: false)
        let pre = root["pre_tokenizer"]
        if let p = pre as? [String: Any] {
            let type = p["type"] as? String
            if type == "Metaspace" {
                guard !replaces else {
                    throw ModelAssetsError.invalidConfig(path: path, field: "pre_tokenizer", reason: "Metaspace after a normalizer that already replaced spaces is not supported (supported: \(supportedSentencePiece))")
                }
                guard p["replacement"] as? String ?? "▁" == "▁" else {
                    throw ModelAssetsError.invalidConfig(path: path, field: "pre_tokenizer.replacement", reason: "'\(p["replacement"] ?? "")' is not supported; only \"▁\" is")
                }
                // Older files spell the scheme as add_prefix_space (true: always).
                let scheme = p["prepend_scheme"] as? String ?? ((p["add_prefix_space"] as? Bool ?? true) ? "always" : "never")
                switch scheme {
                case "always": options.prefix = .always
                case "first": options.prefix = .first
                case "never": options.prefix = .never
                default:
                    throw ModelAssetsError.invalidConfig(path: path, field: "pre_tokenizer.prepend_scheme", reason: "'\(scheme)' is not one of always, first, never")
                }
                options.splitsAtSpace = p["split"] as? Bool ?? true
            } else if type == "Split", replaces, (p["pattern"] as? [String: Any])?["String"] as? String == " ", p["invert"] as? Bool != true {
                // Gemma: once every space is "▁", splitting at " " cuts nothing.
            } else if replaces {
                throw ModelAssetsError.invalidConfig(path: path, field: "pre_tokenizer", reason: "\(describe(p)) is not supported with a SentencePiece-style normalizer (supported: \(supportedSentencePiece))")
            } else {
                return nil
            }
        } else if pre != nil && !(pre is NSNull) {
            return nil
        } else if !replaces {
            return nil
        }
        options.stripsLeadingSpaces = try parseSentencePieceDecoder(root["decoder"], path: path)
        return options
    }

    /// Checks the decoder is Replace("▁"->" "), ByteFallback, Fuse and an optional final
    /// Strip(" ", n, 0); returns n.
    static func parseSentencePieceDecoder(_ node: Any?, path: String) throws -> Int {
        func refuse() -> ModelAssetsError {
            .invalidConfig(path: path, field: "decoder", reason: "\(describe(node ?? NSNull())) is not supported (supported: \(supportedSentencePiece))")
        }
        guard let d = node as? [String: Any], d["type"] as? String == "Sequence", let list = d["decoders"] as? [[String: Any]] else { throw refuse() }
        var sawReplace = false, strip = 0
        for (i, o) in list.enumerated() {
            switch o["type"] as? String {
            case "Replace":
                guard (o["pattern"] as? [String: Any])?["String"] as? String == "▁", o["content"] as? String == " " else { throw refuse() }
                sawReplace = true
            case "ByteFallback", "Fuse":
                break
            case "Strip":
                guard i == list.count - 1, o["content"] as? String == " ", intValue(o["stop"]) ?? 0 == 0, let n = intValue(o["start"]), n >= 0 else { throw refuse() }
                strip = n
            default:
                throw refuse()
            }
        }
        guard sawReplace else { throw refuse() }
        return strip
    }

    static let supportedPipelines = """
        ByteLevel(use_regex: true); Sequence[Digits(individual_digits: true), ByteLevel(use_regex: true)]; \
        Sequence[Split(Regex: the Llama-3, Qwen2, GPT-4o (o200k) or GPT-2 pattern, behavior: Isolated), ByteLevel(use_regex: false)]
        """

    /// Returns whether text is NFC-normalized; refuses any other normalizer.
    static func parseNormalizer(_ node: Any?, path: String) throws -> Bool {
        guard let node, !(node is NSNull) else { return false }
        if let obj = node as? [String: Any] {
            if obj["type"] as? String == "NFC" { return true }
            if obj["type"] as? String == "Sequence", let list = obj["normalizers"] as? [Any] {
                if list.isEmpty { return false }
                if list.count == 1 { return try parseNormalizer(list[0], path: path) }
            }
        }
        throw ModelAssetsError.invalidConfig(path: path, field: "normalizer", reason: "\(describe(node)) is not supported (supported: null, NFC)")
    }

    static func parsePreTokenizer(_ node: Any?, path: String) throws -> PreTokenizer {
        func refuse() -> ModelAssetsError {
            .invalidConfig(path: path, field: "pre_tokenizer", reason: "\(describe(node ?? NSNull())) is not supported (supported: \(supportedPipelines))")
        }
        guard let obj = node as? [String: Any], let type = obj["type"] as? String else { throw refuse() }
        func byteLevel(_ o: Any, useRegex: Bool) -> Bool {
            guard let o = o as? [String: Any], o["type"] as? String == "ByteLevel" else { return false }
            // add_prefix_space would prepend a space to every piece; no model here uses it.
            if o["add_prefix_space"] as? Bool == true { return false }
            return (o["use_regex"] as? Bool ?? true) == useRegex
        }
        if type == "ByteLevel" {
            if byteLevel(obj, useRegex: true) { return .gpt2 }
            throw refuse()
        }
        guard type == "Sequence", let list = obj["pretokenizers"] as? [Any], list.count == 2 else { throw refuse() }
        if let digits = list[0] as? [String: Any], digits["type"] as? String == "Digits",
           digits["individual_digits"] as? Bool == true, byteLevel(list[1], useRegex: true) {
            return .smollm
        }
        if let split = list[0] as? [String: Any], split["type"] as? String == "Split",
           (split["behavior"] as? String ?? "Isolated") == "Isolated", split["invert"] as? Bool != true,
           let pattern = (split["pattern"] as? [String: Any])?["Regex"] as? String,
           byteLevel(list[1], useRegex: false) {
            switch pattern {
            case PreTokenizer.llama3Pattern: return .llama3
            case PreTokenizer.qwen2Pattern: return .qwen2
            case PreTokenizer.gpt4oPattern: return .gpt4o
            case PreTokenizer.gpt2Pattern: return .gpt2
            default: break
            }
        }
        throw refuse()
    }

    /// bos/eos/pad (by content) and the chat template from the files transformers writes beside tokenizer.json.
    static func readSiblingConfig(folder: URL, into parts: inout Parts) throws {
        var lookup: [String: Int] = [:]
        for (id, t) in parts.tokens.enumerated() { if let t { lookup[t] = id } }
        for (content, id) in parts.addedTokens { lookup[content] = id }

        let configURL = folder.appendingPathComponent("tokenizer_config.json")
        if FileManager.default.fileExists(atPath: configURL.path) {
            let cfgPath = configURL.path
            guard let data = try? Data(contentsOf: configURL),
                  let cfg = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
                throw ModelAssetsError.malformed(path: cfgPath, item: "JSON", reason: "not a readable JSON object; fix or delete the file")
            }
            func tokenId(_ key: String) throws -> Int? {
                guard let value = cfg[key], !(value is NSNull) else { return nil }
                let content = (value as? String) ?? ((value as? [String: Any])?["content"] as? String)
                guard let content else {
                    throw ModelAssetsError.malformed(path: cfgPath, item: key, reason: "expected a token string or {\"content\": ...}")
                }
                guard let id = lookup[content] else {
                    throw ModelAssetsError.malformed(path: cfgPath, item: key, reason: "'\(content)' is not a token of tokenizer.json")
                }
                return id
            }
            parts.addBOS = cfg["add_bos_token"] as? Bool
            parts.bos = try tokenId("bos_token")
            parts.eos = try tokenId("eos_token")
            parts.pad = try tokenId("pad_token")
            if let template = cfg["chat_template"] as? String {
                parts.chatTemplate = template
            } else if let list = cfg["chat_template"] as? [[String: Any]] {
                parts.chatTemplate = list.first { $0["name"] as? String == "default" }?["template"] as? String
            }
            if parts.chatTemplate != nil { parts.chatTemplateOrigin = cfgPath }
        }
        let jinjaURL = folder.appendingPathComponent("chat_template.jinja")
        if parts.chatTemplate == nil, let text = try? String(contentsOf: jinjaURL, encoding: .utf8) {
            parts.chatTemplate = text
            parts.chatTemplateOrigin = jinjaURL.path
        }
        // config.json's integer ids fill what tokenizer_config.json left open.
        let modelConfigURL = folder.appendingPathComponent("config.json")
        if parts.bos == nil || parts.eos == nil, let data = try? Data(contentsOf: modelConfigURL),
           let cfg = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] {
            if parts.bos == nil, let id = intValue(cfg["bos_token_id"]) { parts.bos = id }
            if parts.eos == nil, let id = intValue(cfg["eos_token_id"]) { parts.eos = id }
        }
    }

    static func intValue(_ value: Any?) -> Int? {
        if let n = value as? Int { return n }
        guard let n = value as? NSNumber else { return nil }
        let d = n.doubleValue
        return d == d.rounded() && abs(d) < 1e15 ? n.intValue : nil
    }

    static func describe(_ node: Any) -> String {
        guard JSONSerialization.isValidJSONObject(node),
              let data = try? JSONSerialization.data(withJSONObject: node, options: [.sortedKeys]),
              let text = String(data: data, encoding: .utf8) else { return String(describing: node) }
        return text.count > 300 ? String(text.prefix(300)) + "..." : text
    }
}
