// The base model signature remembered per file, so loading a 3B base does not hash 12 GB of
// float32 every time: keyed by what identifies the file's contents on this machine (device,
// inode, size, modification time in nanoseconds; every file of a Hugging Face folder) and the
// signature encoding's version. A cache that cannot be read or written is skipped, never an
// error. Lives in $ADAPTER_CACHE, else $XDG_CACHE_HOME/adapter-toolkit, else ~/.cache/adapter-toolkit.
import Foundation
import ModelAssets
#if canImport(Glibc)
import Glibc
#endif

public enum SignatureCache {
    /// The folder the cache uses; nil when no home or cache folder is known.
    public static var directory: String? {
        let env = ProcessInfo.processInfo.environment
        if let d = env["ADAPTER_CACHE"], !d.isEmpty { return d + "/signatures" }
        if let d = env["XDG_CACHE_HOME"], !d.isEmpty { return d + "/adapter-toolkit/signatures" }
        if let h = env["HOME"], !h.isEmpty { return h + "/.cache/adapter-toolkit/signatures" }
        return nil
    }

    /// Files smaller than this are hashed every time (a fraction of a second), and never cached.
    public static let minimumBytes = 64 << 20

    /// `file`'s signature in `encoding`: from the cache when the file is unchanged, else computed and stored.
    public static func signature(of file: BaseModelFile, encoding: BaseModelSignature.Encoding = BaseModelSignature.current) -> String {
        guard let (key, bytes) = key(for: file.path, encoding: encoding), bytes >= minimumBytes, let dir = directory else {
            return file.signature(encoding: encoding)
        }
        let entry = dir + "/" + key
        if let text = try? String(contentsOfFile: entry, encoding: .utf8) {
            let s = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if s.count == 64, s.allSatisfy(\.isHexDigit) { return s }
        }
        let s = file.signature(encoding: encoding)
        if (try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)) != nil {
            try? AtomicFile.write(Data((s + "\n").utf8), to: entry)
        }
        return s
    }

    /// A digest of the identity of `path` (a file, or every regular file of a folder) and its
    /// size in bytes, or nil when it cannot be read.
    static func key(for path: String, encoding: BaseModelSignature.Encoding) -> (String, Int)? {
        var parts = [encoding.rawValue, URL(fileURLWithPath: path).standardizedFileURL.path]
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else { return nil }
        let files: [String]
        if isDir.boolValue {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return nil }
            files = names.sorted().map { path + "/" + $0 }
        } else {
            files = [path]
        }
        var bytes = 0
        for f in files {
            var st = stat()
            guard stat(f, &st) == 0 else { return nil }
            guard (st.st_mode & S_IFMT) == S_IFREG else { continue }
            bytes += Int(st.st_size)
            parts.append("\(URL(fileURLWithPath: f).lastPathComponent)|\(st.st_dev)|\(st.st_ino)|\(st.st_size)|\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)")
        }
        let digest = SHA256.hash(data: Data(parts.joined(separator: "\n").utf8))
        return (digest.map { String(format: "%02x", $0) }.joined(), bytes)
    }
}
