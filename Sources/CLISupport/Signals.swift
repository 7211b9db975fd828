// SIGINT / SIGTERM become a polite stop request: the training loop polls it after each
// optimizer step and writes a resumable checkpoint before exiting. A second signal exits at once.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

nonisolated(unsafe) private var stopRequests: sig_atomic_t = 0

public enum StopSignal {
    public static func install() {
        let handler: @convention(c) (Int32) -> Void = { sig in
            stopRequests += 1
            if stopRequests > 1 { _exit(128 + sig) }
        }
        signal(SIGINT, handler)
        signal(SIGTERM, handler)
    }

    public static var requested: Bool { stopRequests > 0 }
}
