// Helpers for reading the PyTorch reference fixtures (Fixtures/README.md) and comparing
// numbers at the relative tolerance DESIGN.md sets (~1e-4).
import Foundation
import ModelAssets
import XCTest

enum Fixture {
    static var root: URL { Bundle.module.resourceURL!.appendingPathComponent("Fixtures") }

    static func path(_ relative: String) -> String { root.appendingPathComponent(relative).path }

    static func json(_ relative: String) throws -> [String: Any] {
        let data = try Data(contentsOf: root.appendingPathComponent(relative))
        return try JSONSerialization.jsonObject(with: data) as! [String: Any]
    }
}

extension Dictionary where Key == String, Value == Any {
    func floats(_ key: String) -> [Float] { (self[key] as! [Any]).map { Float(($0 as! NSNumber).doubleValue) } }
    func ints(_ key: String) -> [Int] { (self[key] as! [Any]).map { ($0 as! NSNumber).intValue } }
    func intRows(_ key: String) -> [[Int]] { (self[key] as! [[Any]]).map { $0.map { ($0 as! NSNumber).intValue } } }
    func double(_ key: String) -> Double { (self[key] as! NSNumber).doubleValue }
    func dict(_ key: String) -> [String: Any] { self[key] as! [String: Any] }
    func tensor(_ key: String) -> HostTensor {
        let t = dict(key)
        return HostTensor(shape: t.ints("shape"), data: t.floats("values"))
    }
}

/// max |a - b| / max(|b|_inf, tiny): one relative error for a whole tensor, robust to zeros.
func relativeError(_ a: [Float], _ b: [Float]) -> Float {
    precondition(a.count == b.count, "compared arrays differ in length: \(a.count) vs \(b.count)")
    var maxDiff: Float = 0, scale: Float = 1e-6
    for i in a.indices {
        maxDiff = max(maxDiff, abs(a[i] - b[i]))
        scale = max(scale, abs(b[i]))
    }
    return maxDiff / scale
}

func assertClose(_ a: [Float], _ b: [Float], rel: Float = 1e-4, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    let e = relativeError(a, b)
    XCTAssert(e <= rel, "\(what): relative error \(e) > \(rel)", file: file, line: line)
}

/// The real base model, when fetched (scripts/fetch-model.sh; CI does). Tests that need it skip
/// with this reason otherwise.
func realModelPath() throws -> String {
    if let p = ProcessInfo.processInfo.environment["ADAPTER_BASE_MODEL"], FileManager.default.fileExists(atPath: p) { return p }
    let local = FileManager.default.currentDirectoryPath + "/assets/SmolLM2-135M-Instruct.Q4_1.gguf"
    if FileManager.default.fileExists(atPath: local) { return local }
    throw XCTSkip("the real base model is not fetched (run scripts/fetch-model.sh or set ADAPTER_BASE_MODEL); skipping this SmolLM2 test")
}
