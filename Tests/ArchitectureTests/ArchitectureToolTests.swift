// Every tool's job on each described architecture, end to end on its tiny model as a GGUF file
// (stored weights): train an adapter (train-adapter), evaluate base and adapter (evaluate-adapter),
// distil a draft from the base's blocks (train-draft; it keeps the architecture, a SmolLM3 draft
// its layers' NoPE, a Gemma 3 draft their windows), generate greedy, constrained to a JSON schema and speculatively with the
// draft (generate: the same tokens), package and read back the adapter with its draft
// (export-fmadapter), answer a chat completion (serve) and a session turn (the session API).
// Each tool's executable parses flags and calls these library functions.
import AdapterRuntime
import Autograd
import DataSchema
import Distillation
import Evaluation
import Export
import Foundation
import Guidance
import Inference
import ModelAssets
import ModelDefinition
@testable import Server
import TestSupport
import Training
import XCTest

final class ArchitectureToolTests: XCTestCase {
    /// One conversation per line: the user's word, the assistant's answer in upper case.
    static func writeData(_ path: String, count: Int, offset: Int = 0) throws {
        let words = ["fox", "dog", "lazy", "brown", "tiny", "model", "value", "name"]
        let lines = (0..<count).map { i -> String in
            let w = words[(i + offset) % words.count]
            return #"{"messages": [{"role": "user", "content": "say \#(w)"}, {"role": "assistant", "content": "\#(w.uppercased())"}]}"#
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    func testEveryToolRunsOnEachArchitecture() async throws {
        for f in try ArchitectureFixture.all {
            try await runTools(f)
        }
    }

    func runTools(_ f: ArchitectureFixture) async throws {
        let dir = temporaryDirectory(f.name)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = f.config
        config.maxPositionEmbeddings = 512  // room for chat prompts; no effect on the numbers
        try ModelExport.writeGGUF(config: config, tensors: f.weights(), tokenizer: ArchitectureFixture.tokenizerData(), to: dir + "/base.gguf")
        let base = try BaseModel.load(path: dir + "/base.gguf", storage: .stored)
        XCTAssertEqual(base.config.architecture, f.config.architecture)
        try Self.writeData(dir + "/train.jsonl", count: 8)
        try Self.writeData(dir + "/eval.jsonl", count: 4, offset: 3)

        // train-adapter
        let run = dir + "/run"
        let trained = AdapterRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: dir + "/eval.jsonl", maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            lora: LoRAConfig(rank: 4, alpha: 8), checkpoints: CheckpointSettings(directory: run, frequency: 1, resumeFrom: nil, resume: false, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 2
                o.learningRate = 2e-2
                o.warmupSteps = 1
                o.seed = 11
                return o
            })
        var losses: [Float] = []
        guard case .finished(let adapterPath) = try AdapterRun.run(trained, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { e in
            if case .step(let r, _, _, _) = e { losses.append(r.loss) }
        }) else { return XCTFail("\(f.name): the adapter run did not finish") }
        XCTAssertTrue(losses.allSatisfy(\.isFinite) && losses.count == 8, "\(f.name): \(losses)")
        XCTAssertLessThan(losses.last!, losses.first!, "\(f.name): the loss falls")

        // evaluate-adapter
        var evaluation = EvaluationSettings(evalData: dir + "/eval.jsonl")
        evaluation.checkpoints = [adapterPath]
        evaluation.includeBase = true
        evaluation.maxNewTokens = 6
        evaluation.batchSize = 2
        let report = try EvaluationRun.run(evaluation, base: base)
        XCTAssertEqual(report.models.count, 2, f.name)
        XCTAssertTrue(report.models.allSatisfy { $0.evalLoss?.isFinite == true }, f.name)

        // train-draft: two of the base's blocks (for SmolLM3, layers 0 and its NoPE layer 3 or the last)
        var draftSettings = DraftRunSettings(
            data: DataSettings(trainData: dir + "/train.jsonl", evalData: nil, maxSequenceLength: 64, fixedSizedSequences: false,
                               packSequences: false, skipInvalid: false, batchSize: 2, seed: 3),
            teacherAdapter: adapterPath, source: .baseLayers(2), freezeEmbeddings: false, divergence: .forward, vocabulary: .full,
            checkpoints: CheckpointSettings(directory: dir + "/draft", frequency: 1, resumeFrom: nil, resume: false, keepBest: nil),
            makeOptions: { _ in
                var o = TrainingOptions()
                o.epochs = 1
                o.learningRate = 1e-2
                o.seed = 11
                return o
            })
        draftSettings.teacherPrefixMinimum = 1
        guard case .finished(let draftPath) = try DraftRun.run(draftSettings, base: base, shouldStop: { false }, notice: { _ in }, onEvent: { _ in }) else {
            return XCTFail("\(f.name): the draft run did not finish")
        }
        let draft = try DraftEngine.load(path: draftPath, base: base)
        XCTAssertEqual(draft.trunk.config.architecture, f.config.architecture)
        let chosen = DraftModel.evenlySpacedLayers(2, of: f.config.numLayers)
        XCTAssertEqual(draft.trunk.config.noRopeLayers, chosen.indices.filter { f.config.noRopeLayers.contains(chosen[$0]) })
        XCTAssertEqual(draft.trunk.config.slidingWindowLayers, chosen.indices.filter { f.config.slidingWindowLayers.contains(chosen[$0]) }, "\(f.name): a draft keeps each layer's window")

        // generate: greedy, speculative with the draft (the same tokens), constrained to a schema
        let loaded = try LoadedModel.load(base: base, adapter: adapterPath)
        let engine = InferenceModel(loaded)
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: Int.max)
        let prompt = try encoder.encodePrompt([Message(role: .user, content: "say fox")])
        let request = GenerationRequest(prompt: prompt, maxNewTokens: 12, stopTokens: base.stopTokenIds)
        let greedy = Generator.generate(engine, request).tokens  // what a chat reply holds (it may end at once)
        var running = request
        running.stopTokens = []  // 12 tokens whatever they are, to compare token by token
        let long = Generator.generate(engine, running).tokens
        XCTAssertEqual(long.count, 12, f.name)
        XCTAssertEqual(Array(long.prefix(greedy.count)), greedy, f.name)
        let speculative = SpeculativeDecoder(target: engine, draft: draft, draftTokens: 3).generate(running)
        XCTAssertEqual(speculative.tokens, long, "\(f.name): speculative decoding changes no token")
        let library = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
        let schema = try JSONSchema(try JSONValue.parse(#"{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}"#, context: "test"),
                                    context: "test")
        var constrained = request
        constrained.maxNewTokens = 40
        constrained.constraint = try library.jsonSchema(schema)
        let guided = Generator.generate(engine, constrained)
        let text = base.tokenizer.decode(guided.tokens, skipSpecialTokens: true)
        if !guided.stats.incomplete {
            XCTAssertNoThrow(try JSONValue.parse(text, context: "reply"), "\(f.name): \(text)")
        }
        XCTAssertTrue(text.hasPrefix("{"), "\(f.name): a constrained reply opens the object: \(text)")

        // export-fmadapter: the package with its draft reads back to the same greedy tokens
        let package = try FMAdapterPackage.export(adapter: try Checkpoint.load(adapterPath), draft: try Checkpoint.load(draftPath), base: base,
                                                  options: PackageOptions(name: "tiny_\(f.name)", draftTokenCount: 3), outputDir: dir + "/export")
        let fromPackage = try LoadedModel.load(base: base, adapter: package)
        XCTAssertNotNil(fromPackage.draft, f.name)
        XCTAssertEqual(Generator.generate(InferenceModel(fromPackage), running).tokens, long, "\(f.name): the package's adapter")

        // serve: one chat completion with the adapter from the adapters folder
        let adapters = dir + "/adapters"
        try FileManager.default.createDirectory(atPath: adapters, withIntermediateDirectories: true)
        try PEFTAdapter.write(loaded.adapter!, to: adapters + "/tiny")
        let catalog = try AdapterCatalog(base: base, baseID: "base", folder: adapters, rescanInterval: 0)
        let scheduler = Scheduler(model: InferenceModel(base: base.weights), maxActive: 2, queueCapacity: 4)
        scheduler.start()
        let service = try OpenAIService(catalog: catalog, scheduler: scheduler, limits: ServiceLimits(defaultMaxTokens: 12, maxTokensLimit: 64))
        let body = #"{"model": "tiny", "temperature": 0, "max_tokens": 12, "messages": [{"role": "user", "content": "say fox"}]}"#
        guard case .json(let reply) = try await service.chatCompletions(Array(body.utf8)) else { return XCTFail("\(f.name): no JSON reply") }
        let served = reply["choices"]?.arrayValue?.first?["message"]?["content"]?.stringValue
        XCTAssertEqual(served, base.tokenizer.decode(greedy, skipSpecialTokens: true), "\(f.name): the server's reply is the greedy one")
        scheduler.shutdown()

        // the session API
        let model = try LanguageModel(path: dir + "/base.gguf")
        let session = LanguageModelSession(model: try model.adapted(with: adapterPath))
        let answer = try await session.respond(to: "say fox", options: GenerationOptions(maximumResponseTokens: 12))
        XCTAssertEqual(answer.content, base.tokenizer.decode(greedy, skipSpecialTokens: true), "\(f.name): the session's reply is the greedy one")
    }
}
