// What train-adapter and train-draft do around their command under mpirun: start MPI only when
// a launcher started several processes, give each rank its share of the cores, let rank 0 alone
// speak, and end the job so that an error is reported once. Errors every rank meets alike
// (bad flags, invalid data, a non-finite loss) are printed by rank 0 and every rank exits with
// the same code; an error on one rank during training prints that rank's message and aborts the
// job (mpirun then names the rank too). Without mpirun: the command's own `main()`, unchanged.
import ArgumentParser
import Autograd
import Foundation
import Training

public enum DataParallelJob {
    /// This process's group (nil: one process). Set by `main` before the command runs.
    nonisolated(unsafe) public private(set) static var group: MPIGroup?

    /// Whether this process prints (rank 0, or the only process).
    public static var isRoot: Bool { (group?.rank ?? 0) == 0 }

    /// Threads for this rank: the cores mpirun bound it to (one core each by default for up to
    /// 2 ranks), but never more than the node's cores divided among the ranks on it.
    public static func threadsPerRank(environment: [String: String] = ProcessInfo.processInfo.environment) -> Int {
        let usable = ProcessInfo.processInfo.activeProcessorCount
        let online = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        let local = environment["OMPI_COMM_WORLD_LOCAL_SIZE"].flatMap(Int.init) ?? environment["MPI_LOCALNRANKS"].flatMap(Int.init) ?? 1
        return max(1, min(usable, online / max(1, local)))
    }

    /// A line for the start of the run, or nil for one process.
    public static var summary: String? {
        guard let g = group else { return nil }
        return "data-parallel: \(g.size) ranks (MPI), \(threadsPerRank()) thread\(threadsPerRank() == 1 ? "" : "s") per rank; each batch is split across the ranks, gradients are summed in rank order, rank 0 writes checkpoints and metrics"
    }

    /// Runs `Command` as its `main()` would, on every rank of an MPI job or in one process.
    public static func main<Command: ParsableCommand>(_ command: Command.Type) {
        guard MPIGroup.launchSize().map({ $0 > 1 }) == true else { return Command.main() }
        let g: MPIGroup
        do {
            guard let started = try MPIGroup.start() else { return Command.main() }
            g = started
        } catch {
            Command.exit(withError: error)
        }
        group = g
        var parsed: ParsableCommand
        do {
            parsed = try Command.parseAsRoot()
        } catch {
            // The same arguments on every rank: the same message, printed once.
            g.finish()
            if g.rank == 0 { Command.exit(withError: error) }
            Foundation.exit(Command.exitCode(for: error).rawValue)
        }
        do {
            try withThreads(threadsPerRank()) { try parsed.run() }
            g.finish()
            Foundation.exit(0)
        } catch {
            end(after: error, g, Command.self)
        }
    }

    static func end<Command: ParsableCommand>(after error: Error, _ g: MPIGroup, _: Command.Type) -> Never {
        var shared: Error? = (error is SharedError || error is ExitCode) ? error : nil
        if shared == nil && g.collectives == 0 {
            // Failed during setup, before any rank started training: the others are at the
            // setup agreement too, so all learn every rank's error and report it once.
            do { try GroupSetup.agree(g, key: "", error: error) } catch { shared = error }
        }
        if let shared {
            g.finish()
            if g.rank == 0 { Command.exit(withError: shared) }
            Foundation.exit(Command.exitCode(for: shared).rawValue)
        }
        // This rank alone: say which, and stop the job (the last checkpoint stays intact).
        let text = (error as? LocalizedError)?.errorDescription ?? "\(error)"
        FileHandle.standardError.write(Data("Error on rank \(g.rank) of \(g.size): \(text)\n".utf8))
        g.abort(1)
    }
}
