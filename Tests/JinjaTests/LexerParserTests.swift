// The lexer and parser alone: whitespace control (trim_blocks, lstrip_blocks, `-` and `+`
// markers) as token text, operator precedence as the tree shape, and syntax errors with the
// line and column they name. The renderer's behaviour is held to Jinja2 in ReferenceCaseTests.
import XCTest
@testable import Jinja

final class LexerParserTests: XCTestCase {
    private func texts(_ source: String) throws -> [String] {
        try Lexer.tokenize(source).compactMap { if case let .text(s) = $0.kind { s } else { nil } }
    }

    func testTrimAndLstripBlocks() throws {
        // trim_blocks drops the newline after %}; lstrip_blocks the indentation before {%.
        XCTAssertEqual(try texts("a\n  {% if x %}\n  b\n  {% endif %}\nc"), ["a\n", "  b\n", "c"])
        // Not at a line start: kept.
        XCTAssertEqual(try texts("a {% if x %}b"), ["a ", "b"])
        // `{%+` keeps the indentation, `+%}` the newline; `{%-`/`-%}` strip all whitespace.
        XCTAssertEqual(try texts("a\n  {%+ if x +%}\nb"), ["a\n  ", "\nb"])
        XCTAssertEqual(try texts("a \n {%- if x -%} \n b"), ["a", "b"])
        // Variables are not lstripped; a comment is, and its newline is trimmed.
        XCTAssertEqual(try texts("  {{ x }}\n  {# c #}\nz"), ["  ", "\n", "z"])
        // One trailing newline of the template is dropped; CRLF becomes LF.
        XCTAssertEqual(try texts("a\r\nb\n"), ["a\nb"])
    }

    func testTokensInsideTags() throws {
        let kinds = try Lexer.tokenize("{{ 1_000 + 2.5e3 - 0x1F ~ 'a\\n' \"b\" // x.y }}").map(\.kind)
        XCTAssertEqual(kinds, [.variableBegin, .integer(1000), .op("+"), .float(2500), .op("-"), .integer(31), .op("~"),
                               .string("a\n"), .string("b"), .op("//"), .name("x"), .op("."), .name("y"), .variableEnd, .eof])
        // A dict literal's closing braces do not end the tag.
        let dict = try Lexer.tokenize("{{ {'a': {}} }}").map(\.kind)
        XCTAssertEqual(dict.last, .eof)
        XCTAssertEqual(dict.filter { $0 == .variableEnd }.count, 1)
    }

    private func shape(_ e: Expr) -> String {
        switch e.kind {
        case let .literal(v): return PythonText.repr(v)
        case let .name(n): return n
        case let .binary(op, a, b): return "(\(shape(a)) \(op) \(shape(b)))"
        case let .and(a, b): return "(\(shape(a)) and \(shape(b)))"
        case let .or(a, b): return "(\(shape(a)) or \(shape(b)))"
        case let .not(a): return "(not \(shape(a)))"
        case let .negate(a): return "(-\(shape(a)))"
        case let .filter(base, name, _, _): return "(\(base.map(shape) ?? "_")|\(name))"
        case let .test(base, name, _, negated): return "(\(shape(base)) is \(negated ? "not " : "")\(name))"
        case let .conditional(t, a, b): return "(\(shape(a)) if \(shape(t)) else \(b.map(shape) ?? "_"))"
        case let .attribute(b, n): return "\(shape(b)).\(n)"
        default: return "?"
        }
    }

    private func parseExpression(_ source: String) throws -> String {
        let nodes = try Parser.parse("{{ \(source) }}")
        guard case let .output(e) = nodes[0].kind else { return "" }
        return shape(e)
    }

    func testPrecedence() throws {
        XCTAssertEqual(try parseExpression("1 + 2 * 3"), "(1 + (2 * 3))")
        XCTAssertEqual(try parseExpression("a ~ b + c"), "((a ~ b) + c)")
        XCTAssertEqual(try parseExpression("-x|abs"), "((-x)|abs)")
        XCTAssertEqual(try parseExpression("not a == b and c or d"), "(((not (a == b)) and c) or d)")
        XCTAssertEqual(try parseExpression("a if b else c if d else e"), "(a if b else (c if d else e))")
        XCTAssertEqual(try parseExpression("2 ** 3 ** 2"), "((2 ** 3) ** 2)")
        XCTAssertEqual(try parseExpression("x.y is not defined"), "(x.y is not defined)")
        XCTAssertEqual(try parseExpression("a < b < c"), "((a < b) and (b < c))")
        XCTAssertEqual(try parseExpression("a not in b"), "(a not in b)")
    }

    func testSyntaxErrorsNameLineAndColumn() {
        func error(_ source: String) -> JinjaError? {
            do { _ = try JinjaTemplate(source); return nil } catch { return error }
        }
        let unknown = error("line one\n  {% frobnicate %}")
        XCTAssertEqual(unknown?.kind, .syntax)
        XCTAssertEqual(unknown?.line, 2)
        XCTAssertEqual(unknown?.column, 6)
        XCTAssertEqual(unknown?.message, "Encountered unknown tag 'frobnicate'.")
        let unclosed = error("{% for x in y %}\n{{ x }}")
        XCTAssertEqual(unclosed?.line, 2)
        XCTAssertTrue(unclosed?.message.contains("'endfor' or 'else'") ?? false)
        XCTAssertEqual(error("{{ 1 + }}")?.column, 8)
        XCTAssertEqual(error("a\nb {{ x|nofilter }}")?.message, "No filter named 'nofilter'.")
        XCTAssertEqual(error("a\nb {{ x|nofilter }}")?.line, 2)
        XCTAssertNil(error("{% if false %}{{ x|nofilter }}{% endif %}"), "inside an if the check waits for run time, as Jinja2's")
        XCTAssertEqual(error("{{ (1, 2] }}")?.message, "unexpected ']', expected ')'")
        XCTAssertEqual(error("{% include 'x' %}")?.kind, .syntax)
    }

    func testRuntimeErrorsNameLineAndColumn() throws {
        let t = try JinjaTemplate("ok\n{% for m in messages %}\n  {{ m.content + 1 }}\n{% endfor %}")
        XCTAssertThrowsError(try t.render(["messages": .list([.dict(JinjaDict([("content", .string("a"))]))])])) { e in
            let e = e as! JinjaError
            XCTAssertEqual(e.kind, .type)
            XCTAssertEqual(e.line, 3)
            XCTAssertEqual(e.column, 16)
            XCTAssertEqual(e.message, "can only concatenate str (not \"int\") to str")
            XCTAssertEqual(e.description, "template line 3, column 16: error: can only concatenate str (not \"int\") to str")
        }
        let raising = try JinjaTemplate("{{ raise_exception('System role not supported') }}")
        XCTAssertThrowsError(try raising.render([:])) { e in
            XCTAssertEqual((e as! JinjaError).kind, .raised)
            XCTAssertEqual((e as! JinjaError).message, "System role not supported")
        }
    }
}
