// The keys a server requires (`serve --api-key`, `--api-key-file`), as llama.cpp's and vLLM's
// servers take them: every route but `/health` needs `Authorization: Bearer KEY`; a missing or
// wrong key is answered 401 and counted. A given key is compared with every accepted one in
// time that depends only on the accepted keys' lengths, never on how much of it matched. Also:
// whether a host is loopback (a server without keys listens only there unless told otherwise).
// Leaves out per-key limits, scopes and rotation (restart with the new keys).
import Foundation

public final class AccessKeys: @unchecked Sendable {
    /// The accepted keys' bytes; empty: no key is required.
    private let keys: [[UInt8]]
    private let lock = NSLock()
    private var refusedCount = 0

    /// No key required.
    public static let open = AccessKeys(checked: [])

    private init(checked: [[UInt8]]) { keys = checked }

    /// Requires one of `keys`: each 1 to 4096 visible ASCII characters (what a Bearer token in an
    /// HTTP header can carry). `source` names where they came from, for errors.
    public convenience init(_ keys: [String], source: String = "--api-key") throws(AccessKeyError) {
        var checked: [[UInt8]] = []
        for (i, key) in keys.enumerated() {
            let bytes = Array(key.utf8)
            guard !bytes.isEmpty, bytes.count <= 4096, bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw AccessKeyError("\(source): key \(i + 1) must be 1 to 4096 visible ASCII characters (no spaces, no control or non-ASCII characters); got \(bytes.count) bytes")
            }
            checked.append(bytes)
        }
        self.init(checked: checked)
    }

    /// The keys of a file: one per line; blank lines and lines starting with `#` are skipped,
    /// spaces around a key are not part of it.
    public static func read(file path: String) throws(AccessKeyError) -> [String] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw AccessKeyError("--api-key-file \(path): cannot be read as UTF-8 text (\(error.localizedDescription))")
        }
        let keys = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard !keys.isEmpty else { throw AccessKeyError("--api-key-file \(path): holds no key (one per line; # starts a comment)") }
        return keys
    }

    /// Whether any key is required.
    public var isRequired: Bool { !keys.isEmpty }

    /// Requests refused for a missing or wrong key so far.
    public var refused: Int { lock.withLock { refusedCount } }

    /// nil when the `Authorization` header value grants access; otherwise the refusal (counted).
    func check(authorization: String?) -> ServerError? {
        guard isRequired else { return nil }
        var given: [UInt8]?
        if let value = authorization {
            let parts = value.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            if parts.count == 2, parts[0].lowercased() == "bearer" { given = Array(parts[1].trimmingCharacters(in: .whitespaces).utf8) }
        }
        var granted = false
        if let given {
            for key in keys where Self.equal(key, given) { granted = true }  // every key compared, no early exit
        }
        if granted { return nil }
        lock.withLock { refusedCount += 1 }
        return .unauthorized(missing: given == nil)
    }

    /// `key == given`, in time that depends on `key.count` only.
    static func equal(_ key: [UInt8], _ given: [UInt8]) -> Bool {
        var difference = key.count ^ given.count
        for i in 0..<key.count {
            difference |= Int(key[i] ^ (i < given.count ? given[i] : ~key[i]))
        }
        return difference == 0
    }

    /// Whether `host` (the address a server listens on) is reachable from this machine only:
    /// `localhost`, 127.0.0.0/8 or `::1`. `0.0.0.0`, `::` and any name or other address are not.
    public static func isLoopback(_ host: String) -> Bool {
        var h = host.lowercased()
        if h.hasPrefix("[") && h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if h == "localhost" || h == "::1" || h == "0:0:0:0:0:0:0:1" { return true }
        let octets = h.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets.allSatisfy({ o in !o.isEmpty && o.count <= 3 && o.allSatisfy(\.isASCIIDigit) && Int(o)! <= 255 }) else { return false }
        return octets[0] == "127"
    }
}

/// A key list that cannot be used, and why.
public struct AccessKeyError: Error, LocalizedError, Equatable {
    public let message: String
    init(_ message: String) { self.message = message }
    public var errorDescription: String? { message }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
