// The session API on a tiny model: a reply equals the generation loop's on the rendered
// conversation; later turns reuse the cache and give what a fresh session continuing the
// transcript gives; prewarm changes nothing but the work; guided replies validate or throw
// `incomplete`; sessions with different adapters over one base run concurrently and each gets
// what it gets alone; an adapter for another base is refused.
import AdapterRuntime
import Autograd
import DataSchema
import Foundation
import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class SessionTests: XCTestCase {
    func tinyModel(_ name: String = #function, seed: UInt64 = 1) throws -> LanguageModel {
        let dir = TinyAssets.tempDir(name)
        return try LanguageModel(path: try TinyAssets.writeModel(in: dir, seed: seed, context: 2048))  // room for byte-level tool prompts
    }

    /// A random adapter on all seven targets with B ≠ 0.
    func randomAdapter(_ base: BaseModel, seed: UInt64) -> Adapter { TestSupport.randomAdapter(base, scale: 0.2, seed: seed) }

    /// The generation loop's reply to `messages` (the reference a session must equal).
    func reference(_ model: AdaptedModel, _ messages: [Message], _ options: GenerationOptions = .init()) throws -> String {
        let base = model.model.base
        let encoder = TrainingEncoder(tokenizer: base.tokenizer, renderer: model.model.chatFormat, maxSequenceLength: Int.max)
        let engine = InferenceModel(base: base.weights, adapter: model.adapter)
        let request = GenerationRequest(prompt: try encoder.encodePrompt(messages), maxNewTokens: options.maximumResponseTokens,
                                        stopTokens: base.stopTokenIds, sampling: SamplingOptions(temperature: Float(options.temperature)), seed: options.seed)
        return base.tokenizer.decode(Generator.generate(engine, request).tokens, skipSpecialTokens: true)
    }

    func testRepliesEqualTheGenerationLoopAndLaterTurnsReuseTheCache() async throws {
        let lm = try tinyModel()
        let options = GenerationOptions(maximumResponseTokens: 12)
        let session = LanguageModelSession(model: lm.plain, instructions: "be brief")
        let first = try await session.respond(to: "say alpha0", options: options)
        XCTAssertEqual(first.content, try reference(lm.plain, [Message(role: .system, content: "be brief"), Message(role: .user, content: "say alpha0")], options))
        XCTAssertEqual(first.reusedPromptTokens, 0)
        let second = try await session.respond(to: "and hotel2", options: options)
        XCTAssertGreaterThan(second.reusedPromptTokens, 10, "the instructions and the first turn stay in the cache")
        let fresh = LanguageModelSession(model: lm.plain, transcript: Transcript(entries: Array(session.transcript.entries.prefix(3))))
        let again = try await fresh.respond(to: "and hotel2", options: options)
        XCTAssertEqual(again.reusedPromptTokens, 0)
        XCTAssertEqual(second.content, again.content, "a cached turn gives what a whole-conversation prefill gives")
        XCTAssertEqual(session.transcript.entries.count, 5)
        let data = try JSONEncoder().encode(session.transcript)
        XCTAssertEqual(try JSONDecoder().decode(Transcript.self, from: data), session.transcript, "the transcript is Codable")
    }

    func testPrewarmChangesOnlyTheWork() async throws {
        let lm = try tinyModel()
        let options = GenerationOptions(maximumResponseTokens: 10)
        let cold = LanguageModelSession(model: lm.plain, instructions: "answer the request")
        let warm = LanguageModelSession(model: lm.plain, instructions: "answer the request")
        try warm.prewarm(promptPrefix: "the thing")
        let a = try await cold.respond(to: "the thing at once", options: options)
        let b = try await warm.respond(to: "the thing at once", options: options)
        XCTAssertGreaterThan(b.reusedPromptTokens, 5)
        XCTAssertEqual(a.content, b.content)
    }

    func testGuidedRepliesValidateOrThrowIncomplete() async throws {
        let lm = try tinyModel()
        let schema = try JSONSchema(try JSONValue.parse(#"{"type":"object","properties":{"p":{"enum":["a","b"]},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["p","n"]}"#))
        struct Pick: Decodable, Sendable { var p: String; var n: Int }
        for seed in 0..<4 {
            let session = LanguageModelSession(model: lm.plain)
            let r = try await session.respond(to: "pick one", generating: Pick.self, schema: schema,
                                              options: GenerationOptions(temperature: 1, seed: UInt64(seed), maximumResponseTokens: 24))
            XCTAssertTrue(["a", "b"].contains(r.content.p))
            XCTAssertTrue((0...9).contains(r.content.n))
            XCTAssertEqual(schema.validate(try JSONValue.parse(r.rawContent)), [])
            XCTAssertGreaterThan(r.forcedTokens, 0)
        }
        let session = LanguageModelSession(model: lm.plain)
        let before = session.transcript
        do {
            _ = try await session.respond(to: "pick again", schema: schema, options: GenerationOptions(maximumResponseTokens: 3))
            XCTFail("three tokens cannot hold the object")
        } catch RuntimeError.incomplete {
            XCTAssertEqual(session.transcript, before, "an incomplete reply is not added to the transcript")
        }
        let bad = try JSONSchema(try JSONValue.parse(#"{"not":{"type":"string"}}"#))
        do {
            _ = try await session.respond(to: "x", schema: bad)
            XCTFail("not cannot be enforced")
        } catch RuntimeError.unsupportedGuide(let m) {
            XCTAssertTrue(m.contains("not"), m)
        }
    }

    /// A session on a model with a draft (prompt lookup) gives the replies a session without one
    /// gives, plain and guided, over several turns that reuse the cache.
    func testADraftChangesNoReply() async throws {
        let lm = try tinyModel()
        let adapter = randomAdapter(lm.base, seed: 3)
        let plain = try lm.adapted(with: adapter)
        let drafted = try lm.adapted(with: adapter, draft: DraftSelection(kind: .ngram, tokens: 4, ngram: NGramDraft(minimum: 1, maximum: 3)))
        XCTAssertNil(plain.draftName)
        XCTAssertEqual(drafted.draftName, "ngram (n 1-3)")
        let schema = try JSONSchema(try JSONValue.parse(#"{"type":"object","properties":{"p":{"enum":["abc","abd"]},"n":{"type":"integer","minimum":0,"maximum":99}},"required":["p","n"]}"#))
        let a = LanguageModelSession(model: plain, instructions: "copy: abc abc abd"), b = LanguageModelSession(model: drafted, instructions: "copy: abc abc abd")
        for (i, prompt) in ["say abc abc", "and abd abd", "again abc"].enumerated() {
            let options = GenerationOptions(maximumResponseTokens: 20)
            if i == 1 {
                let x = try await a.respond(to: prompt, schema: schema, options: options), y = try await b.respond(to: prompt, schema: schema, options: options)
                XCTAssertEqual(y.rawContent, x.rawContent, "guided turn \(i)")
            } else {
                let x = try await a.respond(to: prompt, options: options), y = try await b.respond(to: prompt, options: options)
                XCTAssertEqual(y.content, x.content, "turn \(i)")
                XCTAssertEqual(y.reusedPromptTokens, x.reusedPromptTokens, "turn \(i): the cache holds the same tokens")
                XCTAssertEqual(x.draftTokensProposed, 0)
                XCTAssertGreaterThan(y.draftTokensProposed, 0, "turn \(i): the draft proposed")
            }
        }
        XCTAssertEqual(b.transcript, a.transcript)
        XCTAssertThrowsError(try lm.adapted(with: adapter, draft: DraftSelection(kind: .model)), "no trained draft to use")
    }

    func testSessionsWithDifferentAdaptersShareOneBase() async throws {
        let lm = try tinyModel()
        let a = try lm.adapted(with: randomAdapter(lm.base, seed: 3)), b = try lm.adapted(with: randomAdapter(lm.base, seed: 4))
        let options = GenerationOptions(maximumResponseTokens: 16)
        let prompts = ["say alpha0", "the thing", "x"]
        var alone: [String] = []
        for m in [a, b, lm.plain] {
            for p in prompts { alone.append(try await LanguageModelSession(model: m).respond(to: p, options: options).content) }
        }
        XCTAssertNotEqual(alone[0..<3], alone[3..<6], "the two adapters answer differently")
        // all at once: nine sessions on three adapted models over one base
        let together = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for (mi, m) in [a, b, lm.plain].enumerated() {
                for (pi, p) in prompts.enumerated() {
                    group.addTask { (mi * 3 + pi, try await LanguageModelSession(model: m).respond(to: p, options: options).content) }
                }
            }
            var out = [String](repeating: "", count: 9)
            for try await (i, text) in group { out[i] = text }
            return out
        }
        XCTAssertEqual(together, alone, "each session sees only its own adapter")
    }

    func testAnAdapterForAnotherBaseIsRefused() throws {
        let lm = try tinyModel()
        let other = try tinyModel("other", seed: 2)
        XCTAssertThrowsError(try lm.adapted(with: randomAdapter(other.base, seed: 3))) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains(String(lm.base.signature.prefix(12))) || text.contains(String(other.base.signature.prefix(12))), text)
        }
    }

    func testStreamingGivesTheReplyInPieces() async throws {
        let lm = try tinyModel()
        let options = GenerationOptions(maximumResponseTokens: 12)
        var pieces: [String] = []
        for try await piece in LanguageModelSession(model: lm.plain).streamResponse(to: "say alpha0", options: options) { pieces.append(piece) }
        let whole = try await LanguageModelSession(model: lm.plain).respond(to: "say alpha0", options: options).content
        XCTAssertEqual(pieces.joined(), whole)
        XCTAssertGreaterThan(pieces.count, 1)
    }

    func testStreamedGuidedRepliesGrowIntoTheWholeValue() async throws {
        let lm = try tinyModel()
        let schema = try JSONSchema(try JSONValue.parse(#"{"type":"object","properties":{"word":{"type":"string","maxLength":6},"tags":{"type":"array","items":{"enum":["x","yy"]},"maxItems":3}},"required":["word","tags"],"additionalProperties":false}"#))
        for seed in 0..<3 {
            let options = GenerationOptions(temperature: 1, seed: UInt64(seed), maximumResponseTokens: 60)
            var snapshots: [JSONValue] = []
            for try await value in LanguageModelSession(model: lm.plain).streamResponse(to: "describe", schema: schema, options: options) {
                snapshots.append(value)
            }
            let whole = try await LanguageModelSession(model: lm.plain).respond(to: "describe", schema: schema, options: options)
            XCTAssertEqual(snapshots.last, whole.content, "the last snapshot is the whole reply")
            XCTAssertEqual(schema.validate(snapshots.last!), [])
            XCTAssertGreaterThan(snapshots.count, 1, "the value arrives in steps")
            for s in snapshots { if case .object = s {} else { XCTFail("every snapshot is the object so far: \(s)") } }
        }
        do {
            for try await _ in LanguageModelSession(model: lm.plain).streamResponse(to: "describe", schema: schema, options: GenerationOptions(maximumResponseTokens: 2)) {}
            XCTFail("two tokens cannot hold the object")
        } catch RuntimeError.incomplete {}
    }

    func testToolCallsAreConstrainedRunAndRecorded() async throws {
        let lm = try tinyModel()
        let parameters = try JSONSchema(try JSONValue.parse(#"{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9},"b":{"type":"integer","minimum":0,"maximum":9}},"required":["a","b"],"additionalProperties":false}"#))
        final class Calls: @unchecked Sendable { var seen: [JSONValue] = []; let lock = NSLock() }
        let calls = Calls()
        let add = Tool(name: "add", description: "adds", parameters: parameters) { args in
            calls.lock.withLock { calls.seen.append(args) }
            func n(_ v: JSONValue?) -> Double { if case .number(let x)? = v { return x.doubleValue } else { return 0 } }
            return "\(n(args["a"]) + n(args["b"]))"
        }
        let session = LanguageModelSession(model: lm.plain, instructions: "use tools", tools: [add])
        session.maximumToolRounds = 2
        let r = try await session.respond(to: "1+2", options: GenerationOptions(temperature: 1, seed: 5, maximumResponseTokens: 120), toolChoice: .required)
        XCTAssertFalse(calls.seen.isEmpty, "a required call runs the handler")
        for args in calls.seen { XCTAssertEqual(parameters.validate(args), [], "arguments follow the tool's schema: \(args)") }
        XCTAssertFalse(r.content.hasPrefix("<"), "the final reply is text: \(r.content)")
        let entries = session.transcript.entries
        XCTAssertTrue(entries.contains { if case .toolCall(_, "add", _) = $0 { return true } else { return false } })
        XCTAssertTrue(entries.contains { if case .toolOutput(_, "add", _) = $0 { return true } else { return false } })
        if case .response = entries.last {} else { XCTFail("the transcript ends with the reply") }
        // a session without a tool choice keeps plain replies unconstrained: no tools, no change
        let plain = try await LanguageModelSession(model: lm.plain).respond(to: "1+2", options: GenerationOptions(maximumResponseTokens: 8))
        XCTAssertEqual(plain.forcedTokens, 0)
    }
}
