// Splitting a data file into train.jsonl and eval.jsonl: deterministic for a seed (SplitMix64
// permutation picks the eval lines), lines copied byte for byte in file order (BOM and CR
// dropped), invalid lines refused or, with skipInvalid, left out and reported.
// Leaves out stratification by length or tools.
import Foundation
import ModelAssets

public struct SplitResult: Sendable {
    public var trainPath: String
    public var evalPath: String
    public var trainCount: Int
    public var evalCount: Int
    /// The reading summary and issues (non-empty only with skipInvalid).
    public var summary: DataSummary
    public var issues: [DataIssue]
}

public enum DataSplitter {
    /// Writes `train.jsonl` and `eval.jsonl` into `outputDirectory` (created if missing).
    /// `evalFraction` in [0, 1): the eval file gets round(n * fraction) samples, at least one
    /// when the fraction is positive, and the train file keeps at least one.
    public static func split(path: String, evalFraction: Double, seed: UInt64, outputDirectory: String,
                             options: ReadOptions = ReadOptions()) throws(DataSchemaError) -> SplitResult {
        guard evalFraction >= 0, evalFraction < 1 else {
            throw DataSchemaError.invalidOption(name: "eval fraction", message: "\(evalFraction) must be at least 0 and below 1 (for example 0.1)")
        }
        var collector = DataReader.Collector(file: path, options: options)
        collector.keepRaw = true
        try LineSource.forEachLine(path: path, maxLineBytes: options.maxLineBytes) { number, line in
            collector.take(number: number, line: line)
        }
        let dataSet = try collector.finish()
        let lines = collector.rawLines
        let n = lines.count
        var evalCount = Int((Double(n) * evalFraction).rounded())
        if evalFraction > 0 {
            guard n >= 2 else {
                throw DataSchemaError.invalidOption(name: "eval fraction", message: "\(path) has \(n) valid sample; a split needs at least 2")
            }
            evalCount = min(max(evalCount, 1), n - 1)
        }
        let evalSet = Set(SplitMix64.permutation(count: n, seed: seed).prefix(evalCount))
        var train: [UInt8] = []
        var eval: [UInt8] = []
        for (i, line) in lines.enumerated() {
            if evalSet.contains(i) {
                eval += line
                eval.append(0x0A)
            } else {
                train += line
                train.append(0x0A)
            }
        }
        do {
            try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        } catch {
            throw DataSchemaError.unwritableFile(path: outputDirectory, reason: error.localizedDescription)
        }
        let directory = URL(fileURLWithPath: outputDirectory)
        let trainURL = directory.appendingPathComponent("train.jsonl")
        let evalURL = directory.appendingPathComponent("eval.jsonl")
        for (url, bytes) in [(trainURL, train), (evalURL, eval)] {
            do {
                // AtomicFile, not Data.write(options: .atomic): on Linux the latter leaves an empty
                // TemporaryDirectory.* folder in /tmp on every call.
                try AtomicFile.write(Data(bytes), to: url.path)
            } catch let ModelAssetsError.io(_, reason) {
                throw DataSchemaError.unwritableFile(path: url.path, reason: reason)
            } catch {
                throw DataSchemaError.unwritableFile(path: url.path, reason: error.localizedDescription)
            }
        }
        return SplitResult(trainPath: trainURL.path, evalPath: evalURL.path, trainCount: n - evalCount,
                           evalCount: evalCount, summary: dataSet.summary, issues: dataSet.issues)
    }
}
