// Hostile templates terminate with a `.limit` error instead of running away: unbounded macro
// recursion, loops past the iteration bound, output past the size bound (printed, built in
// variables, or repeated), and nesting past the parser's depth bound.
import XCTest
@testable import Jinja

final class LimitTests: XCTestCase {
    private let small = JinjaEnvironment(limits: JinjaLimits(maxOutputBytes: 1 << 16, maxCallDepth: 50, maxIterations: 10_000,
                                                             maxCollectionCount: 10_000))

    private func limitError(_ source: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let t = try JinjaTemplate(source)
            _ = try t.render([:], environment: small)
            XCTFail("rendered without hitting a bound", file: file, line: line)
        } catch {
            XCTAssertEqual(error.kind, .limit, "\(error)", file: file, line: line)
        }
    }

    func testBoundsStopHostileTemplates() {
        limitError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")
        limitError("{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}{% endfor %}{% endfor %}{% endfor %}")
        limitError("{% for i in range(9000) %}{{ 'xxxxxxxxxxxxxxxxxxxx' }}{% endfor %}")
        limitError("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
        limitError("{{ 'a' * 100000000000 }}")
        limitError("{{ [0] * 100000000 }}")
        limitError("{{ range(100000000)|length }}")
        limitError("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
        limitError("{{ " + String(repeating: "(", count: 500) + "1" + String(repeating: ")", count: 500) + " }}")
        limitError(String(repeating: "{% if true %}", count: 200) + String(repeating: "{% endif %}", count: 200))
        limitError("{{ 2 ** 70 }}")
    }

    func testDefaultBoundsLeaveRealWorkAlone() throws {
        // A few thousand messages through a typical template stay well inside the defaults.
        let t = try JinjaTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
        let messages = JinjaValue.list((0..<5000).map { i in .dict(JinjaDict([("role", .string("user")), ("content", .string("message \(i)"))])) })
        let digits: Int = (0..<5000).map { String($0).count }.reduce(0, +)
        let text = try t.render(["messages": messages]).text
        XCTAssertEqual(text.utf8.count, 5000 * 36 + digits)
    }
}
