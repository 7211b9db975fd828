// SHA-256 (FIPS 180-4) for the signatures, checksums and fingerprints the toolkit writes: the
// system's libcrypto on Linux (OpenSSL's EVP interface, Debian's libssl-dev, found through
// pkg-config like OpenBLAS), CryptoKit on Apple's systems. Both hash with the CPU's SHA
// instructions where it has them.
//
// Why not swift-crypto: the toolkit needs this one digest, and swift-crypto builds all of
// BoringSSL for it in every build of every package that depends on the toolkit (a release
// build of swift-crypto alone: 108 s on 2 cores, 175 s of CPU; the same again in an app's first
// debug build and in the fuzzers' build).
import Foundation

#if canImport(CryptoKit)
import CryptoKit

public typealias SHA256 = CryptoKit.SHA256
#else
import CLibCrypto

/// A SHA-256 hash in progress, with the value semantics of swift-crypto's `SHA256`: a copy
/// hashes on independently (the context is copied when a shared one is written).
public struct SHA256 {
    /// libcrypto's SHA-256 calls fail only when memory runs out or the library itself is broken:
    /// an invariant of the process, not bad input, so it traps (as swift-crypto's SHA256 does).
    private static func require(_ ok: Bool, _ what: @autoclosure () -> String) {
        if !ok { fatalError("[SHA256] libcrypto failed to \(what())") }
    }

    private final class Context {
        let ctx: OpaquePointer
        init() {
            let ctx = EVP_MD_CTX_new()
            require(ctx != nil && EVP_DigestInit_ex(ctx, EVP_sha256(), nil) == 1, "start a SHA-256 digest (EVP_DigestInit_ex)")
            self.ctx = ctx!
        }
        init(copying other: Context) {
            let ctx = EVP_MD_CTX_new()
            require(ctx != nil && EVP_MD_CTX_copy_ex(ctx, other.ctx) == 1, "copy a SHA-256 digest (EVP_MD_CTX_copy_ex)")
            self.ctx = ctx!
        }
        deinit { EVP_MD_CTX_free(ctx) }
    }

    private var context = Context()

    public init() {}

    /// Adds bytes to the hash.
    public mutating func update(bufferPointer: UnsafeRawBufferPointer) {
        guard let base = bufferPointer.baseAddress, !bufferPointer.isEmpty else { return }
        if !isKnownUniquelyReferenced(&context) { context = Context(copying: context) }
        Self.require(EVP_DigestUpdate(context.ctx, base, bufferPointer.count) == 1, "hash \(bufferPointer.count) bytes (EVP_DigestUpdate)")
    }

    /// Adds bytes to the hash (every region of `data`, in order).
    public mutating func update<D: DataProtocol>(data: D) {
        for region in data.regions { region.withUnsafeBytes { update(bufferPointer: $0) } }
    }

    /// The 32 bytes of the digest of everything added so far; the hash itself is left as it was.
    public func finalize() -> [UInt8] {
        let copy = Context(copying: context)
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        Self.require(EVP_DigestFinal_ex(copy.ctx, &digest, &length) == 1 && length == 32, "finish a SHA-256 digest (EVP_DigestFinal_ex)")
        return digest
    }

    /// The digest of `data` alone.
    public static func hash<D: DataProtocol>(data: D) -> [UInt8] {
        var h = SHA256()
        h.update(data: data)
        return h.finalize()
    }
}
#endif
