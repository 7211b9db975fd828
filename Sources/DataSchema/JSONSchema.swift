// A JSON Schema validator for the subset Schema.md lists (type, properties, required, enum,
// const, items, additionalProperties, $defs/definitions + local $ref, numeric and size bounds,
// pattern, anyOf/oneOf/allOf/not). Standard keywords outside the subset are refused when the
// schema is loaded, never silently ignored. Follows JSON Schema 2020-12 (Core + Validation).

/// One way an instance fails its schema: `$.attendees[1].email: expected string, got number`.
public struct SchemaViolation: Sendable, Equatable, CustomStringConvertible {
    /// The JSON path of the offending value, `$` for the root.
    public var path: String
    public var message: String
    public var description: String { "\(path): \(message)" }
}

/// A checked JSON schema. `init` refuses malformed schemas (unknown type names, unresolvable
/// `$ref`, unsupported keywords) so that `validate` never meets one.
public struct JSONSchema: Sendable, Equatable {
    public let root: JSONValue

    /// Validation keywords of JSON Schema that this validator does not implement.
    public static let unsupportedKeywords: Set<String> = [
        "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
        "dependentSchemas", "dependencies", "contains", "minContains", "maxContains", "prefixItems",
        "additionalItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    ]
    static let typeNames: Set<String> = ["null", "boolean", "object", "array", "number", "string", "integer"]

    /// `context` names the schema in errors (`tool "get_weather" parameters`).
    public init(_ root: JSONValue, context: String = "schema") throws(DataSchemaError) {
        self.root = root
        do throws(SchemaProblem) {
            try check(root, at: "$")
        } catch {
            throw DataSchemaError.invalidSchema(context: context, message: "\(error.path): \(error.message)")
        }
    }

    struct SchemaProblem: Error {
        var path: String
        var message: String
    }

    // MARK: checking the schema itself

    private func check(_ schema: JSONValue, at path: String) throws(SchemaProblem) {
        if case .bool = schema { return }
        guard let members = schema.objectMembers else {
            throw SchemaProblem(path: path, message: "a schema must be an object or a boolean, got \(schema.typeName)")
        }
        for member in members {
            let key = member.key
            let value = member.value
            let here = path + JSONPath.component(key)
            if JSONSchema.unsupportedKeywords.contains(key) {
                throw SchemaProblem(path: here, message: "the keyword \"\(key)\" is not supported; remove it or express the rule with the supported keywords")
            }
            switch key {
            case "type":
                let names: [JSONValue]
                if case .array(let list) = value { names = list } else { names = [value] }
                if names.isEmpty { throw SchemaProblem(path: here, message: "\"type\" must name at least one type") }
                for name in names {
                    guard let s = name.stringValue, JSONSchema.typeNames.contains(s) else {
                        throw SchemaProblem(path: here, message: "unknown type \(name.compactText); use one of null, boolean, object, array, number, string, integer")
                    }
                }
            case "properties", "$defs", "definitions":
                guard let subs = value.objectMembers else {
                    throw SchemaProblem(path: here, message: "\"\(key)\" must be an object of schemas, got \(value.typeName)")
                }
                for sub in subs { try check(sub.value, at: here + JSONPath.component(sub.key)) }
            case "items", "additionalProperties", "not":
                if case .array = value, key == "items" {
                    throw SchemaProblem(path: here, message: "\"items\" as an array (tuple form) is not supported; give one schema for all items")
                }
                try check(value, at: here)
            case "anyOf", "oneOf", "allOf":
                guard let list = value.arrayValue, !list.isEmpty else {
                    throw SchemaProblem(path: here, message: "\"\(key)\" must be a non-empty array of schemas")
                }
                for (i, sub) in list.enumerated() { try check(sub, at: here + "[\(i)]") }
            case "required":
                guard let list = value.arrayValue, list.allSatisfy({ $0.stringValue != nil }) else {
                    throw SchemaProblem(path: here, message: "\"required\" must be an array of property names")
                }
            case "enum":
                guard value.arrayValue != nil else {
                    throw SchemaProblem(path: here, message: "\"enum\" must be an array of allowed values")
                }
            case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
                guard case .number = value else {
                    throw SchemaProblem(path: here, message: "\"\(key)\" must be a number, got \(value.typeName)")
                }
            case "multipleOf":
                guard case let .number(n) = value, n.doubleValue > 0 else {
                    throw SchemaProblem(path: here, message: "\"multipleOf\" must be a number greater than 0")
                }
            case "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties":
                guard case let .number(n) = value, n.isInteger, n.doubleValue >= 0 else {
                    throw SchemaProblem(path: here, message: "\"\(key)\" must be a non-negative integer")
                }
            case "uniqueItems":
                guard case .bool = value else {
                    throw SchemaProblem(path: here, message: "\"uniqueItems\" must be true or false")
                }
            case "pattern":
                guard let p = value.stringValue else {
                    throw SchemaProblem(path: here, message: "\"pattern\" must be a string")
                }
                do { _ = try Regex(p) } catch {
                    throw SchemaProblem(path: here, message: "\"pattern\" \(value.compactText) is not a regular expression this validator can compile")
                }
            case "$ref":
                guard let ref = value.stringValue else {
                    throw SchemaProblem(path: here, message: "\"$ref\" must be a string")
                }
                try checkReference(ref, at: here)
            default:
                continue  // annotations (title, description, default, format, ...) and unknown keywords
            }
        }
    }

    /// Local references must resolve, and a chain of `$ref`s must not loop back on itself.
    private func checkReference(_ ref: String, at path: String) throws(SchemaProblem) {
        var seen = Set<String>()
        var current = ref
        while true {
            guard seen.insert(current).inserted else {
                throw SchemaProblem(path: path, message: "\"$ref\" \"\(ref)\" loops back to itself without describing a value")
            }
            guard let target = resolve(current) else {
                throw SchemaProblem(path: path, message: "\"$ref\" \"\(current)\" does not resolve; only local references (\"#\", \"#/$defs/Name\", \"#/definitions/Name\") are supported")
            }
            guard let next = target["$ref"]?.stringValue else { return }
            current = next
        }
    }

    /// Resolves "#" and "#/a/b" JSON pointers inside `root`.
    func resolve(_ ref: String) -> JSONValue? {
        guard ref.hasPrefix("#") else { return nil }
        let pointer = ref.dropFirst()
        if pointer.isEmpty { return root }
        guard pointer.hasPrefix("/") else { return nil }
        var node = root
        for rawToken in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            let token = String(rawToken).removingPercentEncodingIfNeeded
                .replacingAll("~1", "/").replacingAll("~0", "~")
            switch node {
            case let .object(members):
                guard let m = members.first(where: { $0.key == token }) else { return nil }
                node = m.value
            case let .array(items):
                guard let i = Int(token), i >= 0, i < items.count else { return nil }
                node = items[i]
            default: return nil
            }
        }
        return node
    }

    // MARK: validating an instance

    /// Every way `instance` fails the schema, in document order; empty when it conforms.
    public func validate(_ instance: JSONValue) -> [SchemaViolation] {
        var out: [SchemaViolation] = []
        var walk = Walk()
        validate(instance, against: root, path: "$", into: &out, &walk)
        // Inside anyOf/oneOf/not a problem of the schema itself would be swallowed; report it at the top.
        if let problem = walk.problem, !out.contains(problem) { out.append(problem) }
        return out
    }

    /// Every way `instance` fails the subschema at the local JSON pointer `pointer` (`#`,
    /// `#/properties/city`, `#/$defs/Name`), `$ref`s inside it resolved against the whole
    /// document; nil when the pointer does not resolve. Guided generation checks enum values
    /// against their sibling keywords with this.
    public func validate(_ instance: JSONValue, atPointer pointer: String) -> [SchemaViolation]? {
        guard let subschema = resolve(pointer) else { return nil }
        var out: [SchemaViolation] = []
        var walk = Walk()
        validate(instance, against: subschema, path: "$", into: &out, &walk)
        if let problem = walk.problem, !out.contains(problem) { out.append(problem) }
        return out
    }

    /// Bounds one validation: hostile schemas can loop (`{"not": {"$ref": "#"}}`) or multiply
    /// the work (shared `$ref`s nested in `allOf`), so each `validate` call gets a step budget, and a
    /// `$ref` met again before the walk has descended into the value is reported as circular.
    public static let maxValidationSteps = 100_000

    private struct Walk {
        var steps = 0
        /// `$ref`s expanded since the walk last descended into an item or property.
        var refs: [String] = []
        var problem: SchemaViolation?
    }

    private func validate(_ item: JSONValue, descendingFrom walk: inout Walk, against schema: JSONValue, path: String,
                          into out: inout [SchemaViolation]) {
        let saved = walk.refs
        walk.refs = []
        validate(item, against: schema, path: path, into: &out, &walk)
        walk.refs = saved
    }

    private func validate(_ instance: JSONValue, against schema: JSONValue, path: String, into out: inout [SchemaViolation],
                          _ walk: inout Walk) {
        walk.steps += 1
        guard walk.steps <= Self.maxValidationSteps, walk.problem == nil else {
            if walk.problem == nil {
                walk.problem = SchemaViolation(path: path, message: "the schema needs more than \(Self.maxValidationSteps) steps to check this value; simplify it ($refs shared inside allOf/anyOf/oneOf multiply the work)")
            }
            return
        }
        if case let .bool(allowed) = schema {
            if !allowed { out.append(SchemaViolation(path: path, message: "no value is allowed here (schema is false)")) }
            return
        }
        guard let members = schema.objectMembers else { return }
        func keyword(_ k: String) -> JSONValue? { members.first(where: { $0.key == k })?.value }

        if let ref = keyword("$ref")?.stringValue, let target = resolve(ref) {
            if walk.refs.contains(ref) {
                walk.problem = SchemaViolation(path: path, message: "\"$ref\" \"\(ref)\" refers back to itself before describing any part of the value; the schema is circular")
                return
            }
            walk.refs.append(ref)
            validate(instance, against: target, path: path, into: &out, &walk)
            walk.refs.removeLast()
        }
        if let type = keyword("type") {
            let names: [String] = (type.arrayValue ?? [type]).compactMap(\.stringValue)
            if !names.contains(where: { JSONSchema.matches(instance, type: $0) }) {
                var got = instance.typeName
                if case let .number(n) = instance, names.contains("integer") { got = "number \(n.literal)" }
                out.append(SchemaViolation(path: path, message: "expected \(names.joined(separator: " or ")), got \(got)"))
                return
            }
        }
        if let allowed = keyword("enum")?.arrayValue, !allowed.contains(instance) {
            let shown = allowed.prefix(10).map(\.compactText).joined(separator: ", ") + (allowed.count > 10 ? ", ..." : "")
            out.append(SchemaViolation(path: path, message: "\(JSONPath.shortText(instance)) is not one of the allowed values \(shown)"))
        }
        if let constant = keyword("const"), constant != instance {
            out.append(SchemaViolation(path: path, message: "expected \(JSONPath.shortText(constant)), got \(JSONPath.shortText(instance))"))
        }
        for combinator in ["allOf", "anyOf", "oneOf"] {
            guard let subs = keyword(combinator)?.arrayValue else { continue }
            var matching = 0
            var firstFailures: [SchemaViolation] = []
            for sub in subs {
                var local: [SchemaViolation] = []
                validate(instance, against: sub, path: path, into: &local, &walk)
                if local.isEmpty { matching += 1 } else if firstFailures.isEmpty { firstFailures = local }
            }
            switch combinator {
            case "allOf" where matching < subs.count:
                out.append(contentsOf: firstFailures)
            case "anyOf" where matching == 0:
                let why = firstFailures.first.map { " (the first says \($0))" } ?? ""
                out.append(SchemaViolation(path: path, message: "matches none of the \(subs.count) anyOf schemas\(why)"))
            case "oneOf" where matching != 1:
                let why = matching == 0 ? (firstFailures.first.map { " (the first says \($0))" } ?? "") : ""
                out.append(SchemaViolation(path: path, message: "matches \(matching) of the \(subs.count) oneOf schemas, expected exactly 1\(why)"))
            default: break
            }
        }
        if let notSchema = keyword("not") {
            var local: [SchemaViolation] = []
            validate(instance, against: notSchema, path: path, into: &local, &walk)
            if local.isEmpty { out.append(SchemaViolation(path: path, message: "matches the schema under \"not\"")) }
        }

        switch instance {
        case let .number(n):
            let x = n.doubleValue
            if case let .number(m)? = keyword("minimum"), x < m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(n.literal) is less than the minimum \(m.literal)"))
            }
            if case let .number(m)? = keyword("maximum"), x > m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(n.literal) is greater than the maximum \(m.literal)"))
            }
            if case let .number(m)? = keyword("exclusiveMinimum"), x <= m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(n.literal) is not greater than the exclusive minimum \(m.literal)"))
            }
            if case let .number(m)? = keyword("exclusiveMaximum"), x >= m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(n.literal) is not less than the exclusive maximum \(m.literal)"))
            }
            if case let .number(m)? = keyword("multipleOf") {
                let q = x / m.doubleValue
                if abs(q - q.rounded()) > 1e-9 * max(1, abs(q)) {
                    out.append(SchemaViolation(path: path, message: "\(n.literal) is not a multiple of \(m.literal)"))
                }
            }
        case let .string(s):
            let length = s.unicodeScalars.count
            if case let .number(m)? = keyword("minLength"), Double(length) < m.doubleValue {
                out.append(SchemaViolation(path: path, message: "string of length \(length) is shorter than minLength \(m.literal)"))
            }
            if case let .number(m)? = keyword("maxLength"), Double(length) > m.doubleValue {
                out.append(SchemaViolation(path: path, message: "string of length \(length) is longer than maxLength \(m.literal)"))
            }
            if let p = keyword("pattern")?.stringValue, let regex = try? Regex(p), (try? regex.firstMatch(in: s)) == nil {
                out.append(SchemaViolation(path: path, message: "\(JSONPath.shortText(instance)) does not match the pattern \(JSONValue.string(p).compactText)"))
            }
        case let .array(items):
            if case let .number(m)? = keyword("minItems"), Double(items.count) < m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(items.count) item\(items.count == 1 ? "" : "s"), fewer than minItems \(m.literal)"))
            }
            if case let .number(m)? = keyword("maxItems"), Double(items.count) > m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(items.count) items, more than maxItems \(m.literal)"))
            }
            if case .bool(true)? = keyword("uniqueItems") {
                outer: for i in items.indices {
                    for j in items.indices where j > i && items[i] == items[j] {
                        out.append(SchemaViolation(path: path, message: "items \(i) and \(j) are equal, but uniqueItems is true"))
                        break outer
                    }
                }
            }
            if let itemSchema = keyword("items") {
                for (i, item) in items.enumerated() {
                    validate(item, descendingFrom: &walk, against: itemSchema, path: path + "[\(i)]", into: &out)
                }
            }
        case let .object(props):
            if let required = keyword("required")?.arrayValue {
                for name in required.compactMap(\.stringValue) where !props.contains(where: { $0.key == name }) {
                    out.append(SchemaViolation(path: path, message: "missing required property \"\(name)\""))
                }
            }
            if case let .number(m)? = keyword("minProperties"), Double(props.count) < m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(props.count) properties, fewer than minProperties \(m.literal)"))
            }
            if case let .number(m)? = keyword("maxProperties"), Double(props.count) > m.doubleValue {
                out.append(SchemaViolation(path: path, message: "\(props.count) properties, more than maxProperties \(m.literal)"))
            }
            let declared = keyword("properties")?.objectMembers ?? []
            let additional = keyword("additionalProperties")
            for prop in props {
                let here = path + JSONPath.component(prop.key)
                if let sub = declared.first(where: { $0.key == prop.key }) {
                    validate(prop.value, descendingFrom: &walk, against: sub.value, path: here, into: &out)
                } else if case .bool(false)? = additional {
                    out.append(SchemaViolation(path: path, message: "unexpected property \"\(prop.key)\" (additionalProperties is false)"))
                } else if let additional {
                    validate(prop.value, descendingFrom: &walk, against: additional, path: here, into: &out)
                }
            }
        default:
            break
        }
    }

    static func matches(_ value: JSONValue, type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("number", .number), ("string", .string),
             ("array", .array), ("object", .object):
            return true
        case let ("integer", .number(n)):
            return n.isInteger
        default:
            return false
        }
    }
}

/// JSON path spelling for error messages: `$.a.b[2]["odd key"]`.
enum JSONPath {
    static func component(_ key: String) -> String {
        let isIdentifier = !key.isEmpty && key.unicodeScalars.allSatisfy { s in
            (s >= "a" && s <= "z") || (s >= "A" && s <= "Z") || (s >= "0" && s <= "9") || s == "_" || s == "$"
        } && !(key.first!.isNumber)
        return isIdentifier ? "." + key : "[" + JSONValue.string(key).compactText + "]"
    }

    /// A value in a message, cut to 60 characters.
    static func shortText(_ value: JSONValue) -> String {
        let text = value.compactText
        return text.count <= 60 ? text : String(text.prefix(57)) + "..."
    }
}

extension String {
    fileprivate func replacingAll(_ target: String, _ replacement: String) -> String {
        guard contains(target) else { return self }
        return splitting(on: target).joined(separator: replacement)
    }

    fileprivate func splitting(on separator: String) -> [String] {
        var parts: [String] = []
        var rest = Substring(self)
        while let range = rest.firstRange(of: separator) {
            parts.append(String(rest[..<range.lowerBound]))
            rest = rest[range.upperBound...]
        }
        parts.append(String(rest))
        return parts
    }

    /// `$ref` pointers may percent-encode characters; decode `%XX` sequences when present.
    fileprivate var removingPercentEncodingIfNeeded: String {
        guard contains("%") else { return self }
        var bytes: [UInt8] = []
        let utf8 = Array(self.utf8)
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
