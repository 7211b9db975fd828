// The value a JSON text so far stands for, while it is being generated: what a streamed guided
// reply shows before it is whole (Foundation Models' partially generated content). Open
// strings, arrays and objects are closed where the text stops; a member whose key is not
// finished, or whose value has not begun, is left out; a number keeps its digits so far
// (`12.` reads as 12); an unfinished `true`/`false`/`null` is left out. Text that is not the
// beginning of some JSON value gives nil. Whole texts parse as `JSONValue.parse` does.

extension JSONValue {
    /// The value that `prefix` (the beginning of a JSON text) has spelled out so far, or nil when
    /// it holds no value yet or cannot begin one.
    public static func partial(_ prefix: String) -> JSONValue? {
        var p = PartialParser(bytes: Array(prefix.utf8))
        guard let value = p.value() else { return nil }
        p.skipSpace()
        return p.atEnd ? value : nil
    }
}

private struct PartialParser {
    let bytes: [UInt8]
    var at = 0

    var atEnd: Bool { at >= bytes.count }

    mutating func skipSpace() {
        while at < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[at]) { at += 1 }
    }

    /// A value, whole or cut at the end of the text; nil when none has begun or it is malformed.
    mutating func value() -> JSONValue? {
        skipSpace()
        guard !atEnd else { return nil }
        switch bytes[at] {
        case UInt8(ascii: "{"): return object()
        case UInt8(ascii: "["): return array()
        case UInt8(ascii: "\""): return string().map { .string($0.text) }
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return number()
        }
    }

    mutating func object() -> JSONValue? {
        at += 1
        var members: [JSONMember] = []
        while true {
            skipSpace()
            if atEnd { return .object(members) }
            if bytes[at] == UInt8(ascii: "}") { at += 1; return .object(members) }
            if !members.isEmpty {
                guard bytes[at] == UInt8(ascii: ",") else { return nil }
                at += 1
                skipSpace()
                if atEnd { return .object(members) }
            }
            guard bytes[at] == UInt8(ascii: "\""), let (key, closed) = string() else { return nil }
            guard closed else { return .object(members) }  // the key is not finished
            skipSpace()
            if atEnd { return .object(members) }
            guard bytes[at] == UInt8(ascii: ":") else { return nil }
            at += 1
            guard let v = value() else { return atEnd ? .object(members) : nil }
            members.append(JSONMember(key: key, value: v))
        }
    }

    mutating func array() -> JSONValue? {
        at += 1
        var items: [JSONValue] = []
        while true {
            skipSpace()
            if atEnd { return .array(items) }
            if bytes[at] == UInt8(ascii: "]") { at += 1; return .array(items) }
            if !items.isEmpty {
                guard bytes[at] == UInt8(ascii: ",") else { return nil }
                at += 1
            }
            guard let v = value() else { return atEnd ? .array(items) : nil }
            items.append(v)
        }
    }

    /// A string's text so far (escapes decoded; an escape cut at the end is left out) and whether
    /// its closing quote came. (The text is a Swift string: its UTF-8 is never cut mid-character.)
    mutating func string() -> (text: String, closed: Bool)? {
        at += 1
        var out: [UInt8] = []
        while at < bytes.count {
            let b = bytes[at]
            if b == UInt8(ascii: "\"") {
                at += 1
                return (String(decoding: out, as: UTF8.self), true)
            }
            if b == UInt8(ascii: "\\") {
                guard at + 1 < bytes.count else { at = bytes.count; break }
                let e = bytes[at + 1]
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard at + 6 <= bytes.count else { at = bytes.count; return (String(decoding: out, as: UTF8.self), false) }
                    guard let unit = UInt16(String(decoding: bytes[(at + 2)..<(at + 6)], as: UTF8.self), radix: 16) else { return nil }
                    var units = [unit]
                    var used = 6
                    if UTF16.isLeadSurrogate(unit) {  // its pair follows as a second \u escape
                        guard at + 12 <= bytes.count else { at = bytes.count; return (String(decoding: out, as: UTF8.self), false) }
                        if bytes[at + 6] == UInt8(ascii: "\\"), bytes[at + 7] == UInt8(ascii: "u"),
                           let low = UInt16(String(decoding: bytes[(at + 8)..<(at + 12)], as: UTF8.self), radix: 16) {
                            units.append(low)
                            used = 12
                        }
                    }
                    out.append(contentsOf: Array(String(decoding: units, as: UTF16.self).utf8))
                    at += used
                    continue
                default: return nil
                }
                at += 2
                continue
            }
            out.append(b)
            at += 1
        }
        return (String(decoding: out, as: UTF8.self), false)
    }

    mutating func literal(_ word: String, _ v: JSONValue) -> JSONValue? {
        let w = Array(word.utf8)
        let n = min(w.count, bytes.count - at)
        guard Array(bytes[at..<(at + n)]) == Array(w[0..<n]) else { return nil }
        at += n
        return n == w.count ? v : nil
    }

    mutating func number() -> JSONValue? {
        let start = at
        while at < bytes.count, "-+.eE0123456789".utf8.contains(bytes[at]) { at += 1 }
        var text = String(decoding: bytes[start..<at], as: UTF8.self)
        if atEnd {  // possibly cut: keep the longest whole number at its start
            while let last = text.last, !last.isNumber { text.removeLast() }
        }
        guard !text.isEmpty, let parsed = try? JSONValue.parse(text, context: "partial number"), case .number = parsed else {
            return nil
        }
        return parsed
    }
}
