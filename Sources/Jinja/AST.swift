// The parsed template: expressions and statements, each with the line and column it starts at
// (errors while rendering name them). Shapes follow jinja2/nodes.py for the subset chat
// templates use; `generation` is transformers' `{% generation %}` extension tag.

struct Position: Equatable, Sendable {
    var line: Int
    var column: Int
}

struct Expr: Sendable {
    indirect enum Kind: Sendable {
        case literal(JinjaValue)
        case name(String)
        case list([Expr])
        case tuple([Expr])
        case dict([(Expr, Expr)])
        case attribute(Expr, String)
        case `subscript`(Expr, Expr)
        case slice(start: Expr?, stop: Expr?, step: Expr?)
        case call(Expr, args: [Expr], kwargs: [(String, Expr)])
        /// `value | name(args)`; `value` is nil inside `{% filter %}` blocks.
        case filter(Expr?, name: String, args: [Expr], kwargs: [(String, Expr)])
        case test(Expr, name: String, args: [Expr], negated: Bool)
        case not(Expr)
        case negate(Expr)
        case plus(Expr)
        case binary(String, Expr, Expr)
        case and(Expr, Expr)
        case or(Expr, Expr)
        case conditional(test: Expr, then: Expr, otherwise: Expr?)
    }
    var kind: Kind
    var position: Position
}

/// What `for` and `set` assign to.
enum Target: Sendable {
    case name(String)
    case tuple([Target])
    /// `ns.attribute` (namespace objects only).
    case attribute(Expr, String)
}

struct Node: Sendable {
    indirect enum Kind: Sendable {
        case text(String)
        case output(Expr)
        case ifBlock(branches: [(Expr, [Node])], otherwise: [Node])
        case forLoop(target: Target, iterable: Expr, condition: Expr?, body: [Node], otherwise: [Node], recursive: Bool)
        case set(Target, Expr)
        case setBlock(Target, filters: [Expr], body: [Node])
        case macro(name: String, parameters: [(String, Expr?)], body: [Node])
        case callBlock(call: Expr, parameters: [(String, Expr?)], body: [Node])
        case filterBlock(filters: [Expr], body: [Node])
        case with(assignments: [(Target, Expr)], body: [Node])
        case generation([Node])
        case breakLoop
        case continueLoop
    }
    var kind: Kind
    var position: Position
}
