// serve: the OpenAI-compatible HTTP server. Thin: parse flags, load the base once, scan the
// adapters folder, start the scheduler and the Hummingbird application; everything else is in
// the Server library. Prints one line when it listens (the port, when --port 0 chose one).
import ArgumentParser
import CLISupport
import Foundation
import Inference
import ModelDefinition
import Hummingbird
import Server


@main
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the base model and the adapters of a folder over the OpenAI HTTP API.",
        discussion: """
            Routes: POST /v1/chat/completions (stream, response_format json_schema / json_object, tools, \
            tool_choice and parallel_tool_calls: calls generated and read in the model's own format, its chat \
            template's, several in one reply where the format joins them; docs/chat-templates.md), POST /v1/completions, GET /v1/models, GET /v1/models/{id}, GET /health; \
            docs/openapi.yaml describes them. The request's "model" picks the base (--model-name) or an \
            adapter of --adapters by its file name without extension (checkpoints *.safetensors, \
            .fmadapter packages, PEFT folders); the folder is read again when a request needs it, so \
            adapters added to it are served without a restart, and ones made for another base are listed \
            as refused with the reason. Requests decode together in one batch whatever their adapters \
            (each row adds its own adapter's low-rank term over the shared base); at most --max-active \
            at a time, --queue more waiting, beyond which the server answers 503 with Retry-After. \
            With --api-key or --api-key-file every route but /health needs 'Authorization: Bearer KEY' \
            (401 otherwise, counted on /health); without a key the server listens only on a loopback \
            address unless --allow-unauthenticated is given. docs/foundation-models-client.md shows Apple's Foundation Models \
            framework (ChatCompletionsLanguageModel) using it.
            """)

    @OptionGroup var model: BaseModelOptions
    @OptionGroup var chatTemplate: ChatTemplateOptions
    @OptionGroup var decoding: DecodingOptions

    @Option(help: "Folder of adapters to serve, each under its name without extension; an entry is \(AdapterForms.phrase).")
    var adapters: String?

    @Option(help: "The id the base model is served under (default: its file name without extension).")
    var modelName: String?

    @Option(help: "Address to listen on (a non-loopback one needs --api-key or --allow-unauthenticated).")
    var host = "127.0.0.1"

    @Option(name: .customLong("api-key"), help: ArgumentHelp("A key clients must send as 'Authorization: Bearer KEY' on every route but /health (repeat for several; a key on the command line is visible to other users of this machine in the process list: --api-key-file is not).", valueName: "key"))
    var apiKeys: [String] = []

    @Option(help: ArgumentHelp("A file of keys, one per line (blank lines and lines starting with # skipped), accepted as --api-key's.", valueName: "file"))
    var apiKeyFile: String?

    @Flag(help: "Listen on a non-loopback --host without any key (anyone who reaches the port can use the server).")
    var allowUnauthenticated = false

    @Option(help: "Port to listen on (0: any free port; the line printed at start says which).")
    var port = 8080

    @Option(help: "Requests decoded together at most (rows of one batch).")
    var maxActive = 8

    @Option(help: "Requests waiting at most when every slot is busy; more are answered 503.")
    var queue = 64

    @Option(help: "max_tokens of a chat request that gives none (capped by the context left).")
    var defaultMaxTokens = 512

    @Option(help: "The largest max_tokens a request may ask for (default: the model's context).")
    var maxTokensLimit: Int?

    @Option(help: "Seconds between rescans of the adapters folder (a request that needs the list rescans when this has passed).")
    var rescanInterval: Double = 1

    @Option(help: "Adapter factors kept as float16 (half the bytes each row streams per token: faster at one row and at eight; an .fmadapter package stores float16 already, so its numbers do not change; a checkpoint's float32 factors are rounded) or float32 (as trained; the reference numbers).")
    var adapterPrecision: InferenceModel.WeightPrecision = .float16

    @Option(help: "MB of recent prompts' keys and values kept, per adapter, so that a prompt beginning like one of them (a shared system message, a conversation's earlier turns) copies those positions instead of computing them (0: every prompt is prefilled whole).")
    var promptCacheMb = 128

    @Option(help: "Milliseconds of prompt prefill between two decoding passes while replies are in flight (as many tokens as take about that long at the rate measured so far, 32 at least): a long prompt then delays those replies by about this much per token instead of its whole prefill. 0: every prompt whole at once.")
    var prefillChunkMs = 500

    @Option(help: ArgumentHelp("Speculative decoding's draft: auto (an .fmadapter package's replies use the draft it carries), ngram (every model's replies use prompt lookup: the tokens that followed the reply's last tokens earlier in the prompt or reply) or none. Replies are the same either way, guided ones included; a draft speeds up a reply while few are decoded together (--draft-row-limit).", valueName: "kind"))
    var draft: DraftKind = .auto

    @Option(help: "Tokens a draft proposes per pass (gamma). Default: a package's speculativeDecodingDraftTokenCount for its own draft, else 5.")
    var numDraftTokens: Int?

    @Option(help: "Drafts propose only while at most this many replies are decoded together (a batch already shares each pass over the weights among its rows; 0 never uses drafts).")
    var draftRowLimit = 1

    func validate() throws {
        guard promptCacheMb >= 0 else { throw ValidationError("--prompt-cache-mb must be 0 or more") }
        guard prefillChunkMs >= 0 else { throw ValidationError("--prefill-chunk-ms must be 0 or more") }
        guard (1...16).contains(maxActive) else { throw ValidationError("--max-active must be 1 to 16 (rows of one batched pass)") }
        guard queue >= 0 else { throw ValidationError("--queue must be 0 or more") }
        guard defaultMaxTokens >= 1 else { throw ValidationError("--default-max-tokens must be at least 1") }
        if let m = maxTokensLimit, m < 1 { throw ValidationError("--max-tokens-limit must be at least 1") }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0 to 65535") }
        guard rescanInterval >= 0 else { throw ValidationError("--rescan-interval must be 0 or more") }
        guard draft != .model else { throw ValidationError("--draft model: each adapter brings its own draft in its package; use --draft auto") }
        if let n = numDraftTokens, n < 1 { throw ValidationError("--num-draft-tokens must be at least 1") }
        guard draftRowLimit >= 0 else { throw ValidationError("--draft-row-limit must be 0 or more") }
        if apiKeys.isEmpty && apiKeyFile == nil && !allowUnauthenticated && !AccessKeys.isLoopback(host) {
            throw ValidationError("--host \(host) is reachable from other machines and no key is set: give --api-key or --api-key-file (clients then send 'Authorization: Bearer KEY'), or --allow-unauthenticated to serve anyone who reaches the port")
        }
    }

    func run() async throws {
        let keys: AccessKeys
        do {
            keys = try AccessKeys(apiKeys + (apiKeyFile.map { try AccessKeys.read(file: $0) } ?? []), source: apiKeyFile == nil ? "--api-key" : "--api-key / --api-key-file")
        } catch {
            throw ValidationError(error.localizedDescription)
        }
        var base = try model.load()
        try chatTemplate.apply(to: &base)
        let name = modelName ?? URL(fileURLWithPath: base.path).deletingPathExtension().lastPathComponent
        let catalog = try AdapterCatalog(base: base, baseID: name, folder: adapters, rescanInterval: rescanInterval,
                                         adapterPrecision: adapterPrecision, drafts: DraftSelection(kind: draft, tokens: numDraftTokens))
        let scheduler = Scheduler(model: InferenceModel(base: base.weights, activations: decoding.activations, kvCache: decoding.kvCache),
                                  maxActive: maxActive, queueCapacity: queue, promptCacheBytes: promptCacheMb << 20,
                                  prefillChunk: prefillChunkMs == 0 ? .whole : .seconds(Double(prefillChunkMs) / 1000),
                                  draftRowLimit: draftRowLimit)
        scheduler.start()
        defer { scheduler.shutdown() }
        let service = try OpenAIService(catalog: catalog, scheduler: scheduler,
                                        limits: ServiceLimits(defaultMaxTokens: defaultMaxTokens, maxTokensLimit: maxTokensLimit))
        let (models, refused) = catalog.listing()
        for r in refused { FileHandle.standardError.write(Data("serve: refused \(r.id): \(r.reason)\n".utf8)) }
        let host = self.host
        let app = HTTPServer.application(service, host: host, port: port, keys: keys) { port in
            let access = keys.isRequired ? "" : AccessKeys.isLoopback(host) ? "" : "; no key: anyone who reaches it can use it"
            FileHandle.standardOutput.write(Data("serve: listening on http://\(host):\(port) (models: \(models.map(\.id).joined(separator: ", "))\(access))\n".utf8))
        }
        try await app.runService()
    }
}
