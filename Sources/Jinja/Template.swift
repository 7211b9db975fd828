// The public face of the engine: a parsed template, the environment it renders in (the date
// `strftime_now` sees, the bounds that stop hostile templates) and the rendered result with the
// spans of `{% generation %}` blocks. Compile-time checks follow Jinja2: unknown filters and
// tests are errors when the template is made, not when a branch first runs.
import Foundation

/// Bounds that make every template terminate in bounded memory.
public struct JinjaLimits: Sendable, Equatable {
    /// Bytes of text a render may produce, counting every buffer (set blocks, macro bodies)
    /// and every string an operation builds (`~`, `*`, `join`, `replace`).
    public var maxOutputBytes: Int
    /// Nested macro calls.
    public var maxCallDepth: Int
    /// Loop iterations over the whole render (nested loops count each inner iteration).
    public var maxIterations: Int
    /// Items in one list or dict a template builds (`range`, `+`, `*`).
    public var maxCollectionCount: Int

    public init(maxOutputBytes: Int = 16 << 20, maxCallDepth: Int = 200, maxIterations: Int = 1_000_000,
                maxCollectionCount: Int = 1_000_000) {
        self.maxOutputBytes = maxOutputBytes
        self.maxCallDepth = maxCallDepth
        self.maxIterations = maxIterations
        self.maxCollectionCount = maxCollectionCount
    }
}

/// A calendar date and time as `strftime_now` formats it (transformers' `datetime.now()`).
public struct JinjaDate: Sendable, Equatable {
    public var year: Int, month: Int, day: Int
    public var hour: Int, minute: Int, second: Int

    public init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// The local date and time now, as Python's `datetime.now()`.
    public static func now() -> JinjaDate {
        let c = Calendar.current.dateComponents([.year, .month, .day, .hour, .minute, .second], from: Date())
        return JinjaDate(year: c.year!, month: c.month!, day: c.day!, hour: c.hour!, minute: c.minute!, second: c.second!)
    }
}

public struct JinjaEnvironment: Sendable {
    /// What `strftime_now` formats; nil means the time of the call.
    public var date: JinjaDate?
    public var limits: JinjaLimits

    public init(date: JinjaDate? = nil, limits: JinjaLimits = JinjaLimits()) {
        self.date = date
        self.limits = limits
    }
}

/// A rendered template: its text and where its `{% generation %}` blocks put their output.
public struct JinjaRendering: Sendable, Equatable {
    public var text: String
    /// UTF-8 byte ranges of `text` produced by `{% generation %}` blocks, in order.
    public var generationRanges: [Range<Int>]

    public init(text: String, generationRanges: [Range<Int>]) {
        self.text = text
        self.generationRanges = generationRanges
    }
}

public struct JinjaTemplate: Sendable {
    let nodes: [Node]
    /// Whether the template has a `{% generation %}` block anywhere.
    public let hasGenerationBlocks: Bool
    /// The top-level names the template reads (`tools`, `messages`, `enable_thinking`, ...).
    public let referencedNames: Set<String>
    /// The attribute and constant item names it reads (`message.tool_calls`, `message['content']`).
    public let referencedAttributes: Set<String>

    /// Parses `source`; a syntax error, an unknown filter or an unknown test throws with its
    /// line and column.
    public init(_ source: String) throws(JinjaError) {
        nodes = try Parser.parse(source)
        var check = Checker()
        try check.nodes(nodes)
        hasGenerationBlocks = check.hasGeneration
        referencedNames = check.names
        referencedAttributes = check.attributes
    }

    /// Renders with `context` as the template's variables (beside the globals `range`,
    /// `namespace`, `dict`, `raise_exception`, `strftime_now`, `cycler`, `joiner`).
    public func render(_ context: [String: JinjaValue], environment: JinjaEnvironment = JinjaEnvironment()) throws(JinjaError) -> JinjaRendering {
        let renderer = Renderer(environment: environment)
        do {
            return try renderer.render(nodes, context: context)
        } catch let error as JinjaError {
            throw error
        } catch {
            throw JinjaError(kind: .runtime, message: "\(error)", line: 1, column: 1)
        }
    }
}

/// Walks the tree once after parsing: filter and test names must exist (Jinja2 checks this at
/// compile time, except directly inside an `if` statement or an inline if-expression, where the
/// check waits until the filter runs), and notes what the template uses.
struct Checker {
    var hasGeneration = false
    var names: Set<String> = []
    var attributes: Set<String> = []
    /// Inside an if statement's test or branches, or an inline if (Jinja's "soft frame").
    var soft = false

    /// Visits with `soft` set for the duration (an if) or cleared (a new frame: loops, macros...).
    mutating func with(soft value: Bool, _ body: (inout Checker) throws(JinjaError) -> Void) throws(JinjaError) {
        let saved = soft
        soft = value
        defer { soft = saved }
        try body(&self)
    }

    mutating func nodes(_ list: [Node]) throws(JinjaError) {
        for n in list { try node(n) }
    }

    mutating func node(_ n: Node) throws(JinjaError) {
        switch n.kind {
        case .text, .breakLoop, .continueLoop: break
        case let .output(e): try expr(e)
        case let .ifBlock(branches, otherwise):
            try with(soft: true) { c throws(JinjaError) in
                for (t, body) in branches { try c.expr(t); try c.nodes(body) }
                try c.nodes(otherwise)
            }
        case let .forLoop(target, iterable, condition, body, otherwise, _):
            try self.target(target)
            try expr(iterable)
            try with(soft: false) { c throws(JinjaError) in
                if let condition { try c.expr(condition) }
                try c.nodes(body)
            }
            try nodes(otherwise)
        case let .set(t, e): try target(t); try expr(e)
        case let .setBlock(t, filters, body):
            try target(t)
            try with(soft: false) { c throws(JinjaError) in
                for f in filters { try c.expr(f) }
                try c.nodes(body)
            }
        case let .macro(_, params, body):
            try with(soft: false) { c throws(JinjaError) in
                for (_, d) in params { if let d { try c.expr(d) } }
                try c.nodes(body)
            }
        case let .callBlock(call, params, body):
            try expr(call)
            try with(soft: false) { c throws(JinjaError) in
                for (_, d) in params { if let d { try c.expr(d) } }
                try c.nodes(body)
            }
        case let .filterBlock(filters, body):
            try with(soft: false) { c throws(JinjaError) in
                for f in filters { try c.expr(f) }
                try c.nodes(body)
            }
        case let .with(assignments, body):
            for (t, e) in assignments { try target(t); try expr(e) }
            try with(soft: false) { c throws(JinjaError) in try c.nodes(body) }
        case let .generation(body):
            hasGeneration = true
            try with(soft: false) { c throws(JinjaError) in try c.nodes(body) }
        }
    }

    mutating func target(_ t: Target) throws(JinjaError) {
        switch t {
        case .name: break
        case let .tuple(items): for i in items { try target(i) }
        case let .attribute(e, _): try expr(e)
        }
    }

    mutating func expr(_ e: Expr) throws(JinjaError) {
        switch e.kind {
        case .literal: break
        case let .name(n): names.insert(n)
        case let .list(items), let .tuple(items): for i in items { try expr(i) }
        case let .dict(pairs): for (k, v) in pairs { try expr(k); try expr(v) }
        case let .attribute(b, name): attributes.insert(name); try expr(b)
        case let .subscript(b, i):
            if case let .literal(.string(name)) = i.kind { attributes.insert(name) }
            try expr(b)
            try expr(i)
        case let .slice(a, b, c): for x in [a, b, c] { if let x { try expr(x) } }
        case let .call(f, args, kwargs): try expr(f); for a in args { try expr(a) }; for (_, a) in kwargs { try expr(a) }
        case let .filter(base, name, args, kwargs):
            guard soft || Filters.names.contains(name) else {
                throw JinjaError(kind: .syntax, message: "No filter named '\(name)'.", line: e.position.line, column: e.position.column)
            }
            if let base { try expr(base) }
            for a in args { try expr(a) }
            for (_, a) in kwargs { try expr(a) }
        case let .test(base, name, args, _):
            guard soft || Tests.names.contains(name) else {
                throw JinjaError(kind: .syntax, message: "No test named '\(name)'.", line: e.position.line, column: e.position.column)
            }
            try expr(base)
            for a in args { try expr(a) }
        case let .not(x), let .negate(x), let .plus(x): try expr(x)
        case let .binary(_, a, b), let .and(a, b), let .or(a, b): try expr(a); try expr(b)
        case let .conditional(t, a, b):
            try with(soft: true) { c throws(JinjaError) in
                try c.expr(t)
                try c.expr(a)
                if let b { try c.expr(b) }
            }
        }
    }
}
