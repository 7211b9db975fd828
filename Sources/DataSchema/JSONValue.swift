// A JSON value that keeps what the author wrote: object keys in their written order and
// numbers as their literal text, so tool and schema JSON renders the same way every time.
// Holds the value type, JSON equality (numbers by value, objects by key set) and the compact
// writer of Schema.md ("Compact JSON"). Parsing lives in JSONParser.swift. Follows RFC 8259.

/// A JSON number kept as written (`1.50` stays `1.50`); `doubleValue` is its IEEE value.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// The literal text, already checked against RFC 8259's number grammar.
    public let literal: String
    public let doubleValue: Double

    /// `literal` must be a valid JSON number; use `JSONNumber(_ value:)` for computed values.
    init(validatedLiteral literal: String) {
        self.literal = literal
        self.doubleValue = Double(literal) ?? .nan
    }

    public init(_ value: Int) {
        self.literal = String(value)
        self.doubleValue = Double(value)
    }

    /// A finite Double written in Swift's shortest round-trip form (`2.0` becomes `2`).
    public init?(_ value: Double) {
        guard value.isFinite else { return nil }
        if value == value.rounded(), abs(value) < 1e15 {
            self.literal = String(Int64(value))
        } else {
            self.literal = "\(value)"
        }
        self.doubleValue = value
    }

    /// True when the value has no fractional part (`3`, `3.0`, `3e2`), as JSON Schema's "integer".
    public var isInteger: Bool { doubleValue.isFinite && doubleValue == doubleValue.rounded() }

    public var description: String { literal }

    public static func == (lhs: JSONNumber, rhs: JSONNumber) -> Bool { lhs.doubleValue == rhs.doubleValue }
    public func hash(into hasher: inout Hasher) { hasher.combine(doubleValue) }
}

/// One member of a JSON object, in written order.
public struct JSONMember: Sendable, Equatable {
    public var key: String
    public var value: JSONValue
    public init(key: String, value: JSONValue) {
        self.key = key
        self.value = value
    }
}

public enum JSONValue: Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    /// Members in written order; keys are unique (the parser rejects duplicates).
    case object([JSONMember])

    /// The JSON type name used in error messages and by JSON Schema's "type" ("integer" is
    /// reported as "number" here; the schema validator checks integers itself).
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .number: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    public subscript(key: String) -> JSONValue? {
        guard case let .object(members) = self else { return nil }
        return members.first(where: { $0.key == key })?.value
    }

    public var stringValue: String? {
        if case let .string(s) = self { return s }
        return nil
    }

    public var objectMembers: [JSONMember]? {
        if case let .object(m) = self { return m }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case let .array(a) = self { return a }
        return nil
    }

    /// Compact JSON: no whitespace, keys in stored order, numbers as written, strings with the
    /// minimal escapes of Schema.md (non-ASCII stays UTF-8).
    public var compactText: String {
        var out = ""
        JSONValue.write(self, to: &out)
        return out
    }

    public var description: String { compactText }

    static func write(_ value: JSONValue, to out: inout String) {
        switch value {
        case .null: out += "null"
        case let .bool(b): out += b ? "true" : "false"
        case let .number(n): out += n.literal
        case let .string(s): writeString(s, to: &out)
        case let .array(items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        case let .object(members):
            out += "{"
            for (i, m) in members.enumerated() {
                if i > 0 { out += "," }
                writeString(m.key, to: &out)
                out += ":"
                write(m.value, to: &out)
            }
            out += "}"
        }
    }

    static func writeString(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}

extension JSONValue: Equatable {
    /// JSON equality: numbers by value (`1 == 1.0`), objects regardless of key order.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            guard a.count == b.count else { return false }
            for m in a {
                guard let other = b.first(where: { $0.key == m.key }), other.value == m.value else { return false }
            }
            return true
        default: return false
        }
    }
}
