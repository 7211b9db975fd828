// The functions every template can call: Jinja2's `range`, `dict`, `namespace`, `cycler`,
// `joiner`, and the two transformers adds: `raise_exception(message)` (stops rendering with the
// template's own message) and `strftime_now(format)` (the environment's date, formatted with
// Python's strftime codes in the C locale).

enum Globals {
    static func functions(_ environment: JinjaEnvironment) -> [String: JinjaCallable] {
        [
            "range": JinjaCallable("range") { args, _, ctx in
                let ints = try args.map { v -> Int in
                    guard let i = Operators.intValue(v) else { throw JinjaFailure.type("'\(v.typeName)' object cannot be interpreted as an integer") }
                    return i
                }
                let (start, stop, step): (Int, Int, Int)
                switch ints.count {
                case 1: (start, stop, step) = (0, ints[0], 1)
                case 2: (start, stop, step) = (ints[0], ints[1], 1)
                case 3: (start, stop, step) = (ints[0], ints[1], ints[2])
                default: throw JinjaFailure.type("range expected 1 to 3 arguments, got \(ints.count)")
                }
                if step == 0 { throw JinjaFailure.runtime("range() arg 3 must not be zero") }
                let count = step > 0 ? max(0, (stop - start + step - 1) / step) : max(0, (start - stop - step - 1) / -step)
                try ctx.checkedCount(count)
                return .list(stride(from: start, to: stop, by: step).map { .int($0) })
            },
            "dict": JinjaCallable("dict") { args, kwargs, ctx in .dict(try dictArguments("dict", args, kwargs, ctx)) },
            "namespace": JinjaCallable("namespace") { args, kwargs, ctx in
                let d = try dictArguments("namespace", args, kwargs, ctx)
                for k in d.keys { try checkNamespaceName(k) }
                return .namespace(JinjaNamespace(d))
            },
            "cycler": JinjaCallable("cycler") { args, _, _ in
                let items = args
                let state = JinjaNamespace(JinjaDict([("position", .int(0))]))
                var d = JinjaDict()
                d["next"] = .callable(JinjaCallable("next") { _, _, _ in
                    guard !items.isEmpty, case let .int(p)? = state.attributes["position"] else { return .none }
                    state.attributes["position"] = .int((p + 1) % items.count)
                    return items[p]
                })
                d["reset"] = .callable(JinjaCallable("reset") { _, _, _ in
                    state.attributes["position"] = .int(0)
                    return .none
                })
                return .dict(d)
            },
            "joiner": JinjaCallable("joiner") { args, _, _ in
                let separator = args.first.map(PythonText.str) ?? ", "
                let state = JinjaNamespace(JinjaDict([("used", .bool(false))]))
                return .callable(JinjaCallable("joiner") { _, _, _ in
                    if state.attributes["used"] == .bool(true) { return .string(separator) }
                    state.attributes["used"] = .bool(true)
                    return .string("")
                })
            },
            "raise_exception": JinjaCallable("raise_exception") { args, _, _ in
                throw JinjaFailure.raised(args.first.map(PythonText.str) ?? "")
            },
            "strftime_now": JinjaCallable("strftime_now") { args, _, _ in
                guard case let .string(format)? = args.first else { throw JinjaFailure.type("strftime_now() needs a format string") }
                return .string(strftime(format, environment.date ?? JinjaDate.now()))
            },
        ]
    }

    /// `dict(mapping_or_pairs, **kwargs)`, as Python's dict() (transformers' `dict` and `namespace`).
    static func dictArguments(_ function: String, _ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ ctx: CallContext) throws -> JinjaDict {
        guard args.count <= 1 else { throw JinjaFailure.type("\(function) expected at most 1 argument, got \(args.count)") }
        var d = JinjaDict()
        switch args.first {
        case nil: break
        case let .dict(base)?: d = base
        case let other?:
            for pair in try ctx.iterate(other) {
                guard case let .list(kv, _) = pair, kv.count == 2, case let .string(k) = kv[0] else {
                    throw JinjaFailure.type("\(function)(): each item must be a (string key, value) pair")
                }
                d[k] = kv[1]
            }
        }
        for (k, v) in kwargs { d[k] = v }
        return d
    }

    /// transformers' namespace refuses names starting with "_" (CPython internals hide there).
    static func checkNamespaceName(_ name: String) throws {
        if name.hasPrefix("_") {
            throw JinjaFailure.security("Chat templates cannot store underscore-prefixed attributes on a namespace, but got \(PythonText.stringRepr(name)). Please rename the attribute.")
        }
    }

    static let months = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                         "October", "November", "December"]
    static let weekdays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

    /// 0 = Monday, as Python's weekday().
    static func weekday(_ d: JinjaDate) -> Int {
        // Days since 1970-01-01 (a Thursday), by the civil-from-days inverse.
        let y = d.month <= 2 ? d.year - 1 : d.year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (d.month + 9) % 12
        let doy = (153 * mp + 2) / 5 + d.day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return ((days % 7) + 7 + 3) % 7
    }

    static func dayOfYear(_ d: JinjaDate) -> Int {
        let leap = (d.year % 4 == 0 && d.year % 100 != 0) || d.year % 400 == 0
        let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][d.month - 1]
        return before + d.day + (leap && d.month > 2 ? 1 : 0)
    }

    static func pad(_ n: Int, _ width: Int = 2, _ fill: Character = "0") -> String {
        let s = String(n)
        return String(repeating: fill, count: max(0, width - s.count)) + s
    }

    /// Python's strftime for the codes chat templates use; others are written as given.
    static func strftime(_ format: String, _ d: JinjaDate) -> String {
        var out = ""
        var it = format.makeIterator()
        while let c = it.next() {
            guard c == "%" else { out.append(c); continue }
            guard let code = it.next() else { out.append("%"); break }
            let hour12 = d.hour % 12 == 0 ? 12 : d.hour % 12
            switch code {
            case "Y": out += String(d.year)
            case "y": out += pad(d.year % 100)
            case "m": out += pad(d.month)
            case "d": out += pad(d.day)
            case "e": out += pad(d.day, 2, " ")
            case "-":
                // GNU's no-padding flag (%-d, %-m): glibc's strftime, which CPython calls on Linux.
                guard let next = it.next() else { out += "%-"; break }
                switch next {
                case "d": out += String(d.day)
                case "m": out += String(d.month)
                case "H": out += String(d.hour)
                case "I": out += String(hour12)
                case "M": out += String(d.minute)
                case "S": out += String(d.second)
                case "j": out += String(dayOfYear(d))
                default: out += "%-" + String(next)
                }
            case "B": out += months[d.month - 1]
            case "b", "h": out += String(months[d.month - 1].prefix(3))
            case "A": out += weekdays[weekday(d)]
            case "a": out += String(weekdays[weekday(d)].prefix(3))
            case "H": out += pad(d.hour)
            case "I": out += pad(hour12)
            case "M": out += pad(d.minute)
            case "S": out += pad(d.second)
            case "p": out += d.hour < 12 ? "AM" : "PM"
            case "j": out += pad(dayOfYear(d), 3)
            case "w": out += String((weekday(d) + 1) % 7)
            case "u": out += String(weekday(d) + 1)
            case "F": out += "\(d.year)-\(pad(d.month))-\(pad(d.day))"
            case "D": out += "\(pad(d.month))/\(pad(d.day))/\(pad(d.year % 100))"
            case "T": out += "\(pad(d.hour)):\(pad(d.minute)):\(pad(d.second))"
            case "%": out += "%"
            default: out += "%" + String(code)
            }
        }
        return out
    }
}
