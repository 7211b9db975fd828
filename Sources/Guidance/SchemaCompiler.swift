// JSON Schema → byte automaton for compact JSON. Every keyword the validator checks is either
// built into the automaton or refused with its path; the generated language is a subset of
// what `JSONSchema.validate` accepts (docs/guided-generation.md lists the choices made).
import DataSchema

/// Where a subschema sits in the schema document, as JSON pointer tokens.
struct SchemaLocation {
    enum Token {
        case key(String)
        case index(Int)
    }

    var tokens: [Token] = []

    func appending(_ key: String) -> SchemaLocation { SchemaLocation(tokens: tokens + [.key(key)]) }
    func appending(_ index: Int) -> SchemaLocation { SchemaLocation(tokens: tokens + [.index(index)]) }

    /// `$.properties.city`, `$.anyOf[1]`, `$["odd key"]`: the validator's path spelling.
    var path: String {
        var out = "$"
        for t in tokens {
            switch t {
            case let .index(i): out += "[\(i)]"
            case let .key(k):
                let identifier = !k.isEmpty && k.unicodeScalars.allSatisfy { s in
                    (s >= "a" && s <= "z") || (s >= "A" && s <= "Z") || (s >= "0" && s <= "9") || s == "_" || s == "$"
                } && !(k.first!.isNumber)
                out += identifier ? "." + k : "[" + JSONValue.string(k).compactText + "]"
            }
        }
        return out
    }

    /// `#/properties/city`: the JSON pointer `JSONSchema` resolves (`~0 ~1` escapes; `%` as `%25`
    /// because the resolver decodes percent escapes).
    var pointer: String {
        var out = "#"
        for t in tokens {
            switch t {
            case let .index(i): out += "/\(i)"
            case let .key(k):
                var escaped = ""
                for ch in k {
                    switch ch {
                    case "~": escaped += "~0"
                    case "/": escaped += "~1"
                    case "%": escaped += "%25"
                    default: escaped.append(ch)
                    }
                }
                out += "/" + escaped
            }
        }
        return out
    }

    /// The location a local `$ref` ("#", "#/$defs/a") points to; nil for other forms.
    init?(reference: String) {
        guard reference.hasPrefix("#") else { return nil }
        let pointer = reference.dropFirst()
        guard pointer.isEmpty || pointer.hasPrefix("/") else { return nil }
        if pointer.isEmpty { return }
        for raw in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            var token = String(raw)
            if token.contains("%"), let decoded = token.removingPercentEncodingForPointer { token = decoded }
            token = token.replacingOccurrencesOf("~1", "/").replacingOccurrencesOf("~0", "~")
            tokens.append(.key(token))
        }
    }

    init(tokens: [Token] = []) { self.tokens = tokens }
}

/// The result of compiling a subschema: a fragment, or the reason no value can be generated.
enum Compiled {
    case value(Fragment)
    case empty(path: String, reason: String)

    var fragment: Fragment? {
        if case let .value(f) = self { return f }
        return nil
    }
}

/// The JSON value kinds a schema can restrict to (integers count as numbers).
enum JSONKind: CaseIterable, Hashable {
    case null, boolean, number, string, array, object

    init?(typeName: String) {
        switch typeName {
        case "null": self = .null
        case "boolean": self = .boolean
        case "number", "integer": self = .number
        case "string": self = .string
        case "array": self = .array
        case "object": self = .object
        default: return nil
        }
    }

    init(of value: JSONValue) {
        switch value {
        case .null: self = .null
        case .bool: self = .boolean
        case .number: self = .number
        case .string: self = .string
        case .array: self = .array
        case .object: self = .object
        }
    }

    /// The kind a compact JSON text starting with `byte` has.
    init?(firstByte byte: UInt8) {
        switch byte {
        case UInt8(ascii: "n"): self = .null
        case UInt8(ascii: "t"), UInt8(ascii: "f"): self = .boolean
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): self = .number
        case UInt8(ascii: "\""): self = .string
        case UInt8(ascii: "["): self = .array
        case UInt8(ascii: "{"): self = .object
        default: return nil
        }
    }
}

final class SchemaCompiler {
    let schema: JSONSchema
    let b: NFABuilder
    private var refStack: [String] = []

    /// Keywords `JSONSchema.validate` acts on; every other key is an annotation to it.
    static let validationKeywords: Set<String> = [
        "$ref", "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern",
        "minItems", "maxItems", "uniqueItems", "items", "required", "minProperties", "maxProperties",
        "properties", "additionalProperties",
    ]
    static let objectKeywords: Set<String> = ["properties", "required", "additionalProperties", "minProperties", "maxProperties"]
    static let arrayKeywords: Set<String> = ["items", "minItems", "maxItems", "uniqueItems"]
    static let stringKeywords: Set<String> = ["minLength", "maxLength", "pattern"]
    static let numberKeywords: Set<String> = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]
    /// Nesting depth of values generated for a schema that allows any value (`{}`, `true`).
    static let anyValueDepth = 3

    init(schema: JSONSchema, stateLimit: Int) {
        self.schema = schema
        self.b = NFABuilder(stateLimit: stateLimit)
    }

    /// Compiles into `builder`, which other schemas share: a tool call's arguments beside
    /// another tool's and a response_format value, each schema resolving its own `$ref`s.
    init(schema: JSONSchema, builder: NFABuilder) {
        self.schema = schema
        self.b = builder
    }

    func checkSize(_ loc: SchemaLocation) throws(GuidanceError) {
        if b.isOverLimit { throw GuidanceError.tooLarge(path: loc.path, limit: b.stateLimit) }
    }

    func unsupported(_ loc: SchemaLocation, _ keyword: String, _ reason: String) -> GuidanceError {
        .unsupported(path: loc.path, keyword: keyword, reason: reason)
    }

    // MARK: schemas

    func compile(_ node: JSONValue, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        try checkSize(loc)
        switch node {
        case .bool(true):
            return .value(anyValue(depth: Self.anyValueDepth))
        case .bool(false):
            return .empty(path: loc.path, reason: "the schema is false, which no value satisfies")
        case let .object(members):
            let result = try compileObjectSchema(members, at: loc)
            try checkSize(loc)
            return result
        default:
            throw unsupported(loc, "$schema", "a schema must be an object or a boolean")
        }
    }

    private func compileObjectSchema(_ members: [JSONMember], at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        func keyword(_ k: String) -> JSONValue? { members.first(where: { $0.key == k })?.value }
        let present = members.map(\.key).filter(Self.validationKeywords.contains)

        // A finite list of values decides alone: each is checked against the whole subschema.
        if keyword("enum") != nil || keyword("const") != nil {
            let values = try literalValues(members, at: loc)
            guard !values.isEmpty else {
                return .empty(path: loc.path, reason: "no value of \"enum\"/\"const\" satisfies the schema's other keywords")
            }
            return .value(b.union(values.map { b.literal($0.compactText) }))
        }
        if let ref = keyword("$ref") {
            if let other = present.first(where: { $0 != "$ref" }) {
                throw unsupported(loc, other, "it sits beside \"$ref\"; generation inlines the referenced schema alone, so move \"\(other)\" into the referenced schema")
            }
            guard let target = ref.stringValue, let targetLocation = SchemaLocation(reference: target),
                  let resolved = resolve(targetLocation) else {
                throw unsupported(loc, "$ref", "only local references that resolve (\"#\", \"#/$defs/Name\") are supported")
            }
            guard !refStack.contains(target) else {
                throw unsupported(loc, "$ref", "\"\(target)\" refers to itself (a recursive schema); generation needs a finite nesting depth, so recursive schemas are refused")
            }
            refStack.append(target)
            defer { refStack.removeLast() }
            return try compile(resolved, at: targetLocation)
        }
        if present.contains("not") {
            throw unsupported(loc, "not", "excluding the values of a schema cannot be built into the generator; describe the allowed values instead")
        }
        let combinators = present.filter { $0 == "anyOf" || $0 == "oneOf" || $0 == "allOf" }
        if let combinator = combinators.first {
            if combinators.count > 1 {
                throw unsupported(loc, combinators[1], "only one of anyOf/oneOf/allOf per schema is supported; nest them")
            }
            if let other = present.first(where: { $0 != combinator }) {
                throw unsupported(loc, other, "it sits beside \"\(combinator)\", which would make the value satisfy both; move \"\(other)\" into each branch")
            }
            let branches = keyword(combinator)?.arrayValue ?? []
            switch combinator {
            case "anyOf": return try anyOf(branches, at: loc.appending("anyOf"))
            case "oneOf": return try oneOf(branches, at: loc.appending("oneOf"))
            default: return try allOf(branches, at: loc.appending("allOf"))
            }
        }
        return try compileTyped(members, at: loc)
    }

    func resolve(_ loc: SchemaLocation) -> JSONValue? {
        var node = schema.root
        for t in loc.tokens {
            switch (t, node) {
            case let (.key(k), .object(members)):
                guard let m = members.first(where: { $0.key == k }) else { return nil }
                node = m.value
            case let (.key(k), .array(items)):
                guard let i = Int(k), i >= 0, i < items.count else { return nil }
                node = items[i]
            case let (.index(i), .array(items)):
                guard i >= 0, i < items.count else { return nil }
                node = items[i]
            default:
                return nil
            }
        }
        return node
    }

    /// The values of enum/const (in order, duplicates removed) that pass the whole subschema.
    func literalValues(_ members: [JSONMember], at loc: SchemaLocation) throws(GuidanceError) -> [JSONValue] {
        func keyword(_ k: String) -> JSONValue? { members.first(where: { $0.key == k })?.value }
        var candidates: [JSONValue] = keyword("enum")?.arrayValue ?? []
        if let constant = keyword("const") {
            candidates = keyword("enum") == nil ? [constant] : candidates.filter { $0 == constant }
        }
        var out: [JSONValue] = []
        for value in candidates where !out.contains(value) {
            guard let violations = schema.validate(value, atPointer: loc.pointer) else {
                throw unsupported(loc, "enum", "the schema location \(loc.pointer) cannot be resolved to check the values")
            }
            if violations.isEmpty { out.append(value) }
        }
        return out
    }

    // MARK: combinators

    func anyOf(_ branches: [JSONValue], at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        var parts: [Fragment] = []
        var firstEmpty: Compiled?
        for (i, branch) in branches.enumerated() {
            let c = try compile(branch, at: loc.appending(i))
            if let f = c.fragment { parts.append(f) } else if firstEmpty == nil { firstEmpty = c }
        }
        if parts.isEmpty {
            return firstEmpty ?? .empty(path: loc.path, reason: "no branch admits a value")
        }
        return .value(b.union(parts))
    }

    /// A union is sound for oneOf only when no generated value matches two branches: each
    /// branch's generated kinds must lie outside every other branch's declared types, or its
    /// (finite) values must each fail every other branch.
    func oneOf(_ branches: [JSONValue], at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        var compiled: [Compiled] = []
        for (i, branch) in branches.enumerated() { compiled.append(try compile(branch, at: loc.appending(i))) }
        let declared = branches.map { declaredKinds($0, depth: 0) }
        let finiteValues: [[JSONValue]?] = branches.enumerated().map { j, branch in
            guard let members = branch.objectMembers, members.contains(where: { $0.key == "enum" || $0.key == "const" }) else { return nil }
            return try? literalValues(members, at: loc.appending(j))
        }
        func fails(_ value: JSONValue, _ at: SchemaLocation) -> Bool {
            !(schema.validate(value, atPointer: at.pointer)?.isEmpty ?? true)
        }
        for i in branches.indices {
            guard let f = compiled[i].fragment else { continue }
            let generated = Set(b.firstBytes(f).compactMap(JSONKind.init(firstByte:)))
            let branchLoc = loc.appending(i)
            for j in branches.indices where j != i {
                if generated.isDisjoint(with: declared[j]) { continue }
                // Validation is by value, so a value generated for (and valid against) branch i
                // cannot match branch j when i's finite values all fail j, or j's all fail i.
                if let values = finiteValues[i], values.allSatisfy({ fails($0, loc.appending(j)) }) { continue }
                if let values = finiteValues[j], values.allSatisfy({ fails($0, branchLoc) }) { continue }
                let shared = generated.intersection(declared[j]).map { "\($0)" }.sorted().joined(separator: ", ")
                throw unsupported(SchemaLocation(tokens: Array(loc.tokens.dropLast())), "oneOf",
                                  "branches \(i) and \(j) may both match one value (both allow \(shared)), and generation cannot ensure exactly one matches; give the branches different \"type\"s or disjoint enums, or use anyOf if overlap is acceptable")
            }
        }
        let parts = compiled.compactMap(\.fragment)
        if parts.isEmpty {
            return compiled.first ?? .empty(path: loc.path, reason: "no branch admits a value")
        }
        return .value(b.union(parts))
    }

    func allOf(_ branches: [JSONValue], at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        let constraining = branches.enumerated().filter { _, branch in
            switch branch {
            case .bool(true): return false
            case let .object(members): return members.contains { Self.validationKeywords.contains($0.key) }
            default: return true
            }
        }
        if constraining.isEmpty { return .value(anyValue(depth: Self.anyValueDepth)) }
        guard constraining.count == 1 else {
            throw unsupported(SchemaLocation(tokens: Array(loc.tokens.dropLast())), "allOf",
                              "\(constraining.count) branches constrain the value, and generation cannot intersect schemas; merge them into one schema")
        }
        return try compile(constraining[0].element, at: loc.appending(constraining[0].offset))
    }

    /// The kinds of values the validator can accept for `node` (a superset).
    func declaredKinds(_ node: JSONValue, depth: Int) -> Set<JSONKind> {
        let all = Set(JSONKind.allCases)
        guard depth < 32 else { return all }
        switch node {
        case .bool(true): return all
        case .bool(false): return []
        case let .object(members):
            var kinds = all
            func keyword(_ k: String) -> JSONValue? { members.first(where: { $0.key == k })?.value }
            if let type = keyword("type") {
                kinds.formIntersection((type.arrayValue ?? [type]).compactMap(\.stringValue).compactMap(JSONKind.init(typeName:)))
            }
            if let values = keyword("enum")?.arrayValue { kinds.formIntersection(values.map(JSONKind.init(of:))) }
            if let constant = keyword("const") { kinds.formIntersection([JSONKind(of: constant)]) }
            if let ref = keyword("$ref")?.stringValue, let target = SchemaLocation(reference: ref).flatMap(resolve) {
                kinds.formIntersection(declaredKinds(target, depth: depth + 1))
            }
            for sub in keyword("allOf")?.arrayValue ?? [] { kinds.formIntersection(declaredKinds(sub, depth: depth + 1)) }
            for combinator in ["anyOf", "oneOf"] {
                if let subs = keyword(combinator)?.arrayValue {
                    kinds.formIntersection(subs.reduce(into: Set<JSONKind>()) { $0.formUnion(declaredKinds($1, depth: depth + 1)) })
                }
            }
            return kinds
        default:
            return all
        }
    }

    // MARK: types

    func compileTyped(_ members: [JSONMember], at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        func keyword(_ k: String) -> JSONValue? { members.first(where: { $0.key == k })?.value }
        let keys = Set(members.map(\.key))
        var types: [String]
        if let type = keyword("type") {
            types = (type.arrayValue ?? [type]).compactMap(\.stringValue)
        } else {
            // No "type": generate the kinds the keywords describe (a subset of what validates).
            types = []
            if !keys.isDisjoint(with: Self.objectKeywords) { types.append("object") }
            if !keys.isDisjoint(with: Self.arrayKeywords) { types.append("array") }
            if !keys.isDisjoint(with: Self.stringKeywords) { types.append("string") }
            if !keys.isDisjoint(with: Self.numberKeywords) { types.append("number") }
            if types.isEmpty { return .value(anyValue(depth: Self.anyValueDepth)) }
        }
        var seen = Set<String>()
        types = types.filter { seen.insert($0).inserted }
        if types.contains("number") { types.removeAll { $0 == "integer" } }
        var parts: [Fragment] = []
        var firstEmpty: Compiled?
        for t in types {
            let c: Compiled
            switch t {
            case "null": c = .value(b.literal("null"))
            case "boolean": c = .value(b.union([b.literal("true"), b.literal("false")]))
            case "integer": c = try compileInteger(keyword, at: loc)
            case "number": c = try compileNumber(keyword, at: loc)
            case "string": c = try compileString(keyword, at: loc)
            case "array": c = try compileArray(keyword, at: loc)
            case "object": c = try compileObject(keyword, at: loc)
            default: throw unsupported(loc, "type", "unknown type \"\(t)\"")
            }
            if let f = c.fragment { parts.append(f) } else if firstEmpty == nil { firstEmpty = c }
        }
        if parts.isEmpty { return firstEmpty ?? .empty(path: loc.path, reason: "no type admits a value") }
        return .value(b.union(parts))
    }

    func bounds(_ keyword: (String) -> JSONValue?) -> (lower: NumberBound?, upper: NumberBound?) {
        func value(_ k: String) -> Double? {
            if case let .number(n)? = keyword(k) { return n.doubleValue }
            return nil
        }
        var lower: NumberBound?, upper: NumberBound?
        if let m = value("minimum") { lower = NumberBound(value: m, exclusive: false) }
        if let m = value("exclusiveMinimum"), lower.map({ m >= $0.value }) ?? true { lower = NumberBound(value: m, exclusive: true) }
        if let m = value("maximum") { upper = NumberBound(value: m, exclusive: false) }
        if let m = value("exclusiveMaximum"), upper.map({ m <= $0.value }) ?? true { upper = NumberBound(value: m, exclusive: true) }
        return (lower, upper)
    }

    func compileInteger(_ keyword: (String) -> JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        if case let .number(m)? = keyword("multipleOf"), m.doubleValue != 1 {
            throw unsupported(loc, "multipleOf", "multipleOf \(m.literal) cannot be enforced by generation (only 1 is); remove it or list the values in \"enum\"")
        }
        let (lower, upper) = bounds(keyword)
        let (lo, hi) = NFABuilder.integerWindow(lower: lower, upper: upper, limit: NFABuilder.integerLimit)
        guard let f = b.integer(lo, hi) else {
            return .empty(path: loc.path, reason: "no integer of at most 15 digits lies within the minimum/maximum bounds")
        }
        return .value(f)
    }

    func compileNumber(_ keyword: (String) -> JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        if case let .number(m)? = keyword("multipleOf") {
            throw unsupported(loc, "multipleOf", "multipleOf \(m.literal) on a number cannot be enforced by generation; use \"type\": \"integer\" (multipleOf 1) or list the values in \"enum\"")
        }
        let (lower, upper) = bounds(keyword)
        if lower == nil && upper == nil { return .value(b.unboundedNumber()) }
        guard let f = b.boundedNumber(lower: lower, upper: upper) else {
            return .empty(path: loc.path, reason: "no number of at most 7 integer digits lies within the minimum/maximum bounds")
        }
        return .value(f)
    }

    func count(_ keyword: (String) -> JSONValue?, _ k: String) -> Int? {
        if case let .number(n)? = keyword(k) { return Int(min(n.doubleValue, 1e9)) }
        return nil
    }

    func compileString(_ keyword: (String) -> JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        let minLength = count(keyword, "minLength") ?? 0
        let maxLength = count(keyword, "maxLength")
        if let maxLength, maxLength < minLength {
            return .empty(path: loc.path, reason: "minLength \(minLength) is greater than maxLength \(maxLength)")
        }
        let scalars: ScalarNFA
        if let pattern = keyword("pattern")?.stringValue {
            scalars = try ScalarNFA.compile(pattern, reading: .json, path: loc.appending("pattern").path, stateLimit: b.stateLimit)
        } else {
            scalars = ScalarNFA(stateLimit: b.stateLimit)
            let s = scalars.state()
            scalars.edge(s, .all, s)
            scalars.start = s
            scalars.accept = s
        }
        let content = try b.scalarStrings(scalars, minLength: minLength, maxLength: maxLength, encoding: .jsonString, path: loc.path)
        guard b.reaches(content) else {
            let why = keyword("pattern") != nil
                ? "no string of the allowed length matches the pattern with the characters generation uses (printable ASCII for '.', negated classes and text around an unanchored match; no combining marks)"
                : "no string has the allowed length"
            return .empty(path: loc.path, reason: why)
        }
        return .value(b.concat([b.literal("\""), content, b.literal("\"")]))
    }

    func compileArray(_ keyword: (String) -> JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        let minItems = count(keyword, "minItems") ?? 0
        let maxItems = count(keyword, "maxItems")
        if let maxItems, maxItems < minItems {
            return .empty(path: loc.path, reason: "minItems \(minItems) is greater than maxItems \(maxItems)")
        }
        if case .bool(true)? = keyword("uniqueItems"), (maxItems ?? 2) > 1 {
            throw unsupported(loc, "uniqueItems", "generation cannot keep items distinct; remove it, set maxItems to 1, or check uniqueness after generation")
        }
        let items = keyword("items") ?? .bool(true)
        let itemLoc = keyword("items") == nil ? loc : loc.appending("items")
        return try array(min: minItems, max: maxItems, at: loc) { () throws(GuidanceError) -> Compiled in
            try self.compile(items, at: itemLoc)
        }
    }

    /// `[` items `]` with `min...max` items; `item` builds a fresh copy per counted position
    /// (the last copy loops when there is no maximum).
    func array(min minItems: Int, max maxItems: Int?, at loc: SchemaLocation, item: () throws(GuidanceError) -> Compiled) throws(GuidanceError) -> Compiled {
        let start = b.state(), open = b.state(), end = b.state()
        b.edge(start, 0x5B, 0x5B, open)
        if minItems == 0 { b.edge(open, 0x5D, 0x5D, end) }
        let copies = maxItems ?? Swift.max(minItems, 1)
        var previous: Int32 = open
        if copies >= 1 {
            for k in 1...copies {
                let c = try item()
                try checkSize(loc)
                guard let f = c.fragment else {
                    if k <= minItems {
                        if case let .empty(path, reason) = c { return .empty(path: path, reason: "minItems \(minItems) needs items, but: \(reason)") }
                    }
                    break
                }
                if k == 1 { b.connect(open, f.start) } else { b.edge(previous, 0x2C, 0x2C, f.start) }
                if k >= minItems { b.edge(f.end, 0x5D, 0x5D, end) }
                if maxItems == nil && k == copies { b.edge(f.end, 0x2C, 0x2C, f.start) }
                previous = f.end
            }
        }
        return .value(Fragment(start: start, end: end))
    }

    func compileObject(_ keyword: (String) -> JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> Compiled {
        let declared = keyword("properties")?.objectMembers ?? []
        let required = (keyword("required")?.arrayValue ?? []).compactMap(\.stringValue)
        let additional = keyword("additionalProperties")
        let minProperties = count(keyword, "minProperties") ?? 0
        let maxProperties = count(keyword, "maxProperties")
        var additionalAllowed = true
        if case .bool(false)? = additional { additionalAllowed = false }

        // Entries in the order "x-order" names them (Apple's GenerationSchema: a JSON object's
        // keys carry no order, so the declared order travels beside them), the rest in the
        // schema's order; then required names that "properties" does not declare.
        var entries: [(key: String, schema: JSONValue, loc: SchemaLocation, required: Bool)] = []
        for m in try ordered(declared, by: keyword("x-order"), at: loc) {
            entries.append((m.key, m.value, loc.appending("properties").appending(m.key), required.contains(m.key)))
        }
        var undeclared: [String] = []
        for name in required where !declared.contains(where: { $0.key == name }) && !undeclared.contains(name) {
            undeclared.append(name)
        }
        if let name = undeclared.first, !additionalAllowed {
            return .empty(path: loc.path, reason: "\"\(name)\" is required but not in \"properties\", and additionalProperties is false")
        }
        for name in undeclared {
            let schema = additional ?? .bool(true)
            entries.append((name, schema, additional == nil ? loc : loc.appending("additionalProperties"), true))
        }

        if entries.isEmpty {
            // A free-form object: at most one member (a finite automaton cannot keep several
            // arbitrary keys distinct, and duplicate keys are not JSON the parser accepts).
            if minProperties > 1 {
                throw unsupported(loc, "minProperties", "an object without declared properties gets at most one member from generation; declare the properties")
            }
            let open = b.literal("{"), close = b.literal("}")
            if !additionalAllowed || maxProperties == 0 {
                if minProperties > 0 { return .empty(path: loc.path, reason: "minProperties \(minProperties) but no property is allowed") }
                return .value(b.concat([open, close]))
            }
            let valueLoc = additional == nil ? loc : loc.appending("additionalProperties")
            let value = try compile(additional ?? .bool(true), at: valueLoc)
            guard let v = value.fragment else {
                if minProperties > 0, case let .empty(path, reason) = value { return .empty(path: path, reason: reason) }
                return .value(b.concat([open, close]))
            }
            let member = b.concat([anyString(), b.literal(":"), v])
            return .value(b.concat([open, minProperties == 1 ? member : b.optional(member), close]))
        }

        // Compile each value once; a required one without values empties the object.
        var compiled: [(key: String, fragment: Fragment, required: Bool)] = []
        for e in entries {
            let c = try compile(e.schema, at: e.loc)
            switch c {
            case let .value(f): compiled.append((e.key, f, e.required))
            case let .empty(path, reason):
                if e.required { return .empty(path: path, reason: "required property \"\(e.key)\": \(reason)") }
            }
        }
        let requiredCount = compiled.filter(\.required).count
        if minProperties > requiredCount {
            throw unsupported(loc, "minProperties", "minProperties \(minProperties) is more than the \(requiredCount) required properties, and generation may leave optional ones out; list enough properties in \"required\"")
        }
        if let maxProperties, maxProperties < compiled.count {
            throw unsupported(loc, "maxProperties", "maxProperties \(maxProperties) is less than the \(compiled.count) properties generation may write; remove optional properties or raise it")
        }
        // F(i): nothing written yet before property i; G(i): something written (a comma comes
        // first). Property i's value is shared by both paths and leads to G(i + 1).
        let n = compiled.count
        let f = (0...n).map { _ in b.state() }
        let g = (0...n).map { _ in b.state() }
        for (i, p) in compiled.enumerated() {
            let key = b.literal(JSONValue.string(p.key).compactText + ":")
            b.connect(key.end, p.fragment.start)
            b.connect(f[i], key.start)
            b.edge(g[i], 0x2C, 0x2C, key.start)
            b.connect(p.fragment.end, g[i + 1])
            if !p.required {
                b.connect(f[i], f[i + 1])
                b.connect(g[i], g[i + 1])
            }
        }
        let close = b.literal("}")
        b.connect(f[n], close.start)
        b.connect(g[n], close.start)
        let open = b.literal("{")
        b.connect(open.end, f[0])
        return .value(Fragment(start: open.start, end: close.end))
    }

    /// `properties` in the order of `x-order` (an array of property names; names it does not
    /// list follow in the schema's order, names that are not properties are passed over).
    func ordered(_ declared: [JSONMember], by order: JSONValue?, at loc: SchemaLocation) throws(GuidanceError) -> [JSONMember] {
        guard let order else { return declared }
        guard let names = order.arrayValue, names.allSatisfy({ $0.stringValue != nil }) else {
            throw unsupported(loc, "x-order", "it names the order properties are generated in and must be an array of property names, got \(order.compactText.prefix(80))")
        }
        var out: [JSONMember] = []
        for name in names.compactMap(\.stringValue) {
            if let m = declared.first(where: { $0.key == name }), !out.contains(where: { $0.key == name }) { out.append(m) }
        }
        for m in declared where !out.contains(where: { $0.key == m.key }) { out.append(m) }
        return out
    }

    // MARK: any value

    func anyString() -> Fragment {
        let scalars = ScalarNFA(stateLimit: b.stateLimit)
        let s = scalars.state()
        scalars.edge(s, .all, s)
        scalars.start = s
        scalars.accept = s
        let content = (try? b.scalarStrings(scalars, minLength: 0, maxLength: nil, encoding: .jsonString, path: "$")) ?? b.empty()
        return b.concat([b.literal("\""), content, b.literal("\"")])
    }

    /// Any JSON value nested at most `depth` levels; objects have at most one member.
    func anyValue(depth: Int) -> Fragment {
        var parts = [
            b.literal("null"), b.literal("true"), b.literal("false"), b.unboundedNumber(), anyString(),
        ]
        if depth > 0 {
            let loc = SchemaLocation()
            if case let .value(f)? = try? array(min: 0, max: nil, at: loc, item: { () throws(GuidanceError) -> Compiled in
                .value(self.anyValue(depth: depth - 1))
            }) {
                parts.append(f)
            }
            let member = b.concat([anyString(), b.literal(":"), anyValue(depth: depth - 1)])
            parts.append(b.concat([b.literal("{"), b.optional(member), b.literal("}")]))
        }
        return b.union(parts)
    }
}

extension String {
    fileprivate func replacingOccurrencesOf(_ target: String, _ replacement: String) -> String {
        guard contains(target) else { return self }
        var out = ""
        var rest = Substring(self)
        while let r = rest.firstRange(of: target) {
            out += rest[..<r.lowerBound]
            out += replacement
            rest = rest[r.upperBound...]
        }
        return out + rest
    }

    fileprivate var removingPercentEncodingForPointer: String? {
        let utf8 = Array(self.utf8)
        var bytes: [UInt8] = []
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "%"), i + 2 < utf8.count,
               let v = UInt8(String(decoding: utf8[(i + 1)...(i + 2)], as: UTF8.self), radix: 16) {
                bytes.append(v)
                i += 3
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
