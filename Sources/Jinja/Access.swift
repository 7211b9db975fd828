// Attribute access, subscripts and slices with the sandboxed environment's rules: `x.name`
// tries the Python attribute (str/list/dict methods, a namespace's attributes) before the item,
// `x[key]` the item before the attribute; a miss is an Undefined that says what was missing
// ("'dict object' has no attribute 'tools'"); names starting with `_` are refused; methods
// that would mutate a list or dict are refused (ImmutableSandboxedEnvironment).

enum Access {
    /// `base.name`
    static func attribute(_ base: JinjaValue, _ name: String) throws -> JinjaValue {
        if case let .undefined(hint) = base { throw JinjaFailure.undefined(hint) }
        if let m = try method(base, name) { return m }
        switch base {
        case let .dict(d):
            if let v = d[name] { return v }
        case let .namespace(ns):
            if let v = ns.attributes[name] { return v }
        default:
            break
        }
        return missing(base, name)
    }

    /// `base[index]`
    static func item(_ base: JinjaValue, _ index: JinjaValue) throws -> JinjaValue {
        switch (base, index) {
        case let (.undefined(hint), _):
            throw JinjaFailure.undefined(hint)
        case let (.dict(d), .string(k)):
            if let v = d[k] { return v }
        case let (.namespace(ns), .string(k)):
            // A namespace has no items; its attributes are found through getattr below.
            if let v = ns.attributes[k] { return v }
        case let (.list(items, _), _):
            if let i = intIndex(index) {
                let j = i < 0 ? i + items.count : i
                if j >= 0 && j < items.count { return items[j] }
                return .undefined(hint: "'\(base.objectDescription)' has no element \(i)")
            }
        case let (.string(s), _):
            if let i = intIndex(index) {
                let scalars = Array(s.unicodeScalars)
                let j = i < 0 ? i + scalars.count : i
                if j >= 0 && j < scalars.count { return .string(String(scalars[j])) }
                return .undefined(hint: "'str object' has no element \(i)")
            }
        default:
            break
        }
        if case let .string(name) = index, let m = try method(base, name) { return m }
        if case let .string(name) = index { return missing(base, name) }
        return .undefined(hint: "'\(base.objectDescription)' has no element \(PythonText.repr(index))")
    }

    static func missing(_ base: JinjaValue, _ name: String) -> JinjaValue {
        .undefined(hint: "'\(base.objectDescription)' has no attribute \(PythonText.stringRepr(name))")
    }

    static func intIndex(_ v: JinjaValue) -> Int? {
        switch v {
        case let .int(i): i
        case let .bool(b): b ? 1 : 0
        default: nil
        }
    }

    /// `base[start:stop:step]` on a list or string, with Python's clamping.
    static func slice(_ base: JinjaValue, start: JinjaValue?, stop: JinjaValue?, step: JinjaValue?) throws -> JinjaValue {
        func bound(_ v: JinjaValue?) throws -> Int? {
            guard let v, !v.isNone else { return nil }
            guard let i = intIndex(v) else { throw JinjaFailure.type("slice indices must be integers or None") }
            return i
        }
        let st = try bound(step) ?? 1
        if st == 0 { throw JinjaFailure.runtime("slice step cannot be zero") }
        func indices(_ n: Int) throws -> [Int] {
            var lo = try bound(start), hi = try bound(stop)
            if st > 0 {
                var a = lo ?? 0, b = hi ?? n
                if a < 0 { a = max(0, a + n) } else { a = min(a, n) }
                if b < 0 { b = max(0, b + n) } else { b = min(b, n) }
                return a < b ? Array(stride(from: a, to: b, by: st)) : []
            }
            if lo == nil { lo = n - 1 } else if lo! < 0 { lo = max(-1, lo! + n) } else { lo = min(lo!, n - 1) }
            if hi == nil { hi = -1 } else if hi! < 0 { hi = max(-1, hi! + n) } else { hi = min(hi!, n - 1) }
            return lo! > hi! ? Array(stride(from: lo!, to: hi!, by: st)) : []
        }
        switch base {
        case let .list(items, isTuple):
            return .list(try indices(items.count).map { items[$0] }, isTuple: isTuple)
        case let .string(s):
            let scalars = Array(s.unicodeScalars)
            var view = String.UnicodeScalarView()
            for i in try indices(scalars.count) { view.append(scalars[i]) }
            return .string(String(view))
        case let .undefined(hint):
            throw JinjaFailure.undefined(hint)
        default:
            throw JinjaFailure.type("'\(base.typeName)' object is not subscriptable")
        }
    }

    static let mutating: Set<String> = ["append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                                        "update", "setdefault", "popitem", "add", "discard"]

    /// What the sandbox gives for an unsafe attribute: an Undefined that prints as "" and raises
    /// with the sandbox's message when used (called, iterated, read further).
    static func unsafe(_ base: JinjaValue, _ name: String) -> JinjaValue {
        .undefined(hint: "access to attribute '\(name)' of '\(base.typeName)' object is unsafe.")
    }

    /// The bound method `name` of `base`, nil when it has none; unsafe names give `unsafe`.
    static func method(_ base: JinjaValue, _ name: String) throws -> JinjaValue? {
        if name.hasPrefix("_") {
            switch base {
            case .dict, .namespace: return nil  // may be an item
            default: return unsafe(base, name)
            }
        }
        switch base {
        case let .string(s):
            guard Methods.stringMethods.contains(name) else { return nil }
            return .callable(JinjaCallable(name) { args, kwargs, ctx in try Methods.string(s, name, args, kwargs, ctx) })
        case let .list(items, _):
            if mutating.contains(name) { return unsafe(base, name) }
            guard ["index", "count", "copy"].contains(name) else { return nil }
            return .callable(JinjaCallable(name) { args, _, _ in try Methods.list(items, name, args) })
        case let .dict(d):
            if mutating.contains(name) { return unsafe(base, name) }
            guard ["items", "keys", "values", "get", "copy"].contains(name) else { return nil }
            return .callable(JinjaCallable(name) { args, _, _ in try Methods.dict(d, name, args) })
        default:
            return nil
        }
    }
}
