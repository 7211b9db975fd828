// Tick values people can read (nice numbers, log axes, labels without float noise), what the
// curve shows and leaves out, and that a real SVG renderer (rsvg-convert, librsvg) draws it.
import Foundation
@testable import RunLog
import XCTest

final class LossCurveTests: XCTestCase {
    func testNiceNumbers() {
        XCTAssertEqual(NiceTicks.niceNumber(3.09, round: true), 5)
        XCTAssertEqual(NiceTicks.niceNumber(2.9, round: true), 2)
        XCTAssertEqual(NiceTicks.niceNumber(0.0123, round: true), 0.01, accuracy: 1e-15)
        XCTAssertEqual(NiceTicks.niceNumber(130, round: false), 200)
        XCTAssertEqual(NiceTicks.niceNumber(1000, round: false), 1000)
    }

    func testLinearTicksAreRoundAndCoverTheRange() {
        // the axis: 0.149 / 4.01 / 7.88 / 11.7 / 15.6 before
        let t = NiceTicks.linear(lo: 0.149, hi: 15.6, count: 6)
        XCTAssertEqual(t.ticks, [0, 5, 10, 15, 20])
        XCTAssertEqual(t.lo, 0)
        XCTAssertEqual(t.hi, 20)
        XCTAssertEqual(NiceTicks.linear(lo: 0, hi: 125, count: 7, integer: true).ticks.filter { $0 <= 125 },
                       [0, 20, 40, 60, 80, 100, 120])
        XCTAssertEqual(NiceTicks.linear(lo: 0, hi: 3, count: 7, integer: true).ticks, [0, 1, 2, 3])
        let small = NiceTicks.linear(lo: 0.1, hi: 0.7, count: 6)
        XCTAssertEqual(small.ticks.map { NiceTicks.label($0, step: 0.1) }, ["0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"])
        // one value: a range around it
        let one = NiceTicks.linear(lo: 2, hi: 2, count: 5)
        XCTAssert(one.lo < 2 && one.hi > 2, "\(one)")
    }

    func testLogTicks() {
        XCTAssertEqual(NiceTicks.logarithmic(lo: 0.018, hi: 1.6).map { NiceTicks.label($0, step: nil) },
                       ["0.02", "0.05", "0.1", "0.2", "0.5", "1"])
        XCTAssertEqual(NiceTicks.logarithmic(lo: 2e-5, hi: 30).map { NiceTicks.label($0, step: nil) },
                       ["0.0001", "0.001", "0.01", "0.1", "1", "10"])
        // within a factor of two: linear round values on the log axis
        XCTAssertEqual(NiceTicks.logarithmic(lo: 0.9, hi: 1.6).map { NiceTicks.label($0, step: nil) }, ["1", "1.2", "1.4", "1.6"])
        XCTAssertEqual(NiceTicks.label(0.15, step: nil), "0.15")
        XCTAssertEqual(NiceTicks.label(0.30000000000000004, step: 0.1), "0.3")
        XCTAssertEqual(NiceTicks.label(1500, step: 500), "1500")
    }

    func series(train: Int, evals: [Int], epochs: [Int] = []) -> LossCurve.Series {
        var s = LossCurve.Series()
        var ema = BiasCorrectedEMA()
        for i in 1...train {
            let loss = 1.6 * exp(-Double(i) / 20) + 0.02
            s.train.append(.init(step: i, value: loss))
            s.smoothed.append(.init(step: i, value: ema.add(loss)))
        }
        s.eval = evals.map { .init(step: $0, value: 1.6 * exp(-Double($0) / 20) + 0.03) }
        s.epochStarts = epochs.enumerated().map { ($1, $0 + 2) }
        return s
    }

    func testCurveShowsWhatItHasAndNoLegendWithoutData() {
        let noEval = LossCurve.svg(series(train: 60, evals: []), title: "adapter training on train.jsonl", subtitle: "run x")
        XCTAssert(noEval.contains("adapter training on train.jsonl"))
        XCTAssert(noEval.contains("train loss, moving average"))
        XCTAssertFalse(noEval.contains("eval loss"), "no legend entry without eval points")
        XCTAssertFalse(noEval.contains("<circle"))
        XCTAssert(noEval.contains("(log scale)"))
        for label in ["0.1", "0.2", "0.5", "1"] { XCTAssert(noEval.contains(">\(label)</text>"), "tick \(label)") }

        let withEval = LossCurve.svg(series(train: 60, evals: [30, 60], epochs: [30]), title: "t")
        XCTAssertEqual(withEval.components(separatedBy: "<circle").count - 1, 2 + 1, "two eval markers and the legend's")
        XCTAssert(withEval.contains(">eval loss</text>") && withEval.contains(">epoch 2</text>"))

        let linear = LossCurve.svg(series(train: 10, evals: []), title: "t", scale: .linear)
        XCTAssertFalse(linear.contains("log scale"))
        var negative = series(train: 10, evals: [])
        negative.train[3].value = -0.01
        XCTAssert(LossCurve.svg(negative, title: "t").contains("linear: a value is not positive"))
        XCTAssert(LossCurve.svg(LossCurve.Series(), title: "t").contains("no steps logged yet"))
        XCTAssert(LossCurve.svg(series(train: 3, evals: []), title: "a < b & \"c\"").contains("a &lt; b &amp; &quot;c&quot;"))
    }

    /// librsvg parses the file (it refuses malformed XML) and renders a PNG.
    func testRsvgConvertRendersTheCurve() throws {
        guard let rsvg = ["/usr/bin/rsvg-convert", "/usr/local/bin/rsvg-convert"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw XCTSkip("rsvg-convert not installed (Debian package librsvg2-bin; scripts/setup.sh installs it)")
        }
        let dir = NSTemporaryDirectory() + "runlog-rsvg-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (name, svg) in [("log", LossCurve.svg(series(train: 120, evals: [60, 120], epochs: [60]), title: "adapter training on train.jsonl", subtitle: "run r")),
                            ("empty", LossCurve.svg(LossCurve.Series(), title: "nothing yet"))] {
            let input = dir + "/\(name).svg", output = dir + "/\(name).png"
            try svg.write(toFile: input, atomically: true, encoding: .utf8)
            let p = Process()
            p.executableURL = URL(fileURLWithPath: rsvg)
            p.arguments = [input, "-o", output]
            let err = Pipe()
            p.standardError = err
            try p.run()
            p.waitUntilExit()
            let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            XCTAssertEqual(p.terminationStatus, 0, "rsvg-convert failed on \(name).svg: \(message)")
            let png = try Data(contentsOf: URL(fileURLWithPath: output))
            XCTAssertEqual(Array(png.prefix(8)), [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], "not a PNG")
            // IHDR: width and height as the SVG gives them
            XCTAssertEqual(png[16..<20].reduce(0) { $0 << 8 | Int($1) }, 760)
            XCTAssertEqual(png[20..<24].reduce(0) { $0 << 8 | Int($1) }, 440)
        }
        // and a broken file is refused, so the check above can fail
        try "<svg xmlns=\"http://www.w3.org/2000/svg\"><line></svg>".write(toFile: dir + "/bad.svg", atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: rsvg)
        p.arguments = [dir + "/bad.svg", "-o", dir + "/bad.png"]
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        XCTAssertNotEqual(p.terminationStatus, 0)
    }

    func testBiasCorrectedAverage() {
        var e = BiasCorrectedEMA(beta: 0.9)
        XCTAssertEqual(e.add(2), 2, accuracy: 1e-12, "the first value, not 0.2")
        XCTAssertEqual(e.add(2), 2, accuracy: 1e-12)
        var c = BiasCorrectedEMA(beta: 0.9)
        let xs = [5.0, 1, 3, 0.5]
        var last = 0.0
        for x in xs { last = c.add(x) }
        // (Σ (1-β) β^(t-i) x_i) / (1 - β^t)
        let w = (0..<4).map { 0.1 * pow(0.9, Double(3 - $0)) }
        XCTAssertEqual(last, zip(w, xs).map(*).reduce(0, +) / (1 - pow(0.9, 4)), accuracy: 1e-12)
    }
}
