// Runs the toolkit's executables as child processes for the fault matrix: fork + execve so the
// child can get a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored: writes past it fail with
// EFBIG, a full disk without privileges) before it starts; output goes to files; wait4 reports the
// exit status and the child's peak memory. Between fork and execve only async-signal-safe calls.
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

struct ChildProcess {
    let pid: pid_t
    let logPath: String

    struct Exit {
        /// The exit code, or 128 + the signal number when a signal ended it.
        var status: Int32
        var signaled: Bool
        /// Peak resident memory in bytes (ru_maxrss, which includes the parent's at fork; see
        /// `waitMeasuringPeak` for the child's own).
        var peakBytes: Int
        var output: String
    }

    /// The folder holding the package's built executables (beside the test bundle), or a skip
    /// that says how to get them.
    static func productsDirectory() throws -> String {
        let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var dir = exe.deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: dir.appendingPathComponent("train-adapter").path) { return dir.path }
            dir = dir.deletingLastPathComponent()
        }
        throw XCTSkip("train-adapter was not found beside the test bundle (\(exe.path)); build every product first (`swift build` with the same configuration and scratch path) so the child-process fault tests can run")
    }

    static func tool(_ name: String) throws -> String {
        let path = try productsDirectory() + "/" + name
        guard FileManager.default.isExecutableFile(atPath: path) else { throw XCTSkip("\(path) is not built") }
        return path
    }

    /// Starts `executable` with `arguments`; stdout and stderr go to `logPath`.
    static func start(_ executable: String, _ arguments: [String], logPath: String, fileSizeLimit: Int? = nil) -> ChildProcess {
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let logC = strdup(logPath)
        defer {
            for p in argv { free(p) }
            free(logC)
        }
        let pid = fork()
        precondition(pid >= 0, "fork failed: \(String(cString: strerror(errno)))")
        if pid == 0 {
            if let limit = fileSizeLimit {
                signal(SIGXFSZ, SIG_IGN)
                var rl = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
                if setrlimit(Int32(RLIMIT_FSIZE.rawValue), &rl) != 0 { _exit(121) }
            }
            let fd = open(logC!, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            if fd < 0 { _exit(122) }
            dup2(fd, 1)
            dup2(fd, 2)
            close(fd)
            argv.withUnsafeBufferPointer { execve(argv[0]!, $0.baseAddress!, environ) }
            _exit(127)
        }
        return ChildProcess(pid: pid, logPath: logPath)
    }

    /// Runs to completion.
    static func run(_ executable: String, _ arguments: [String], logPath: String, fileSizeLimit: Int? = nil) -> Exit {
        start(executable, arguments, logPath: logPath, fileSizeLimit: fileSizeLimit).wait()
    }

    /// Waits like `wait()`, but `peakBytes` is the child's own peak (VmHWM, polled every
    /// millisecond after its execve): ru_maxrss also counts the parent's memory at fork time.
    func waitMeasuringPeak(executable: String) -> Exit {
        let target = URL(fileURLWithPath: executable).resolvingSymlinksInPath().path
        var peak = 0
        while isRunning {
            let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? ""
            if exe == target, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
               let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
               let kb = Int(line.split(separator: " ").dropFirst().first ?? "") {
                peak = max(peak, kb * 1024)
            }
            usleep(1000)
        }
        var exit = wait()
        exit.peakBytes = peak
        return exit
    }

    func wait() -> Exit {
        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        let signaled = (status & 0x7F) != 0
        let code = signaled ? 128 + (status & 0x7F) : (status >> 8) & 0xFF
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return Exit(status: code, signaled: signaled, peakBytes: Int(usage.ru_maxrss) * 1024, output: text)
    }

    /// Whether the child is still running (not exited; an unreaped child counts as exited).
    var isRunning: Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(close, offsetBy: 2)...].first
        return state != "Z" && state != "X"
    }

    func send(_ sig: Int32) { kill(pid, sig) }

    /// Whether `sig` is still pending (sent, not yet delivered) for the child (/proc/PID/status).
    func hasPending(_ sig: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
        for line in status.split(separator: "\n") where line.hasPrefix("ShdPnd:") || line.hasPrefix("SigPnd:") {
            if let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16), mask & (1 << UInt64(sig - 1)) != 0 { return true }
        }
        return false
    }
}

/// Polls `condition` every `interval` seconds until it holds or `timeout` passes.
func waitUntil(timeout: TimeInterval, interval: TimeInterval = 0.002, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(timeout)
    while Date() < end {
        if condition() { return true }
        if interval > 0 { usleep(UInt32(interval * 1_000_000)) }
    }
    return condition()
}
