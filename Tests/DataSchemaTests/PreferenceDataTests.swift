// Preference pairs: every accepted form (TRL's conversational prompt/chosen/rejected, "messages"
// as the shared history, strings, TRL's implicit prompt), each kind of bad pair reported with its
// line, rendering (the reply's mask only, TRL's prompt_len), truncation, batching (a pair never
// split, the prompt once, the same loss positions either way), row shares and statistics.
@testable import DataSchema
import ModelAssets
import XCTest

final class PreferenceDataTests: XCTestCase {
    static let good = #"{"prompt":[{"role":"user","content":"Capital of France?"}],"chosen":[{"role":"assistant","content":"Paris."}],"rejected":[{"role":"assistant","content":"Lyon."}]}"#

    func read(_ lines: [String], skipInvalid: Bool = true) throws -> PreferenceDataSet {
        try DataReader.readPreferences(bytes: Array(lines.joined(separator: "\n").utf8), file: "pairs.jsonl",
                                       options: ReadOptions(skipInvalid: skipInvalid))
    }

    func testAcceptedForms() throws {
        let data = try read([
            Self.good,
            // "messages" as the shared history ending in a user turn, with a system turn and an earlier exchange
            #"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"2+2?"}],"chosen":[{"role":"assistant","content":"4"}],"rejected":[{"role":"assistant","content":"5"}],"metadata":{"source":"x"}}"#,
            // strings: one user turn, one assistant turn each
            #"{"prompt":"2+3?","chosen":"5","rejected":"6"}"#,
            // TRL's implicit prompt: whole conversations, the common first turns are the prompt
            #"{"chosen":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}],"rejected":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Go away."}]}"#,
            // a reply that calls a tool and answers with its result
            #"{"prompt":[\#(TestData.weatherTools),{"role":"user","content":"Oslo?"}],"chosen":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Oslo"}}}]},{"role":"tool","content":"5C"},{"role":"assistant","content":"5C in Oslo."}],"rejected":[{"role":"assistant","content":"I cannot know."}]}"#,
        ], skipInvalid: false)
        XCTAssertEqual(data.samples.count, 5)
        XCTAssertEqual(data.summary.accepted, 5)
        XCTAssertEqual(data.samples[1].prompt.map(\.role), [.system, .user, .assistant, .user])
        XCTAssertEqual(data.samples[2].prompt, [Message(role: .user, content: "2+3?")])
        XCTAssertEqual(data.samples[2].chosen, [Message(role: .assistant, content: "5")])
        XCTAssertEqual(data.samples[3].prompt, [Message(role: .user, content: "Hi")])
        XCTAssertEqual(data.samples[3].rejected, [Message(role: .assistant, content: "Go away.")])
        XCTAssertEqual(data.samples[4].chosen.map(\.role), [.assistant, .tool, .assistant])
        XCTAssertEqual(data.samples[4].line, 5)
    }

    func testEachBadPairIsReportedWithItsLine() throws {
        let data = try read([
            Self.good,                                                                                       // 1 ok
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":[{"role":"assistant","content":"b"}]}"#,    // 2 no rejected
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":[{"role":"user","content":"b"}],"rejected":"c"}"#, // 3 reply not assistant
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":"b","rejected":"b"}"#,                       // 4 same reply
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":"b","rejected":"  "}"#,                      // 5 empty rejected
            #"{"prompt":[{"role":"user","content":"a"}],"messages":[],"chosen":"b","rejected":"c"}"#,         // 6 both synonyms
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":"b","rejected":"c","tools":[]}"#,            // 7 unknown key
            #"{"chosen":[{"role":"assistant","content":"b"}],"rejected":[{"role":"assistant","content":"c"}]}"#, // 8 no prompt
            #"{"prompt":[{"role":"assistant","content":"a"}],"chosen":"b","rejected":"c"}"#,                  // 9 prompt order
            #"{"prompt":5,"chosen":"b","rejected":"c"}"#,                                                     // 10 prompt type
            #"{"prompt":[{"role":"user","content":"a"}],"chosen":[{"role":"assistant","content":7}],"rejected":"c"}"#, // 11 content type
        ])
        let text = data.issues.map(\.description)
        func has(_ line: Int, _ fragment: String, file: StaticString = #filePath, l: UInt = #line) {
            XCTAssert(text.contains { $0.hasPrefix("pairs.jsonl:\(line): ") && $0.contains(fragment) },
                      "no issue on line \(line) containing '\(fragment)' in:\n\(text.joined(separator: "\n"))", file: file, line: l)
        }
        has(2, "has no \"rejected\"")
        has(3, "\"chosen\" begins with a user turn")
        has(4, "are the same reply")
        has(5, "prompt + \"rejected\": assistant turn has empty content")
        has(6, "both \"prompt\" and \"messages\"")
        has(7, "unknown key \"tools\" in a preference pair; put \"tools\" on the system message")
        has(8, "no \"prompt\"")
        has(9, "assistant turn is the first turn (turn 1)")
        has(10, "\"prompt\" must be an array of messages")
        has(11, "in \"chosen\": \"content\" of turn 1 must be a string")
        XCTAssertEqual(data.summary.accepted, 1)
        XCTAssertEqual(data.summary.rejected, 10)
        XCTAssertEqual(Set(data.issues.map(\.line)), Set(2...11))
        XCTAssertEqual(data.summary.rejectedByKind[.preference], 1)
        // without skipInvalid the read throws, listing them
        XCTAssertThrowsError(try read([Self.good, #"{"prompt":"a","chosen":"b","rejected":"b"}"#], skipInvalid: false)) { error in
            XCTAssert((error as? DataSchemaError)?.errorDescription?.contains("pairs.jsonl:2: ") == true, "\(error)")
        }
    }

    func testSupervisedReaderPointsAPairToThePreferenceObjectives() throws {
        let issues = try TestData.issues(Self.good + "\n" + #"{"messages":[{"role":"user","content":"a"}],"chosen":"b","rejected":"c"}"#)
        XCTAssertEqual(issues.count, 2)
        for i in issues { XCTAssert(i.contains("--objective dpo, ipo or orpo"), i) }
    }

    func testFileKindDetection() throws {
        let dir = try TestData.temporaryDirectory()
        let pairs = dir.appendingPathComponent("p.jsonl"), plain = dir.appendingPathComponent("s.jsonl")
        try ("\n{broken\n" + Self.good + "\n").write(to: pairs, atomically: true, encoding: .utf8)
        try #"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#.write(to: plain, atomically: true, encoding: .utf8)
        XCTAssertTrue(try DataReader.holdsPreferences(path: pairs.path))
        XCTAssertFalse(try DataReader.holdsPreferences(path: plain.path))
        XCTAssertEqual(try DataReader.readPreferences(path: pairs.path, options: ReadOptions(skipInvalid: true)).samples.count, 1)
    }

    let encoder = TrainingEncoder(tokenizer: ByteTokenizer(), template: FakeChatML(), maxSequenceLength: 512)

    func testRenderingMasksOnlyTheReply() throws {
        let data = try read([#"{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"},{"role":"user","content":"2+2?"}],"chosen":"4","rejected":"five"}"#], skipInvalid: false)
        let s = data.samples[0]
        let (c, r) = try encoder.encodePair(prompt: s.prompt, chosen: s.chosen, rejected: s.rejected)
        let tok = ByteTokenizer()
        XCTAssertEqual(tok.decode(c.tokens), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n")
        // the targets: the reply's content and end-of-turn only (the history's "Yo" is not trained)
        XCTAssertEqual(tok.decode(zip(c.tokens, c.isTarget).filter(\.1).map(\.0)), "4<|im_end|>")
        XCTAssertEqual(tok.decode(zip(r.tokens, r.isTarget).filter(\.1).map(\.0)), "five<|im_end|>")
        // the prompt (with its generation prompt) is exactly where the two part
        let set = try encoder.encode(data)
        let e = set.examples[0]
        XCTAssertEqual(e.sharedPositions, try encoder.encodePrompt(s.prompt).count - 1)
        XCTAssertEqual(e.chosen.targetTokenCount, 2)
        XCTAssertEqual(e.rejected.targetTokenCount, 5)
    }

    func testTruncationThatLeavesAReplyNothingIsAnIssue() throws {
        let data = try read([Self.good, #"{"prompt":"\#(String(repeating: "long ", count: 30))","chosen":"a","rejected":"b"}"#])
        let short = TrainingEncoder(tokenizer: ByteTokenizer(), template: FakeChatML(), maxSequenceLength: 60)
        XCTAssertThrowsError(try short.encode(data)) { error in
            XCTAssert("\(error.localizedDescription)".contains("pairs.jsonl:2: the \"chosen\" reply has no token left after truncating"), "\(error)")
        }
        let kept = try short.encode(data, skipInvalid: true)
        XCTAssertEqual(kept.examples.count, 1)
        XCTAssertEqual(kept.summary.rejectedByKind[.noTargetTokens], 1)
    }

    func pairsData() throws -> [PreferenceExample] {
        let lines = (0..<5).map { i in
            #"{"prompt":[{"role":"system","content":"Answer in one word."},{"role":"user","content":"Question \#(i)?"}],"chosen":"Answer\#(i)","rejected":"\#(String(repeating: "no", count: i + 1))"}"#
        }
        return try encoder.encode(try read(lines, skipInvalid: false)).examples
    }

    /// The loss positions of each sequence in a batch, as (sample, chosen?, [(input, target)]).
    func lossTokens(_ b: Batch) -> [[Int]] {
        b.preferencePairs.flatMap { [$0.chosen, $0.rejected] }.map { s in
            s.positions.filter { b.lossMask[s.row * b.length + $0] }.map { b.targets[s.row * b.length + $0] }
        }
    }

    func testBatchingLayoutsKeepPairsWholeAndTheSameTargets() throws {
        let examples = try pairsData()
        let layouts: [BatchOptions.Layout] = [.sharePrefix, .padToLongest, .padToFixed(200), .pack(400)]
        var reference: [[Int]]? = nil
        for layout in layouts {
            let batcher = try PreferenceBatcher(examples: examples, options: BatchOptions(batchSize: 2, layout: layout, shuffle: true, seed: 3))
            let batches = batcher.batches(epoch: 1)
            XCTAssertEqual(batches.count, batcher.batchCount(epoch: 1))
            let pairs = batches.flatMap(\.preferencePairs)
            XCTAssertEqual(pairs.count, 5, "\(layout)")
            XCTAssertEqual(pairs.map(\.chosen.sampleIndex), batcher.order(epoch: 1).map { examples[$0].sampleIndex }, "\(layout)")
            let tokens = batches.flatMap(lossTokens)
            if let reference { XCTAssertEqual(tokens, reference, "\(layout)") } else { reference = tokens }
            for b in batches {
                for (c, r) in b.preferencePairs {
                    // each sequence sees exactly its own example: prompt (shared or its own) then its tokens
                    let e = examples.first { $0.sampleIndex == c.sampleIndex }!
                    for (seq, x) in [(c, e.chosen), (r, e.rejected)] {
                        let own = seq.positions.map { b.inputIds[seq.row * b.length + $0] }
                        let prefix = (0..<seq.sharedPrompt).map { b.inputIds[seq.row * b.length + $0] }
                        XCTAssertEqual(prefix + own, x.inputs, "\(layout)")
                        XCTAssertEqual(seq.positions.map { b.positions[seq.row * b.length + $0] }, Array(seq.sharedPrompt..<x.count))
                    }
                    if layout == .sharePrefix { XCTAssertEqual(c.sharedPrompt, e.sharedPositions) } else { XCTAssertEqual(c.sharedPrompt, 0) }
                }
            }
        }
        // one pair per row except when packed; shares are whole rows, so whole pairs
        let b = try PreferenceBatcher(examples: examples, options: BatchOptions(batchSize: 3, layout: .sharePrefix, shuffle: false)).batches(epoch: 0)[0]
        XCTAssertEqual(b.batchSize, 3)
        let parts = (0..<2).compactMap { b.rowShare(rank: $0, of: 2) }
        XCTAssertEqual(parts.map(\.preferencePairCount), [2, 1])
        XCTAssertEqual(parts.flatMap(lossTokens), lossTokens(b))
        XCTAssertThrowsError(try PreferenceBatcher(examples: examples, options: BatchOptions(batchSize: 1, layout: .pack(20))))
    }

    func testStatistics() throws {
        let data = try read([Self.good, #"{"prompt":"2+3?","chosen":"5","rejected":"six"}"#], skipInvalid: false)
        let s = try PreferenceStats.compute(data, encoder: encoder)
        XCTAssertEqual(s.pairs, 2)
        XCTAssertEqual(s.promptTurnsByRole[.user], 2)
        XCTAssertEqual(s.chosenCharacters, "Paris.".count + 1)
        XCTAssertEqual(s.rejectedCharacters, "Lyon.".count + 3)
        let t = try XCTUnwrap(s.tokens)
        // byte tokens: a reply's target tokens are its bytes and <|im_end|>
        XCTAssertEqual(t.chosenTargetTokens, 6 + 1 + 1 + 1)
        XCTAssertEqual(t.rejectedTargetTokens, 5 + 1 + 3 + 1)
        let prompt1 = try encoder.encodePrompt([Message(role: .user, content: "Capital of France?")]).count
        let prompt2 = try encoder.encodePrompt([Message(role: .user, content: "2+3?")]).count
        XCTAssertEqual(t.promptTokens, prompt1 + prompt2)
        XCTAssertEqual(t.exceeding, 0)
    }
}
