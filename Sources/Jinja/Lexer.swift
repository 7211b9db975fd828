// Template source to tokens, as Jinja2's lexer does it under transformers' settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline off): newlines normalized to \n, one final
// newline dropped, `{%-`/`-%}` whitespace control, `{%+`/`+%}` opt-outs, comments dropped, raw
// blocks kept as text, brackets balanced inside tags so `{{ {'a': {}} }}` closes at the right
// `}}`. Reference: jinja2/lexer.py (3.1): the root rule, OptionalLStrip, the tag rules.

struct Token: Equatable {
    enum Kind: Equatable {
        case text(String)
        case variableBegin, variableEnd, blockBegin, blockEnd
        case name(String)
        case string(String)
        case integer(Int)
        case float(Double)
        case op(String)
        case eof
    }
    var kind: Kind
    var line: Int
    var column: Int
}

struct Lexer {
    private var src: [Unicode.Scalar]
    private var pos = 0
    private var tokens: [Token] = []
    /// Whether the previous match ended with a newline (Jinja's `line_starting`).
    private var lineStarting = true
    /// Line starts (offsets) for line/column of any offset.
    private var lineStarts: [Int] = [0]

    static let operators: [String] = ["//", "**", "==", "!=", ">=", "<=",
                                      "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
                                      "<", ">", "=", ".", ":", "|", ",", ";"]

    init(_ source: String) {
        // Jinja splits on \r\n, \r and \n, drops one trailing empty line, joins with \n.
        var scalars: [Unicode.Scalar] = []
        scalars.reserveCapacity(source.unicodeScalars.count)
        var previousCR = false
        for u in source.unicodeScalars {
            if u == "\r" {
                scalars.append("\n")
                previousCR = true
                continue
            }
            if u == "\n" && previousCR { previousCR = false; continue }
            previousCR = false
            scalars.append(u)
        }
        if scalars.last == "\n" { scalars.removeLast() }
        src = scalars
        for (i, u) in src.enumerated() where u == "\n" { lineStarts.append(i + 1) }
    }

    static func tokenize(_ source: String) throws(JinjaError) -> [Token] {
        var lexer = Lexer(source)
        try lexer.run()
        return lexer.tokens
    }

    func location(_ offset: Int) -> (line: Int, column: Int) {
        var lo = 0, hi = lineStarts.count - 1
        while lo < hi {
            let mid = (lo + hi + 1) / 2
            if lineStarts[mid] <= offset { lo = mid } else { hi = mid - 1 }
        }
        return (lo + 1, offset - lineStarts[lo] + 1)
    }

    private func error(_ message: String, at offset: Int) -> JinjaError {
        let (l, c) = location(offset)
        return JinjaError(kind: .syntax, message: message, line: l, column: c)
    }

    private mutating func emit(_ kind: Token.Kind, at offset: Int) {
        let (l, c) = location(offset)
        tokens.append(Token(kind: kind, line: l, column: c))
    }

    static func isSpace(_ u: Unicode.Scalar) -> Bool {
        u.properties.isWhitespace || (0x1C...0x1F).contains(u.value)
    }

    private func at(_ i: Int, _ text: String) -> Bool {
        var j = i
        for u in text.unicodeScalars {
            guard j < src.count, src[j] == u else { return false }
            j += 1
        }
        return true
    }

    private func skipSpaces(_ i: Int) -> Int {
        var j = i
        while j < src.count && Lexer.isSpace(src[j]) { j += 1 }
        return j
    }

    /// Emits template text before a tag after its whitespace control: `-` strips all trailing
    /// whitespace; otherwise (for `{%` and `{#` without `+`) lstrip_blocks removes the spaces
    /// between the line start and the tag.
    private mutating func emitText(_ start: Int, _ end: Int, sign: Unicode.Scalar?, isVariable: Bool) {
        var stop = end
        if sign == "-" {
            while stop > start && Lexer.isSpace(src[stop - 1]) { stop -= 1 }
        } else if sign != "+" && !isVariable {
            var lineStart = start
            if let nl = src[start..<end].lastIndex(of: "\n") { lineStart = nl + 1 }
            if (lineStart > start || lineStarting) && lineStart < end
                && src[lineStart..<end].allSatisfy(Lexer.isSpace) {
                stop = lineStart
            }
        }
        if stop > start {
            emit(.text(String(String.UnicodeScalarView(src[start..<stop]))), at: start)
        }
    }

    private mutating func run() throws(JinjaError) {
        while pos < src.count {
            // The next `{{`, `{%` or `{#`.
            var i = pos
            var found = false
            while i + 1 < src.count {
                if src[i] == "{" && (src[i + 1] == "{" || src[i + 1] == "%" || src[i + 1] == "#") { found = true; break }
                i += 1
            }
            guard found else {
                emitText(pos, src.count, sign: "+", isVariable: true)
                break
            }
            let opener = src[i + 1]
            var j = i + 2
            var sign: Unicode.Scalar?
            if j < src.count && (src[j] == "-" || src[j] == "+") { sign = src[j]; j += 1 }
            if opener == "%", let rawEnd = rawBeginEnd(j) {
                emitText(pos, i, sign: sign, isVariable: false)
                try lexRaw(contentStart: rawEnd, tagStart: i)
                continue
            }
            emitText(pos, i, sign: sign, isVariable: opener == "{")
            switch opener {
            case "#": try lexComment(from: j, tagStart: i)
            case "%": try lexTag(from: j, tagStart: i, isBlock: true)
            default: try lexTag(from: j, tagStart: i, isBlock: false)
            }
        }
        emit(.eof, at: src.count)
    }

    /// After `{%` and its sign: `\s*raw\s*(-%}\s*|%})` gives the offset after it.
    private func rawBeginEnd(_ from: Int) -> Int? {
        var j = skipSpaces(from)
        guard at(j, "raw") else { return nil }
        j += 3
        if j < src.count, isNameChar(src[j]) { return nil }
        j = skipSpaces(j)
        if at(j, "-%}") { return skipSpaces(j + 3) }
        if at(j, "%}") { return j + 2 }
        return nil
    }

    private mutating func lexRaw(contentStart: Int, tagStart: Int) throws(JinjaError) {
        // The content runs to `{%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
        lineStarting = contentStart > 0 && src[contentStart - 1] == "\n"
        var i = contentStart
        while i + 1 < src.count {
            if src[i] == "{" && src[i + 1] == "%" {
                var j = i + 2
                var sign: Unicode.Scalar?
                if j < src.count && (src[j] == "-" || src[j] == "+") { sign = src[j]; j += 1 }
                j = skipSpaces(j)
                if at(j, "endraw") {
                    j = skipSpaces(j + 6)
                    var end: Int?
                    if at(j, "+%}") { end = j + 3 } else if at(j, "-%}") { end = skipSpaces(j + 3) } else if at(j, "%}") {
                        end = j + 2
                        if end! < src.count && src[end!] == "\n" { end! += 1 }
                    }
                    if let end {
                        emitText(contentStart, i, sign: sign, isVariable: false)
                        pos = end
                        lineStarting = src[end - 1] == "\n"
                        return
                    }
                }
            }
            i += 1
        }
        throw error("Missing end of raw directive", at: tagStart)
    }

    private mutating func lexComment(from: Int, tagStart: Int) throws(JinjaError) {
        var i = from
        while i < src.count {
            if at(i, "+#}") { pos = i + 3; lineStarting = false; return }
            if at(i, "-#}") { pos = skipSpaces(i + 3); lineStarting = src[pos - 1] == "\n"; return }
            if at(i, "#}") {
                pos = i + 2
                if pos < src.count && src[pos] == "\n" { pos += 1 }
                lineStarting = src[pos - 1] == "\n"
                return
            }
            i += 1
        }
        throw error("Missing end of comment tag", at: tagStart)
    }

    private func isNameStart(_ u: Unicode.Scalar) -> Bool {
        u == "_" || u.properties.isAlphabetic
    }

    private func isNameChar(_ u: Unicode.Scalar) -> Bool {
        u == "_" || u.properties.isAlphabetic || u.properties.numericType == .decimal
    }

    private mutating func lexTag(from: Int, tagStart: Int, isBlock: Bool) throws(JinjaError) {
        emit(isBlock ? .blockBegin : .variableBegin, at: tagStart)
        var balance: [Unicode.Scalar] = []
        var i = from
        while true {
            if balance.isEmpty {
                if isBlock {
                    if at(i, "+%}") { pos = i + 3; break }
                    if at(i, "-%}") { pos = skipSpaces(i + 3); break }
                    if at(i, "%}") {
                        pos = i + 2
                        if pos < src.count && src[pos] == "\n" { pos += 1 }
                        break
                    }
                } else {
                    if at(i, "-}}") { pos = skipSpaces(i + 3); break }
                    if at(i, "}}") { pos = i + 2; break }
                }
            }
            guard i < src.count else {
                throw error("unexpected end of template, expected '\(isBlock ? "end of statement block" : "end of print statement")'", at: tagStart)
            }
            let u = src[i]
            if Lexer.isSpace(u) { i += 1; continue }
            if let (kind, end) = try number(at: i) {
                emit(kind, at: i)
                i = end
                continue
            }
            if isNameStart(u) {
                var j = i + 1
                while j < src.count && isNameChar(src[j]) { j += 1 }
                emit(.name(String(String.UnicodeScalarView(src[i..<j]))), at: i)
                i = j
                continue
            }
            if u == "'" || u == "\"" {
                let (text, end) = try string(at: i)
                emit(.string(text), at: i)
                i = end
                continue
            }
            guard let op = Lexer.operators.first(where: { at(i, $0) }) else {
                throw error("unexpected char \(PythonText.stringRepr(String(u))) at \(i)", at: i)
            }
            switch op {
            case "(": balance.append(")")
            case "[": balance.append("]")
            case "{": balance.append("}")
            case ")", "]", "}":
                guard let expected = balance.popLast() else { throw error("unexpected '\(op)'", at: i) }
                if String(expected) != op { throw error("unexpected '\(op)', expected '\(expected)'", at: i) }
            default: break
            }
            emit(.op(op), at: i)
            i += op.unicodeScalars.count
        }
        emit(isBlock ? .blockEnd : .variableEnd, at: i)
        lineStarting = pos > 0 && src[pos - 1] == "\n"
    }

    private func isDigit(_ i: Int) -> Bool {
        i < src.count && src[i].value >= 48 && src[i].value <= 57
    }

    /// Digits with single underscores between them, from `i`; the offset after them.
    private func digits(_ i: Int) -> Int? {
        guard isDigit(i) else { return nil }
        var j = i + 1
        while true {
            if isDigit(j) { j += 1 } else if j < src.count && src[j] == "_" && isDigit(j + 1) { j += 2 } else { break }
        }
        return j
    }

    /// Jinja's float rule (digits, then `.digits` and/or an exponent), else its integer rule.
    private func number(at i: Int) throws(JinjaError) -> (Token.Kind, Int)? {
        guard isDigit(i) else { return nil }
        let intEnd = digits(i)!
        var j = intEnd
        var isFloat = false
        if j < src.count && src[j] == ".", let fracEnd = digits(j + 1) { j = fracEnd; isFloat = true }
        if j < src.count && (src[j] == "e" || src[j] == "E") {
            var k = j + 1
            if k < src.count && (src[k] == "+" || src[k] == "-") { k += 1 }
            if let expEnd = digits(k) { j = expEnd; isFloat = true }
        }
        let text = String(String.UnicodeScalarView(src[i..<j])).replacingOccurrencesOfUnderscore()
        if isFloat {
            guard let d = Double(text) else { throw error("bad float literal \(text)", at: i) }
            return (.float(d), j)
        }
        // Prefixed integers: 0b, 0o, 0x.
        if src[i] == "0", i + 1 < src.count, let radix = ["b": 2, "B": 2, "o": 8, "O": 8, "x": 16, "X": 16][Character(src[i + 1])] {
            var k = i + 2
            var body = ""
            while k < src.count, src[k] == "_" || Int(String(src[k]), radix: radix) != nil {
                if src[k] != "_" { body.unicodeScalars.append(src[k]) }
                k += 1
            }
            if !body.isEmpty {
                guard let v = Int(body, radix: radix) else { throw error("integer literal too large", at: i) }
                return (.integer(v), k)
            }
        }
        guard let v = Int(text) else { throw error("integer literal \(text) is too large", at: i) }
        return (.integer(v), intEnd)
    }

    /// A quoted literal with Python's unicode-escape rules (Jinja decodes with them).
    private func string(at i: Int) throws(JinjaError) -> (String, Int) {
        let quote = src[i]
        var out = String.UnicodeScalarView()
        var j = i + 1
        while j < src.count {
            let u = src[j]
            if u == quote { return (String(out), j + 1) }
            if u != "\\" { out.append(u); j += 1; continue }
            guard j + 1 < src.count else { break }
            let e = src[j + 1]
            j += 2
            switch e {
            case "\n": break
            case "\\": out.append("\\")
            case "'": out.append("'")
            case "\"": out.append("\"")
            case "a": out.append("\u{07}")
            case "b": out.append("\u{08}")
            case "f": out.append("\u{0C}")
            case "n": out.append("\n")
            case "r": out.append("\r")
            case "t": out.append("\t")
            case "v": out.append("\u{0B}")
            case "0"..."7":
                var v = e.value - 48
                var n = 1
                while n < 3, j < src.count, ("0"..."7").contains(src[j]) { v = v * 8 + src[j].value - 48; j += 1; n += 1 }
                out.append(Unicode.Scalar(v)!)
            case "x", "u", "U":
                let width = e == "x" ? 2 : e == "u" ? 4 : 8
                guard j + width <= src.count,
                      let v = UInt32(String(String.UnicodeScalarView(src[j..<(j + width)])), radix: 16),
                      let scalar = Unicode.Scalar(v) else {
                    throw error("truncated \\\(e) escape in a string literal", at: j - 2)
                }
                out.append(scalar)
                j += width
            default:
                out.append("\\")
                out.append(e)
            }
        }
        throw error("unexpected end of string literal", at: i)
    }
}

extension String {
    fileprivate func replacingOccurrencesOfUnderscore() -> String {
        String(unicodeScalars.filter { $0 != "_" }.map(Character.init))
    }
}
