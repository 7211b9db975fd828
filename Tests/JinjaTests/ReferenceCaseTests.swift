// The engine against Jinja2 itself: every case in Fixtures/jinja_cases.json (made by
// scripts/fixtures/make_jinja_fixtures.py from scripts/fixtures/jinja_cases.py with
// transformers' own compiled environment) renders to the same bytes, or raises where Jinja2
// raised — with the template's own message for raise_exception.
import Foundation
import XCTest
@testable import Jinja

final class ReferenceCaseTests: XCTestCase {
    func testEveryCaseMatchesJinja2() throws {
        let url = try XCTUnwrap(Bundle.module.url(forResource: "jinja_cases", withExtension: "json", subdirectory: "Fixtures"))
        guard case let .dict(file) = try OrderedJSON.parse(String(decoding: try Data(contentsOf: url), as: UTF8.self)),
              case let .list(cases, _)? = file["cases"] else { return XCTFail("jinja_cases.json has no \"cases\" list") }
        XCTAssertGreaterThan(cases.count, 100)
        let environment = JinjaEnvironment(date: JinjaDate(year: 2024, month: 7, day: 26, hour: 9, minute: 5, second: 3))
        var failures = 0
        for item in cases {
            guard case let .dict(c) = item, case let .string(name)? = c["name"], case let .string(source)? = c["template"],
                  case let .dict(context)? = c["context"], case let .dict(expected)? = c["expected"] else {
                XCTFail("malformed case \(PythonText.repr(item).prefix(80))")
                continue
            }
            var variables: [String: JinjaValue] = [:]
            for (k, v) in context.pairs { variables[k] = v }
            let result: Result<String, JinjaError>
            do {
                result = .success(try JinjaTemplate(source).render(variables, environment: environment).text)
            } catch {
                result = .failure(error)
            }
            switch (expected["out"], result) {
            case let (.string(want)?, .success(got)):
                if got != want { failures += 1; XCTFail("\(name): rendered \(PythonText.repr(.string(got))), Jinja2 \(PythonText.repr(.string(want)))") }
            case let (.string(want)?, .failure(error)):
                failures += 1
                XCTFail("\(name): raised \(error), Jinja2 rendered \(PythonText.repr(.string(want)))")
            case let (nil, .success(got)):
                failures += 1
                XCTFail("\(name): rendered \(PythonText.repr(.string(got))), Jinja2 raised \(PythonText.str(expected["error"] ?? .none))")
            case let (nil, .failure(error)):
                if case .string("TemplateError")? = expected["type"], case let .string(message)? = expected["error"] {
                    XCTAssertEqual(error.kind, .raised, name)
                    XCTAssertEqual(error.message, message, name)
                }
            default:
                XCTFail("\(name): expected has neither out nor error")
            }
        }
        XCTAssertEqual(failures, 0)
    }
}
