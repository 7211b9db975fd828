// A seeded generator of JSON schemas inside the generation subset: nested objects (required and
// optional properties, odd key names), arrays with bounds, strings with lengths and patterns,
// integers and numbers with bounds, enums and consts of any JSON, type arrays, anyOf, oneOf
// with type-disjoint branches, single-branch allOf, $defs with $ref, and "any value".
// The corpus of the soundness tests (Tests/GuidanceTests) and of bench guided-decoding.
import DataSchema

public struct RandomSchemas {
    var rng: SeededGenerator
    var definitions: [(name: String, schema: String)] = []

    public init(seed: UInt64) { rng = SeededGenerator(seed: seed) }

    mutating func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    mutating func chance(_ p: Double) -> Bool { Double(rng.next() % 10_000) / 10_000 < p }
    mutating func pick<T>(_ list: [T]) -> T { list[int(list.count)] }

    static let patterns = [
        "^[a-z]+$", "^[A-Z][a-z]{1,6}$", "^\\d{3}-\\d{4}$", "[0-9]", "^(red|green|blue)$", "^.{2,5}$", "é",
        "^[à-ÿ]+$", "x+y?", "^\\w+@\\w+\\.com$", "^[^@\\s]+@[^@\\s]+$", "^(?:ab|cd)*$", "^[A-F0-9]{2}(:[A-F0-9]{2}){0,3}$",
        "^\\S+$", "^a.c", "end$", "^[\\-+]?\\d+(\\.\\d+)?$", "^\\s*$", "^[^\"\\\\]*$", "^\"q\"$", "^日本", "[\\u0041-\\u0043]{2}",
    ]
    static let keys = ["id", "name", "title", "value", "a", "b", "items", "odd key", "quo\"te", "back\\slash", "ünï", "x-y", "123", "", "$ref", "k"]

    static func quote(_ s: String) -> String { JSONValue.string(s).compactText }

    mutating func jsonValue(depth: Int) -> String {
        switch int(depth > 0 ? 8 : 6) {
        case 0: return "null"
        case 1: return pick(["true", "false"])
        case 2: return pick(["0", "-1", "1.50", "2e3", "-0.25", "123456", "1E-2"])
        case 3: return Self.quote(pick(["a", "", "with \"quote\"", "tab\there", "é", "😀", "line\nbreak", "back\\", "\u{1}"]))
        case 4: return Self.quote(pick(["x", "y", "z"]))
        case 5: return String(int(100))
        case 6: return "[" + (0..<int(3)).map { _ in jsonValue(depth: depth - 1) }.joined(separator: ",") + "]"
        default:
            var keys = Set<String>()
            return "{" + (0..<int(3)).compactMap { _ -> String? in
                let k = pick(Self.keys)
                guard keys.insert(k).inserted else { return nil }
                return Self.quote(k) + ":" + jsonValue(depth: depth - 1)
            }.joined(separator: ",") + "}"
        }
    }

    mutating func number(_ values: [String]) -> String { pick(values) }

    mutating func schema(depth: Int) -> String {
        let leaf = depth <= 0
        switch int(leaf ? 9 : 16) {
        case 0: return #"{"type":"null"}"#
        case 1: return #"{"type":"boolean"}"#
        case 2:
            var s = #"{"type":"integer""#
            if chance(0.5) { s += #","minimum":"# + pick(["-5", "0", "1", "2.5", "-100", "10"]) }
            if chance(0.5) { s += #","maximum":"# + pick(["5", "20", "100", "7.5", "1000", "99999"]) }
            if chance(0.2) { s += #","exclusiveMinimum":"# + pick(["-3", "0", "0.5"]) }
            if chance(0.2) { s += #","exclusiveMaximum":"# + pick(["30", "1000", "50.5"]) }
            return s + "}"
        case 3:
            var s = #"{"type":"number""#
            if chance(0.5) { s += #","minimum":"# + pick(["-1.5", "0", "1", "-100", "0.25"]) }
            if chance(0.5) { s += #","maximum":"# + pick(["1", "2.75", "100", "1e6"]) }
            if chance(0.2) { s += #","exclusiveMaximum":"# + pick(["0", "1", "3.5"]) }
            if chance(0.15) { s += #","exclusiveMinimum":"# + pick(["-1", "0", "0.5"]) }
            return s + "}"
        case 4, 5:
            var s = #"{"type":"string""#
            if chance(0.35) { s += #","minLength":"# + String(int(4)) }
            if chance(0.35) { s += #","maxLength":"# + String(3 + int(8)) }
            if chance(0.35) { s += #","pattern":"# + Self.quote(pick(Self.patterns)) }
            return s + "}"
        case 6:
            return #"{"enum":["# + (0..<(1 + int(4))).map { _ in jsonValue(depth: 2) }.joined(separator: ",") + "]}"
        case 7:
            if chance(0.5) { return #"{"const":"# + jsonValue(depth: 2) + "}" }
            return #"{"type":"string","enum":["a","bb","ccc",3,null],"maxLength":2}"#
        case 8:
            return pick([#"{"type":["string","null"]}"#, #"{"type":["integer","boolean"],"maximum":3}"#, "{}", "true",
                         #"{"type":["number","integer"],"minimum":1}"#, #"{"description":"anything"}"#])
        case 9, 10, 11:
            return object(depth: depth)
        case 12:
            var s = #"{"type":"array","items":"# + schema(depth: depth - 1)
            let lo = int(3)
            if chance(0.5) { s += #","minItems":"# + String(lo) }
            if chance(0.5) { s += #","maxItems":"# + String(lo + int(3)) }
            return s + "}"
        case 13:
            return #"{"anyOf":["# + (0..<(1 + int(3))).map { _ in schema(depth: depth - 1) }.joined(separator: ",") + "]}"
        case 14:
            // oneOf with branches of different declared types.
            var types = ["string", "integer", "boolean", "null", "object", "array"]
            var branches: [String] = []
            for _ in 0..<(2 + int(2)) {
                let t = types.remove(at: int(types.count))
                switch t {
                case "string": branches.append(#"{"type":"string","maxLength":"# + String(2 + int(5)) + "}")
                case "integer": branches.append(#"{"type":"integer","minimum":0}"#)
                case "object": branches.append(#"{"type":"object","properties":{"v":"# + schema(depth: depth - 1) + #"},"required":["v"]}"#)
                case "array": branches.append(#"{"type":"array","items":"# + schema(depth: depth - 1) + #","maxItems":2}"#)
                default: branches.append(#"{"type":""# + t + #""}"#)
                }
            }
            return #"{"oneOf":["# + branches.joined(separator: ",") + "]}"
        default:
            if chance(0.5) {
                let name = "d\(definitions.count)"
                definitions.append((name, schema(depth: depth - 1)))
                return ##"{"$ref":"#/$defs/"## + name + #""}"#
            }
            return #"{"allOf":["# + schema(depth: depth - 1) + #",{"title":"t"}]}"#
        }
    }

    mutating func object(depth: Int) -> String {
        var keys: [String] = []
        for _ in 0..<(1 + int(4)) {
            let k = pick(Self.keys)
            if !keys.contains(k) { keys.append(k) }
        }
        let properties = keys.map { Self.quote($0) + ":" + schema(depth: depth - 1) }.joined(separator: ",")
        let required = keys.filter { _ in chance(0.6) }.map(Self.quote).joined(separator: ",")
        var s = #"{"type":"object","properties":{"# + properties + #"},"required":["# + required + "]"
        if chance(0.5) { s += #","additionalProperties":false"# }
        return s + "}"
    }

    /// A schema document (JSON text; each call a new one): a root schema, and the $defs its $refs point into.
    public mutating func document() -> String {
        definitions = []
        let root = chance(0.8) ? object(depth: 3) : schema(depth: 3)
        guard !definitions.isEmpty else { return root }
        let defs = definitions.map { Self.quote($0.name) + ":" + $0.schema }.joined(separator: ",")
        return "{\"$defs\":{" + defs + "},\"allOf\":[" + root + "]}"
    }
}
