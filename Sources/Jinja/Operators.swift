// Python's binary operators on template values: arithmetic (ints overflow into an error rather
// than into big integers), `/` always a float, `//` and `%` flooring, str and list `+` and `*`,
// `~` (str of both sides), comparisons (chains are expanded by the parser), `in` / `not in`.
// Undefined raises in arithmetic and ordering, compares unequal to everything defined, and is
// empty for `in`. `%` on a string is printf-style formatting (%s %r %d %i %f %%).
import Foundation

enum Operators {
    static func negate(_ v: JinjaValue) throws -> JinjaValue {
        switch v {
        case let .int(i):
            guard i != Int.min else { throw JinjaFailure.limit("integer overflow") }
            return .int(-i)
        case let .bool(b): return .int(b ? -1 : 0)
        case let .float(d): return .float(-d)
        case let .undefined(hint): throw JinjaFailure.undefined(hint)
        default: throw JinjaFailure.type("bad operand type for unary -: '\(v.typeName)'")
        }
    }

    static func intValue(_ v: JinjaValue) -> Int? {
        switch v {
        case let .int(i): i
        case let .bool(b): b ? 1 : 0
        default: nil
        }
    }

    static func unsupported(_ op: String, _ a: JinjaValue, _ b: JinjaValue) -> JinjaFailure {
        .type("unsupported operand type(s) for \(op): '\(a.typeName)' and '\(b.typeName)'")
    }

    static func overflow(_ r: (partialValue: Int, overflow: Bool)) throws -> JinjaValue {
        if r.overflow { throw JinjaFailure.limit("integer overflow (the template's numbers exceed 64 bits)") }
        return .int(r.partialValue)
    }

    static func binary(_ op: String, _ a: JinjaValue, _ b: JinjaValue, _ ctx: CallContext) throws -> JinjaValue {
        switch op {
        case "~":
            return try ctx.checked(PythonText.str(a) + PythonText.str(b))
        case "==": return .bool(a == b)
        case "!=": return .bool(a != b)
        case "<", ">", "<=", ">=":
            if case let .undefined(hint) = a { throw JinjaFailure.undefined(hint) }
            if case let .undefined(hint) = b { throw JinjaFailure.undefined(hint) }
            do {
                switch op {
                case "<": return .bool(try pythonLess(a, b))
                case ">": return .bool(try pythonLess(b, a))
                case "<=":
                    if a == b { return .bool(true) }
                    return .bool(try pythonLess(a, b))
                default:
                    if a == b { return .bool(true) }
                    return .bool(try pythonLess(b, a))
                }
            } catch {
                throw JinjaFailure.type("'\(op)' not supported between instances of '\(a.typeName)' and '\(b.typeName)'")
            }
        case "in": return .bool(try contains(b, a))
        case "not in": return .bool(!(try contains(b, a)))
        default:
            break
        }
        if case let .undefined(hint) = a { throw JinjaFailure.undefined(hint) }
        if case let .undefined(hint) = b { throw JinjaFailure.undefined(hint) }
        switch op {
        case "+":
            switch (a, b) {
            case let (.string(x), .string(y)): return try ctx.checked(x + y)
            case let (.list(x, tx), .list(y, ty)) where tx == ty:
                try ctx.checkedCount(x.count + y.count)
                return .list(x + y, isTuple: tx)
            case (.string, _): throw JinjaFailure.type("can only concatenate str (not \"\(b.typeName)\") to str")
            case (.list(_, false), _): throw JinjaFailure.type("can only concatenate list (not \"\(b.typeName)\") to list")
            default: break
            }
            if let x = intValue(a), let y = intValue(b) { return try overflow(x.addingReportingOverflow(y)) }
            if let x = a.numberValue, let y = b.numberValue { return .float(x + y) }
            throw unsupported("+", a, b)
        case "-":
            if let x = intValue(a), let y = intValue(b) { return try overflow(x.subtractingReportingOverflow(y)) }
            if let x = a.numberValue, let y = b.numberValue { return .float(x - y) }
            throw unsupported("-", a, b)
        case "*":
            switch (a, b) {
            case let (.string(s), n), let (n, .string(s)):
                guard let count = intValue(n) else { throw JinjaFailure.type("can't multiply sequence by non-int of type '\(n.typeName)'") }
                if count <= 0 { return .string("") }
                let size = s.utf8.count.multipliedReportingOverflow(by: count)
                if size.overflow || size.partialValue > ctx.limits.maxOutputBytes {
                    throw JinjaFailure.limit("a string of \(s.utf8.count) bytes repeated \(count) times exceeds the template output bound")
                }
                return .string(String(repeating: s, count: count))
            case let (.list(items, t), n), let (n, .list(items, t)):
                guard let count = intValue(n) else { throw JinjaFailure.type("can't multiply sequence by non-int of type '\(n.typeName)'") }
                if count <= 0 { return .list([], isTuple: t) }
                let size = items.count.multipliedReportingOverflow(by: count)
                if size.overflow { throw JinjaFailure.limit("a list repeated \(count) times is too large") }
                try ctx.checkedCount(size.partialValue)
                return .list(Array([[JinjaValue]](repeating: items, count: count).joined()), isTuple: t)
            default: break
            }
            if let x = intValue(a), let y = intValue(b) { return try overflow(x.multipliedReportingOverflow(by: y)) }
            if let x = a.numberValue, let y = b.numberValue { return .float(x * y) }
            throw unsupported("*", a, b)
        case "/":
            guard let x = a.numberValue, let y = b.numberValue else { throw unsupported("/", a, b) }
            if y == 0 { throw JinjaFailure.runtime("division by zero") }
            return .float(x / y)
        case "//":
            if let x = intValue(a), let y = intValue(b) {
                if y == 0 { throw JinjaFailure.runtime("integer division or modulo by zero") }
                if x == Int.min && y == -1 { throw JinjaFailure.limit("integer overflow") }
                let q = x / y
                return .int((x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q)
            }
            guard let x = a.numberValue, let y = b.numberValue else { throw unsupported("//", a, b) }
            if y == 0 { throw JinjaFailure.runtime("float floor division by zero") }
            return .float((x / y).rounded(.down))
        case "%":
            if case let .string(format) = a { return try ctx.checked(try printf(format, b)) }
            if let x = intValue(a), let y = intValue(b) {
                if y == 0 { throw JinjaFailure.runtime("integer division or modulo by zero") }
                if y == -1 { return .int(0) }
                let r = x % y
                return .int(r != 0 && ((r < 0) != (y < 0)) ? r + y : r)
            }
            guard let x = a.numberValue, let y = b.numberValue else { throw unsupported("%", a, b) }
            if y == 0 { throw JinjaFailure.runtime("float modulo") }
            let r = x.truncatingRemainder(dividingBy: y)
            return .float(r != 0 && ((r < 0) != (y < 0)) ? r + y : r)
        case "**":
            if let x = intValue(a), let y = intValue(b), y >= 0 {
                var result = 1
                for _ in 0..<min(y, 64) {
                    let r = result.multipliedReportingOverflow(by: x)
                    if r.overflow { throw JinjaFailure.limit("integer overflow (the template's numbers exceed 64 bits)") }
                    result = r.partialValue
                }
                if y > 64 && abs(x) > 1 { throw JinjaFailure.limit("integer overflow (the template's numbers exceed 64 bits)") }
                if y > 64 && x == -1 { return .int(y % 2 == 0 ? 1 : -1) }
                return .int(result)
            }
            guard let x = a.numberValue, let y = b.numberValue else { throw unsupported("** or pow()", a, b) }
            return .float(pow(x, y))
        default:
            throw JinjaFailure.runtime("unknown operator \(op)")
        }
    }

    /// `needle in haystack`.
    static func contains(_ haystack: JinjaValue, _ needle: JinjaValue) throws -> Bool {
        switch haystack {
        case let .string(s):
            guard case let .string(n) = needle else {
                if case let .undefined(hint) = needle { throw JinjaFailure.undefined(hint) }
                throw JinjaFailure.type("'in <string>' requires string as left operand, not \(needle.typeName)")
            }
            return n.isEmpty || Methods.find(s, n, fromRight: false) >= 0
        case let .list(items, _): return items.contains(needle)
        case let .dict(d):
            if case let .string(k) = needle { return d[k] != nil }
            return false
        case .undefined: return false
        default:
            throw JinjaFailure.type("argument of type '\(haystack.typeName)' is not iterable")
        }
    }

    /// printf-style `format % values` for %s %r %d %i %f %%.
    static func printf(_ format: String, _ values: JinjaValue) throws -> String {
        var args: [JinjaValue]
        if case let .list(items, true) = values { args = items } else { args = [values] }
        var out = ""
        var it = format.unicodeScalars.makeIterator()
        var used = 0
        while let u = it.next() {
            guard u == "%" else { out.unicodeScalars.append(u); continue }
            guard let spec = it.next() else { throw JinjaFailure.runtime("incomplete format") }
            if spec == "%" { out += "%"; continue }
            guard used < args.count else { throw JinjaFailure.type("not enough arguments for format string") }
            let v = args[used]
            used += 1
            switch spec {
            case "s": out += PythonText.str(v)
            case "r": out += PythonText.repr(v)
            case "d", "i":
                guard let d = v.numberValue else { throw JinjaFailure.type("%\(spec) format: a real number is required, not \(v.typeName)") }
                out += intValue(v).map(String.init) ?? String(Int(d.rounded(.towardZero)))
            case "f":
                guard let d = v.numberValue else { throw JinjaFailure.type("must be real number, not \(v.typeName)") }
                out += fixed(d, 6)
            default:
                throw JinjaFailure.runtime("unsupported format character '\(spec)'")
            }
        }
        if used < args.count { throw JinjaFailure.type("not all arguments converted during string formatting") }
        return out
    }

    /// A Double with `digits` decimals, rounded half to even on the exact binary value (as C's printf).
    static func fixed(_ d: Double, _ digits: Int) -> String {
        var s = ""
        var x = d
        if x < 0 { s = "-"; x = -x }
        let scale = pow(10.0, Double(digits))
        let scaled = (x * scale).rounded(.toNearestOrEven)
        let intPart = (scaled / scale).rounded(.towardZero)
        var frac = String(Int(scaled - intPart * scale))
        while frac.count < digits { frac = "0" + frac }
        return s + String(format: intPart) + (digits > 0 ? "." + frac : "")
    }

    private static func pow(_ x: Double, _ y: Double) -> Double { Foundation.pow(x, y) }
}

extension String {
    fileprivate init(format d: Double) {
        self = d < 1e18 ? String(Int(d)) : PythonText.floatRepr(d)
    }
}
