// Crash-safe file replacement: write to a temporary file in the same folder, fsync it, rename
// it over the final name, fsync the folder. A crash or a full disk at any point leaves either
// the old file or the new one under the final name, never a torn one; the temporary is removed
// on failure. Whole files (`write`) or files written in pieces (`Stream`). POSIX calls only (Glibc on Linux).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public enum AtomicFile {
    /// Writes `data` to `path` atomically. Throws `ModelAssetsError.io` naming the path and the
    /// system's reason (e.g. "No space left on device") and leaves any older file intact.
    public static func write(_ data: Data, to path: String) throws {
        let stream = try Stream(path: path)
        try data.withUnsafeBytes { try stream.write($0) }
        try stream.commit()
    }

    /// A file written in pieces under a temporary name and renamed to `path` by `commit()`. Until
    /// then `path` is untouched; a stream dropped without `commit()` removes its temporary file.
    public final class Stream {
        public let path: String
        private let temporaryPath: String
        private let folder: String
        private var fd: Int32
        public private(set) var bytesWritten = 0

        public init(path: String) throws {
            let url = URL(fileURLWithPath: path)
            self.path = path
            folder = url.deletingLastPathComponent().path
            temporaryPath = folder + "/." + url.lastPathComponent + ".tmp-\(getpid())"
            fd = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            guard fd >= 0 else { throw ModelAssetsError.io(path: path, reason: "cannot create a file in \(folder): \(errnoText())") }
        }

        deinit { abandon() }

        /// Appends `bytes`; on failure the stream is abandoned (temporary removed) and the error names the reason.
        public func write(_ bytes: UnsafeRawBufferPointer) throws {
            precondition(fd >= 0, "[AtomicFile] write after commit or abandon of \(path)")
            var off = 0
            while off < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + off, bytes.count - off)
                if n < 0 {
                    if errno == EINTR { continue }
                    let why = errnoText()
                    abandon()
                    throw ModelAssetsError.io(path: path, reason: "write failed: \(why); the previous file (if any) is unchanged")
                }
                off += n
            }
            bytesWritten += bytes.count
        }

        /// Flushes to disk and renames the temporary file to `path`.
        public func commit() throws {
            precondition(fd >= 0, "[AtomicFile] commit after commit or abandon of \(path)")
            if fsync(fd) != 0 {
                let why = errnoText()
                abandon()
                throw ModelAssetsError.io(path: path, reason: "fsync failed: \(why); the previous file (if any) is unchanged")
            }
            close(fd)
            fd = -1
            if rename(temporaryPath, path) != 0 {
                let why = errnoText()
                unlink(temporaryPath)
                throw ModelAssetsError.io(path: path, reason: "rename failed: \(why); the previous file (if any) is unchanged")
            }
            let dfd = open(folder, O_RDONLY)
            if dfd >= 0 {
                fsync(dfd)
                close(dfd)
            }
        }

        /// Closes and removes the temporary file; `path` keeps whatever it held. Safe to call twice.
        public func abandon() {
            guard fd >= 0 else { return }
            close(fd)
            fd = -1
            unlink(temporaryPath)
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}
