// Data transforms: schema injection into all samples, a range, or listed turns (then the
// replies are validated against the schema), bad turn references, and a custom transform.
import DataSchema
import ModelAssets
import XCTest

final class TransformTests: XCTestCase {
    let format = try! ResponseFormat(json: try! JSONValue.parse(
        #"{"type":"json_schema","json_schema":{"name":"Answer","schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}}"#))

    let lines = [
        #"[{"role":"user","content":"one"},{"role":"assistant","content":"{\"n\":1}"},{"role":"user","content":"two"},{"role":"assistant","content":"{\"n\":2}"}]"#,
        #"[{"role":"user","content":"three"},{"role":"assistant","content":"{\"n\":3}"}]"#,
        #"[{"role":"user","content":"four"},{"role":"assistant","content":"four"}]"#,
    ].joined(separator: "\n")

    func formats(_ data: DataSet) -> [[Bool]] {
        data.samples.map { $0.messages.map { $0.responseFormat != nil } }
    }

    func testInjectIntoAllSamplesValidatesReplies() throws {
        let data = try TestData.read(lines, transforms: [SchemaInjectionTransform(responseFormat: format)])
        XCTAssertEqual(formats(data), [[false, false, true, false], [true, false]])
        XCTAssertEqual(data.issues.map(\.description), [
            "train.jsonl:3: assistant reply (turn 2) to the response_format \"Answer\" of turn 1 is not JSON: unexpected 'f' where a value was expected (strings need double quotes) (column 1)",
        ])
    }

    func testInjectIntoARangeAndAllUserTurns() throws {
        let t = SchemaInjectionTransform(responseFormat: format, selection: .samples(0..<2), userTurns: .all)
        let data = try TestData.read(lines, skipInvalid: false, transforms: [t])
        XCTAssertEqual(formats(data), [[true, false, true, false], [true, false], [false, false]])
        let rendered = ChatRendering.chatMessages(data.samples[1].messages)[0].content
        XCTAssertTrue(rendered.hasPrefix("Respond with a JSON value that conforms to the JSON schema \"Answer\""), rendered)
        XCTAssertTrue(rendered.hasSuffix("</schema>\n\nthree"), rendered)
    }

    func testInjectIntoListedTurns() throws {
        let t = SchemaInjectionTransform(responseFormat: format, selection: .turns([TurnReference(sample: 0, turn: 0)]))
        XCTAssertEqual(formats(try TestData.read(lines, skipInvalid: false, transforms: [t])),
                       [[true, false, false, false], [false, false], [false, false]])
        let wrong = SchemaInjectionTransform(responseFormat: format, selection: .turns([TurnReference(sample: 1, turn: 1)]))
        let data = try TestData.read(lines, transforms: [wrong])
        XCTAssertEqual(data.issues.map(\.description), [
            "train.jsonl:2: data transform: schema injection names turn index 1 of sample 1, an assistant turn; only user turns take a response_format",
        ])
    }

    func testCustomTransform() throws {
        struct Shout: DataTransform {
            func transform(_ messages: [Message], sampleIndex: Int) throws -> [Message] {
                messages.map { var m = $0; if m.role == .user { m.content = m.content.uppercased() }; return m }
            }
        }
        let data = try TestData.read(lines, transforms: [Shout(), ClosureTransform { messages, index in
            index == 2 ? Array(messages.dropLast()) : messages
        }])
        XCTAssertEqual(data.samples.map { $0.messages[0].content }, ["ONE", "THREE"])
        XCTAssertEqual(data.issues.map(\.description),
                       ["train.jsonl:3: the sample has no assistant turn; training samples need at least one reply"])
    }
}
