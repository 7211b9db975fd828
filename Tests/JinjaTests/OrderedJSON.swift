// A JSON reader for the fixtures that keeps object key order (Python dicts keep it, and
// templates iterate and print dicts in that order) and Python's json.loads number rule:
// an integer literal is an int, anything with a fraction or exponent a float.
import Foundation
@testable import Jinja

struct OrderedJSON {
    private let bytes: [UInt8]
    private var i = 0

    static func parse(_ text: String) throws -> JinjaValue {
        var p = OrderedJSON(bytes: Array(text.utf8))
        let v = try p.value()
        p.skip()
        guard p.i == p.bytes.count else { throw NSError(domain: "OrderedJSON", code: 1, userInfo: [NSLocalizedDescriptionKey: "trailing data at \(p.i)"]) }
        return v
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private mutating func skip() {
        while i < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[i]) { i += 1 }
    }

    private func fail(_ m: String) -> Error { NSError(domain: "OrderedJSON", code: 1, userInfo: [NSLocalizedDescriptionKey: "\(m) at byte \(i)"]) }

    private mutating func value() throws -> JinjaValue {
        skip()
        guard i < bytes.count else { throw fail("end of input") }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            i += 1
            var d = JinjaDict()
            skip()
            if bytes[i] == UInt8(ascii: "}") { i += 1; return .dict(d) }
            while true {
                skip()
                guard case let .string(k) = try value() else { throw fail("key") }
                skip()
                guard bytes[i] == UInt8(ascii: ":") else { throw fail("colon") }
                i += 1
                d[k] = try value()
                skip()
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                guard bytes[i] == UInt8(ascii: "}") else { throw fail("object end") }
                i += 1
                return .dict(d)
            }
        case UInt8(ascii: "["):
            i += 1
            var items: [JinjaValue] = []
            skip()
            if bytes[i] == UInt8(ascii: "]") { i += 1; return .list(items) }
            while true {
                items.append(try value())
                skip()
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                guard bytes[i] == UInt8(ascii: "]") else { throw fail("array end") }
                i += 1
                return .list(items)
            }
        case UInt8(ascii: "\""):
            var j = i + 1
            while bytes[j] != UInt8(ascii: "\"") { j += bytes[j] == UInt8(ascii: "\\") ? 2 : 1 }
            let s = try JSONSerialization.jsonObject(with: Data(bytes[i...j]), options: .fragmentsAllowed) as! String
            i = j + 1
            return .string(s)
        case UInt8(ascii: "t"): i += 4; return .bool(true)
        case UInt8(ascii: "f"): i += 5; return .bool(false)
        case UInt8(ascii: "n"): i += 4; return .none
        default:
            let start = i
            while i < bytes.count, "+-.eE0123456789".utf8.contains(bytes[i]) { i += 1 }
            let text = String(decoding: bytes[start..<i], as: UTF8.self)
            if !text.contains(where: { ".eE".contains($0) }), let n = Int(text) { return .int(n) }
            guard let d = Double(text) else { throw fail("number \(text)") }
            return .float(d)
        }
    }
}
