// A run's folder: created and checked writable before any compute, locked so that two
// trainings never interleave their checkpoints, holding the checkpoints and each run's log
// (RunLog: adapter/, draft/ with metrics.jsonl, events and the loss curve). Also the data
// fingerprint that ties a checkpoint to its data.
import Foundation
import ModelAssets
#if canImport(Glibc)
import Glibc
#endif

public final class RunFolder {
    public let path: String
    let lockPath: String
    private var locked = false
    private var lockFD: Int32 = -1

    /// Creates the folder if needed, proves it writable, and takes its lock. Throws
    /// `TrainingError.io` with the reason and what to do.
    public init(_ path: String) throws {
        self.path = path
        lockPath = path + "/.train.lock"
        let fm = FileManager.default
        var isDir: ObjCBool = false
        if fm.fileExists(atPath: path, isDirectory: &isDir) {
            guard isDir.boolValue else { throw TrainingError.io(path: path, reason: "exists and is not a folder; pass a folder for --checkpoint-dir") }
        } else {
            do { try fm.createDirectory(atPath: path, withIntermediateDirectories: true) } catch {
                throw TrainingError.io(path: path, reason: "cannot create the checkpoint folder: \(error.localizedDescription)")
            }
        }
        guard access(path, W_OK) == 0 else {
            throw TrainingError.io(path: path, reason: "the checkpoint folder is not writable; choose another --checkpoint-dir or fix its permissions")
        }
        try takeLock()
    }

    deinit { releaseLock() }

    /// The lock is an flock(2) on `.train.lock`, held through an open descriptor: the kernel
    /// drops it when the process ends however it ends (kill -9, power loss), so a lock file left
    /// behind never blocks a later run, and two processes can never both hold it (the pid
    /// written inside is only for the message). Taking a lock whose file was just unlinked by
    /// its releasing owner is detected (inode check) and retried.
    private func takeLock() throws {
        for _ in 0..<8 {
            let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw TrainingError.io(path: path, reason: "cannot create the lock file \(lockPath): \(String(cString: strerror(errno)))")
            }
            if flock(fd, LOCK_EX | LOCK_NB) != 0 {
                let why = errno
                close(fd)
                guard why == EWOULDBLOCK || why == EAGAIN else {
                    throw TrainingError.io(path: path, reason: "cannot lock \(lockPath): \(String(cString: strerror(why)))")
                }
                let owner = (try? String(contentsOfFile: lockPath, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
                let who = owner.flatMap { Int32($0) }.map { "process \($0)" } ?? "another process"
                throw TrainingError.io(path: path, reason: "another training (\(who)) is using this checkpoint folder; wait for it to finish or use another --checkpoint-dir")
            }
            var held = stat(), named = stat()
            guard fstat(fd, &held) == 0, stat(lockPath, &named) == 0, held.st_ino == named.st_ino, held.st_dev == named.st_dev else {
                close(fd)  // the previous owner unlinked this file after we opened it: try the new one
                continue
            }
            let text = "\(getpid())\n"
            _ = ftruncate(fd, 0)
            _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
            lockFD = fd
            locked = true
            removeStaleTemporaries()
            return
        }
        throw TrainingError.io(path: path, reason: "cannot take the folder's lock \(lockPath) (it keeps being replaced); check that no other training is running")
    }

    public func releaseLock() {
        if locked {
            unlink(lockPath)  // while still holding it, so no one locks a file about to vanish
            close(lockFD)
            lockFD = -1
            locked = false
        }
    }

    /// Temporary files of atomic writes (`.NAME.tmp-PID`) whose writer no longer runs are what a
    /// kill or a full disk leaves behind; they are never checkpoints. Removed once the lock is held,
    /// in the folder and in the runs' log folders inside it.
    func removeStaleTemporaries() {
        let logs = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).map { path + "/" + $0 }.filter { p in
            var isDir: ObjCBool = false
            return FileManager.default.fileExists(atPath: p, isDirectory: &isDir) && isDir.boolValue
        }
        for folder in [path] + logs {
            for n in Self.hiddenNames(in: folder) {
                guard let r = n.range(of: ".tmp-", options: .backwards), let pid = Int32(n[r.upperBound...]) else { continue }
                if pid != getpid(), kill(pid, 0) != 0, errno == ESRCH { unlink(folder + "/" + n) }
            }
        }
    }

    /// Names starting with "." in `folder` (FileManager's listing leaves them out on Linux).
    static func hiddenNames(in folder: String) -> [String] {
        guard let dir = opendir(folder) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasPrefix("."), name != ".", name != ".." { names.append(name) }
        }
        return names
    }

    /// The newest resumable checkpoint with `prefix` in the folder (by trainer step), if any.
    /// Damaged files are skipped here; `scanCheckpoints` names them so that a CLI can say so.
    public func newestCheckpoint(prefix: String) -> String? {
        Self.scanCheckpoints(in: path, prefix: prefix).newest
    }

    /// Every `prefix-*.safetensors` in `folder`: the newest one that loads (by trainer step;
    /// at equal steps final, then interrupted, then epoch), and those that do not load, with the
    /// reason. Reads only; takes no lock.
    public static func scanCheckpoints(in folder: String, prefix: String) -> (newest: String?, damaged: [(path: String, reason: String)]) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
        var best: (step: Int, rank: Int, path: String)? = nil
        var damaged: [(path: String, reason: String)] = []
        for n in names where n.hasPrefix(prefix + "-") && n.hasSuffix(".safetensors") {
            let p = folder + "/" + n
            let c: Checkpoint
            do { c = try Checkpoint.load(p) } catch {
                damaged.append((p, (error as? LocalizedError)?.errorDescription ?? "\(error)"))
                continue
            }
            let rank = c.header.label == "final" ? 2 : (c.header.label == "interrupted" ? 1 : 0)
            let key = (c.header.state.step, rank, p)
            if best == nil || (key.0, key.1) > (best!.step, best!.rank) { best = key }
        }
        return (best?.path, damaged)
    }
}

public enum Fingerprint {
    /// Lowercase hex SHA-256 of the parts, each length-prefixed.
    public static func sha256(_ parts: [Data]) -> String {
        var h = SHA256()
        for p in parts {
            var n = UInt64(p.count).littleEndian
            h.update(data: Data(bytes: &n, count: 8))
            h.update(data: p)
        }
        return h.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// `sha256([contents of the file at path, extra])`, read 1 MiB at a time so a large
    /// training file is never held in memory for its fingerprint.
    public static func sha256(file path: String, then extra: Data) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw TrainingError.io(path: path, reason: "cannot read the file to fingerprint it; check that it exists and is readable")
        }
        defer { try? handle.close() }
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: 0)
        var h = SHA256()
        var n = UInt64(size).littleEndian
        h.update(data: Data(bytes: &n, count: 8))
        var read: UInt64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            h.update(data: chunk)
            read += UInt64(chunk.count)
        }
        guard read == size else {
            throw TrainingError.io(path: path, reason: "the file changed while it was read (\(size) bytes, then \(read)); do not edit training data during a run")
        }
        var m = UInt64(extra.count).littleEndian
        h.update(data: Data(bytes: &m, count: 8))
        h.update(data: extra)
        return h.finalize().map { String(format: "%02x", $0) }.joined()
    }
}
