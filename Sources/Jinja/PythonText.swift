// Values as text, the way CPython writes them for a chat template: `str()` (what `{{ x }}` prints),
// `repr()` (lists and dicts print their items' repr), float repr (shortest round-trip digits,
// fixed notation for exponents -4..15, else `1e+16`), and `json.dumps` with the arguments
// transformers' `tojson` filter passes (ensure_ascii=False, indent, separators, sort_keys).
// Leaves out %-formatting and str.format beyond `{}` fields (Methods.swift).

enum PythonText {
    /// `str(value)`; Undefined prints as "".
    static func str(_ value: JinjaValue) -> String {
        switch value {
        case .undefined: return ""
        case let .string(s): return s
        default: return repr(value)
        }
    }

    static func repr(_ value: JinjaValue) -> String {
        var out = ""
        writeRepr(value, into: &out)
        return out
    }

    static func writeRepr(_ value: JinjaValue, into out: inout String) {
        switch value {
        case .undefined: out += ""
        case .none: out += "None"
        case let .bool(b): out += b ? "True" : "False"
        case let .int(i): out += String(i)
        case let .float(d): out += floatRepr(d)
        case let .string(s): out += stringRepr(s)
        case let .list(items, isTuple):
            out += isTuple ? "(" : "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += ", " }
                writeRepr(item, into: &out)
            }
            if isTuple && items.count == 1 { out += "," }
            out += isTuple ? ")" : "]"
        case let .dict(d):
            out += "{"
            for (i, (k, v)) in d.pairs.enumerated() {
                if i > 0 { out += ", " }
                out += stringRepr(k) + ": "
                writeRepr(v, into: &out)
            }
            out += "}"
        case let .namespace(ns):
            out += "<Namespace "
            writeRepr(.dict(ns.attributes), into: &out)
            out += ">"
        case let .callable(f):
            out += "<function \(f.name)>"
        case let .iterator(it):
            out += "<\(it.typeName) object>"
        }
    }

    /// Python's float repr: shortest digits that round-trip; fixed notation when the decimal
    /// exponent is in -4..<16, else `d.ddde+XX`.
    static func floatRepr(_ d: Double) -> String {
        if d.isNaN { return "nan" }
        if d.isInfinite { return d < 0 ? "-inf" : "inf" }
        // Swift's description has the same shortest digits; only the layout differs.
        let text = d.description
        var sign = ""
        var body = Substring(text)
        if body.hasPrefix("-") { sign = "-"; body = body.dropFirst() }
        var mantissa = body
        var exponent = 0
        if let e = body.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            mantissa = body[..<e]
            exponent = Int(body[body.index(after: e)...]) ?? 0
        }
        var digits = ""
        var pointAt = 0
        if let dot = mantissa.firstIndex(of: ".") {
            digits = String(mantissa[..<dot]) + mantissa[mantissa.index(after: dot)...]
            pointAt = mantissa.distance(from: mantissa.startIndex, to: dot)
        } else {
            digits = String(mantissa)
            pointAt = digits.count
        }
        // Normalize: strip leading zeros (moving the point), trailing zeros.
        while digits.count > 1 && digits.hasPrefix("0") { digits.removeFirst(); pointAt -= 1 }
        while digits.count > 1 && digits.hasSuffix("0") { digits.removeLast() }
        if digits == "0" { return sign + "0.0" }
        let exp10 = pointAt + exponent - 1   // value = d.ddd × 10^exp10
        if exp10 >= -4 && exp10 < 16 {
            if exp10 < 0 {
                return sign + "0." + String(repeating: "0", count: -exp10 - 1) + digits
            }
            let intCount = exp10 + 1
            if digits.count <= intCount {
                return sign + digits + String(repeating: "0", count: intCount - digits.count) + ".0"
            }
            let split = digits.index(digits.startIndex, offsetBy: intCount)
            return sign + digits[..<split] + "." + digits[split...]
        }
        var out = sign + String(digits.first!)
        if digits.count > 1 { out += "." + digits.dropFirst() }
        let e = abs(exp10)
        out += (exp10 < 0 ? "e-" : "e+") + (e < 10 ? "0" : "") + String(e)
        return out
    }

    /// Python's str repr: single quotes unless the text holds ' and no ".
    static func stringRepr(_ s: String) -> String {
        let quote: Character = s.contains("'") && !s.contains("\"") ? "\"" : "'"
        var out = String(quote)
        for u in s.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if Character(u) == quote {
                    out += "\\" + String(quote)
                } else if isPrintable(u) {
                    out.unicodeScalars.append(u)
                } else if u.value < 0x100 {
                    out += "\\x" + hex(u.value, width: 2)
                } else if u.value < 0x10000 {
                    out += "\\u" + hex(u.value, width: 4)
                } else {
                    out += "\\U" + hex(u.value, width: 8)
                }
            }
        }
        out.append(quote)
        return out
    }

    /// Python's str.isprintable for one code point: not in categories Cc, Cf, Cs, Co, Cn, Zl,
    /// Zp, or Zs other than the space.
    static func isPrintable(_ u: Unicode.Scalar) -> Bool {
        if u == " " { return true }
        switch u.properties.generalCategory {
        case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator,
             .paragraphSeparator, .spaceSeparator:
            return false
        default:
            return true
        }
    }

    static func hex(_ v: UInt32, width: Int) -> String {
        let h = String(v, radix: 16)
        return String(repeating: "0", count: max(0, width - h.count)) + h
    }

    // MARK: JSON

    struct JSONOptions {
        var indent: String?          // nil: one line
        var itemSeparator = ", "
        var keySeparator = ": "
        var sortKeys = false
    }

    /// `json.dumps(value, ensure_ascii=False, ...)`. Undefined, namespaces and callables are not
    /// JSON serializable (a TypeError, as in Python).
    static func json(_ value: JinjaValue, _ options: JSONOptions) throws(JinjaFailure) -> String {
        var out = ""
        try writeJSON(value, options, level: 0, into: &out)
        return out
    }

    static func writeJSON(_ value: JinjaValue, _ o: JSONOptions, level: Int, into out: inout String) throws(JinjaFailure) {
        if level > 200 { throw JinjaFailure.limit("tojson: nesting deeper than 200 levels") }
        switch value {
        case .none: out += "null"
        case let .bool(b): out += b ? "true" : "false"
        case let .int(i): out += String(i)
        case let .float(d):
            if d.isNaN { out += "NaN" } else if d.isInfinite { out += d < 0 ? "-Infinity" : "Infinity" } else { out += floatRepr(d) }
        case let .string(s): writeJSONString(s, into: &out)
        case let .list(items, _):
            if items.isEmpty { out += "[]"; return }
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += o.itemSeparator }
                newline(o, level + 1, &out)
                try writeJSON(item, o, level: level + 1, into: &out)
            }
            newline(o, level, &out)
            out += "]"
        case let .dict(d):
            if d.isEmpty { out += "{}"; return }
            out += "{"
            var pairs = d.pairs
            if o.sortKeys { pairs.sort { $0.0.unicodeScalars.lexicographicallyPrecedes($1.0.unicodeScalars) } }
            for (i, (k, v)) in pairs.enumerated() {
                if i > 0 { out += o.itemSeparator }
                newline(o, level + 1, &out)
                writeJSONString(k, into: &out)
                out += o.keySeparator
                try writeJSON(v, o, level: level + 1, into: &out)
            }
            newline(o, level, &out)
            out += "}"
        case .undefined, .namespace, .callable, .iterator:
            throw JinjaFailure.type("Object of type \(value.typeName) is not JSON serializable")
        }
    }

    private static func newline(_ o: JSONOptions, _ level: Int, _ out: inout String) {
        guard let indent = o.indent else { return }
        out += "\n"
        for _ in 0..<level { out += indent }
    }

    /// A JSON string as Python's encoder writes it with ensure_ascii=False: `"`, `\`, and
    /// control characters below U+0020 escaped (\n \r \t \b \f or \u00XX), all else as is.
    static func writeJSONString(_ s: String, into out: inout String) {
        out += "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if u.value < 0x20 { out += "\\u" + hex(u.value, width: 4) } else { out.unicodeScalars.append(u) }
            }
        }
        out += "\""
    }
}
