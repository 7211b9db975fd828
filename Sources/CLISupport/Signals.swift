// SIGINT / SIGTERM / SIGUSR1 become a polite stop request: the training loop polls it after each
// optimizer step and writes a resumable checkpoint before exiting. A second signal exits at once.
// (Under mpirun, Ctrl-C reaches the ranks as SIGTERM followed by SIGKILL after Open MPI's
// odls_base_sigkill_timeout, 1 s by default; SIGUSR1 sent to mpirun is passed on to every rank
// with no kill after it.)
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
        signal(SIGUSR1, handler)
    }

    public static var requested: Bool { stopRequests > 0 }
}
