// Tokens to the AST by recursive descent, with Jinja2's grammar and precedence (parser.py):
// conditional < or < and < not < comparisons (chained, `in`, `not in`) < + - < ~ < * / // % <
// ** < unary - + < postfix (. [] ()) < filters and tests. Statements: if/elif/else, for (tuple
// targets, `if` filter, else, recursive), set (also block form and namespace attributes), macro,
// call, filter, with, raw (the lexer's), break/continue, print, and transformers' `generation`.
// Refuses include/extends/import/block (no loader in a chat template). Nesting is bounded so a
// hostile template cannot exhaust the stack.

struct Parser {
    private var tokens: [Token]
    private var index = 0
    private var depth = 0
    /// Open statements, innermost last, for "looking for endfor" messages.
    private var tagStack: [String] = []
    static let maxDepth = 96

    init(tokens: [Token]) { self.tokens = tokens }

    static func parse(_ source: String) throws(JinjaError) -> [Node] {
        var parser = Parser(tokens: try Lexer.tokenize(source))
        let nodes = try parser.subparse(endTags: [])
        if case .eof = parser.current.kind {} else {
            throw parser.fail("unexpected \(parser.describe(parser.current))")
        }
        return nodes
    }

    // MARK: token stream

    private var current: Token { tokens[index] }
    private func peek(_ n: Int = 1) -> Token { tokens[min(index + n, tokens.count - 1)] }
    private var position: Position { Position(line: current.line, column: current.column) }

    private mutating func advance() -> Token {
        let t = tokens[index]
        if index < tokens.count - 1 { index += 1 }
        return t
    }

    private func fail(_ message: String, at token: Token? = nil) -> JinjaError {
        let t = token ?? current
        return JinjaError(kind: .syntax, message: message, line: t.line, column: t.column)
    }

    private func describe(_ t: Token) -> String {
        switch t.kind {
        case let .text(s): "template data \(PythonText.stringRepr(String(s.prefix(20))))"
        case .variableBegin: "'begin of print statement'"
        case .variableEnd: "'end of print statement'"
        case .blockBegin: "'begin of statement block'"
        case .blockEnd: "'end of statement block'"
        case let .name(n): "'\(n)'"
        case let .string(s): "string \(PythonText.stringRepr(s))"
        case let .integer(i): "integer \(i)"
        case let .float(d): "float \(PythonText.floatRepr(d))"
        case let .op(o): "'\(o)'"
        case .eof: "'end of template'"
        }
    }

    private func isOp(_ op: String) -> Bool {
        if case let .op(o) = current.kind { return o == op }
        return false
    }

    private func isName(_ name: String) -> Bool {
        if case let .name(n) = current.kind { return n == name }
        return false
    }

    private mutating func skipOp(_ op: String) -> Bool {
        if isOp(op) { _ = advance(); return true }
        return false
    }

    private mutating func skipName(_ name: String) -> Bool {
        if isName(name) { _ = advance(); return true }
        return false
    }

    private mutating func expectOp(_ op: String) throws(JinjaError) {
        guard skipOp(op) else { throw fail("expected '\(op)', got \(describe(current))") }
    }

    private mutating func expectName() throws(JinjaError) -> String {
        guard case let .name(n) = current.kind else { throw fail("expected a name, got \(describe(current))") }
        _ = advance()
        return n
    }

    private mutating func expectName(_ name: String) throws(JinjaError) {
        guard skipName(name) else { throw fail("expected '\(name)', got \(describe(current))") }
    }

    private mutating func expectBlockEnd() throws(JinjaError) {
        guard case .blockEnd = current.kind else { throw fail("expected end of statement block, got \(describe(current))") }
        _ = advance()
    }

    private mutating func enter() throws(JinjaError) {
        depth += 1
        if depth > Parser.maxDepth { throw JinjaError(kind: .limit, message: "the template nests deeper than \(Parser.maxDepth) levels", line: current.line, column: current.column) }
    }

    private mutating func leave() { depth -= 1 }

    // MARK: statements

    /// Nodes until a block whose tag name is one of `endTags` (left as the current token, after
    /// the block begin), or the end of the template.
    private mutating func subparse(endTags: [String]) throws(JinjaError) -> [Node] {
        var nodes: [Node] = []
        while true {
            let t = current
            switch t.kind {
            case let .text(s):
                _ = advance()
                nodes.append(Node(kind: .text(s), position: Position(line: t.line, column: t.column)))
            case .variableBegin:
                _ = advance()
                let e = try parseTuple()
                guard case .variableEnd = current.kind else { throw fail("expected end of print statement, got \(describe(current))") }
                _ = advance()
                nodes.append(Node(kind: .output(e), position: e.position))
            case .blockBegin:
                _ = advance()
                if case let .name(n) = current.kind, endTags.contains(n) { return nodes }
                nodes.append(try parseStatement())
            case .eof:
                if !endTags.isEmpty {
                    let wanted = endTags.map { "'\($0)'" }.joined(separator: " or ")
                    let inner = tagStack.last.map { " The innermost block that needs to be closed is '\($0)'." } ?? ""
                    throw fail("Unexpected end of template. Jinja was looking for the following tags: \(wanted).\(inner)")
                }
                return nodes
            default:
                throw fail("unexpected \(describe(t))")
            }
        }
    }

    /// `%}` then the body up to one of `endTags`; the end tag's name is consumed and returned.
    private mutating func parseBody(_ endTags: [String]) throws(JinjaError) -> ([Node], String) {
        try expectBlockEnd()
        let body = try subparse(endTags: endTags)
        let tag = try expectName()
        return (body, tag)
    }

    private mutating func parseStatement() throws(JinjaError) -> Node {
        try enter()
        defer { leave() }
        let start = position
        guard case let .name(tag) = current.kind else { throw fail("tag name expected") }
        tagStack.append(tag)
        defer { tagStack.removeLast() }
        _ = advance()
        let kind: Node.Kind
        switch tag {
        case "if": kind = try parseIf()
        case "for": kind = try parseFor()
        case "set": kind = try parseSet()
        case "macro": kind = try parseMacro()
        case "call": kind = try parseCallBlock()
        case "filter":
            let filters = try parseFilterList()
            let (body, _) = try parseBody(["endfilter"])
            kind = .filterBlock(filters: filters, body: body)
        case "with": kind = try parseWith()
        case "generation":
            let (body, _) = try parseBody(["endgeneration"])
            kind = .generation(body)
        case "print":
            kind = .output(try parseTuple())
        case "break", "continue":
            guard tagStack.dropLast().contains("for") else { throw fail("'\(tag)' outside of a for loop", at: tokens[index - 1]) }
            kind = tag == "break" ? .breakLoop : .continueLoop
        case "include", "extends", "import", "from", "block":
            throw fail("'\(tag)' is not supported in a chat template (there is no template loader)", at: tokens[index - 1])
        default:
            throw fail("Encountered unknown tag '\(tag)'.", at: tokens[index - 1])
        }
        try expectBlockEnd()
        return Node(kind: kind, position: start)
    }

    private mutating func parseIf() throws(JinjaError) -> Node.Kind {
        var branches: [(Expr, [Node])] = []
        var otherwise: [Node] = []
        while true {
            let test = try parseTuple(withCondition: false)
            let (body, tag) = try parseBody(["elif", "else", "endif"])
            branches.append((test, body))
            if tag == "elif" { continue }
            if tag == "else" { (otherwise, _) = try parseBody(["endif"]) }
            break
        }
        return .ifBlock(branches: branches, otherwise: otherwise)
    }

    private mutating func parseFor() throws(JinjaError) -> Node.Kind {
        let target = try parseAssignTarget(endNames: ["in"], withNamespace: false)
        try expectName("in")
        let iterable = try parseTuple(withCondition: false, endNames: ["recursive"])
        var condition: Expr?
        if skipName("if") { condition = try parseExpression() }
        let recursive = skipName("recursive")
        let (body, tag) = try parseBody(["endfor", "else"])
        var otherwise: [Node] = []
        if tag == "else" { (otherwise, _) = try parseBody(["endfor"]) }
        return .forLoop(target: target, iterable: iterable, condition: condition, body: body, otherwise: otherwise, recursive: recursive)
    }

    private mutating func parseSet() throws(JinjaError) -> Node.Kind {
        let target = try parseAssignTarget(endNames: [], withNamespace: true)
        if skipOp("=") { return .set(target, try parseTuple()) }
        let filters = skipOp("|") ? try parseFilterList() : []
        let (body, _) = try parseBody(["endset"])
        return .setBlock(target, filters: filters, body: body)
    }

    private mutating func parseSignature() throws(JinjaError) -> [(String, Expr?)] {
        var params: [(String, Expr?)] = []
        try expectOp("(")
        while !isOp(")") {
            if !params.isEmpty { try expectOp(",") }
            let name = try expectName()
            var value: Expr?
            if skipOp("=") { value = try parseExpression() } else if params.contains(where: { $0.1 != nil }) {
                throw fail("non-default argument follows default argument")
            }
            params.append((name, value))
        }
        try expectOp(")")
        return params
    }

    private mutating func parseMacro() throws(JinjaError) -> Node.Kind {
        let name = try expectName()
        let params = try parseSignature()
        let (body, _) = try parseBody(["endmacro"])
        return .macro(name: name, parameters: params, body: body)
    }

    private mutating func parseCallBlock() throws(JinjaError) -> Node.Kind {
        let params = isOp("(") ? try parseSignature() : []
        let call = try parseExpression()
        guard case .call = call.kind else { throw fail("expected call", at: nil) }
        let (body, _) = try parseBody(["endcall"])
        return .callBlock(call: call, parameters: params, body: body)
    }

    private mutating func parseWith() throws(JinjaError) -> Node.Kind {
        var assignments: [(Target, Expr)] = []
        while true {
            if case .blockEnd = current.kind { break }
            if !assignments.isEmpty { try expectOp(",") }
            let target = try parseAssignTarget(endNames: [], withNamespace: false)
            try expectOp("=")
            assignments.append((target, try parseExpression()))
        }
        let (body, _) = try parseBody(["endwith"])
        return .with(assignments: assignments, body: body)
    }

    private mutating func parseAssignTarget(endNames: Set<String>, withNamespace: Bool) throws(JinjaError) -> Target {
        var targets: [Target] = []
        var isTuple = false
        while true {
            if !targets.isEmpty { try expectOp(",") }
            if isTupleEnd(endNames) { break }
            let t = current
            let name = try expectName()
            if withNamespace && isOp(".") {
                _ = advance()
                let attribute = try expectName()
                targets.append(.attribute(Expr(kind: .name(name), position: Position(line: t.line, column: t.column)), attribute))
            } else {
                targets.append(.name(name))
            }
            if isOp(",") { isTuple = true } else { break }
        }
        if !isTuple, let only = targets.first { return only }
        if targets.isEmpty { throw fail("expected an assignment target, got \(describe(current))") }
        return .tuple(targets)
    }

    // MARK: expressions

    private func isTupleEnd(_ endNames: Set<String>) -> Bool {
        switch current.kind {
        case .variableEnd, .blockEnd: return true
        case let .op(o): return o == ")"
        case let .name(n): return endNames.contains(n)
        default: return false
        }
    }

    /// Expressions separated by commas make a tuple (`{{ a, b }}`); one alone is itself.
    private mutating func parseTuple(withCondition: Bool = true, endNames: Set<String> = [], explicitParentheses: Bool = false) throws(JinjaError) -> Expr {
        let start = position
        var items: [Expr] = []
        var isTuple = false
        while true {
            if !items.isEmpty { try expectOp(",") }
            if isTupleEnd(endNames) { break }
            items.append(withCondition ? try parseExpression() : try parseOr())
            if isOp(",") { isTuple = true } else { break }
        }
        if !isTuple {
            if let only = items.first { return only }
            if !explicitParentheses { throw fail("Expected an expression, got \(describe(current))") }
        }
        return Expr(kind: .tuple(items), position: start)
    }

    private mutating func parseExpression() throws(JinjaError) -> Expr {
        try enter()
        defer { leave() }
        var expr = try parseOr()
        while isName("if") {
            let p = position
            _ = advance()
            let test = try parseOr()
            var otherwise: Expr?
            if skipName("else") { otherwise = try parseExpression() }
            expr = Expr(kind: .conditional(test: test, then: expr, otherwise: otherwise), position: p)
        }
        return expr
    }

    private mutating func parseOr() throws(JinjaError) -> Expr {
        var left = try parseAnd()
        while isName("or") {
            let p = position
            _ = advance()
            left = Expr(kind: .or(left, try parseAnd()), position: p)
        }
        return left
    }

    private mutating func parseAnd() throws(JinjaError) -> Expr {
        var left = try parseNot()
        while isName("and") {
            let p = position
            _ = advance()
            left = Expr(kind: .and(left, try parseNot()), position: p)
        }
        return left
    }

    private mutating func parseNot() throws(JinjaError) -> Expr {
        if isName("not") {
            let p = position
            _ = advance()
            try enter()
            defer { leave() }
            return Expr(kind: .not(try parseNot()), position: p)
        }
        return try parseCompare()
    }

    private mutating func parseCompare() throws(JinjaError) -> Expr {
        let first = try parseMath1()
        var expr = first
        var previous = first
        // a < b < c is (a < b) and (b < c), with b evaluated once in Python; b is pure here.
        var chain: Expr?
        while true {
            let p = position
            var op: String?
            if case let .op(o) = current.kind, ["==", "!=", "<", ">", "<=", ">="].contains(o) {
                op = o
                _ = advance()
            } else if isName("in") {
                op = "in"
                _ = advance()
            } else if isName("not"), case .name("in") = peek().kind {
                op = "not in"
                _ = advance(); _ = advance()
            }
            guard let op else { break }
            let right = try parseMath1()
            let link = Expr(kind: .binary(op, previous, right), position: p)
            chain = chain.map { Expr(kind: .and($0, link), position: p) } ?? link
            previous = right
            expr = chain!
        }
        return expr
    }

    private mutating func parseMath1() throws(JinjaError) -> Expr {
        var left = try parseConcat()
        while case let .op(o) = current.kind, o == "+" || o == "-" {
            let p = position
            _ = advance()
            left = Expr(kind: .binary(o, left, try parseConcat()), position: p)
        }
        return left
    }

    private mutating func parseConcat() throws(JinjaError) -> Expr {
        var left = try parseMath2()
        while isOp("~") {
            let p = position
            _ = advance()
            left = Expr(kind: .binary("~", left, try parseMath2()), position: p)
        }
        return left
    }

    private mutating func parseMath2() throws(JinjaError) -> Expr {
        var left = try parsePow()
        while case let .op(o) = current.kind, ["*", "/", "//", "%"].contains(o) {
            let p = position
            _ = advance()
            left = Expr(kind: .binary(o, left, try parsePow()), position: p)
        }
        return left
    }

    private mutating func parsePow() throws(JinjaError) -> Expr {
        var left = try parseUnary()
        while isOp("**") {
            let p = position
            _ = advance()
            left = Expr(kind: .binary("**", left, try parseUnary()), position: p)
        }
        return left
    }

    private mutating func parseUnary(withFilter: Bool = true) throws(JinjaError) -> Expr {
        try enter()
        defer { leave() }
        let p = position
        var node: Expr
        if skipOp("-") {
            node = Expr(kind: .negate(try parseUnary(withFilter: false)), position: p)
        } else if skipOp("+") {
            node = Expr(kind: .plus(try parseUnary(withFilter: false)), position: p)
        } else {
            node = try parsePrimary()
        }
        node = try parsePostfix(node)
        if withFilter { node = try parseFilterExpression(node) }
        return node
    }

    private mutating func parsePrimary() throws(JinjaError) -> Expr {
        let t = current
        let p = position
        switch t.kind {
        case let .name(n):
            _ = advance()
            switch n {
            case "true", "True": return Expr(kind: .literal(.bool(true)), position: p)
            case "false", "False": return Expr(kind: .literal(.bool(false)), position: p)
            case "none", "None": return Expr(kind: .literal(.none), position: p)
            default: return Expr(kind: .name(n), position: p)
            }
        case let .string(s):
            _ = advance()
            var text = s
            while case let .string(more) = current.kind { text += more; _ = advance() }
            return Expr(kind: .literal(.string(text)), position: p)
        case let .integer(i):
            _ = advance()
            return Expr(kind: .literal(.int(i)), position: p)
        case let .float(d):
            _ = advance()
            return Expr(kind: .literal(.float(d)), position: p)
        case .op("("):
            _ = advance()
            let e = try parseTuple(explicitParentheses: true)
            try expectOp(")")
            return e
        case .op("["):
            _ = advance()
            var items: [Expr] = []
            while !isOp("]") {
                if !items.isEmpty { try expectOp(",") }
                if isOp("]") { break }
                items.append(try parseExpression())
            }
            try expectOp("]")
            return Expr(kind: .list(items), position: p)
        case .op("{"):
            _ = advance()
            var pairs: [(Expr, Expr)] = []
            while !isOp("}") {
                if !pairs.isEmpty { try expectOp(",") }
                if isOp("}") { break }
                let key = try parseExpression()
                try expectOp(":")
                pairs.append((key, try parseExpression()))
            }
            try expectOp("}")
            return Expr(kind: .dict(pairs), position: p)
        default:
            throw fail("unexpected \(describe(t))")
        }
    }

    private mutating func parsePostfix(_ start: Expr) throws(JinjaError) -> Expr {
        var node = start
        while true {
            let p = position
            if skipOp(".") {
                switch current.kind {
                case let .name(n):
                    _ = advance()
                    node = Expr(kind: .attribute(node, n), position: p)
                case let .integer(i):
                    _ = advance()
                    node = Expr(kind: .subscript(node, Expr(kind: .literal(.int(i)), position: p)), position: p)
                default:
                    throw fail("expected name or number after '.', got \(describe(current))")
                }
            } else if skipOp("[") {
                var args: [Expr] = []
                while !isOp("]") {
                    if !args.isEmpty { try expectOp(",") }
                    if isOp("]") { break }
                    args.append(try parseSubscribed())
                }
                try expectOp("]")
                guard !args.isEmpty else { throw fail("expected a subscript") }
                let index = args.count == 1 ? args[0] : Expr(kind: .tuple(args), position: p)
                node = Expr(kind: .subscript(node, index), position: p)
            } else if isOp("(") {
                node = try parseCall(node)
            } else {
                return node
            }
        }
    }

    /// One subscript: an expression or a slice `a:b:c` with any part left out.
    private mutating func parseSubscribed() throws(JinjaError) -> Expr {
        let p = position
        var parts: [Expr?] = []
        if isOp(":") {
            parts.append(nil)
        } else {
            let e = try parseExpression()
            guard isOp(":") else { return e }
            parts.append(e)
        }
        _ = advance()  // ':'
        if isOp("]") || isOp(",") { parts.append(nil) } else if isOp(":") { parts.append(nil) } else { parts.append(try parseExpression()) }
        if skipOp(":") {
            if isOp("]") || isOp(",") { parts.append(nil) } else { parts.append(try parseExpression()) }
        } else {
            parts.append(nil)
        }
        return Expr(kind: .slice(start: parts[0], stop: parts[1], step: parts[2]), position: p)
    }

    private mutating func parseCallArguments() throws(JinjaError) -> ([Expr], [(String, Expr)]) {
        try expectOp("(")
        var args: [Expr] = []
        var kwargs: [(String, Expr)] = []
        while !isOp(")") {
            if !args.isEmpty || !kwargs.isEmpty { try expectOp(",") }
            if isOp(")") { break }
            if case let .name(n) = current.kind, case .op("=") = peek().kind {
                _ = advance(); _ = advance()
                kwargs.append((n, try parseExpression()))
            } else {
                if !kwargs.isEmpty { throw fail("invalid syntax for function call expression: positional argument after keyword argument") }
                args.append(try parseExpression())
            }
        }
        try expectOp(")")
        return (args, kwargs)
    }

    private mutating func parseCall(_ callee: Expr) throws(JinjaError) -> Expr {
        let p = position
        let (args, kwargs) = try parseCallArguments()
        return Expr(kind: .call(callee, args: args, kwargs: kwargs), position: p)
    }

    private mutating func parseFilterExpression(_ start: Expr) throws(JinjaError) -> Expr {
        var node = start
        while true {
            if skipOp("|") {
                node = try parseFilter(node)
            } else if isName("is") {
                node = try parseTest(node)
            } else if isOp("(") {
                node = try parseCall(node)
            } else {
                return node
            }
        }
    }

    /// One filter `name(args)` (the `|` already read) applied to `base` (nil in filter blocks).
    private mutating func parseFilter(_ base: Expr?) throws(JinjaError) -> Expr {
        let p = position
        var name = try expectName()
        while isOp(".") { _ = advance(); name += "." + (try expectName()) }
        var args: [Expr] = []
        var kwargs: [(String, Expr)] = []
        if isOp("(") { (args, kwargs) = try parseCallArguments() }
        return Expr(kind: .filter(base, name: name, args: args, kwargs: kwargs), position: p)
    }

    /// `f(args) | g ...` for `{% filter %}` and `{% set x | f %}`: each with no base, in order.
    private mutating func parseFilterList() throws(JinjaError) -> [Expr] {
        var out = [try parseFilter(nil)]
        while skipOp("|") { out.append(try parseFilter(nil)) }
        return out
    }

    private mutating func parseTest(_ subject: Expr) throws(JinjaError) -> Expr {
        let p = position
        _ = advance()  // is
        let negated = skipName("not")
        var name = try expectName()
        while isOp(".") { _ = advance(); name += "." + (try expectName()) }
        var args: [Expr] = []
        if isOp("(") {
            let (a, kw) = try parseCallArguments()
            args = a + kw.map(\.1)
        } else {
            switch current.kind {
            case .name("else"), .name("or"), .name("and"):
                break
            case .name("is"):
                throw fail("You cannot chain multiple tests with is")
            case .name, .string, .integer, .float, .op("("), .op("["), .op("{"):
                args = [try parsePostfix(try parsePrimary())]
            default:
                break
            }
        }
        return Expr(kind: .test(subject, name: name, args: args, negated: negated), position: p)
    }
}
