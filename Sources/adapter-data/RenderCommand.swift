// `adapter-data render FILE.jsonl`: each record's text as the chat template renders it (the
// model's own, or --chat-template's), so a user sees exactly what a model will see; with
// --pieces, its tokens and which the loss trains. Records may end in any turn. With --json, one
// JSON object per record ({"text": ...} or {"error": ...}); exit status 1 when any record raised
// or was invalid. The rendering is DataSchema's ChatFormat; this only parses, calls it and prints.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import Jinja
import ModelAssets
import ModelDefinition

struct RenderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render",
        abstract: "Print each record's text as the chat template renders it (what the model will see).",
        discussion: """
            The template is the base model's own (--base-model, or the fetched default), or --chat-template FILE. \
            Without a base model the special tokens are only what --bos-token and --eos-token give. Records may end \
            in any turn; plain {"text": ...} records print as they are.
            """)

    @Argument(help: "The JSONL file, one record per line (Schema.md).")
    var file: String

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions

    @Option(help: "The bos_token the template sees (instead of the tokenizer's).")
    var bosToken: String?

    @Option(help: "The eos_token the template sees (instead of the tokenizer's).")
    var eosToken: String?

    @Option(help: ArgumentHelp("The date strftime_now sees, YYYY-MM-DD (default: today).", valueName: "date"))
    var date: String?

    @Flag(help: "End each rendering with the generation prompt (the assistant header), as for generation.")
    var addGenerationPrompt = false

    @Flag(help: "One JSON object per record: {\"line\", \"text\"} or {\"line\", \"error\"}.")
    var json = false

    @Flag(help: "Also show the tokens and which the loss trains (needs the model's tokenizer).")
    var pieces = false

    func parsedDate() throws -> JinjaDate? {
        guard let date else { return nil }
        let parts = date.split(separator: "-").map { Int($0) }
        guard parts.count == 3, let y = parts[0], let m = parts[1], let d = parts[2], (1...12).contains(m), (1...31).contains(d) else {
            throw ValidationError("--date must be YYYY-MM-DD, got '\(date)'")
        }
        return JinjaDate(year: y, month: m, day: d)
    }

    func run() throws {
        let jinjaDate = try parsedDate()
        // The tokenizer (and the model's template) when a base model is named or fetched; a
        // --chat-template alone renders without one.
        var tokenizer: BPETokenizer?
        var modelTemplate: ChatTemplateSource?
        if model.baseModel != nil || (chatTemplate.chatTemplate == nil && BaseModel.defaultPath() != nil) || pieces {
            let loaded = try model.loadTokenizer()
            tokenizer = loaded.tokenizer
            modelTemplate = loaded.template
        }
        guard let base = modelTemplate ?? (chatTemplate.chatTemplate == nil ? nil : ChatTemplateSource(body: .builtIn(ChatTemplate(kind: .chatml)), origin: "")) else {
            throw ValidationError("no chat template: give --base-model PATH (its own template) or --chat-template FILE")
        }
        var specials = tokenizer?.namedSpecialTokens ?? []
        for (name, value) in [("bos_token", bosToken), ("eos_token", eosToken)] {
            guard let value else { continue }
            specials.removeAll { $0.name == name }
            specials.append((name, value))
        }
        let format = try ChatFormat(source: try chatTemplate.source(model: base), specialTokens: specials, date: jinjaDate)
        if !json { ChatTemplateOptions.announce(format, data: [file]) }
        let encoder = tokenizer.map { TrainingEncoder(tokenizer: $0, renderer: format, maxSequenceLength: Int.max / 2) }

        let data = try DataReader.read(path: file, options: ReadOptions(mode: .any, skipInvalid: true))
        var outputs: [(line: Int, object: [String: Any], text: String?, error: String?)] = []
        // One object per input line: a line's issues (there may be several) joined.
        var issuesByLine: [Int: [String]] = [:]
        for issue in data.issues { issuesByLine[issue.line, default: []].append(issue.message) }
        for (line, messages) in issuesByLine {
            let message = messages.joined(separator: "; ")
            outputs.append((line, ["line": line, "error": message], nil, message))
        }
        for sample in data.samples {
            do {
                let text = try format.render(sample.messages, addGenerationPrompt: addGenerationPrompt).text
                var object: [String: Any] = ["line": sample.line, "text": text]
                if pieces, let encoder, let tokenizer {
                    let sequences = addGenerationPrompt
                        ? [EncodedSample(tokens: try encoder.encodePrompt(sample.messages), isTarget: [], fullTokenCount: 0)]
                        : try encoder.encodeAll(sample.messages)
                    object["pieces"] = sequences.map { s in
                        s.tokens.enumerated().map { i, id in [id, tokenizer.decode([id]), i < s.isTarget.count && s.isTarget[i] ? 1 : 0] as [Any] }
                    }
                }
                outputs.append((sample.line, object, text, nil))
            } catch {
                let message = error.errorDescription ?? "\(error)"
                outputs.append((sample.line, ["line": sample.line, "error": message], nil, message))
            }
        }
        outputs.sort { $0.line < $1.line }
        var failed = 0
        for o in outputs {
            if o.error != nil { failed += 1 }
            if json {
                let data = try JSONSerialization.data(withJSONObject: o.object, options: [.sortedKeys, .withoutEscapingSlashes])
                print(String(decoding: data, as: UTF8.self))
                continue
            }
            print("### \(file):\(o.line)")
            if let error = o.error {
                print("error: \(error)")
                continue
            }
            print(o.text!)
            if let sequences = o.object["pieces"] as? [[[Any]]] {
                for (k, sequence) in sequences.enumerated() {
                    if sequences.count > 1 { print("--- sequence \(k + 1) of \(sequences.count)") }
                    for piece in sequence {
                        let id = piece[0] as! Int, text = piece[1] as! String, trained = piece[2] as! Int == 1
                        print(String(format: "%8d %@ %@", id, trained ? "*" : " ", PythonTextRepr.quote(text)))
                    }
                }
            }
        }
        if failed > 0 {
            FileHandle.standardError.write(Data("\(failed) of \(outputs.count) records could not be rendered\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// A token's text shown on one line: quoted, with newlines and tabs escaped.
enum PythonTextRepr {
    static func quote(_ s: String) -> String {
        var out = "\""
        for c in s.unicodeScalars {
            switch c {
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default: out.unicodeScalars.append(c)
            }
        }
        return out + "\""
    }
}
