// A strict RFC 8259 JSON parser over UTF-8 bytes that reports the column of the first error,
// keeps object keys in written order, rejects duplicate keys, and keeps number literals.
// Leaves out JSON5/comments/NaN. Nesting is bounded (`maxDepth`) so hostile input cannot
// overflow the stack; UTF-8 validity is checked before parsing (see `firstInvalidUTF8Offset`).

/// Where and why parsing failed; `offset` is a byte offset into the parsed bytes.
struct JSONParseFailure: Error {
    var offset: Int
    var message: String

    /// 1-based column counted in Unicode scalars, as editors show it.
    func column(in bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var column = 1
        var i = 0
        let end = min(offset, bytes.count)
        while i < end {
            if bytes[i] & 0xC0 != 0x80 { column += 1 }
            i += 1
        }
        return column
    }
}

struct JSONParser {
    static let maxDepth = 512

    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// Parses exactly one JSON value, with only whitespace around it.
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseFailure) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        guard parser.index < bytes.count else {
            throw JSONParseFailure(offset: 0, message: "no JSON value (the text is empty)")
        }
        let value = try parser.parseValue()
        parser.skipWhitespace()
        if parser.index < bytes.count {
            throw JSONParseFailure(offset: parser.index, message: "unexpected \(parser.describeByte(at: parser.index)) after the JSON value; put one JSON value per line")
        }
        return value
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    func describeByte(at i: Int) -> String {
        guard i < bytes.count else { return "end of line" }
        let b = bytes[i]
        if b == 0xEF, i + 2 < bytes.count, bytes[i + 1] == 0xBB, bytes[i + 2] == 0xBF {
            return "byte-order mark (U+FEFF)"
        }
        if b >= 0x21 && b < 0x7F { return "'\(Character(UnicodeScalar(b)))'" }
        if b < 0x20 { return "control character 0x\(String(b, radix: 16, uppercase: true))" }
        return "non-ASCII text"
    }

    mutating func parseValue() throws(JSONParseFailure) -> JSONValue {
        guard index < bytes.count else {
            throw JSONParseFailure(offset: index, message: "the line ends where a value was expected; is the JSON cut short?")
        }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectWord("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectWord("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectWord("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default:
            throw JSONParseFailure(offset: index, message: "unexpected \(describeByte(at: index)) where a value was expected")
        }
    }

    mutating func expectWord(_ word: StaticString) throws(JSONParseFailure) {
        let start = index
        let count = word.utf8CodeUnitCount
        var ok = index + count <= bytes.count
        if ok {
            for k in 0..<count where bytes[index + k] != word.utf8Start[k] { ok = false; break }
        }
        guard ok else {
            throw JSONParseFailure(offset: start, message: "unexpected \(describeByte(at: start)) where a value was expected (strings need double quotes)")
        }
        index += count
    }

    mutating func enter() throws(JSONParseFailure) {
        depth += 1
        if depth > JSONParser.maxDepth {
            throw JSONParseFailure(offset: index, message: "nesting deeper than \(JSONParser.maxDepth) levels")
        }
    }

    mutating func parseObject() throws(JSONParseFailure) -> JSONValue {
        try enter()
        index += 1  // {
        var members: [JSONMember] = []
        var seen = Set<String>()
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw JSONParseFailure(offset: index, message: "expected a key in double quotes, found \(describeByte(at: index))")
            }
            let keyOffset = index
            let key = try parseString()
            guard seen.insert(key).inserted else {
                throw JSONParseFailure(offset: keyOffset, message: "duplicate key \"\(key)\" in one object; keep only one")
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw JSONParseFailure(offset: index, message: "expected ':' after key \"\(key)\", found \(describeByte(at: index))")
            }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            members.append(JSONMember(key: key, value: value))
            skipWhitespace()
            guard index < bytes.count else {
                throw JSONParseFailure(offset: index, message: "the line ends inside an object; expected ',' or '}'")
            }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; break }
            throw JSONParseFailure(offset: index, message: "expected ',' or '}' after the value of \"\(key)\", found \(describeByte(at: index))")
        }
        depth -= 1
        return .object(members)
    }

    mutating func parseArray() throws(JSONParseFailure) -> JSONValue {
        try enter()
        index += 1  // [
        var items: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else {
                throw JSONParseFailure(offset: index, message: "the line ends inside an array; expected ',' or ']'")
            }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; break }
            throw JSONParseFailure(offset: index, message: "expected ',' or ']' in an array, found \(describeByte(at: index))")
        }
        depth -= 1
        return .array(items)
    }

    mutating func parseNumber() throws(JSONParseFailure) -> JSONNumber {
        let start = index
        func digit(_ i: Int) -> Bool { i < bytes.count && bytes[i] >= UInt8(ascii: "0") && bytes[i] <= UInt8(ascii: "9") }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard digit(index) else { throw JSONParseFailure(offset: index, message: "a number needs digits after '-'") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if digit(index) { throw JSONParseFailure(offset: start, message: "numbers must not have leading zeros") }
        } else {
            while digit(index) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digit(index) else { throw JSONParseFailure(offset: index, message: "a number needs digits after '.'") }
            while digit(index) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digit(index) else { throw JSONParseFailure(offset: index, message: "a number needs digits in its exponent") }
            while digit(index) { index += 1 }
        }
        let literal = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        return JSONNumber(validatedLiteral: literal)
    }

    func hexValue(_ b: UInt8) -> UInt32? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(b - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    mutating func parseHex4() throws(JSONParseFailure) -> UInt32 {
        guard index + 4 <= bytes.count else {
            throw JSONParseFailure(offset: index, message: "\\u needs four hex digits")
        }
        var v: UInt32 = 0
        for k in 0..<4 {
            guard let h = hexValue(bytes[index + k]) else {
                throw JSONParseFailure(offset: index + k, message: "\\u needs four hex digits")
            }
            v = v << 4 | h
        }
        index += 4
        return v
    }

    /// Expects `index` at the opening quote; bytes are valid UTF-8 (checked by the reader).
    mutating func parseString() throws(JSONParseFailure) -> String {
        let open = index
        index += 1
        let start = index
        // Fast path: no escapes, no control characters.
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return s
            }
            if b == UInt8(ascii: "\\") || b < 0x20 { break }
            index += 1
        }
        var scalars = String.UnicodeScalarView()
        var utf8Run: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        func flush() {
            if !utf8Run.isEmpty {
                scalars.append(contentsOf: String(decoding: utf8Run, as: UTF8.self).unicodeScalars)
                utf8Run.removeAll(keepingCapacity: true)
            }
        }
        while true {
            guard index < bytes.count else {
                throw JSONParseFailure(offset: open, message: "a string starting here is not closed before the end of the line")
            }
            let b = bytes[index]
            if b == UInt8(ascii: "\"") { index += 1; break }
            if b < 0x20 {
                let hint = b == 0x0A || b == 0x0D ? " (a raw line break inside a string: write it as \\n)" : " (escape it as \\u00XX)"
                throw JSONParseFailure(offset: index, message: "control character 0x\(String(b, radix: 16, uppercase: true)) inside a string\(hint)")
            }
            if b != UInt8(ascii: "\\") {
                utf8Run.append(b)
                index += 1
                continue
            }
            let escapeOffset = index
            index += 1
            guard index < bytes.count else {
                throw JSONParseFailure(offset: escapeOffset, message: "a string ends inside an escape sequence")
            }
            let e = bytes[index]
            index += 1
            var scalar: UnicodeScalar
            switch e {
            case UInt8(ascii: "\""): scalar = "\""
            case UInt8(ascii: "\\"): scalar = "\\"
            case UInt8(ascii: "/"): scalar = "/"
            case UInt8(ascii: "b"): scalar = "\u{08}"
            case UInt8(ascii: "f"): scalar = "\u{0C}"
            case UInt8(ascii: "n"): scalar = "\n"
            case UInt8(ascii: "r"): scalar = "\r"
            case UInt8(ascii: "t"): scalar = "\t"
            case UInt8(ascii: "u"):
                let first = try parseHex4()
                var code = first
                if (0xD800...0xDBFF).contains(first) {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw JSONParseFailure(offset: escapeOffset, message: "unpaired UTF-16 surrogate \\u\(String(first, radix: 16, uppercase: true))")
                    }
                    index += 2
                    let second = try parseHex4()
                    guard (0xDC00...0xDFFF).contains(second) else {
                        throw JSONParseFailure(offset: escapeOffset, message: "unpaired UTF-16 surrogate \\u\(String(first, radix: 16, uppercase: true))")
                    }
                    code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(first) {
                    throw JSONParseFailure(offset: escapeOffset, message: "unpaired UTF-16 surrogate \\u\(String(first, radix: 16, uppercase: true))")
                }
                scalar = UnicodeScalar(code)!
            default:
                let shown = e >= 0x21 && e < 0x7F ? String(UnicodeScalar(e)) : "(byte 0x\(String(e, radix: 16, uppercase: true)))"
                throw JSONParseFailure(offset: escapeOffset, message: "unknown escape sequence \\\(shown); escape a backslash as \\\\")
            }
            flush()
            scalars.append(scalar)
        }
        flush()
        return String(scalars)
    }
}

/// The offset of the first byte that breaks UTF-8 (overlongs, surrogates and values past
/// U+10FFFF included), or nil when all of `bytes` is valid.
func firstInvalidUTF8Offset(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
    var i = 0
    let n = bytes.count
    while i < n {
        let b0 = bytes[i]
        if b0 < 0x80 { i += 1; continue }
        var need = 0
        var lower: UInt8 = 0x80
        var upper: UInt8 = 0xBF
        switch b0 {
        case 0xC2...0xDF: need = 1
        case 0xE0: need = 2; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: need = 2
        case 0xED: need = 2; upper = 0x9F
        case 0xF0: need = 3; lower = 0x90
        case 0xF1...0xF3: need = 3
        case 0xF4: need = 3; upper = 0x8F
        default: return i
        }
        guard i + need < n else { return i }
        let b1 = bytes[i + 1]
        if b1 < lower || b1 > upper { return i }
        for k in 2...max(2, need) where k <= need {
            if bytes[i + k] & 0xC0 != 0x80 { return i }
        }
        i += need + 1
    }
    return nil
}

extension JSONValue {
    /// Parses one JSON text. `context` names where it came from, for the error message.
    public static func parse(_ text: String, context: String = "JSON text") throws(DataSchemaError) -> JSONValue {
        var copy = text
        let result: Result<JSONValue, JSONParseFailure> = copy.withUTF8 { buffer in
            do throws(JSONParseFailure) {
                return .success(try JSONParser.parse(buffer))
            } catch {
                return .failure(JSONParseFailure(offset: error.column(in: buffer), message: error.message))
            }
        }
        switch result {
        case let .success(value): return value
        case let .failure(failure):
            throw DataSchemaError.malformedJSON(context: context, message: "\(failure.message) (column \(failure.offset))")
        }
    }
}
