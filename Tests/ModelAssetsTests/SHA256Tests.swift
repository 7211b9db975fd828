// ModelAssets' SHA256 (the system's libcrypto): FIPS 180-2's test vectors (appendix B; the same
// digests as Python's hashlib.sha256), pieces against the whole, and the value semantics every
// caller relies on (a copy hashes on alone; finalize leaves the hash as it was).
import Foundation
import ModelAssets
import XCTest

final class SHA256Tests: XCTestCase {
    private func hex<S: Sequence>(_ digest: S) -> String where S.Element == UInt8 {
        digest.map { String(format: "%02x", $0) }.joined()
    }

    func testFIPSVectors() {
        XCTAssertEqual(hex(SHA256.hash(data: [UInt8]())), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(SHA256.hash(data: Data("abc".utf8))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(SHA256.hash(data: Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        // a million "a", in uneven pieces through every update form
        var h = SHA256()
        let a = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        var at = 0, size = 1
        while at < a.count {
            let end = min(a.count, at + size)
            switch size % 3 {
            case 0: h.update(data: a[at..<end])
            case 1: a[at..<end].withUnsafeBytes { h.update(bufferPointer: $0) }
            default: h.update(data: Data(a[at..<end]))
            }
            at = end
            size = size * 7 % 100_003 + 1
        }
        XCTAssertEqual(hex(h.finalize()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testCopiesHashOnAloneAndFinalizeLeavesTheHash() {
        var a = SHA256()
        a.update(data: Data("ab".utf8))
        var b = a  // shares the state until one of them is written
        b.update(data: Data("c".utf8))
        XCTAssertEqual(hex(b.finalize()), hex(SHA256.hash(data: Data("abc".utf8))))
        XCTAssertEqual(hex(a.finalize()), hex(SHA256.hash(data: Data("ab".utf8))))
        // finalize does not end the hash: more bytes continue it
        a.update(data: Data("c".utf8))
        XCTAssertEqual(hex(a.finalize()), hex(b.finalize()))
        // an empty update changes nothing
        a.update(bufferPointer: UnsafeRawBufferPointer(start: nil, count: 0))
        XCTAssertEqual(hex(a.finalize()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
