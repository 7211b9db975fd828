// Jinja2's tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...) with Python's
// meaning (tests.py): `number` counts bools, `integer` does not; `iterable` is true for
// Undefined (it iterates as empty); `sequence` is anything with a length and items.

enum Tests {
    static let names: Set<String> = [
        "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false", "filter",
        "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=", "lower", "lt", "<",
        "lessthan", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "test", "true",
        "undefined", "upper",
    ]

    static func run(_ name: String, _ v: JinjaValue, _ args: [JinjaValue], _ ctx: CallContext) throws -> Bool {
        func arg() throws -> JinjaValue {
            guard let a = args.first else { throw JinjaFailure.type("test '\(name)' needs an argument") }
            return a
        }
        switch name {
        case "boolean": if case .bool = v { return true }; return false
        case "callable": if case .callable = v { return true }; return false
        case "defined": return !v.isUndefined
        case "undefined": return v.isUndefined
        case "none": return v.isNone
        case "true": if case .bool(true) = v { return true }; return false
        case "false": if case .bool(false) = v { return true }; return false
        case "string": if case .string = v { return true }; return false
        case "mapping": if case .dict = v { return true }; return false
        case "number": return v.numberValue != nil
        case "integer": if case .int = v { return true }; return false
        case "float": if case .float = v { return true }; return false
        case "iterable":
            switch v {
            case .list, .dict, .string, .undefined, .iterator: return true
            default: return false
            }
        case "sequence":
            switch v {
            case .list, .dict, .string, .undefined: return true
            default: return false
            }
        case "escaped": return false
        case "filter":
            guard case let .string(n) = try arg() else { return false }
            return Filters.names.contains(n)
        case "test":
            guard case let .string(n) = try arg() else { return false }
            return names.contains(n)
        case "even", "odd":
            guard let i = Operators.intValue(v) else {
                if case let .float(d) = v, d == d.rounded() { return (Int(d) % 2 == 0) == (name == "even") }
                throw JinjaFailure.type("not all arguments converted during string formatting")
            }
            return (i % 2 == 0) == (name == "even")
        case "divisibleby":
            let d = try arg()
            guard let x = Operators.intValue(v), let y = Operators.intValue(d) else {
                let r = try Operators.binary("%", v, d, ctx)
                return r == .int(0)
            }
            if y == 0 { throw JinjaFailure.runtime("integer division or modulo by zero") }
            return x % y == 0
        case "eq", "equalto", "==": return v == (try arg())
        case "ne", "!=": return v != (try arg())
        case "lt", "<", "lessthan": return try Operators.binary("<", v, try arg(), ctx).isTruthy
        case "le", "<=": return try Operators.binary("<=", v, try arg(), ctx).isTruthy
        case "gt", ">", "greaterthan": return try Operators.binary(">", v, try arg(), ctx).isTruthy
        case "ge", ">=": return try Operators.binary(">=", v, try arg(), ctx).isTruthy
        case "in": return try Operators.contains(try arg(), v)
        case "sameas":
            let other = try arg()
            switch (v, other) {
            case (.none, .none): return true
            case let (.bool(a), .bool(b)): return a == b
            case let (.namespace(a), .namespace(b)): return a === b
            case let (.int(a), .int(b)): return a == b && (-5...256).contains(a)
            default: return false
            }
        case "lower":
            let s = PythonText.str(v)
            let cased = s.unicodeScalars.filter(Methods.isCased)
            return !cased.isEmpty && cased.allSatisfy { !$0.properties.isUppercase && !($0.properties.generalCategory == .titlecaseLetter) }
        case "upper":
            let s = PythonText.str(v)
            let cased = s.unicodeScalars.filter(Methods.isCased)
            return !cased.isEmpty && cased.allSatisfy { !$0.properties.isLowercase && !($0.properties.generalCategory == .titlecaseLetter) }
        default:
            throw JinjaFailure.runtime("No test named '\(name)' found.")
        }
    }
}
