// Reading a model file once (memory-mapped where the platform allows) and walking it with a
// bounds-checked little-endian cursor that throws instead of trapping. Big-endian files and
// streaming reads are left out. Follows gguf.cpp's `gguf_reader`: check the bytes left first.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A file mapped read-only into memory (mmap, MAP_PRIVATE): the page cache is the only copy, shared
/// by every process that maps the same file, and pages are read in as they are first touched.
/// Unmapped when the last reference goes.
public final class MappedFile: @unchecked Sendable {
    public let path: String
    /// The first byte; `count` bytes are readable (nil for an empty file).
    public let base: UnsafeRawPointer?
    public let count: Int

    public init(path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw ModelAssetsError.io(path: path, reason: "cannot open: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ModelAssetsError.io(path: path, reason: "cannot stat: \(String(cString: strerror(errno)))") }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw ModelAssetsError.io(path: path, reason: "is a folder, not a file") }
        count = Int(st.st_size)
        if count == 0 {
            base = nil
            return
        }
        let p = mmap(nil, count, PROT_READ, MAP_PRIVATE, fd, 0)
        guard let p, p != MAP_FAILED else {
            throw ModelAssetsError.io(path: path, reason: "cannot map the file: \(String(cString: strerror(errno)))")
        }
        base = UnsafeRawPointer(p)
    }

    deinit {
        if let base { munmap(UnsafeMutableRawPointer(mutating: base), count) }
    }

    /// Lets the kernel drop the whole pages inside `range` from this process's resident memory
    /// (they stay in the page cache; a later read maps them in again from the file, unchanged):
    /// for parts read once, such as a GGUF's metadata, whose values were copied when it was parsed.
    public func dropResidentPages(_ range: Range<Int>) {
        #if canImport(Glibc)
        guard let base, !range.isEmpty else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let lower = (max(0, range.lowerBound) + page - 1) / page * page, upper = min(count, range.upperBound) / page * page
        guard upper > lower else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base + lower), upper - lower, MADV_DONTNEED)
        #endif
    }

    /// The bytes as Data without a copy; the Data keeps this mapping alive.
    public var data: Data {
        guard let base else { return Data() }
        return Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: count, deallocator: .custom { [self] _, _ in
            withExtendedLifetime(self) {}
        })
    }
}

enum FileBytes {
    /// The whole file, mapped rather than copied when possible.
    static func read(path: String) throws -> Data {
        let url = URL(fileURLWithPath: path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ModelAssetsError.io(path: path, reason: "no such file")
        }
        if isDirectory.boolValue { throw ModelAssetsError.io(path: path, reason: "is a folder, not a file") }
        do {
            return try Data(contentsOf: url, options: .alwaysMapped)
        } catch {
            throw ModelAssetsError.io(path: path, reason: "cannot read: \(error.localizedDescription)")
        }
    }

    /// Writes through a temporary file in the same folder and renames it into place, so a
    /// reader never sees half a file.
    static func writeAtomically(_ data: Data, to path: String) throws {
        try AtomicFile.write(data, to: path)
    }
}

/// A little-endian cursor over raw bytes. Every read checks the bytes left and throws
/// `ModelAssetsError.truncated` naming `item`.
struct ByteCursor {
    let bytes: UnsafeRawBufferPointer
    let path: String
    private(set) var offset: Int

    init(_ bytes: UnsafeRawBufferPointer, path: String, offset: Int = 0) {
        self.bytes = bytes
        self.path = path
        self.offset = offset
    }

    var remaining: Int { bytes.count - offset }

    func require(_ count: Int, _ item: @autoclosure () -> String) throws {
        guard count >= 0, count <= remaining else {
            throw ModelAssetsError.truncated(path: path, item: item(), needed: count, available: remaining)
        }
    }

    mutating func skip(_ count: Int, _ item: @autoclosure () -> String) throws {
        try require(count, item())
        offset += count
    }

    mutating func read<T: FixedWidthInteger>(_: T.Type, _ item: @autoclosure () -> String) throws -> T {
        try require(MemoryLayout<T>.size, item())
        let value = T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
        offset += MemoryLayout<T>.size
        return value
    }

    mutating func readFloat(_ item: @autoclosure () -> String) throws -> Float {
        Float(bitPattern: try read(UInt32.self, item()))
    }

    mutating func readDouble(_ item: @autoclosure () -> String) throws -> Double {
        Double(bitPattern: try read(UInt64.self, item()))
    }

    /// A length as a non-negative Int; a UInt64 above Int.max is reported as a truncation.
    mutating func readLength(_ item: @autoclosure () -> String) throws -> Int {
        let raw = try read(UInt64.self, item())
        guard raw <= UInt64(Int.max) else {
            throw ModelAssetsError.truncated(path: path, item: item(), needed: Int.max, available: remaining)
        }
        return Int(raw)
    }

    mutating func readBytes(_ count: Int, _ item: @autoclosure () -> String) throws -> UnsafeRawBufferPointer {
        try require(count, item())
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
        offset += count
        return slice
    }

    /// UTF-8 text of `count` bytes; invalid UTF-8 is an error naming `item`.
    mutating func readUTF8(_ count: Int, _ item: @autoclosure () -> String) throws -> String {
        let raw = try readBytes(count, item())
        guard let text = String(validating: raw, as: UTF8.self) else {
            throw ModelAssetsError.malformed(path: path, item: item(), reason: "text is not valid UTF-8")
        }
        return text
    }
}

/// A growing little-endian byte buffer for the writers.
struct ByteSink {
    var bytes: [UInt8] = []

    mutating func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(_ value: Float) { append(value.bitPattern) }
    mutating func append(_ value: Double) { append(value.bitPattern) }
    mutating func append(bytes other: some Sequence<UInt8>) { bytes.append(contentsOf: other) }

    mutating func pad(toMultipleOf alignment: Int, with byte: UInt8 = 0) {
        let rem = bytes.count % alignment
        if rem != 0 { bytes.append(contentsOf: repeatElement(byte, count: alignment - rem)) }
    }
}
