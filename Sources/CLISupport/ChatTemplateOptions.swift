// The chat-template flags every tool that renders prompts takes (defined once here):
// `--chat-template FILE` replaces the model's own template, `--chat-template-kwargs JSON` passes
// extra template variables. Applying them to a loaded base and printing, once, how prompts will
// be rendered (the template's origin; a built-in fallback; and, only when the data has tools,
// tools written into turns or the model's own call format) is the executables' part; the
// rendering itself is DataSchema's ChatFormat.
import ArgumentParser
import DataSchema
import Foundation
import ModelAssets
import ModelDefinition

public struct ChatTemplateOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Render prompts with this chat template instead of the model's own: a Jinja file, or a tokenizer_config.json holding \"chat_template\". Without it the model's template is used (GGUF tokenizer.chat_template, tokenizer_config.json or chat_template.jinja), or the built-in ChatML/Llama-3 one when the model has none (a note says so).", valueName: "file"))
    public var chatTemplate: String?

    @Option(help: ArgumentHelp("Extra chat-template variables as a JSON object, e.g. '{\"enable_thinking\": false}' (Qwen3).", valueName: "json"))
    public var chatTemplateKwargs: String?

    public init() {}

    /// The template to render with: the file's, or `model`'s (the base's own), with the kwargs.
    public func source(model: ChatTemplateSource) throws -> ChatTemplateSource {
        var source = try chatTemplate.map(ChatTemplateSource.file) ?? model
        source.kwargsJSON = chatTemplateKwargs
        return source
    }

    /// Puts the chosen template on `base` (so every library that renders with `base.template`
    /// uses it), checks it loads, and prints once how prompts are rendered; the notes about
    /// tools only when a conversation in `data` (JSONL files) has tools or tool calls.
    @discardableResult
    public func apply(to base: inout BaseModel, quiet: Bool = false, data: [String] = []) throws -> ChatFormat {
        base.template = try source(model: base.template)
        let format = try ChatFormat(base: base.template, tokenizer: base.tokenizer)
        if !quiet { Self.announce(format, data: data) }
        return format
    }

    /// Prints the format's notes on stderr, one "note:" line each, and its notes about tools
    /// when `toolsPresent`.
    public static func announce(_ format: ChatFormat, toolsPresent: Bool) {
        for note in format.notes + (toolsPresent ? format.toolNotes : []) {
            FileHandle.standardError.write(Data("note: \(note)\n".utf8))
        }
    }

    /// As above, the tool notes when a conversation of the JSONL files `data` has tools or calls.
    public static func announce(_ format: ChatFormat, data: [String]) {
        announce(format, toolsPresent: !format.toolNotes.isEmpty && data.contains(where: holdsTools))
    }

    /// Whether a conversation in the JSONL file at `path` offers tools or calls one (samples that
    /// do not read are left to the tool's own reading, which reports them).
    public static func holdsTools(_ path: String) -> Bool {
        guard let set = try? DataReader.read(path: path, options: ReadOptions(mode: .train, skipInvalid: true)) else { return false }
        return set.samples.contains { $0.messages.contains { !$0.tools.isEmpty || !$0.toolCalls.isEmpty } }
    }
}
