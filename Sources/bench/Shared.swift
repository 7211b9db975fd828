// What several bench subcommands share: left-aligned table columns, the process's peak RSS and
// the flag conformances of library enums. Measurements that differ on purpose (decode's
// all-core sum against kernels' per-thread streaming read) stay with their subcommands.
import ArgumentParser
import Foundation
import Inference
import ModelDefinition

/// `s` padded with spaces to `width` characters, or followed by one space when it is as long.
func pad(_ s: String, _ width: Int) -> String { s.count >= width ? s + " " : s + String(repeating: " ", count: width - s.count) }

/// The process's peak resident set so far, in MB (getrusage's ru_maxrss).
func peakRSSMB() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

extension ManyRowsPath: ExpressibleByArgument {}
extension InferenceModel.PromptAttention: ExpressibleByArgument {}
