// Jinja2's built-in filters that chat templates use, with their Python behaviour (filters.py):
// `map`/`select`/`reject`/`selectattr`/`rejectattr`/`reverse`/`unique`/`items` return
// iterators as Jinja's generators do; `tojson` is transformers' override (json.dumps with
// ensure_ascii=False and its indent/separators/sort_keys arguments), not Jinja's HTML-safe one;
// `title` is Jinja's word-boundary rule, not str.title. Leaves out HTML-oriented filters
// (urlize, xmlattr, striptags, wordwrap, filesizeformat), random and groupby.

/// Named arguments of a filter call, positional or by keyword, as Python binds them.
struct Arguments {
    let args: [JinjaValue]
    let kwargs: [(String, JinjaValue)]
    let names: [String]
    let function: String

    init(_ function: String, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ names: [String]) throws {
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.names = names
        if args.count > names.count {
            throw JinjaFailure.type("\(function)() takes \(names.count) argument(s) after the value but \(args.count) were given")
        }
        for (k, _) in kwargs where !names.contains(k) {
            throw JinjaFailure.type("\(function)() got an unexpected keyword argument '\(k)'")
        }
    }

    subscript(_ name: String) -> JinjaValue? {
        if let i = names.firstIndex(of: name), i < args.count { return args[i] }
        return kwargs.first { $0.0 == name }?.1
    }

    func bool(_ name: String, _ d: Bool) -> Bool { self[name]?.isTruthy ?? d }

    func int(_ name: String, _ d: Int) throws -> Int {
        guard let v = self[name] else { return d }
        guard let i = Operators.intValue(v) else { throw JinjaFailure.type("\(function): '\(name)' must be an integer, got \(v.typeName)") }
        return i
    }
}

enum Filters {
    static let names: Set<String> = [
        "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first",
        "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map",
        "max", "min", "pprint", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
        "slice", "sort", "string", "sum", "title", "tojson", "trim", "truncate", "unique", "upper", "wordcount",
    ]

    static func str(_ v: JinjaValue) -> String { PythonText.str(v) }

    /// Strings for Jinja's `soft_str`, refusing Undefined where Jinja's string conversion would
    /// only print it (Undefined prints as "").
    static func text(_ v: JinjaValue) -> String { PythonText.str(v) }

    static func run(_ name: String, _ value: JinjaValue, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ ctx: CallContext) throws -> JinjaValue {
        func bind(_ names: [String]) throws -> Arguments { try Arguments(name, args, kwargs, names) }
        switch name {
        case "abs":
            switch value {
            case let .int(i): return .int(abs(i))
            case let .bool(b): return .int(b ? 1 : 0)
            case let .float(d): return .float(abs(d))
            default: throw JinjaFailure.type("bad operand type for abs(): '\(value.typeName)'")
            }
        case "attr":
            let a = try bind(["name"])
            guard case let .string(n)? = a["name"] else { throw JinjaFailure.type("attr: the name must be a string") }
            // Python getattr only: a dict's keys are not attributes.
            if case let .namespace(ns) = value, let v = ns.attributes[n] { return v }
            return try Access.method(value, n) ?? Access.missing(value, n)
        case "batch", "slice":
            let a = try bind(name == "batch" ? ["linecount", "fill_with"] : ["slices", "fill_with"])
            let n = try a.int(name == "batch" ? "linecount" : "slices", 1)
            guard n > 0 else { throw JinjaFailure.runtime("\(name): the count must be positive") }
            let items = try ctx.iterate(value)
            var out: [JinjaValue] = []
            if name == "batch" {
                var i = 0
                while i < items.count {
                    var chunk = Array(items[i..<min(i + n, items.count)])
                    if chunk.count < n, let fill = a["fill_with"] { chunk += Array(repeating: fill, count: n - chunk.count) }
                    out.append(.list(chunk))
                    i += n
                }
            } else {
                let per = items.count / n, extra = items.count % n
                var offset = 0
                for k in 0..<n {
                    let size = per + (k < extra ? 1 : 0)
                    var chunk = Array(items[offset..<(offset + size)])
                    offset += size
                    if let fill = a["fill_with"], extra > 0, k >= extra { chunk.append(fill) }
                    out.append(.list(chunk))
                }
            }
            return .iterator(JinjaIterator(out))
        case "capitalize":
            return .string(Methods.capitalize(text(value)))
        case "center":
            let a = try bind(["width"])
            return try Methods.string(text(value), "center", [.int(try a.int("width", 80))], [], ctx)
        case "count", "length":
            switch value {
            case let .string(s): return .int(s.unicodeScalars.count)
            case let .list(items, _): return .int(items.count)
            case let .dict(d): return .int(d.count)
            case .undefined: return .int(0)
            default: throw JinjaFailure.type("object of type '\(value.typeName)' has no len()")
            }
        case "d", "default":
            let a = try bind(["default_value", "boolean"])
            if value.isUndefined || (a.bool("boolean", false) && !value.isTruthy) { return a["default_value"] ?? .string("") }
            return value
        case "dictsort":
            let a = try bind(["case_sensitive", "by", "reverse"])
            guard case let .dict(d) = value else {
                if case let .undefined(hint) = value { throw JinjaFailure.undefined(hint) }
                throw JinjaFailure.type("'\(value.typeName)' object has no attribute 'items'")
            }
            let byValue: Bool
            switch a["by"] {
            case nil, .string("key")?: byValue = false
            case .string("value")?: byValue = true
            default: throw JinjaFailure.runtime("You can only sort by either \"key\" or \"value\"")
            }
            let caseSensitive = a.bool("case_sensitive", false)
            let pairs = try sorted(d.pairs.map { JinjaValue.list([.string($0.0), $0.1], isTuple: true) }, reverse: a.bool("reverse", false)) { item in
                guard case let .list(kv, _) = item else { return item }
                let key = kv[byValue ? 1 : 0]
                return caseSensitive ? key : ignoreCase(key)
            }
            return .list(pairs)
        case "e", "escape", "forceescape":
            return .string(escapeHTML(text(value)))
        case "first":
            if case let .iterator(it) = value {
                guard it.position < it.items.count else { return .undefined(hint: "No first item, sequence was empty.") }
                it.position += 1
                return it.items[it.position - 1]
            }
            return try ctx.iterate(value).first ?? .undefined(hint: "No first item, sequence was empty.")
        case "last":
            switch value {
            case let .list(items, _): return items.last ?? .undefined(hint: "No last item, sequence was empty.")
            case let .string(s): return s.unicodeScalars.last.map { .string(String($0)) } ?? .undefined(hint: "No last item, sequence was empty.")
            case let .dict(d): return d.keys.last.map { .string($0) } ?? .undefined(hint: "No last item, sequence was empty.")
            default: throw JinjaFailure.type("'\(value.typeName)' object is not reversible")
            }
        case "float":
            let a = try bind(["default"])
            return toFloat(value) ?? a["default"] ?? .float(0)
        case "format":
            guard case let .string(f) = value else { throw JinjaFailure.type("format: the value must be a string") }
            if !kwargs.isEmpty {
                if !args.isEmpty { throw JinjaFailure.type("can't handle positional and keyword arguments at the same time") }
                throw JinjaFailure.runtime("format with keyword arguments (%(name)s) is not supported")
            }
            return try ctx.checked(try Operators.printf(f, .list(args, isTuple: true)))
        case "indent":
            let a = try bind(["width", "first", "blank"])
            let indentation: String
            if case let .string(s)? = a["width"] { indentation = s } else { indentation = String(repeating: " ", count: try a.int("width", 4)) }
            let s = text(value) + "\n"
            var out: String
            if a.bool("blank", false) {
                out = Methods.splitlines(s).joined(separator: "\n" + indentation)
            } else {
                var lines = Methods.splitlines(s)
                out = lines.isEmpty ? "" : lines.removeFirst()
                if !lines.isEmpty { out += "\n" + lines.map { $0.isEmpty ? $0 : indentation + $0 }.joined(separator: "\n") }
            }
            if a.bool("first", false) { out = indentation + out }
            return try ctx.checked(out)
        case "int":
            let a = try bind(["default", "base"])
            return toInt(value, base: try a.int("base", 10)) ?? a["default"] ?? .int(0)
        case "items":
            switch value {
            case let .dict(d): return .iterator(JinjaIterator(d.pairs.map { .list([.string($0.0), $0.1], isTuple: true) }))
            case .undefined: return .iterator(JinjaIterator([]))
            default: throw JinjaFailure.type("Can only get item pairs from a mapping.")
            }
        case "join":
            let a = try bind(["d", "attribute"])
            var items = try ctx.iterate(value)
            if let attribute = a["attribute"] { items = try items.map { try attributeGetter(attribute, nil)($0) } }
            let separator = a["d"].map(text) ?? ""
            return try ctx.checked(items.map(text).joined(separator: separator))
        case "list":
            return .list(try ctx.iterate(value))
        case "lower":
            return .string(Methods.lower(text(value)))
        case "upper":
            return .string(Methods.upper(text(value)))
        case "map":
            let items = try ctx.iterate(value)
            if args.isEmpty, let attribute = kwargs.first(where: { $0.0 == "attribute" })?.1 {
                let rest = kwargs.filter { $0.0 != "attribute" && $0.0 != "default" }
                if let k = rest.first { throw JinjaFailure.runtime("Unexpected keyword argument '\(k.0)'") }
                let getter = attributeGetter(attribute, kwargs.first { $0.0 == "default" }?.1)
                return .iterator(JinjaIterator(try items.map(getter)))
            }
            guard case let .string(filter)? = args.first else { throw JinjaFailure.runtime("map requires a filter argument") }
            guard names.contains(filter) else { throw JinjaFailure.runtime("No filter named '\(filter)'.") }
            let rest = Array(args.dropFirst())
            return .iterator(JinjaIterator(try items.map { try run(filter, $0, rest, kwargs, ctx) }))
        case "max", "min":
            let a = try bind(["case_sensitive", "attribute"])
            let items = try ctx.iterate(value)
            guard !items.isEmpty else { return .undefined(hint: "No aggregated item, sequence was empty.") }
            let getter = a["attribute"].map { attributeGetter($0, nil) } ?? { $0 }
            let caseSensitive = a.bool("case_sensitive", false)
            var best = items[0]
            var bestKey = try getter(best)
            if !caseSensitive { bestKey = ignoreCase(bestKey) }
            for item in items.dropFirst() {
                var key = try getter(item)
                if !caseSensitive { key = ignoreCase(key) }
                if name == "max" ? try pythonLess(bestKey, key) : try pythonLess(key, bestKey) {
                    best = item
                    bestKey = key
                }
            }
            return best
        case "pprint":
            return .string(PythonText.repr(value))
        case "reject", "select", "rejectattr", "selectattr":
            let byAttribute = name.hasSuffix("attr")
            let keep = name.hasPrefix("select")
            let items = try ctx.iterate(value)
            var transform: (JinjaValue) throws -> JinjaValue = { $0 }
            var rest = args
            if byAttribute {
                guard let attribute = rest.first else { throw JinjaFailure.runtime("Missing parameter for attribute name") }
                transform = attributeGetter(attribute, nil)
                rest.removeFirst()
            }
            var test: (JinjaValue) throws -> Bool = { $0.isTruthy }
            if case let .string(testName)? = rest.first {
                guard Tests.names.contains(testName) else { throw JinjaFailure.runtime("No test named '\(testName)'.") }
                let testArgs = Array(rest.dropFirst()) + kwargs.map(\.1)
                test = { try Tests.run(testName, $0, testArgs, ctx) }
            }
            return .iterator(JinjaIterator(try items.filter { try test(try transform($0)) == keep }))
        case "replace":
            let a = try bind(["old", "new", "count"])
            guard let old = a["old"], let new = a["new"] else { throw JinjaFailure.type("replace() needs old and new") }
            let count = a["count"].flatMap(Operators.intValue) ?? -1
            return try ctx.checked(try Methods.replace(text(value), text(old), text(new), count, ctx))
        case "reverse":
            switch value {
            case let .string(s): return .string(String(String.UnicodeScalarView(s.unicodeScalars.reversed())))
            case let .list(items, _): return .iterator(JinjaIterator(items.reversed(), typeName: "list_reverseiterator"))
            case let .dict(d): return .iterator(JinjaIterator(d.keys.reversed().map { .string($0) }, typeName: "dict_reversekeyiterator"))
            default: return .list(try ctx.iterate(value).reversed())
            }
        case "round":
            let a = try bind(["precision", "method"])
            let precision = try a.int("precision", 0)
            guard let x = value.numberValue else { throw JinjaFailure.type("type \(value.typeName) doesn't define __round__ method") }
            let scale = pow10(precision)
            switch a["method"] {
            case nil, .string("common")?:
                return .float(pythonRound(x, precision))
            case .string("ceil")?: return .float((x * scale).rounded(.up) / scale)
            case .string("floor")?: return .float((x * scale).rounded(.down) / scale)
            default: throw JinjaFailure.runtime("method must be common, ceil or floor")
            }
        case "safe":
            return value
        case "sort":
            let a = try bind(["reverse", "case_sensitive", "attribute"])
            let caseSensitive = a.bool("case_sensitive", false)
            let getter = a["attribute"].map { attributeGetter($0, nil) } ?? { $0 }
            return .list(try sorted(try ctx.iterate(value), reverse: a.bool("reverse", false)) { item in
                let key = try getter(item)
                return caseSensitive ? key : ignoreCase(key)
            })
        case "string":
            return .string(text(value))
        case "sum":
            let a = try bind(["attribute", "start"])
            var total = a["start"] ?? .int(0)
            let getter = a["attribute"].map { attributeGetter($0, nil) } ?? { $0 }
            for item in try ctx.iterate(value) { total = try Operators.binary("+", total, try getter(item), ctx) }
            return total
        case "title":
            // Jinja: words start after runs of `-`, whitespace, `(`, `{`, `[`, `<`.
            var out = ""
            var atStart = true
            for u in text(value).unicodeScalars {
                let boundary = u == "-" || u == "(" || u == "{" || u == "[" || u == "<" || Methods.isSpace(u)
                if boundary { out.unicodeScalars.append(u); atStart = true; continue }
                out += atStart ? u.properties.uppercaseMapping : u.properties.lowercaseMapping
                atStart = false
            }
            return .string(out)
        case "tojson":
            return try ctx.checked(try toJSON(value, args, kwargs))
        case "trim":
            let a = try bind(["chars"])
            return .string(Methods.strip(text(value), try Methods.argString(a["chars"], "trim"), left: true, right: true))
        case "truncate":
            let a = try bind(["length", "killwords", "end", "leeway"])
            let s = Array(text(value).unicodeScalars)
            let length = try a.int("length", 255)
            let end = a["end"].map(text) ?? "..."
            let leeway = try a.int("leeway", 5)
            if s.count <= length + leeway { return .string(text(value)) }
            let keep = max(0, length - end.unicodeScalars.count)
            var cut = Methods.string(s[0..<keep])
            if !a.bool("killwords", false), let space = cut.unicodeScalars.lastIndex(of: " ") {
                cut = String(cut.unicodeScalars[..<space])
            }
            return .string(cut + end)
        case "unique":
            let a = try bind(["case_sensitive", "attribute"])
            let caseSensitive = a.bool("case_sensitive", false)
            let getter = a["attribute"].map { attributeGetter($0, nil) } ?? { $0 }
            var seen: [JinjaValue] = []
            var out: [JinjaValue] = []
            for item in try ctx.iterate(value) {
                var key = try getter(item)
                if !caseSensitive { key = ignoreCase(key) }
                if !seen.contains(key) { seen.append(key); out.append(item) }
            }
            return .iterator(JinjaIterator(out))
        case "wordcount":
            return .int(try Methods.split(text(value), nil, -1, fromRight: false).count)
        default:
            throw JinjaFailure.runtime("No filter named '\(name)' found.")
        }
    }

    /// transformers' tojson: `json.dumps(x, ensure_ascii=False, indent=indent,
    /// separators=separators, sort_keys=sort_keys)`.
    static func toJSON(_ value: JinjaValue, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)]) throws -> String {
        let a = try Arguments("tojson", args, kwargs, ["ensure_ascii", "indent", "separators", "sort_keys"])
        if a["ensure_ascii"]?.isTruthy == true { throw JinjaFailure.runtime("tojson: ensure_ascii=True is not supported") }
        var o = PythonText.JSONOptions()
        switch a["indent"] {
        case nil, .none?: break
        case let .int(n)?: o.indent = String(repeating: " ", count: max(0, n)); o.itemSeparator = ","
        case let .string(s)?: o.indent = s; o.itemSeparator = ","
        case let other?: throw JinjaFailure.type("tojson: indent must be an integer or a string, got \(other.typeName)")
        }
        if let separators = a["separators"], !separators.isNone {
            guard case let .list(parts, _) = separators, parts.count == 2, case let .string(item) = parts[0], case let .string(key) = parts[1] else {
                throw JinjaFailure.type("tojson: separators must be a pair of strings")
            }
            o.itemSeparator = item
            o.keySeparator = key
        }
        o.sortKeys = a.bool("sort_keys", false)
        return try PythonText.json(value, o)
    }

    static func escapeHTML(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars {
            switch u {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&#34;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }

    static func ignoreCase(_ v: JinjaValue) -> JinjaValue {
        if case let .string(s) = v { return .string(Methods.lower(s)) }
        return v
    }

    /// Python's sorted(): stable, by key, Python ordering (a TypeError on mixed types).
    static func sorted(_ items: [JinjaValue], reverse: Bool, key: (JinjaValue) throws -> JinjaValue) throws -> [JinjaValue] {
        let keyed = try items.enumerated().map { ($0.offset, try key($0.element), $0.element) }
        var failure: Error?
        let out = keyed.sorted { a, b in
            do {
                if reverse {
                    if try pythonLess(b.1, a.1) { return true }
                    if try pythonLess(a.1, b.1) { return false }
                } else {
                    if try pythonLess(a.1, b.1) { return true }
                    if try pythonLess(b.1, a.1) { return false }
                }
            } catch { failure = error }
            return a.0 < b.0
        }
        if let failure { throw failure }
        return out.map(\.2)
    }

    /// Jinja's make_attrgetter: `a.b.0` looked up part by part with subscript rules.
    static func attributeGetter(_ attribute: JinjaValue, _ defaultValue: JinjaValue?) -> (JinjaValue) throws -> JinjaValue {
        let parts: [JinjaValue]
        switch attribute {
        case let .string(s):
            parts = s.split(separator: ".", omittingEmptySubsequences: false).map { p in Int(p).map(JinjaValue.int) ?? .string(String(p)) }
        default:
            parts = [attribute]
        }
        return { item in
            var v = item
            for p in parts { v = try Access.item(v, p) }
            if v.isUndefined, let defaultValue { return defaultValue }
            return v
        }
    }

    static func toInt(_ v: JinjaValue, base: Int) -> JinjaValue? {
        switch v {
        case let .int(i): return .int(i)
        case let .bool(b): return .int(b ? 1 : 0)
        case let .float(d): return d.isFinite && abs(d) < 9.2e18 ? .int(Int(d)) : nil
        case let .string(s):
            let t = Methods.strip(s, nil, left: true, right: true).replacingOccurrences("_", "")
            if let i = Int(t, radix: base) { return .int(i) }
            if let d = Double(t), d.isFinite, abs(d) < 9.2e18 { return .int(Int(d)) }
            return nil
        default: return nil
        }
    }

    static func toFloat(_ v: JinjaValue) -> JinjaValue? {
        switch v {
        case let .int(i): return .float(Double(i))
        case let .bool(b): return .float(b ? 1 : 0)
        case let .float(d): return .float(d)
        case let .string(s):
            let t = Methods.strip(s, nil, left: true, right: true).lowercased()
            if ["inf", "+inf", "infinity", "+infinity"].contains(t) { return .float(.infinity) }
            if ["-inf", "-infinity"].contains(t) { return .float(-.infinity) }
            if ["nan", "+nan", "-nan"].contains(t) { return .float(.nan) }
            return Double(t.replacingOccurrences("_", "")).map { .float($0) }
        default: return nil
        }
    }

    static func pow10(_ n: Int) -> Double {
        var r = 1.0
        for _ in 0..<abs(n) { r *= 10 }
        return n < 0 ? 1 / r : r
    }

    /// Python's round(x, n) with ties to even on the scaled value (CPython decides on the exact
    /// binary value; the two differ only for values a hair off a tie).
    static func pythonRound(_ x: Double, _ n: Int) -> Double {
        guard x.isFinite, n <= 22 else { return x }
        let scale = pow10(n)
        return (x * scale).rounded(.toNearestOrEven) / scale
    }
}

extension String {
    func replacingOccurrences(_ a: String, _ b: String) -> String {
        (try? Methods.replace(self, a, b, -1, nil)) ?? self
    }
}
