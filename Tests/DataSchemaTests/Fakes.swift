// Test doubles for ModelAssets' protocols: a byte-level tokenizer (one id per UTF-8 byte, the
// ChatML specials as single ids) and a ChatML-like template, so that every token maps back to
// known text. Not a model of BPE merges; the real tokenizer has its own tests.
import DataSchema
import Foundation
import ModelAssets

struct ByteTokenizer: TextTokenizer {
    static let specials = ["<|im_start|>": 256, "<|im_end|>": 257]
    var vocabularySize: Int { 258 }

    func encode(_ text: String) -> [Int] {
        var ids: [Int] = []
        var rest = Substring(text)
        outer: while !rest.isEmpty {
            for (special, id) in ByteTokenizer.specials where rest.hasPrefix(special) {
                ids.append(id)
                rest = rest.dropFirst(special.count)
                continue outer
            }
            let c = rest.first!
            ids += String(c).utf8.map { Int($0) }
            rest = rest.dropFirst()
        }
        return ids
    }

    func decode(_ ids: [Int]) -> String {
        var bytes: [UInt8] = []
        var out = ""
        for id in ids {
            if id < 256 {
                bytes.append(UInt8(id))
            } else {
                out += String(decoding: bytes, as: UTF8.self)
                bytes = []
                out += ByteTokenizer.specials.first { $0.value == id }!.key
            }
        }
        return out + String(decoding: bytes, as: UTF8.self)
    }
}

struct FakeChatML: ChatTemplating {
    func render(_ messages: [ChatMessage], addGenerationPrompt: Bool) -> [TemplateSegment] {
        var out: [TemplateSegment] = []
        for m in messages {
            let target = m.role == .assistant
            out.append(TemplateSegment(text: "<|im_start|>\(m.role.rawValue)\n", isTarget: false))
            out.append(TemplateSegment(text: m.content, isTarget: target))
            out.append(TemplateSegment(text: "<|im_end|>", isTarget: target))
            out.append(TemplateSegment(text: "\n", isTarget: false))
        }
        if addGenerationPrompt { out.append(TemplateSegment(text: "<|im_start|>assistant\n", isTarget: false)) }
        return out
    }
}

enum TestData {
    static func read(_ text: String, file: String = "train.jsonl", mode: DataMode = .train, skipInvalid: Bool = true,
                     transforms: [any DataTransform] = []) throws -> DataSet {
        try DataReader.read(bytes: Array(text.utf8), file: file,
                            options: ReadOptions(mode: mode, skipInvalid: skipInvalid, transforms: transforms))
    }

    static func issues(_ text: String, mode: DataMode = .train) throws -> [String] {
        try read(text, mode: mode).issues.map(\.description)
    }

    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("dataschema-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    static let weatherTools = #"{"role":"system","content":"You help with weather.","tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","arguments":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}}}]}"#
}
