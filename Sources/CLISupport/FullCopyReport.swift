// With ADAPTER_REPORT_FULL_COPIES=1 in the environment, a tool that loads a base prints on exit
// how many full float32 copies of stored base matrices it made (FrozenMatrix.fullCopies), so a
// benchmark (scripts/bench-tools.sh) shows that a tool kept the base as its file stores it.
import Foundation
import ModelDefinition

nonisolated(unsafe) private var fullCopyReportInstalled = false

public enum FullCopyReport {
    public static let environmentKey = "ADAPTER_REPORT_FULL_COPIES"

    /// Registers the exit report once, when the environment asks for it.
    public static func install() {
        guard !fullCopyReportInstalled, ProcessInfo.processInfo.environment[environmentKey] == "1" else { return }
        fullCopyReportInstalled = true
        atexit {
            FileHandle.standardError.write(Data("full float32 copies of stored base matrices: \(FrozenMatrix.fullCopies.value)\n".utf8))
        }
    }
}
