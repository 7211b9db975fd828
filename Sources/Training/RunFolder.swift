// A run's folder: created and checked writable before any compute, locked so that two
// trainings never interleave their checkpoints, and holding metrics.jsonl and loss-curve.svg
// beside the checkpoints. Also the data fingerprint that ties a checkpoint to its data.
import Crypto
import Foundation
import ModelAssets
#if canImport(Glibc)
import Glibc
#endif

public final class RunFolder {
    public let path: String
    let lockPath: String
    private var locked = false

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

    private func takeLock() throws {
        for _ in 0..<2 {
            let fd = open(lockPath, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            if fd >= 0 {
                let text = "\(getpid())\n"
                _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
                close(fd)
                locked = true
                return
            }
            guard errno == EEXIST else {
                throw TrainingError.io(path: path, reason: "cannot create the lock file: \(String(cString: strerror(errno)))")
            }
            // A lock left by a process that no longer runs (kill -9, power loss) is stale.
            let owner = (try? String(contentsOfFile: lockPath, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            if let owner, owner > 0, kill(owner, 0) == 0 || errno == EPERM {
                throw TrainingError.io(path: path, reason: "another training (process \(owner)) is using this checkpoint folder; wait for it to finish or use another --checkpoint-dir")
            }
            unlink(lockPath)
        }
        throw TrainingError.io(path: path, reason: "cannot take the folder's lock \(lockPath); remove it if no training is running")
    }

    public func releaseLock() {
        if locked {
            unlink(lockPath)
            locked = false
        }
    }

    public var metricsPath: String { path + "/metrics.jsonl" }
    public var lossCurvePath: String { path + "/loss-curve.svg" }

    /// Appends one JSON object per line to metrics.jsonl.
    public func appendMetric(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        if !FileManager.default.fileExists(atPath: metricsPath) {
            FileManager.default.createFile(atPath: metricsPath, contents: nil)
        }
        guard let h = FileHandle(forWritingAtPath: metricsPath) else { return }
        h.seekToEndOfFile()
        h.write(data + Data("\n".utf8))
        try? h.close()
    }

    /// Rewrites loss-curve.svg from the run's history.
    public func writeLossCurve(state: TrainerState, title: String) throws {
        let svg = LossCurve.svg(train: state.history.map { ($0.step, $0.loss) },
                                eval: state.evals.map { ($0.step, $0.loss) }, title: title)
        try AtomicFile.write(Data(svg.utf8), to: lossCurvePath)
    }

    /// The newest resumable checkpoint with `prefix` in the folder (by trainer step), if any.
    public func newestCheckpoint(prefix: String) -> String? {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        var best: (step: Int, rank: Int, path: String)? = nil
        for n in names where n.hasPrefix(prefix + "-") && n.hasSuffix(".safetensors") {
            let p = path + "/" + n
            guard let c = try? Checkpoint.load(p) else { continue }
            let rank = c.header.label == "final" ? 2 : (c.header.label == "interrupted" ? 1 : 0)
            let key = (c.header.state.step, rank, p)
            if best == nil || (key.0, key.1) > (best!.step, best!.rank) { best = key }
        }
        return best?.path
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
}
