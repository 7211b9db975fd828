// Publishing a folder (a package, a PEFT adapter, a fused Hugging Face model) all at once: it is
// built under a hidden temporary name beside its destination, each file written with
// AtomicFile (fsync), and only when complete renamed over the old one (old moved aside first,
// then removed). A failure leaves the older folder untouched and removes the partial one.
// POSIX rename(2) only; Linux's renameat2(RENAME_EXCHANGE) is left out for portability.
import Foundation
import ModelDefinition
#if canImport(Glibc)
import Glibc
#endif

enum FolderPublisher {
    /// Builds `destination` by calling `build` with a fresh empty folder, then swaps it in.
    /// An existing destination is replaced only when `isReplaceable` says it is one of ours
    /// (or it is empty); anything else is refused rather than deleted.
    static func publish(to destination: String, what: String, isReplaceable: (String) -> Bool,
                        build: (String) throws -> Void) throws {
        let fm = FileManager.default
        let url = URL(fileURLWithPath: destination).standardizedFileURL
        let parent = url.deletingLastPathComponent().path
        let leaf = url.lastPathComponent
        do { try fm.createDirectory(atPath: parent, withIntermediateDirectories: true) } catch {
            throw ExportError.io(path: parent, reason: "cannot create the output folder: \(error.localizedDescription)")
        }
        var isDir: ObjCBool = false
        let exists = fm.fileExists(atPath: url.path, isDirectory: &isDir)
        if exists {
            let contents = (try? fm.contentsOfDirectory(atPath: url.path)) ?? []
            guard isDir.boolValue, contents.isEmpty || isReplaceable(url.path) else {
                throw ExportError.io(path: url.path, reason: "exists and is not \(what); it was left alone — remove it yourself or choose another --output-dir or name")
            }
        }
        let tag = "\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let tmp = parent + "/." + leaf + ".partial-" + tag
        do { try fm.createDirectory(atPath: tmp, withIntermediateDirectories: false) } catch {
            throw ExportError.io(path: tmp, reason: "cannot create a temporary folder: \(error.localizedDescription)")
        }
        do {
            try build(tmp)
            syncFolder(tmp)
            if exists {
                let old = parent + "/." + leaf + ".old-" + tag
                guard rename(url.path, old) == 0 else {
                    throw ExportError.io(path: url.path, reason: "cannot move the older version aside: \(String(cString: strerror(errno))); it is unchanged")
                }
                guard rename(tmp, url.path) == 0 else {
                    let why = String(cString: strerror(errno))
                    _ = rename(old, url.path)
                    throw ExportError.io(path: url.path, reason: "cannot move the new version into place: \(why); the older version was put back")
                }
                try? fm.removeItem(atPath: old)
            } else {
                guard rename(tmp, url.path) == 0 else {
                    throw ExportError.io(path: url.path, reason: "cannot move the new folder into place: \(String(cString: strerror(errno)))")
                }
            }
            syncFolder(parent)
        } catch {
            try? fm.removeItem(atPath: tmp)
            throw error
        }
    }

    static func syncFolder(_ path: String) {
        let fd = open(path, O_RDONLY)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
    }
}
