// The CPU feature level the kernels run at, for executables and benchmarks to print (library code
// does not print): CBlockKernels' level, which is the CPU's best or the lower one the environment
// variable ADAPTER_CPU_LEVEL names (portable, avx2, avx512, avx512vnni; read once, at the first
// kernel call, clamped to what the CPU runs), and the OpenBLAS kernels, which follow the same
// variable (COpenBLAS/shim.h). Leaves out choosing a level from code (bk_set_level does that).
import Autograd
import CBlockKernels
import Foundation

public enum CPULevel {
    /// The environment variable that lowers the level (tests and benchmarks of a lower CPU's code).
    public static let environmentKey = "ADAPTER_CPU_LEVEL"

    /// The level names, lowest first: what ADAPTER_CPU_LEVEL accepts.
    public static let names: [String] = (0..<Int32(BK_LEVEL_COUNT)).map(name)

    /// The level the kernels run at.
    public static var active: String { name(bk_active_level()) }

    /// The highest level this CPU runs, whatever ADAPTER_CPU_LEVEL says.
    public static var cpu: String { name(bk_cpu_level()) }

    /// ADAPTER_CPU_LEVEL's value as the kernels read it (nil when unset or empty).
    public static var requested: String? {
        guard bk_level_request() != BK_LEVEL_UNSET, let v = ProcessInfo.processInfo.environment[environmentKey] else { return nil }
        return v
    }

    /// Throws when ADAPTER_CPU_LEVEL is set to something that names no level (the kernels then
    /// run at the CPU's best, which a run meant to test a lower level should not do silently).
    public static func checkEnvironment() throws {
        guard bk_level_request() == BK_LEVEL_UNKNOWN else { return }
        throw ModelError.invalidConfig("\(environmentKey)=\(requested ?? "") names no CPU level: use one of \(names.joined(separator: ", ")), or unset it for the CPU's best (\(cpu))")
    }

    /// One line for a tool's output, e.g. "avx2 (ADAPTER_CPU_LEVEL=avx2 on a CPU that runs
    /// avx512vnni), OpenBLAS Haswell" or "avx512vnni, OpenBLAS SkylakeX".
    public static var summary: String {
        var s = active
        if let requested {
            let request = bk_level_request()
            if request == BK_LEVEL_UNKNOWN {
                s += " (\(environmentKey)=\(requested) names no level: ignored)"
            } else if request > bk_cpu_level() {
                s += " (\(environmentKey)=\(requested), clamped to what this CPU runs)"
            } else if request < bk_cpu_level() {
                s += " (\(environmentKey)=\(requested) on a CPU that runs \(cpu))"
            }
        }
        return s + ", OpenBLAS \(BLAS.coreName)"
    }

    static func name(_ level: Int32) -> String { String(cString: bk_level_name(level)) }
}
