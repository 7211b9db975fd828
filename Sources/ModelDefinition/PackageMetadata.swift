// metadata.json of an .fmadapter package: the eight keys Apple's adapter toolkit writes
// (camelCase, sorted, pretty-printed), and a small JSON value type for `creatorDefined`. Reading
// checks that every key is present with its type and that the identifier matches the signature.
// Nothing beyond the eight keys is written; the LoRA shape lives in adapter_weights.bin's header.
import Foundation

/// Any JSON value, for the free-form `creatorDefined` object. Integers stay integers.
public enum MetadataValue: Codable, Equatable, Sendable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([MetadataValue])
    case object([String: MetadataValue])

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int.self) { self = .int(i) }
        else if let d = try? c.decode(Double.self) { self = .double(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([MetadataValue].self) { self = .array(a) }
        else if let o = try? c.decode([String: MetadataValue].self) { self = .object(o) }
        else { throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a JSON value") }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// Parses `text` as a JSON object (what `--creator-defined` takes).
    public static func parseObject(_ text: String, what: String) throws -> [String: MetadataValue] {
        do {
            let v = try JSONDecoder().decode(MetadataValue.self, from: Data(text.utf8))
            guard case .object(let o) = v else {
                throw ModelError.unsupported("\(what) must be a JSON object such as '{\"version\": \"1.0\"}', got: \(text)")
            }
            return o
        } catch let e as ModelError {
            throw e
        } catch {
            throw ModelError.unsupported("\(what) is not valid JSON (\(WeightsContainer.describe(error))); give a JSON object such as '{\"version\": \"1.0\"}'")
        }
    }
}

/// The contents of metadata.json.
public struct PackageMetadata: Codable, Equatable, Sendable {
    public var adapterIdentifier: String
    public var author: String
    public var baseModelSignature: String
    public var creatorDefined: [String: MetadataValue]
    public var description: String
    public var license: String
    public var loraRank: Int
    /// Tokens the draft proposes per step; 0 when the package has no draft.
    public var speculativeDecodingDraftTokenCount: Int

    public static let requiredKeys = ["adapterIdentifier", "author", "baseModelSignature", "creatorDefined",
                                      "description", "license", "loraRank", "speculativeDecodingDraftTokenCount"]

    public init(adapterIdentifier: String, author: String, baseModelSignature: String, creatorDefined: [String: MetadataValue],
                description: String, license: String, loraRank: Int, speculativeDecodingDraftTokenCount: Int) {
        self.adapterIdentifier = adapterIdentifier
        self.author = author
        self.baseModelSignature = baseModelSignature
        self.creatorDefined = creatorDefined
        self.description = description
        self.license = license
        self.loraRank = loraRank
        self.speculativeDecodingDraftTokenCount = speculativeDecodingDraftTokenCount
    }

    /// `fmadapter-NAME-<first 7 hex of the base signature>`.
    public static func identifier(name: String, baseSignature: String) -> String {
        "fmadapter-\(name)-\(baseSignature.prefix(7))"
    }

    /// The adapter name inside the identifier (nil when the identifier is malformed).
    public var adapterName: String? {
        let prefix = "fmadapter-"
        guard adapterIdentifier.hasPrefix(prefix), adapterIdentifier.count > prefix.count + 8 else { return nil }
        let name = adapterIdentifier.dropFirst(prefix.count).dropLast(8)
        return adapterIdentifier.dropLast(7).hasSuffix("-") ? String(name) : nil
    }

    /// Pretty-printed, keys sorted, slashes unescaped, ending in a newline.
    public func encoded() throws -> Data {
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try enc.encode(self) + Data("\n".utf8)
    }

    /// Reads metadata.json, naming the first missing or mistyped key.
    public static func read(path: String) throws -> PackageMetadata {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ModelError.package(path: path, reason: "the file is missing; the package is incomplete, re-export it")
        }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw ModelError.package(path: path, reason: "cannot be read: \(error.localizedDescription)")
        }
        let object: [String: MetadataValue]
        do {
            guard case .object(let o) = try JSONDecoder().decode(MetadataValue.self, from: data) else {
                throw ModelError.package(path: path, reason: "is not a JSON object")
            }
            object = o
        } catch let e as ModelError {
            throw e
        } catch {
            throw ModelError.package(path: path, reason: "is not valid JSON (\(WeightsContainer.describe(error))); re-export the package")
        }
        if let missing = requiredKeys.first(where: { object[$0] == nil }) {
            throw ModelError.package(path: path, reason: "metadata has no key '\(missing)' (every package needs \(requiredKeys.joined(separator: ", "))); re-export the package")
        }
        let m: PackageMetadata
        do { m = try JSONDecoder().decode(PackageMetadata.self, from: data) } catch {
            throw ModelError.package(path: path, reason: "metadata \(WeightsContainer.describe(error)); re-export the package")
        }
        guard m.loraRank >= 1 else {
            throw ModelError.package(path: path, reason: "loraRank is \(m.loraRank); it must be at least 1")
        }
        guard m.speculativeDecodingDraftTokenCount >= 0 else {
            throw ModelError.package(path: path, reason: "speculativeDecodingDraftTokenCount is \(m.speculativeDecodingDraftTokenCount); it must not be negative")
        }
        guard m.baseModelSignature.count >= 7, m.baseModelSignature.allSatisfy(\.isHexDigit) else {
            throw ModelError.package(path: path, reason: "baseModelSignature '\(m.baseModelSignature)' is not a hex digest")
        }
        guard let name = m.adapterName, AdapterName.isValid(name),
              m.adapterIdentifier == identifier(name: name, baseSignature: m.baseModelSignature) else {
            throw ModelError.package(path: path, reason: "adapterIdentifier '\(m.adapterIdentifier)' does not have the form fmadapter-NAME-\(m.baseModelSignature.prefix(7)) (NAME: letters, digits, underscores; the suffix: the first 7 hex digits of baseModelSignature)")
        }
        return m
    }
}

/// The runtime's rule for adapter names: letters, digits and underscores.
public enum AdapterName {
    public static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.allSatisfy { s in
            (s >= "a" && s <= "z") || (s >= "A" && s <= "Z") || (s >= "0" && s <= "9") || s == "_"
        }
    }

    /// `name` with every other character replaced by an underscore (for the error message).
    public static func suggestion(for name: String) -> String {
        let fixed = String(name.unicodeScalars.map { s -> Character in
            let ok = (s >= "a" && s <= "z") || (s >= "A" && s <= "Z") || (s >= "0" && s <= "9") || s == "_"
            return ok ? Character(s) : "_"
        })
        return "'\(fixed.isEmpty ? "my_adapter" : fixed)'"
    }
}
