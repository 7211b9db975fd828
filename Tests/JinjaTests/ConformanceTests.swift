// The conformance suite: real chat templates (Fixtures/templates, origins in SOURCES) rendered by
// transformers on conversations with one user turn, system + several turns, the training form,
// tools with calls and results (content "", absent, null), Unicode/quotes/whitespace, Qwen3's
// thinking switches and earlier thinking turns, and conversations a template refuses. Made by
// scripts/fixtures/make_chat_template_fixtures.py. Our rendering must equal transformers' byte for
// byte, with the same {% generation %} spans, and raise where it raised (with the template's own
// message for raise_exception).
import Foundation
import XCTest
@testable import Jinja

final class ConformanceTests: XCTestCase {
    static func fixturesFolder() throws -> URL {
        try XCTUnwrap(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
    }

    func testRealTemplatesRenderAsTransformers() throws {
        let folder = try Self.fixturesFolder()
        let data = try Data(contentsOf: folder.appendingPathComponent("chat_template_cases.json"))
        guard case let .dict(file) = try OrderedJSON.parse(String(decoding: data, as: UTF8.self)),
              case let .list(cases, _)? = file["cases"] else { return XCTFail("chat_template_cases.json has no cases") }
        var templates: [String: JinjaTemplate] = [:]
        var rendered = 0, raised = 0, withGeneration = 0
        let environment = JinjaEnvironment(date: JinjaDate(year: 2024, month: 7, day: 26, hour: 9, minute: 5, second: 3))
        for item in cases {
            guard case let .dict(c) = item, case let .string(file)? = c["template"], case let .string(conversation)? = c["conversation"],
                  case let .dict(kwargs)? = c["kwargs"], case let .dict(expected)? = c["expected"] else {
                XCTFail("malformed case")
                continue
            }
            let name = "\(file) / \(conversation)"
            if templates[file] == nil {
                let source = try String(contentsOf: folder.appendingPathComponent("templates").appendingPathComponent(file), encoding: .utf8)
                templates[file] = try JinjaTemplate(source)
            }
            var context: [String: JinjaValue] = [:]
            for (k, v) in kwargs.pairs { context[k] = v }
            context["messages"] = c["messages"] ?? .list([])
            context["tools"] = c["tools"] ?? JinjaValue.none
            context["documents"] = JinjaValue.none
            context["add_generation_prompt"] = c["add_generation_prompt"] ?? .bool(false)
            let result: Result<JinjaRendering, JinjaError>
            do { result = .success(try templates[file]!.render(context, environment: environment)) } catch { result = .failure(error) }
            switch (expected["out"], result) {
            case let (.string(want)?, .success(got)):
                rendered += 1
                XCTAssertEqual(got.text, want, name)
                var spans: [Range<Int>] = []
                if case let .list(pairs, _)? = expected["generation"] {
                    for p in pairs { if case let .list(se, _) = p, case let .int(s) = se[0], case let .int(e) = se[1] { spans.append(s..<e) } }
                }
                if !spans.isEmpty { withGeneration += 1 }
                XCTAssertEqual(got.generationRanges, spans, "\(name): {% generation %} spans")
            case let (.string(want)?, .failure(error)):
                XCTFail("\(name): raised \(error); transformers rendered \(PythonText.repr(.string(want)).prefix(200))")
            case let (nil, .success(got)):
                XCTFail("\(name): rendered \(PythonText.repr(.string(got.text)).prefix(200)); transformers raised \(PythonText.str(expected["error"] ?? .none))")
            case let (nil, .failure(error)):
                raised += 1
                if case .string("TemplateError")? = expected["type"], case let .string(message)? = expected["error"] {
                    XCTAssertEqual(error.kind, .raised, name)
                    XCTAssertEqual(error.message, message, name)
                }
            default:
                XCTFail("\(name): expected has neither out nor error")
            }
        }
        // The suite covers what it claims: many renderings, some refusals, some generation spans.
        XCTAssertGreaterThanOrEqual(templates.count, 16)
        XCTAssertGreaterThan(rendered, 100)
        XCTAssertGreaterThan(raised, 10)
        XCTAssertGreaterThan(withGeneration, 3)
    }
}
