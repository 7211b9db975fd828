// `adapter-data tokenize`: text (or a file, or JSONL conversations rendered through the chat
// template with --chat) to token ids as JSON, with the loss mask for conversations.
import ArgumentParser
import CLISupport
import DataSchema
import Foundation
import ModelAssets

struct TokenizeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenize",
        abstract: "Print the token ids of a text, a file, or (with --chat) each conversation of a JSONL file.")

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions

    @Option(help: "The text to tokenize.")
    var text: String?

    @Argument(help: "A file to tokenize (plain text, or JSONL with --chat).")
    var file: String?

    @Flag(help: "Treat FILE as JSONL conversations: render each through the chat template and print ids, target mask and pieces.")
    var chat = false

    @Flag(help: "Also print each token's text.")
    var pieces = false

    func validate() throws {
        if (text == nil) == (file == nil) { throw ValidationError("give either --text TEXT or a FILE") }
        if chat && file == nil { throw ValidationError("--chat needs a JSONL FILE") }
    }

    func run() throws {
        let (_, tokenizer, template) = try model.loadTokenizer()
        func emit(_ object: [String: Any]) throws {
            let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        }
        func pieceList(_ ids: [Int]) -> [String] { ids.map { tokenizer.decode([$0]) } }
        if chat, let file {
            let data = try DataReader.read(path: file, options: ReadOptions(mode: .train, skipInvalid: true))
            let format = try ChatFormat(base: try chatTemplate.source(model: template), tokenizer: tokenizer)
            ChatTemplateOptions.announce(format, data: [file])
            let encoder = TrainingEncoder(tokenizer: tokenizer, renderer: format, maxSequenceLength: Int.max / 2)
            for issue in data.issues { FileHandle.standardError.write(Data("skipped \(issue)\n".utf8)) }
            for sample in data.samples {
                // A template that rewrites earlier turns gives one sequence per assistant turn.
                for e in try encoder.encodeAll(sample.messages) {
                    var o: [String: Any] = ["line": sample.line, "ids": e.tokens, "target": e.isTarget.map { $0 ? 1 : 0 }]
                    if pieces { o["pieces"] = pieceList(e.tokens) }
                    try emit(o)
                }
            }
            return
        }
        let content: String
        if let text { content = text } else {
            do { content = try String(contentsOfFile: file!, encoding: .utf8) } catch {
                throw ValidationError("\(file!): cannot read as UTF-8 text: \(error.localizedDescription)")
            }
        }
        let ids = tokenizer.encode(content)
        var o: [String: Any] = ["ids": ids, "count": ids.count]
        if pieces { o["pieces"] = pieceList(ids) }
        let lost = tokenizer.unencodableScalars(in: content)
        if !lost.isEmpty {
            FileHandle.standardError.write(Data("note: \(lost.count) character(s) have no token in this vocabulary and are dropped (as the reference tokenizer does): \(lost.prefix(5).map { String(format: "U+%04X", $0.value) })\n".utf8))
        }
        try emit(o)
    }
}
