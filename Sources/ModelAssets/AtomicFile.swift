// Crash-safe file replacement: write to a temporary file in the same folder, fsync it, rename
// it over the final name, fsync the folder. A crash or a full disk at any point leaves either
// the old file or the new one under the final name, never a torn one; the temporary is removed
// on failure. POSIX calls only (Glibc on Linux).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public enum AtomicFile {
    /// Writes `data` to `path` atomically. Throws `ModelAssetsError.io` naming the path and the
    /// system's reason (e.g. "No space left on device") and leaves any older file intact.
    public static func write(_ data: Data, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        let dir = url.deletingLastPathComponent().path
        let tmp = dir + "/." + url.lastPathComponent + ".tmp-\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw ModelAssetsError.io(path: path, reason: "cannot create a file in \(dir): \(errnoText())") }
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        let written: Int = data.withUnsafeBytes { raw in
            var off = 0
            while off < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + off, raw.count - off)
                if n < 0 {
                    if errno == EINTR { continue }
                    return -1
                }
                off += n
            }
            return off
        }
        if written != data.count {
            let why = errnoText()
            close(fd)
            throw ModelAssetsError.io(path: path, reason: "write failed: \(why); the previous file (if any) is unchanged")
        }
        if fsync(fd) != 0 {
            let why = errnoText()
            close(fd)
            throw ModelAssetsError.io(path: path, reason: "fsync failed: \(why); the previous file (if any) is unchanged")
        }
        close(fd)
        if rename(tmp, path) != 0 {
            throw ModelAssetsError.io(path: path, reason: "rename failed: \(errnoText()); the previous file (if any) is unchanged")
        }
        ok = true
        let dfd = open(dir, O_RDONLY)
        if dfd >= 0 {
            fsync(dfd)
            close(dfd)
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}
