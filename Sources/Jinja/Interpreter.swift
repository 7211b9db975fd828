// Walks the AST and writes text, with Jinja2's runtime rules: a fresh scope for every loop
// iteration (a `set` inside a loop does not leak out, which is why templates use namespace()),
// macros that close over the scope they were defined in, Undefined that prints as "" but raises
// when used further, attribute lookup that tries Python attributes then items (and the reverse
// for subscripts), Python's operators, loop objects, and the bounds of JinjaLimits. Errors carry
// the position of the innermost expression or statement that failed.

/// A variable scope; loops, macros and `with` blocks open a child.
final class Scope {
    var vars: [String: JinjaValue] = [:]
    let parent: Scope?
    init(parent: Scope?) { self.parent = parent }

    func lookup(_ name: String) -> JinjaValue? {
        var s: Scope? = self
        while let scope = s {
            if let v = scope.vars[name] { return v }
            s = scope.parent
        }
        return nil
    }
}

/// What a callable can reach while it runs: the renderer and the position it was called from.
typealias CallContext = Renderer

enum Flow { case normal, breakLoop, continueLoop }

final class Renderer {
    let environment: JinjaEnvironment
    var limits: JinjaLimits { environment.limits }
    private var buffers: [String] = [""]
    private var producedBytes = 0
    private var iterations = 0
    private var callDepth = 0
    private var generationRanges: [Range<Int>] = []

    init(environment: JinjaEnvironment) {
        self.environment = environment
    }

    func render(_ nodes: [Node], context: [String: JinjaValue]) throws -> JinjaRendering {
        let globals = Scope(parent: nil)
        for (name, f) in Globals.functions(environment) { globals.vars[name] = .callable(f) }
        let top = Scope(parent: globals)
        top.vars = context
        _ = try exec(nodes, top)
        return JinjaRendering(text: buffers[0], generationRanges: generationRanges)
    }

    // MARK: output and bounds

    private func write(_ text: String) throws {
        try countBytes(text.utf8.count)
        buffers[buffers.count - 1] += text
    }

    /// Counts bytes toward the output bound (every produced string counts).
    func countBytes(_ n: Int) throws {
        producedBytes += n
        if producedBytes > limits.maxOutputBytes {
            throw JinjaFailure.limit("the template produced more than \(limits.maxOutputBytes) bytes of text")
        }
    }

    /// A string an operation built; refused when it alone exceeds the output bound.
    func checked(_ s: String) throws -> JinjaValue {
        if s.utf8.count > limits.maxOutputBytes {
            throw JinjaFailure.limit("a string of \(s.utf8.count) bytes exceeds the template output bound of \(limits.maxOutputBytes) bytes")
        }
        return .string(s)
    }

    func checkedCount(_ n: Int) throws {
        if n > limits.maxCollectionCount {
            throw JinjaFailure.limit("a collection of \(n) items exceeds the bound of \(limits.maxCollectionCount)")
        }
    }

    private func countIteration() throws {
        iterations += 1
        if iterations > limits.maxIterations {
            throw JinjaFailure.limit("the template ran more than \(limits.maxIterations) loop iterations")
        }
    }

    /// Renders `body` into a buffer of its own and returns its text.
    func capture(_ body: () throws -> Void) throws -> String {
        buffers.append("")
        defer { buffers.removeLast() }
        try body()
        return buffers[buffers.count - 1]
    }

    private func located(_ error: Error, _ p: Position) -> Error {
        if let f = error as? JinjaFailure {
            return JinjaError(kind: f.kind, message: f.message, line: p.line, column: p.column)
        }
        return error
    }

    // MARK: statements

    func exec(_ nodes: [Node], _ scope: Scope) throws -> Flow {
        for node in nodes {
            let flow = try exec(node, scope)
            if flow != .normal { return flow }
        }
        return .normal
    }

    private func exec(_ node: Node, _ scope: Scope) throws -> Flow {
        do {
            switch node.kind {
            case let .text(s):
                try write(s)
            case let .output(e):
                try write(PythonText.str(try eval(e, scope)))
            case let .ifBlock(branches, otherwise):
                for (test, body) in branches where try eval(test, scope).isTruthy {
                    return try exec(body, scope)
                }
                return try exec(otherwise, scope)
            case let .forLoop(target, iterable, condition, body, otherwise, recursive):
                if recursive { throw JinjaFailure.runtime("recursive for loops are not supported") }
                try forLoop(target: target, iterable: try eval(iterable, scope), condition: condition,
                            body: body, otherwise: otherwise, scope: scope)
            case let .set(target, e):
                try assign(target, try eval(e, scope), scope)
            case let .setBlock(target, filters, body):
                var value: JinjaValue = .string(try capture { _ = try exec(body, scope) })
                for f in filters { value = try applyFilter(f, to: value, scope) }
                try assign(target, value, scope)
            case let .macro(name, parameters, body):
                scope.vars[name] = .callable(makeMacro(name: name, parameters: parameters, body: body, scope: scope))
            case let .callBlock(call, parameters, body):
                let caller = makeMacro(name: "caller", parameters: parameters, body: body, scope: scope)
                guard case let .call(callee, args, kwargs) = call.kind else { return .normal }
                let f = try eval(callee, scope)
                let result = try invoke(f, args: try args.map { try eval($0, scope) },
                                        kwargs: try kwargs.map { ($0.0, try eval($0.1, scope)) } + [("caller", .callable(caller))])
                try write(PythonText.str(result))
            case let .filterBlock(filters, body):
                var value: JinjaValue = .string(try capture { _ = try exec(body, scope) })
                for f in filters { value = try applyFilter(f, to: value, scope) }
                try write(PythonText.str(value))
            case let .with(assignments, body):
                let inner = Scope(parent: scope)
                for (t, e) in assignments { try assign(t, try eval(e, scope), inner) }
                return try exec(body, inner)
            case let .generation(body):
                let text = try capture { _ = try exec(body, scope) }
                let start = buffers[0].utf8.count
                generationRanges.append(start..<(start + text.utf8.count))
                buffers[buffers.count - 1] += text
            case .breakLoop:
                return .breakLoop
            case .continueLoop:
                return .continueLoop
            }
            return .normal
        } catch {
            throw located(error, node.position)
        }
    }

    private func forLoop(target: Target, iterable: JinjaValue, condition: Expr?, body: [Node], otherwise: [Node], scope: Scope) throws {
        var items = try iterate(iterable)
        if let condition {
            // The filter sees the loop variables but not `loop`.
            var kept: [JinjaValue] = []
            for item in items {
                try countIteration()
                let s = Scope(parent: scope)
                try assign(target, item, s)
                if try eval(condition, s).isTruthy { kept.append(item) }
            }
            items = kept
        }
        if items.isEmpty {
            _ = try exec(otherwise, scope)
            return
        }
        var lastChanged: [JinjaValue]?
        for (i, item) in items.enumerated() {
            try countIteration()
            let s = Scope(parent: scope)
            let n = items.count
            var loop = JinjaDict()
            loop["index"] = .int(i + 1)
            loop["index0"] = .int(i)
            loop["revindex"] = .int(n - i)
            loop["revindex0"] = .int(n - i - 1)
            loop["first"] = .bool(i == 0)
            loop["last"] = .bool(i == n - 1)
            loop["length"] = .int(n)
            loop["depth"] = .int(1)
            loop["depth0"] = .int(0)
            loop["previtem"] = i > 0 ? items[i - 1] : .undefined(hint: "there is no previous item")
            loop["nextitem"] = i < n - 1 ? items[i + 1] : .undefined(hint: "there is no next item")
            loop["cycle"] = .callable(JinjaCallable("cycle") { args, _, _ in
                guard !args.isEmpty else { throw JinjaFailure.type("no items for cycling given") }
                return args[i % args.count]
            })
            loop["changed"] = .callable(JinjaCallable("changed") { args, _, _ in
                if lastChanged != args { lastChanged = args; return .bool(true) }
                return .bool(false)
            })
            s.vars["loop"] = .dict(loop)
            try assign(target, item, s)
            if try exec(body, s) == .breakLoop { break }
        }
    }

    func assign(_ target: Target, _ value: JinjaValue, _ scope: Scope) throws {
        switch target {
        case let .name(n):
            scope.vars[n] = value
        case let .tuple(targets):
            let items = try iterate(value)
            guard items.count == targets.count else {
                throw JinjaFailure.runtime(items.count > targets.count
                    ? "too many values to unpack (expected \(targets.count))"
                    : "not enough values to unpack (expected \(targets.count), got \(items.count))")
            }
            for (t, v) in zip(targets, items) { try assign(t, v, scope) }
        case let .attribute(e, attribute):
            guard case let .namespace(ns) = try eval(e, scope) else {
                throw JinjaFailure.runtime("cannot assign attribute on non-namespace object")
            }
            try Globals.checkNamespaceName(attribute)
            ns.attributes[attribute] = value
        }
    }

    private func makeMacro(name: String, parameters: [(String, Expr?)], body: [Node], scope: Scope) -> JinjaCallable {
        JinjaCallable(name) { [unowned self] args, kwargs, _ in
            self.callDepth += 1
            defer { self.callDepth -= 1 }
            if self.callDepth > self.limits.maxCallDepth {
                throw JinjaFailure.limit("macro calls nest deeper than \(self.limits.maxCallDepth) (recursion)")
            }
            let s = Scope(parent: scope)
            var extra = Array(args.dropFirst(parameters.count))
            var extraKwargs = JinjaDict()
            for (i, (pname, defaultValue)) in parameters.enumerated() {
                if i < args.count {
                    s.vars[pname] = args[i]
                } else if let kw = kwargs.first(where: { $0.0 == pname }) {
                    s.vars[pname] = kw.1
                } else if let defaultValue {
                    s.vars[pname] = try self.eval(defaultValue, s)
                } else {
                    s.vars[pname] = .undefined(hint: "parameter '\(pname)' was not provided")
                }
            }
            for (k, v) in kwargs where !parameters.contains(where: { $0.0 == k }) {
                if k == "caller" { s.vars["caller"] = v } else { extraKwargs[k] = v }
            }
            if !extra.isEmpty && !self.usesName("varargs", body) {
                throw JinjaFailure.type("macro '\(name)' takes not more than \(parameters.count) argument(s)")
            }
            if let k = extraKwargs.keys.first, !self.usesName("kwargs", body) {
                throw JinjaFailure.type("macro '\(name)' takes no keyword argument '\(k)'")
            }
            s.vars["varargs"] = .list(extra, isTuple: true)
            s.vars["kwargs"] = .dict(extraKwargs)
            extra.removeAll()
            let text = try self.capture { _ = try self.exec(body, s) }
            return .string(text)
        }
    }

    private func usesName(_ name: String, _ body: [Node]) -> Bool {
        var c = Checker()
        try? c.nodes(body)
        return c.names.contains(name)
    }

    // MARK: expressions

    func eval(_ e: Expr, _ scope: Scope) throws -> JinjaValue {
        do {
            return try evalInner(e, scope)
        } catch {
            throw located(error, e.position)
        }
    }

    private func evalInner(_ e: Expr, _ scope: Scope) throws -> JinjaValue {
        switch e.kind {
        case let .literal(v):
            return v
        case let .name(n):
            return scope.lookup(n) ?? .undefined(n)
        case let .list(items):
            return .list(try items.map { try eval($0, scope) })
        case let .tuple(items):
            return .list(try items.map { try eval($0, scope) }, isTuple: true)
        case let .dict(pairs):
            var d = JinjaDict()
            for (k, v) in pairs {
                let key = try eval(k, scope)
                guard case let .string(ks) = key else {
                    throw JinjaFailure.type("dict keys must be strings in a chat template, got \(key.typeName)")
                }
                d[ks] = try eval(v, scope)
            }
            return .dict(d)
        case let .attribute(base, name):
            return try Access.attribute(try eval(base, scope), name)
        case let .subscript(base, index):
            let b = try eval(base, scope)
            if case let .slice(start, stop, step) = index.kind {
                return try Access.slice(b, start: try start.map { try eval($0, scope) },
                                        stop: try stop.map { try eval($0, scope) }, step: try step.map { try eval($0, scope) })
            }
            return try Access.item(b, try eval(index, scope))
        case .slice:
            throw JinjaFailure.runtime("a slice outside of a subscript")
        case let .call(callee, args, kwargs):
            let f = try eval(callee, scope)
            return try invoke(f, args: try args.map { try eval($0, scope) },
                              kwargs: try kwargs.map { ($0.0, try eval($0.1, scope)) })
        case .filter:
            return try applyFilter(e, to: nil, scope)
        case let .test(base, name, args, negated):
            let value = try eval(base, scope)
            let result = try Tests.run(name, value, try args.map { try eval($0, scope) }, self)
            return .bool(result != negated)
        case let .not(x):
            return .bool(!(try eval(x, scope)).isTruthy)
        case let .negate(x):
            return try Operators.negate(try eval(x, scope))
        case let .plus(x):
            let v = try eval(x, scope)
            guard v.numberValue != nil else { throw JinjaFailure.type("bad operand type for unary +: '\(v.typeName)'") }
            if case let .bool(b) = v { return .int(b ? 1 : 0) }
            return v
        case let .binary(op, a, b):
            return try Operators.binary(op, try eval(a, scope), try eval(b, scope), self)
        case let .and(a, b):
            let x = try eval(a, scope)
            return x.isTruthy ? try eval(b, scope) : x
        case let .or(a, b):
            let x = try eval(a, scope)
            return x.isTruthy ? x : try eval(b, scope)
        case let .conditional(test, then, otherwise):
            if try eval(test, scope).isTruthy { return try eval(then, scope) }
            if let otherwise { return try eval(otherwise, scope) }
            return .undefined(hint: "the inline if-expression on line \(e.position.line) evaluated to false and no else section was defined.")
        }
    }

    /// A filter expression; `input` replaces the base (filter blocks, set blocks).
    private func applyFilter(_ e: Expr, to input: JinjaValue?, _ scope: Scope) throws -> JinjaValue {
        do {
            guard case let .filter(base, name, args, kwargs) = e.kind else { return try eval(e, scope) }
            let value = try input ?? (base.map { try eval($0, scope) } ?? .undefined(hint: "no value to filter"))
            return try Filters.run(name, value, try args.map { try eval($0, scope) },
                                   try kwargs.map { ($0.0, try eval($0.1, scope)) }, self)
        } catch {
            throw located(error, e.position)
        }
    }

    func invoke(_ f: JinjaValue, args: [JinjaValue], kwargs: [(String, JinjaValue)]) throws -> JinjaValue {
        switch f {
        case let .callable(c):
            return try c.call(args, kwargs, self)
        case let .undefined(hint):
            throw JinjaFailure.undefined(hint)
        default:
            throw JinjaFailure.type("'\(f.typeName)' object is not callable")
        }
    }

    /// Python's iter(): lists, dict keys, a string's characters; Undefined is empty.
    func iterate(_ v: JinjaValue) throws -> [JinjaValue] {
        switch v {
        case let .list(items, _): return items
        case let .dict(d): return d.keys.map { .string($0) }
        case let .string(s): return s.unicodeScalars.map { .string(String($0)) }
        case .undefined: return []
        case let .iterator(it): return it.drain()
        default: throw JinjaFailure.type("'\(v.typeName)' object is not iterable")
        }
    }
}
