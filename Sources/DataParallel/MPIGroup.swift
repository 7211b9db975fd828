// Training's `ProcessGroup` over MPI_COMM_WORLD (Open MPI or MPICH through the CMPI system
// library). The gradient sum is a reduce-scatter whose additions this code makes, in rank order
// (MPI_Alltoallv hands rank c every rank's c-th chunk; rank c adds the pieces 0 + 1 + ... + N−1),
// then an MPI_Allgatherv of the summed chunks: the traffic of a ring allreduce, 2(N−1)/N of the
// buffer per rank, with a summation order no MPI algorithm choice can change. Leaves out
// nonblocking overlap of the sum with backward.
import Autograd
import CMPI
import Foundation
import Training

public enum DataParallelError: Error, LocalizedError, Equatable {
    /// An MPI call failed on this rank.
    case mpi(call: String, rank: Int, message: String)
    /// The launcher's environment could not be used.
    case launch(String)

    public var errorDescription: String? {
        switch self {
        case .mpi(let call, let rank, let message):
            "\(call) failed on rank \(rank): \(message); check that every rank is alive and reachable (mpirun's messages name the first that failed)"
        case .launch(let why):
            why
        }
    }
}

public final class MPIGroup: ProcessGroup {
    public let rank: Int
    public let size: Int
    /// Collective operations completed so far (0: the ranks are still in their setup).
    public private(set) var collectives = 0
    /// Seconds and bytes (this rank's buffers) in `sum` since the start.
    public private(set) var sumSeconds = 0.0
    public private(set) var sumBytes = 0
    private let world: MPI_Comm
    private var finished = false

    /// The number of processes an MPI launcher started (`mpirun -np N` sets OMPI_COMM_WORLD_SIZE,
    /// MPICH's mpiexec PMI_SIZE), or nil when this process was not started by one.
    public static func launchSize(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Int? {
        for key in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"] {
            if let v = environment[key], let n = Int(v) { return n }
        }
        return nil
    }

    /// Initialises MPI when a launcher started more than one process; nil otherwise (a run
    /// without mpirun, or `mpirun -np 1`, never initialises MPI). Errors come back as codes.
    public static func start() throws -> MPIGroup? {
        guard let n = launchSize(), n > 1 else { return nil }
        var provided: Int32 = 0
        guard MPI_Init_thread(nil, nil, cmpi_thread_funneled(), &provided) == cmpi_success() else {
            throw DataParallelError.launch("MPI_Init_thread failed although the environment says \(n) processes were launched; run through mpirun")
        }
        guard let world = cmpi_comm_world() else { throw DataParallelError.launch("MPI gave no MPI_COMM_WORLD") }
        MPI_Comm_set_errhandler(world, cmpi_errors_return())
        var r: Int32 = 0, s: Int32 = 0
        MPI_Comm_rank(world, &r)
        MPI_Comm_size(world, &s)
        return MPIGroup(rank: Int(r), size: Int(s), world: world)
    }

    init(rank: Int, size: Int, world: MPI_Comm) {
        self.rank = rank
        self.size = size
        self.world = world
    }

    private func check(_ code: Int32, _ call: String) throws {
        guard code != cmpi_success() else { return }
        var text = [CChar](repeating: 0, count: Int(cmpi_max_error_string()) + 1)
        var length: Int32 = 0
        MPI_Error_string(code, &text, &length)
        throw DataParallelError.mpi(call: call, rank: rank, message: String(decoding: text.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    private func count32(_ n: Int, _ call: String) throws -> Int32 {
        guard let c = Int32(exactly: n) else {
            throw DataParallelError.mpi(call: call, rank: rank, message: "\(n) elements is more than one MPI message holds (2^31 − 1)")
        }
        return c
    }

    /// Chunk `c` of `count` values: contiguous, sizes differing by at most one.
    static func chunk(_ c: Int, of n: Int, count: Int) -> Range<Int> {
        let base = count / n, extra = count % n
        let start = c * base + min(c, extra)
        return start..<(start + base + (c < extra ? 1 : 0))
    }

    public func sum(_ values: inout [Float]) throws {
        let t0 = monotonicSeconds()
        let n = size
        let chunks = (0..<n).map { MPIGroup.chunk($0, of: n, count: values.count) }
        let counts = try chunks.map { try count32($0.count, "MPI_Alltoallv") }
        let displs = try chunks.map { try count32($0.lowerBound, "MPI_Alltoallv") }
        let mine = chunks[rank].count
        // Every rank's piece of this rank's chunk, in rank order: [N, mine].
        var pieces = [Float](repeating: 0, count: mine * n)
        let recvCounts = [Int32](repeating: counts[rank], count: n)
        let recvDispls = try (0..<n).map { try count32($0 * mine, "MPI_Alltoallv") }
        try check(MPI_Alltoallv(values, counts, displs, cmpi_float(), &pieces, recvCounts, recvDispls, cmpi_float(), world),
                  "MPI_Alltoallv (gradient sum)")
        var total = Array(pieces[0..<mine])
        total.withUnsafeMutableBufferPointer { acc in
            pieces.withUnsafeBufferPointer { p in
                for s in 1..<n {
                    let piece = p.baseAddress! + s * mine
                    for j in 0..<mine { acc[j] += piece[j] }
                }
            }
        }
        try check(MPI_Allgatherv(total, counts[rank], cmpi_float(), &values, counts, displs, cmpi_float(), world),
                  "MPI_Allgatherv (gradient sum)")
        collectives += 1
        sumSeconds += monotonicSeconds() - t0
        sumBytes += values.count * 4
    }

    public func allGather(_ bytes: [UInt8]) throws -> [[UInt8]] {
        var mine = Int64(bytes.count)
        var lengths = [Int64](repeating: 0, count: size)
        try check(MPI_Allgather(&mine, 1, cmpi_int64(), &lengths, 1, cmpi_int64(), world), "MPI_Allgather")
        let counts = try lengths.map { try count32(Int($0), "MPI_Allgatherv") }
        var displs: [Int32] = []
        var offset = 0
        for c in counts {
            displs.append(try count32(offset, "MPI_Allgatherv"))
            offset += Int(c)
        }
        var all = [UInt8](repeating: 0, count: offset)
        try check(MPI_Allgatherv(bytes, counts[rank], cmpi_byte(), &all, counts, displs, cmpi_byte(), world), "MPI_Allgatherv")
        collectives += 1
        return (0..<size).map { Array(all[Int(displs[$0])..<(Int(displs[$0]) + Int(counts[$0]))]) }
    }

    public func broadcast(_ bytes: [UInt8], root: Int) throws -> [UInt8] {
        var length = Int64(rank == root ? bytes.count : 0)
        try check(MPI_Bcast(&length, 1, cmpi_int64(), Int32(root), world), "MPI_Bcast")
        var out = rank == root ? bytes : [UInt8](repeating: 0, count: Int(length))
        // In pieces of at most 1 GiB (MPI counts are 32-bit).
        let piece = 1 << 30
        var start = 0
        while start < out.count {
            let n = min(piece, out.count - start)
            try out.withUnsafeMutableBytes { buffer in
                try check(MPI_Bcast(buffer.baseAddress! + start, Int32(n), cmpi_byte(), Int32(root), world), "MPI_Bcast")
            }
            start += n
        }
        collectives += 1
        return out
    }

    /// Waits for every rank.
    public func barrier() throws {
        try check(MPI_Barrier(world), "MPI_Barrier")
        collectives += 1
    }

    /// Ends MPI on this rank (every rank calls it once at the end of the job).
    public func finish() {
        guard !finished else { return }
        finished = true
        MPI_Finalize()
    }

    /// Stops every rank of the job with `code` (mpirun reports which rank called it).
    public func abort(_ code: Int32) -> Never {
        MPI_Abort(world, code)
        exit(code)
    }
}
