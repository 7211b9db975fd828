// Python's str, list and dict methods that chat templates call (`.strip()`, `.split()`,
// `.startswith()`, `.items()`, `.get()`, ...), with CPython's semantics: whitespace is
// str.isspace's, indices count code points, `split()` without a separator drops empty parts,
// `title()` capitalizes after every uncased character. Leaves out encodings and format specs
// beyond plain `{}` fields.

enum Methods {
    static let stringMethods: Set<String> = [
        "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "lower", "upper",
        "title", "capitalize", "swapcase", "casefold", "replace", "find", "rfind", "index", "rindex", "count", "join",
        "format", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "istitle", "isnumeric",
        "isdecimal", "zfill", "center", "ljust", "rjust", "partition", "rpartition", "removeprefix", "removesuffix",
    ]

    static func isSpace(_ u: Unicode.Scalar) -> Bool { Lexer.isSpace(u) }

    static func scalars(_ s: String) -> [Unicode.Scalar] { Array(s.unicodeScalars) }

    static func string(_ scalars: some Sequence<Unicode.Scalar>) -> String {
        var v = String.UnicodeScalarView()
        v.append(contentsOf: scalars)
        return String(v)
    }

    static func argString(_ v: JinjaValue?, _ method: String) throws -> String? {
        switch v {
        case nil, .none?: return nil
        case let .string(s)?: return s
        case let other?: throw JinjaFailure.type("\(method) arg must be None or str, not \(other.typeName)")
        }
    }

    static func argInt(_ v: JinjaValue?, _ method: String) throws -> Int? {
        switch v {
        case nil, .none?: return nil
        case let .int(i)?: return i
        case let .bool(b)?: return b ? 1 : 0
        case let other?: throw JinjaFailure.type("'\(other.typeName)' object cannot be interpreted as an integer")
        }
    }

    /// Python strip family: `chars` nil strips whitespace.
    static func strip(_ s: String, _ chars: String?, left: Bool, right: Bool) -> String {
        let set = chars.map { Set($0.unicodeScalars) }
        let drop: (Unicode.Scalar) -> Bool = { u in set.map { $0.contains(u) } ?? isSpace(u) }
        let a = scalars(s)
        var lo = 0, hi = a.count
        if left { while lo < hi && drop(a[lo]) { lo += 1 } }
        if right { while hi > lo && drop(a[hi - 1]) { hi -= 1 } }
        return string(a[lo..<hi])
    }

    /// str.split / str.rsplit.
    static func split(_ s: String, _ sep: String?, _ maxsplit: Int, fromRight: Bool) throws -> [String] {
        let a = scalars(s)
        guard let sep else {
            // Runs of whitespace separate; leading/trailing whitespace gives no empty parts.
            var words: [(Int, Int)] = []
            var i = 0
            while i < a.count {
                while i < a.count && isSpace(a[i]) { i += 1 }
                if i >= a.count { break }
                let start = i
                while i < a.count && !isSpace(a[i]) { i += 1 }
                words.append((start, i))
            }
            if maxsplit < 0 || words.count <= maxsplit { return words.map { string(a[$0.0..<$0.1]) } }
            // The unsplit remainder keeps its outer whitespace (CPython: '  a  b  '.split(None, 1)
            // is ['a', 'b  ']).
            if fromRight {
                let keep = words.suffix(maxsplit)
                let head = strip(string(a[0..<keep.first!.0]), nil, left: false, right: true)
                return [head] + keep.map { string(a[$0.0..<$0.1]) }
            }
            let first = words.prefix(maxsplit)
            return first.map { string(a[$0.0..<$0.1]) } + [string(a[words[maxsplit].0..<a.count])]
        }
        let p = scalars(sep)
        if p.isEmpty { throw JinjaFailure.runtime("empty separator") }
        var cuts: [Int] = []
        if fromRight {
            var i = a.count - p.count
            while i >= 0 && (maxsplit < 0 || cuts.count < maxsplit) {
                if Array(a[i..<(i + p.count)]) == p { cuts.insert(i, at: 0); i -= p.count } else { i -= 1 }
            }
        } else {
            var i = 0
            while i + p.count <= a.count && (maxsplit < 0 || cuts.count < maxsplit) {
                if Array(a[i..<(i + p.count)]) == p { cuts.append(i); i += p.count } else { i += 1 }
            }
        }
        var parts: [String] = []
        var start = 0
        for c in cuts {
            parts.append(string(a[start..<c]))
            start = c + p.count
        }
        parts.append(string(a[start..<a.count]))
        return parts
    }

    static let lineBreaks: Set<UInt32> = [0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029]

    /// str.splitlines(keepends=False).
    static func splitlines(_ s: String) -> [String] {
        let a = scalars(s)
        var out: [String] = []
        var start = 0
        var i = 0
        while i < a.count {
            if lineBreaks.contains(a[i].value) {
                out.append(string(a[start..<i]))
                if a[i] == "\r" && i + 1 < a.count && a[i + 1] == "\n" { i += 1 }
                start = i + 1
            }
            i += 1
        }
        if start < a.count { out.append(string(a[start..<a.count])) }
        return out
    }

    static func isCased(_ u: Unicode.Scalar) -> Bool { u.properties.isCased }

    /// str.title(): uppercase (titlecase) a cased character after an uncased one, lowercase the rest.
    static func title(_ s: String) -> String {
        var out = ""
        var previousCased = false
        for u in s.unicodeScalars {
            if previousCased { out += u.properties.lowercaseMapping } else { out += u.properties.titlecaseMapping }
            previousCased = isCased(u)
        }
        return out
    }

    /// str.capitalize(): the first character titlecased, the rest lowercased.
    static func capitalize(_ s: String) -> String {
        var out = ""
        for (i, u) in s.unicodeScalars.enumerated() {
            out += i == 0 ? u.properties.titlecaseMapping : u.properties.lowercaseMapping
        }
        return out
    }

    static func lower(_ s: String) -> String { s.unicodeScalars.map(\.properties.lowercaseMapping).joined() }
    static func upper(_ s: String) -> String { s.unicodeScalars.map(\.properties.uppercaseMapping).joined() }

    /// str.replace(old, new, count=-1); an empty `old` inserts `new` between every character.
    static func replace(_ s: String, _ old: String, _ new: String, _ count: Int, _ ctx: CallContext?) throws -> String {
        let a = scalars(s), p = scalars(old)
        var out = String.UnicodeScalarView()
        var done = 0
        if p.isEmpty {
            for u in a {
                if count < 0 || done < count { out.append(contentsOf: new.unicodeScalars); done += 1 }
                out.append(u)
            }
            if count < 0 || done < count { out.append(contentsOf: new.unicodeScalars) }
        } else {
            var i = 0
            while i < a.count {
                if (count < 0 || done < count) && i + p.count <= a.count && Array(a[i..<(i + p.count)]) == p {
                    out.append(contentsOf: new.unicodeScalars)
                    i += p.count
                    done += 1
                    if let ctx, out.count > ctx.limits.maxOutputBytes { throw JinjaFailure.limit("replace: the result exceeds the template output bound") }
                } else {
                    out.append(a[i])
                    i += 1
                }
            }
        }
        return String(out)
    }

    static func find(_ s: String, _ sub: String, fromRight: Bool) -> Int {
        let a = scalars(s), p = scalars(sub)
        if p.count > a.count { return -1 }
        let range = Array(0...(a.count - p.count))
        for i in fromRight ? range.reversed() : range where Array(a[i..<(i + p.count)]) == p { return i }
        return -1
    }

    static func affixes(_ v: JinjaValue, _ method: String) throws -> [String] {
        switch v {
        case let .string(s): return [s]
        case let .list(items, true):
            return try items.map { item in
                guard case let .string(s) = item else { throw JinjaFailure.type("tuple for \(method) must only contain str, not \(item.typeName)") }
                return s
            }
        default:
            throw JinjaFailure.type("\(method) first arg must be str or a tuple of str, not \(v.typeName)")
        }
    }

    static func string(_ s: String, _ name: String, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ ctx: CallContext) throws -> JinjaValue {
        func arg(_ i: Int, _ key: String) -> JinjaValue? {
            i < args.count ? args[i] : kwargs.first { $0.0 == key }?.1
        }
        switch name {
        case "strip", "lstrip", "rstrip":
            return .string(strip(s, try argString(arg(0, "chars"), name), left: name != "rstrip", right: name != "lstrip"))
        case "split", "rsplit":
            let parts = try split(s, try argString(arg(0, "sep"), name), try argInt(arg(1, "maxsplit"), name) ?? -1, fromRight: name == "rsplit")
            try ctx.checkedCount(parts.count)
            return .list(parts.map { .string($0) })
        case "splitlines":
            return .list(splitlines(s).map { .string($0) })
        case "startswith", "endswith":
            guard let first = arg(0, "prefix") else { throw JinjaFailure.type("\(name)() takes at least 1 argument (0 given)") }
            let a = scalars(s)
            let lo = max(0, min(a.count, (try argInt(arg(1, "start"), name)).map { $0 < 0 ? $0 + a.count : $0 } ?? 0))
            let hi = max(lo, min(a.count, (try argInt(arg(2, "end"), name)).map { $0 < 0 ? $0 + a.count : $0 } ?? a.count))
            let part = Array(a[lo..<hi])
            for affix in try affixes(first, name) {
                let p = scalars(affix)
                if name == "startswith" ? part.starts(with: p) : (part.count >= p.count && Array(part.suffix(p.count)) == p) {
                    return .bool(true)
                }
            }
            return .bool(false)
        case "lower", "casefold": return .string(lower(s))
        case "upper": return .string(upper(s))
        case "title": return .string(title(s))
        case "capitalize": return .string(capitalize(s))
        case "swapcase":
            return .string(s.unicodeScalars.map { $0.properties.isLowercase ? $0.properties.uppercaseMapping : $0.properties.isUppercase ? $0.properties.lowercaseMapping : String($0) }.joined())
        case "replace":
            guard case let .string(old)? = arg(0, "old"), case let .string(new)? = arg(1, "new") else {
                throw JinjaFailure.type("replace() arguments must be str")
            }
            return try ctx.checked(try replace(s, old, new, try argInt(arg(2, "count"), name) ?? -1, ctx))
        case "find", "rfind", "index", "rindex":
            guard case let .string(sub)? = arg(0, "sub") else { throw JinjaFailure.type("must be str") }
            let i = find(s, sub, fromRight: name.hasPrefix("r"))
            if i < 0 && name.hasSuffix("index") { throw JinjaFailure.runtime("substring not found") }
            return .int(i)
        case "count":
            guard case let .string(sub)? = arg(0, "sub") else { throw JinjaFailure.type("must be str") }
            if sub.isEmpty { return .int(s.unicodeScalars.count + 1) }
            return .int(try split(s, sub, -1, fromRight: false).count - 1)
        case "join":
            guard let items = arg(0, "iterable") else { throw JinjaFailure.type("join() takes exactly one argument") }
            let parts = try ctx.iterate(items).map { item -> String in
                guard case let .string(t) = item else { throw JinjaFailure.type("sequence item: expected str instance, \(item.typeName) found") }
                return t
            }
            return try ctx.checked(parts.joined(separator: s))
        case "format":
            return try ctx.checked(try format(s, args, kwargs))
        case "isdigit", "isnumeric", "isdecimal":
            return .bool(!s.isEmpty && s.unicodeScalars.allSatisfy { $0.properties.numericType != nil })
        case "isalpha": return .bool(!s.isEmpty && s.unicodeScalars.allSatisfy(\.properties.isAlphabetic))
        case "isalnum": return .bool(!s.isEmpty && s.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || $0.properties.numericType != nil })
        case "isspace": return .bool(!s.isEmpty && s.unicodeScalars.allSatisfy(isSpace))
        case "isupper", "islower":
            let cased = s.unicodeScalars.filter(isCased)
            let ok = name == "isupper" ? cased.allSatisfy { !$0.properties.isLowercase } : cased.allSatisfy { !$0.properties.isUppercase }
            return .bool(!cased.isEmpty && ok)
        case "istitle": return .bool(!s.isEmpty && title(s) == s && s.unicodeScalars.contains(where: isCased))
        case "zfill", "center", "ljust", "rjust":
            let width = try argInt(arg(0, "width"), name) ?? 0
            if width > ctx.limits.maxOutputBytes { throw JinjaFailure.limit("\(name): width \(width) exceeds the output bound") }
            let fill = name == "zfill" ? "0" : (try argString(arg(1, "fillchar"), name) ?? " ")
            let n = s.unicodeScalars.count
            guard width > n else { return .string(s) }
            let pad = width - n
            switch name {
            case "ljust": return .string(s + String(repeating: fill, count: pad))
            case "rjust": return .string(String(repeating: fill, count: pad) + s)
            case "center":
                let left = pad / 2 + (pad & width & 1)
                return .string(String(repeating: fill, count: left) + s + String(repeating: fill, count: pad - left))
            default:
                if s.hasPrefix("-") || s.hasPrefix("+") {
                    return .string(String(s.prefix(1)) + String(repeating: "0", count: pad) + s.dropFirst())
                }
                return .string(String(repeating: "0", count: pad) + s)
            }
        case "partition", "rpartition":
            guard case let .string(sep)? = arg(0, "sep"), !sep.isEmpty else { throw JinjaFailure.runtime("empty separator") }
            let i = find(s, sep, fromRight: name == "rpartition")
            let a = scalars(s)
            if i < 0 {
                return .list(name == "partition" ? [.string(s), .string(""), .string("")] : [.string(""), .string(""), .string(s)], isTuple: true)
            }
            return .list([.string(string(a[0..<i])), .string(sep), .string(string(a[(i + sep.unicodeScalars.count)...]))], isTuple: true)
        case "removeprefix", "removesuffix":
            guard case let .string(affix)? = arg(0, "prefix") else { throw JinjaFailure.type("\(name)() argument must be str") }
            let a = scalars(s), p = scalars(affix)
            if name == "removeprefix" { return .string(a.starts(with: p) ? string(a.dropFirst(p.count)) : s) }
            return .string(a.count >= p.count && Array(a.suffix(p.count)) == p && !p.isEmpty ? string(a.dropLast(p.count)) : s)
        default:
            throw JinjaFailure.runtime("'str' object has no attribute '\(name)'")
        }
    }

    /// str.format with `{}`, `{0}`, `{name}` fields (no format specs or conversions).
    static func format(_ s: String, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)]) throws -> String {
        var out = ""
        var auto = 0
        var i = s.startIndex
        while i < s.endIndex {
            let c = s[i]
            if c == "{" {
                let next = s.index(after: i)
                if next < s.endIndex && s[next] == "{" { out += "{"; i = s.index(after: next); continue }
                guard let close = s[next...].firstIndex(of: "}") else { throw JinjaFailure.runtime("Single '{' encountered in format string") }
                let field = String(s[next..<close])
                if field.contains(":") || field.contains("!") || field.contains(".") || field.contains("[") {
                    throw JinjaFailure.runtime("format fields with specs, conversions or attributes are not supported: {\(field)}")
                }
                let value: JinjaValue
                if field.isEmpty {
                    guard auto < args.count else { throw JinjaFailure.runtime("Replacement index \(auto) out of range for positional args tuple") }
                    value = args[auto]
                    auto += 1
                } else if let n = Int(field) {
                    guard n < args.count else { throw JinjaFailure.runtime("Replacement index \(n) out of range for positional args tuple") }
                    value = args[n]
                } else {
                    guard let kw = kwargs.first(where: { $0.0 == field }) else { throw JinjaFailure.runtime("KeyError: '\(field)'") }
                    value = kw.1
                }
                out += PythonText.str(value)
                i = s.index(after: close)
            } else if c == "}" {
                let next = s.index(after: i)
                guard next < s.endIndex && s[next] == "}" else { throw JinjaFailure.runtime("Single '}' encountered in format string") }
                out += "}"
                i = s.index(after: next)
            } else {
                out.append(c)
                i = s.index(after: i)
            }
        }
        return out
    }

    static func list(_ items: [JinjaValue], _ name: String, _ args: [JinjaValue]) throws -> JinjaValue {
        switch name {
        case "index":
            guard let x = args.first, let i = items.firstIndex(of: x) else { throw JinjaFailure.runtime("value is not in list") }
            return .int(i)
        case "count":
            guard let x = args.first else { throw JinjaFailure.type("count() takes exactly one argument (0 given)") }
            return .int(items.filter { $0 == x }.count)
        default:
            return .list(items)
        }
    }

    static func dict(_ d: JinjaDict, _ name: String, _ args: [JinjaValue]) throws -> JinjaValue {
        switch name {
        case "items": return .list(d.pairs.map { .list([.string($0.0), $0.1], isTuple: true) })
        case "keys": return .list(d.keys.map { .string($0) })
        case "values": return .list(d.values)
        case "get":
            guard let key = args.first else { throw JinjaFailure.type("get expected at least 1 argument, got 0") }
            if case let .string(k) = key, let v = d[k] { return v }
            return args.count > 1 ? args[1] : .none
        default:
            return .dict(d)
        }
    }
}
