// A small app on the toolkit's runtime: loads a base model once (weights as the file stores
// them), optionally an adapter over it, and in one session asks for a plain reply, a streamed
// one and a reply guided by a JSON schema that decodes into a Swift type; with an adapter, a
// session on the bare base runs concurrently beside the adapted one over the same loaded weights.
//
//   swift run -c release events-app MODEL.gguf [ADAPTER]
//
// ADAPTER: a checkpoint (adapter-*.safetensors), an .fmadapter package or a PEFT folder trained on
// MODEL. Exits 1 with the error's description when anything fails.
import AdapterRuntime
import DataSchema
import Foundation

struct Event: Codable, Sendable {
    var title: String
    var day: String
    var start: String
}

let eventSchema = #"""
{"type": "object",
 "properties": {
   "title": {"type": "string", "maxLength": 40},
   "day": {"enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]},
   "start": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}},
 "required": ["title", "day", "start"],
 "additionalProperties": false}
"""#

func run(_ arguments: [String]) async throws {
    guard arguments.count >= 2 else {
        throw ExampleError("usage: events-app MODEL.gguf [ADAPTER]")
    }
    let started = Date()
    let model = try LanguageModel(path: arguments[1])
    print("loaded \(arguments[1]) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
    let adapted = try arguments.count > 2 ? model.adapted(with: arguments[2]) : model.plain
    if let signature = adapted.adapterSignature { print("adapter \(arguments[2]) (\(signature.prefix(12)))") }

    let options = GenerationOptions(maximumResponseTokens: 48)
    let session = LanguageModelSession(model: adapted, instructions: "You turn calendar requests into events.")
    try session.prewarm(promptPrefix: "Lunch")

    let plain = try await session.respond(to: "Lunch with Ana next Tuesday at 12:30. Say it in one sentence.", options: options)
    print("plain reply (\(plain.generatedTokens) tokens, \(Int(plain.tokensPerSecond)) tokens/s, \(plain.reusedPromptTokens) prompt tokens from the cache): \(plain.content)")

    print("streamed reply: ", terminator: "")
    for try await piece in session.streamResponse(to: "And dinner on Friday?", options: options) { print(piece, terminator: "") }
    print()

    let schema = try JSONSchema(try JSONValue.parse(eventSchema))
    let guided = try await session.respond(to: "Yoga on Sunday at 16:45.", generating: Event.self, schema: schema,
                                           options: GenerationOptions(maximumResponseTokens: 96))
    let violations = schema.validate(try JSONValue.parse(guided.rawContent))
    guard violations.isEmpty else { throw ExampleError("the guided reply does not validate: \(violations)") }
    print("guided reply (\(guided.forcedTokens) of \(guided.generatedTokens) tokens forced): \(guided.rawContent)")
    print("as a Swift value: title \(guided.content.title), day \(guided.content.day), start \(guided.content.start)")

    if adapted.adapter != nil {
        // the bare base and the adapter, at the same time, over one loaded set of weights
        async let base = LanguageModelSession(model: model.plain).respond(to: "Lunch with Ana next Tuesday at 12:30.", options: options)
        async let tuned = LanguageModelSession(model: adapted).respond(to: "Lunch with Ana next Tuesday at 12:30.", options: options)
        let (b, t) = try await (base, tuned)
        print("concurrently, base: \(b.content)")
        print("concurrently, adapter: \(t.content)")
    }
    let data = try JSONEncoder().encode(session.transcript)
    print("transcript: \(session.transcript.entries.count) entries, \(data.count) bytes of JSON")
}

struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

do {
    try await run(CommandLine.arguments)
} catch {
    FileHandle.standardError.write(Data("events-app: \((error as? LocalizedError)?.errorDescription ?? "\(error)")\n".utf8))
    exit(1)
}
