// The values a template computes with, as one enum with Python's meaning (what Jinja2 running in
// CPython gives a chat template): None, bools, ints, floats, str (indexed by code point), lists,
// dicts in insertion order, Jinja's Undefined, namespace objects and callables. Holds truthiness,
// equality and ordering as Python's; printing (str, repr, JSON) is in PythonText.swift.
// Leaves out sets, bytes and tuples as a type of their own (a tuple is a list that prints
// with parentheses).

/// A dict's entries in insertion order with a key index, as a Python dict (string keys).
public struct JinjaDict: Sendable, Equatable {
    public private(set) var keys: [String] = []
    private var storage: [String: JinjaValue] = [:]

    public init() {}
    public init(_ pairs: [(String, JinjaValue)]) {
        for (k, v) in pairs { self[k] = v }
    }

    public subscript(key: String) -> JinjaValue? {
        get { storage[key] }
        set {
            if let newValue {
                if storage.updateValue(newValue, forKey: key) == nil { keys.append(key) }
            } else if storage.removeValue(forKey: key) != nil {
                keys.removeAll { $0 == key }
            }
        }
    }

    public var count: Int { keys.count }
    public var isEmpty: Bool { keys.isEmpty }
    /// (key, value) pairs in insertion order.
    public var pairs: [(String, JinjaValue)] { keys.map { ($0, storage[$0]!) } }
    public var values: [JinjaValue] { keys.map { storage[$0]! } }

    public static func == (a: JinjaDict, b: JinjaDict) -> Bool {
        a.storage == b.storage  // Python dict equality ignores order
    }
}

/// A `namespace()` object: the one mutable value a template may assign attributes on.
public final class JinjaNamespace: @unchecked Sendable {
    var attributes: JinjaDict
    init(_ attributes: JinjaDict) { self.attributes = attributes }
}

/// A Python iterator (what `map`, `select`, `reverse` and friends return): always true, no
/// length, and consumed by the first loop over it.
public final class JinjaIterator: @unchecked Sendable {
    let items: [JinjaValue]
    var position = 0
    /// Python's type name ("generator", "list_reverseiterator").
    let typeName: String
    init(_ items: [JinjaValue], typeName: String = "generator") {
        self.items = items
        self.typeName = typeName
    }

    /// The items not yet consumed, consuming them.
    func drain() -> [JinjaValue] {
        defer { position = items.count }
        return Array(items[position...])
    }
}

/// Something a template calls: a macro, a global function or a bound method.
public struct JinjaCallable: @unchecked Sendable {
    public let name: String
    let call: (_ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ ctx: CallContext) throws -> JinjaValue
    init(_ name: String, _ call: @escaping (_ args: [JinjaValue], _ kwargs: [(String, JinjaValue)], _ ctx: CallContext) throws -> JinjaValue) {
        self.name = name
        self.call = call
    }
}

public enum JinjaValue: Sendable {
    /// Jinja2's default Undefined: prints as "", is false, iterates as empty; anything else raises.
    /// `hint` is the message Jinja would raise with ("'x' is undefined").
    case undefined(hint: String)
    case none
    case bool(Bool)
    case int(Int)
    case float(Double)
    case string(String)
    /// A Python list, or a tuple when `isTuple` (only printing differs).
    case list([JinjaValue], isTuple: Bool)
    case dict(JinjaDict)
    case namespace(JinjaNamespace)
    case callable(JinjaCallable)
    case iterator(JinjaIterator)

    public static func list(_ items: [JinjaValue]) -> JinjaValue { .list(items, isTuple: false) }
    public static func undefined(_ name: String) -> JinjaValue { .undefined(hint: "'\(name)' is undefined") }

    public var isUndefined: Bool { if case .undefined = self { true } else { false } }
    public var isNone: Bool { if case .none = self { true } else { false } }

    /// Python truthiness (Undefined is false).
    public var isTruthy: Bool {
        switch self {
        case .undefined, .none: false
        case let .bool(b): b
        case let .int(i): i != 0
        case let .float(d): d != 0
        case let .string(s): !s.isEmpty
        case let .list(items, _): !items.isEmpty
        case let .dict(d): !d.isEmpty
        case .namespace, .callable, .iterator: true
        }
    }

    /// Python's type name, as error messages say it.
    public var typeName: String {
        switch self {
        case .undefined: "Undefined"
        case .none: "NoneType"
        case .bool: "bool"
        case .int: "int"
        case .float: "float"
        case .string: "str"
        case let .list(_, isTuple): isTuple ? "tuple" : "list"
        case .dict: "dict"
        case .namespace: "Namespace"
        case .callable: "function"
        case let .iterator(it): it.typeName
        }
    }

    /// Jinja's own name for a value in "has no attribute" messages ("dict object", "str object").
    var objectDescription: String {
        switch self {
        case .none: "None"
        case .namespace: "<Namespace>"
        default: "\(typeName) object"
        }
    }

    /// A number as Double when it is one (bools count, as in Python).
    var numberValue: Double? {
        switch self {
        case let .int(i): Double(i)
        case let .float(d): d
        case let .bool(b): b ? 1 : 0
        default: nil
        }
    }
}

extension JinjaValue: Equatable {
    /// Python `==`: numbers by value across int/float/bool, lists element-wise (a tuple never
    /// equals a list), dicts by content, namespaces by identity; Undefined equals only Undefined.
    public static func == (a: JinjaValue, b: JinjaValue) -> Bool {
        switch (a, b) {
        case (.undefined, .undefined), (.none, .none): return true
        case let (.string(x), .string(y)): return x.unicodeScalars.elementsEqual(y.unicodeScalars)
        case let (.list(x, tx), .list(y, ty)): return tx == ty && x == y
        case let (.dict(x), .dict(y)): return x == y
        case let (.namespace(x), .namespace(y)): return x === y
        case let (.iterator(x), .iterator(y)): return x === y
        case (.callable, .callable): return false
        default:
            if let x = a.numberValue, let y = b.numberValue {
                if case let .int(i) = a, case let .int(j) = b { return i == j }
                return x == y
            }
            return false
        }
    }
}

/// Python's ordering for `<`, `sort`, `min`, `max`: numbers with numbers, strings by code point,
/// lists lexicographically; anything else is a TypeError.
func pythonLess(_ a: JinjaValue, _ b: JinjaValue) throws(JinjaFailure) -> Bool {
    switch (a, b) {
    case let (.string(x), .string(y)):
        return x.unicodeScalars.lexicographicallyPrecedes(y.unicodeScalars)
    case let (.list(x, tx), .list(y, ty)) where tx == ty:
        for (p, q) in zip(x, y) where p != q { return try pythonLess(p, q) }
        return x.count < y.count
    default:
        if case let .int(i) = a, case let .int(j) = b { return i < j }
        if let x = a.numberValue, let y = b.numberValue { return x < y }
        throw JinjaFailure.type("'<' not supported between instances of '\(a.typeName)' and '\(b.typeName)'")
    }
}
