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
    static let schemas: [String] = [
        #"{"type":"object","properties":{"title":{"type":"string","maxLength":12},"day":{"enum":["mon","tue","wed"]},"minutes":{"type":["integer","null"],"minimum":0,"maximum":600},"attendees":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},"location":{"type":["string","null"],"maxLength":10}},"required":["title","day","minutes","attendees"],"additionalProperties":false}"#,
        #"{"type":"array","items":{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"number","minimum":-5,"maximum":5}},"required":["ok"]},"minItems":1,"maxItems":2}"#,
        #"{"enum":["red","green",3,null,{"a":[1,2]}]}"#,
        #"{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}"#,
    ]

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
