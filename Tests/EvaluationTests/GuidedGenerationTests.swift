// Guided generation through the decoder: a reply generated under a JSON-schema constraint
// validates against the schema whenever it is reported complete (whatever the model: a random
// tiny model sampling at temperature 1 leaves all the work to the mask), a reply cut by the
// token limit is reported incomplete, batched generation gives the single-conversation result,
// and evaluate-adapter's constrained row counts them. Real-model checks where it is fetched.
import DataSchema
@testable import Evaluation
import Foundation
import Guidance
@testable import Inference
import ModelAssets
import ModelDefinition
import TestSupport
import XCTest

final class GuidedGenerationTests: XCTestCase {
    static let schemas = GuidedGenerationSchemas.all

    func schema(_ text: String) throws -> JSONSchema { try JSONSchema(try JSONValue.parse(text)) }

    func makeEngine(_ name: String = #function) throws -> (BaseModel, InferenceModel, ConstraintLibrary) {
        let dir = TinyAssets.tempDir(name)
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        return (base, InferenceModel(base: base.weights), try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds))
    }

    func testCompleteConstrainedRepliesValidateAgainstTheirSchema() throws {
        let (base, engine, library) = try makeEngine()
        let prompt = base.tokenizer.encode("<|im_start|>user\nthe event<|im_end|>\n<|im_start|>assistant\n")
        for text in Self.schemas {
            let s = try schema(text)
            let constraint = try library.jsonSchema(s)
            var complete = 0
            for seed in 0..<12 {
                let request = GenerationRequest(prompt: prompt, maxNewTokens: 160, stopTokens: base.stopTokenIds,
                                                sampling: SamplingOptions(temperature: 1), seed: UInt64(seed), constraint: constraint)
                let (tokens, stats) = Generator.generate(engine, request)
                let output = base.tokenizer.decode(tokens, skipSpecialTokens: true)
                if stats.incomplete {
                    XCTAssertFalse(stats.stoppedAtEndOfTurn && constraint.grammar.matches(output), "reported incomplete but whole: \(output)")
                    continue
                }
                complete += 1
                XCTAssertTrue(stats.stoppedAtEndOfTurn)
                let value = try JSONValue.parse(output, context: "constrained reply")
                XCTAssertEqual(s.validate(value), [], "seed \(seed): \(output) does not follow \(text)")
                XCTAssertFalse(output.contains("\n") || output.hasPrefix(" "), "no free whitespace: \(output)")
            }
            XCTAssertGreaterThan(complete, 0, "some replies to \(text) complete within 160 tokens")
        }
    }

    /// A constraint with no stop tokens given ends at the constraint's own stop token (before,
    /// the reply went on past it, where no token is allowed, and the process stopped).
    func testAnEmptyStopSetEndsAtTheConstraintsStopToken() throws {
        let (base, engine, library) = try makeEngine()
        let constraint = try library.choice(["yes", "no"])
        let request = GenerationRequest(prompt: [5, 6], maxNewTokens: 16, stopTokens: [], constraint: constraint)
        XCTAssertEqual(request.stopTokens, Set(constraint.vocabulary.stopTokens))
        let (tokens, stats) = Generator.generate(engine, request)
        XCTAssertTrue(stats.stoppedAtEndOfTurn)
        XCTAssertFalse(stats.incomplete)
        XCTAssertTrue(["yes", "no"].contains(base.tokenizer.decode(tokens, skipSpecialTokens: true)), base.tokenizer.decode(tokens))
    }

    func testTheTokenLimitReportsTheReplyIncomplete() throws {
        let (base, engine, library) = try makeEngine()
        let constraint = try library.jsonSchema(try schema(Self.schemas[0]))
        let request = GenerationRequest(prompt: [5, 6], maxNewTokens: 4, stopTokens: base.stopTokenIds, constraint: constraint)
        let (tokens, stats) = Generator.generate(engine, request)
        XCTAssertEqual(tokens.count, 4)
        XCTAssertTrue(stats.incomplete, "four tokens cannot hold a whole Event")
        XCTAssertGreaterThan(stats.forcedTokens, 0, "{\"title\":\" is forced")
        let text = base.tokenizer.decode(tokens), opening = "{\"title\":\""
        XCTAssertTrue(text.hasPrefix(opening) || opening.hasPrefix(text), "the schema's first property comes first: \(text)")
        let plain = Generator.generate(engine, GenerationRequest(prompt: [5, 6], maxNewTokens: 4, stopTokens: base.stopTokenIds))
        XCTAssertFalse(plain.stats.incomplete, "an unconstrained reply is never called incomplete")
    }

    /// With a token limit from the shortest possible reply up, a random model sampling at
    /// temperature 1 still ends every constrained reply complete and valid: near the limit the
    /// mask keeps only tokens after which the reply can close in time (`closedByLimit`).
    func testRepliesCloseWithinTheTokenLimit() throws {
        let (base, engine, library) = try makeEngine()
        let prompt = base.tokenizer.encode("<|im_start|>user\nthe event<|im_end|>\n<|im_start|>assistant\n")
        var closed = 0, total = 0
        for text in Self.schemas {
            let s = try schema(text)
            let constraint = try library.jsonSchema(s)
            let shortest = constraint.start().tokensToCompletion
            for extra in [0, 2, 8] {
                for seed in 0..<4 {
                    let limit = shortest + 1 + extra
                    let request = GenerationRequest(prompt: prompt, maxNewTokens: limit, stopTokens: base.stopTokenIds,
                                                    sampling: SamplingOptions(temperature: 1), seed: UInt64(seed), constraint: constraint)
                    let (tokens, stats) = Generator.generate(engine, request)
                    let output = base.tokenizer.decode(tokens, skipSpecialTokens: true)
                    XCTAssertFalse(stats.incomplete, "limit \(limit) (shortest \(shortest) tokens), seed \(seed): cut off at \(output)")
                    XCTAssertTrue(stats.stoppedAtEndOfTurn)
                    XCTAssertLessThan(tokens.count, limit)
                    XCTAssertEqual(s.validate(try JSONValue.parse(output, context: "reply")), [], "\(output) does not follow \(text)")
                    let batched = try Generator.generateBatch(engine, [request, request], batchSize: 2, sharedPrefixMinimum: 0)
                    XCTAssertEqual(batched[1].tokens, tokens)
                    XCTAssertEqual(batched[1].stats.closedByLimit, stats.closedByLimit)
                    if stats.closedByLimit { closed += 1 }
                    total += 1
                }
            }
        }
        print("constrained replies at tight limits: \(total) complete, \(closed) of them narrowed by the limit")
        XCTAssertGreaterThan(closed, total / 4, "at these limits a random model needs the narrowing often")
    }

    func testChoiceAndRegexConstrainTheReply() throws {
        let (base, engine, library) = try makeEngine()
        for seed in 0..<6 {
            let choice = GenerationRequest(prompt: [5], maxNewTokens: 20, stopTokens: base.stopTokenIds, sampling: SamplingOptions(temperature: 1),
                                           seed: UInt64(seed), constraint: try library.choice(["yes", "no", "not sure"]))
            let c = Generator.generate(engine, choice)
            XCTAssertFalse(c.stats.incomplete)
            XCTAssertTrue(["yes", "no", "not sure"].contains(base.tokenizer.decode(c.tokens)))
            let regex = GenerationRequest(prompt: [5], maxNewTokens: 20, stopTokens: base.stopTokenIds, sampling: SamplingOptions(temperature: 1),
                                          seed: UInt64(seed), constraint: try library.regex(#"[a-c]{2}-\d{2}"#))
            let r = Generator.generate(engine, regex)
            XCTAssertFalse(r.stats.incomplete)
            XCTAssertNotNil(base.tokenizer.decode(r.tokens).wholeMatch(of: #/[a-c]{2}-\d{2}/#))
        }
    }

    func testBatchedConstrainedGenerationEqualsOneAtATime() throws {
        let (base, engine, library) = try makeEngine()
        var requests: [GenerationRequest] = []
        for (i, text) in Self.schemas.enumerated() {
            for seed in 0..<2 {
                let prompt = base.tokenizer.encode("<|im_start|>user\nrequest \(i) \(seed)<|im_end|>\n<|im_start|>assistant\n")
                requests.append(GenerationRequest(prompt: prompt, maxNewTokens: 40, stopTokens: base.stopTokenIds,
                                                  sampling: SamplingOptions(temperature: seed == 0 ? 0 : 1), seed: UInt64(seed),
                                                  constraint: try library.jsonSchema(try schema(text))))
            }
        }
        requests.append(GenerationRequest(prompt: [9, 10], maxNewTokens: 12, stopTokens: base.stopTokenIds))  // unconstrained beside them
        let single = requests.map { Generator.generate(engine, $0) }
        for batch in [1, 3, requests.count] {
            let batched = try Generator.generateBatch(engine, requests, batchSize: batch, sharedPrefixMinimum: 0)
            for (i, (a, b)) in zip(single, batched).enumerated() {
                XCTAssertEqual(b.tokens, a.tokens, "batch \(batch), request \(i)")
                XCTAssertEqual(b.stats.incomplete, a.stats.incomplete, "batch \(batch), request \(i)")
                XCTAssertEqual(b.stats.forcedTokens, a.stats.forcedTokens, "batch \(batch), request \(i)")
            }
        }
    }

    func testEvaluationAddsAConstrainedRow() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let format = #"{"type":"json_schema","json_schema":{"name":"Pick","schema":{"type":"object","properties":{"pick":{"enum":["a","b"]},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["pick","n"],"additionalProperties":false}}}"#
        let lines = (0..<4).map { i in
            #"{"messages":[{"role":"user","content":"pick \#(i)","response_format":\#(format)},{"role":"assistant","content":"{\"pick\":\"a\",\"n\":\#(i)}"}]}"#
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/eval.jsonl", atomically: true, encoding: .utf8)
        var s = EvaluationSettings(evalData: dir + "/eval.jsonl")
        s.computeLoss = false
        s.maxNewTokens = 24
        s.constrained = true
        let report = try EvaluationRun.run(s, base: base)
        XCTAssertEqual(report.models.map(\.label), ["base", "base constrained"])
        let plain = report.models[0], guided = report.models[1]
        XCTAssertFalse(plain.constrained)
        XCTAssertTrue(guided.constrained)
        XCTAssertEqual(guided.jsonTargets, 4)
        XCTAssertEqual(guided.schemaConforming, guided.jsonTargets - guided.incompleteReplies, "every complete constrained reply conforms")
        XCTAssertEqual(guided.incompleteReplies, 0, "{\"pick\":\"a\",\"n\":0} fits in 24 tokens")
        XCTAssertEqual(guided.jsonValidRate, 1)
        XCTAssertTrue(EvaluationTable.render(report).contains("incomplete"))
    }

    /// Evaluation with a draft (prompt lookup; speculative decoding one reply at a time) gives the
    /// batched evaluation's replies and scores, plain and constrained, and reports the draft.
    func testEvaluationWithADraftGivesTheSameReplies() throws {
        let dir = TinyAssets.tempDir()
        let base = try BaseModel.load(path: try TinyAssets.writeModel(in: dir, seed: 1))
        let format = #"{"type":"json_schema","json_schema":{"name":"Pick","schema":{"type":"object","properties":{"pick":{"enum":["a","b"]},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["pick","n"],"additionalProperties":false}}}"#
        let lines = (0..<5).map { i in
            #"{"messages":[{"role":"user","content":"pick a or b, \"pick\":\"a\" \#(i)","response_format":\#(format)},{"role":"assistant","content":"{\"pick\":\"a\",\"n\":\#(i)}"}]}"#
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/eval.jsonl", atomically: true, encoding: .utf8)
        func run(_ draft: DraftSelection?, output: String) throws -> (EvaluationReport, [String]) {
            var s = EvaluationSettings(evalData: dir + "/eval.jsonl")
            s.computeLoss = false
            s.maxNewTokens = 40
            s.constrained = true
            s.draft = draft
            s.outputPath = dir + "/" + output
            let report = try EvaluationRun.run(s, base: base)
            let replies = try String(contentsOfFile: dir + "/" + output, encoding: .utf8).split(separator: "\n").map {
                try JSONValue.parse(String($0), context: output)["output"]?.stringValue ?? ""
            }
            return (report, replies)
        }
        let (plain, plainReplies) = try run(nil, output: "plain.jsonl")
        let (drafted, draftedReplies) = try run(DraftSelection(kind: .ngram, tokens: 3, ngram: NGramDraft(minimum: 1, maximum: 3)), output: "drafted.jsonl")
        XCTAssertEqual(draftedReplies, plainReplies)
        XCTAssertEqual(drafted.models.map(\.exactMatches), plain.models.map(\.exactMatches))
        XCTAssertEqual(drafted.models.map(\.schemaConforming), plain.models.map(\.schemaConforming))
        XCTAssertEqual(drafted.models.map(\.incompleteReplies), plain.models.map(\.incompleteReplies))
        XCTAssertTrue(drafted.models.allSatisfy { $0.draft != nil && $0.draftTokensProposed > 0 }, "\(drafted.models.map(\.draftTokensProposed))")
        XCTAssertTrue(plain.models.allSatisfy { $0.draft == nil })
        XCTAssertTrue(EvaluationTable.render(drafted).contains("speculative decoding with the ngram"))
        // --draft model with no trained draft anywhere is refused, saying what to give
        XCTAssertThrowsError(try run(DraftSelection(kind: .model), output: "none.jsonl")) { error in
            XCTAssertTrue(error.localizedDescription.contains("--draft-checkpoint"), error.localizedDescription)
        }
    }

    /// The progress lines count exact matches per row: a model's constrained row starts from zero
    /// (the counter was once shared and printed "exact match so far 116/40").
    func testProgressCountsExactMatchesPerRow() {
        func result(_ exact: Bool) -> TargetResult {
            TargetResult(model: "m", sample: 0, line: 1, turn: 1, promptTokens: 1, reference: "", output: "", exactMatch: exact,
                         json: nil, toolCalls: nil, generatedTokens: 1, stoppedAtEndOfTurn: true, prefillSeconds: 0, decodeSeconds: 0)
        }
        var progress = EvaluationProgress(every: 2)
        var lines: [String] = []
        let events: [(String, Int, Bool)] = [("a", 1, true), ("a", 2, true), ("a", 3, false),
                                             ("a constrained", 1, true), ("a constrained", 2, false), ("a constrained", 3, false)]
        for (label, done, exact) in events {
            if let line = progress.line(for: .generated(label: label, done: done, total: 3, result: result(exact))) { lines.append(line) }
        }
        XCTAssertEqual(lines, ["a: generated 2/3, exact match so far 2/2", "a: generated 3/3, exact match so far 2/3",
                               "a constrained: generated 2/3, exact match so far 1/2", "a constrained: generated 3/3, exact match so far 1/3"])
    }

    /// SmolLM2 on the extraction example's requests: the base model alone writes no valid JSON;
    /// constrained, every reply that completes follows the Event schema.
    func testRealModelConstrainedExtractionReplies() throws {
        guard let path = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs the real base model: set ADAPTER_BASE_MODEL (scripts/fetch-model.sh prints its path)")
        }
        let base = try BaseModel.load(path: path)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let data = try DataReader.read(path: root.appendingPathComponent("examples/extraction/eval.jsonl").path, options: ReadOptions(mode: .train))
        let targets = Array(Evaluator.targets(of: data.samples, turns: .last).prefix(6))
        let encoder = try TrainingEncoder(tokenizer: base.tokenizer, template: base.template, maxSequenceLength: 1024)
        let library = try ConstraintLibrary(tokenizer: base.tokenizer, stopTokens: base.stopTokenIds)
        let engine = InferenceModel(base: base.weights)
        var complete = 0
        for t in targets {
            let format = try XCTUnwrap(t.format)
            let r = try Evaluator.generate(engine, target: t, base: base, encoder: encoder, maxNewTokens: 200, label: "base", constraints: library)
            XCTAssertEqual(r.incomplete, r.json?.valid == false, "line \(t.line): valid exactly when complete: \(r.output)")
            if r.incomplete == false {
                complete += 1
                XCTAssertEqual(format.schema.validate(try JSONValue.parse(r.output)), [], "line \(t.line): \(r.output)")
            }
        }
        print("SmolLM2 base, constrained extraction replies: \(complete) of \(targets.count) complete within 200 tokens, all of them schema-valid")
        XCTAssertGreaterThan(complete, 0)
    }
}
