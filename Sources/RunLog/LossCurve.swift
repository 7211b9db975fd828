// A run's loss curve as a self-contained SVG (any browser or image viewer shows it; no plotting
// library): raw training loss per logged step, its bias-corrected moving average, eval loss as a
// marker at each evaluation, epoch boundaries, round tick values, and by default a log-scale loss
// axis (losses fall by orders of magnitude, and a linear axis flattens everything after the first
// steps). Legend entries only for series with data. Ticks follow Heckbert's "nice numbers"
// (Graphics Gems, 1990): steps of 1, 2 or 5 times a power of ten.
import Foundation

public enum LossCurve {
    public enum Scale: String, CaseIterable, Sendable {
        case log, linear
    }

    public struct Point: Sendable, Equatable {
        public var step: Int
        public var value: Double
        public init(step: Int, value: Double) {
            self.step = step
            self.value = value
        }
    }

    /// What one curve shows.
    public struct Series: Sendable {
        public var train: [Point] = []
        /// The moving average of `train` (same steps).
        public var smoothed: [Point] = []
        public var eval: [Point] = []
        /// The first step of each epoch after the first: (step, epoch number, 1-based).
        public var epochStarts: [(step: Int, epoch: Int)] = []
        public init() {}
    }

    /// The SVG text. `scale` .log falls back to linear (said in the axis title) when a value is not positive.
    public static func svg(_ s: Series, title: String, subtitle: String = "", yLabel: String = "loss",
                           scale: Scale = .log, width: Int = 760, height: Int = 440) -> String {
        let train = s.train.filter { $0.value.isFinite }, smooth = s.smoothed.filter { $0.value.isFinite }
        let ev = s.eval.filter { $0.value.isFinite }
        // the legend: a row of its own under the title, entries only for series with data
        var legend: [(symbol: String, text: String)] = []
        if !train.isEmpty { legend.append(("<line x1=\"0\" y1=\"0\" x2=\"22\" y2=\"0\" stroke=\"#9ecae1\" stroke-width=\"1.5\"/>", "train loss")) }
        if !smooth.isEmpty { legend.append(("<line x1=\"0\" y1=\"0\" x2=\"22\" y2=\"0\" stroke=\"#08519c\" stroke-width=\"2.2\"/>", "train loss, moving average")) }
        if !ev.isEmpty { legend.append(("<circle cx=\"11\" cy=\"0\" r=\"4.5\" fill=\"#d94801\"/>", "eval loss")) }
        let legendY = subtitle.isEmpty ? 42.0 : 60.0
        let left = 70.0, right = 20.0, top = legendY + (legend.isEmpty ? 0 : 16), bottom = 48.0
        let w = Double(width) - left - right, h = Double(height) - top - bottom
        let values = (s.train + s.smoothed + s.eval).map(\.value).filter(\.isFinite)
        let steps = (s.train + s.smoothed + s.eval).map(\.step) + s.epochStarts.map(\.step)
        let useLog = scale == .log && !values.isEmpty && values.allSatisfy { $0 > 0 }
        var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" viewBox="0 0 \(width) \(height)" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(f(left))" y="22" font-size="15" font-weight="bold">\(escape(title))</text>

        """
        if !subtitle.isEmpty { svg += "<text x=\"\(f(left))\" y=\"40\" fill=\"#555\">\(escape(subtitle))</text>\n" }

        // x: optimizer steps from 0 to a round end
        let maxStep = Double(max(1, steps.max() ?? 1))
        let xHi = maxStep
        let xTicks = NiceTicks.linear(lo: 0, hi: maxStep, count: 7, integer: true).ticks.filter { $0 <= maxStep + 1e-9 }
        func x(_ step: Int) -> Double { left + Double(step) / xHi * w }

        // y: the loss values with a margin; log or linear
        var yTicks: [Double]
        var yLo: Double, yHi: Double
        if values.isEmpty {
            (yLo, yHi, yTicks) = (0, 1, [0, 0.5, 1])
        } else if useLog {
            let lo = values.min()!, hi = values.max()!
            let pad = max(0.02, (log10(hi) - log10(lo)) * 0.04)
            yLo = pow(10, log10(lo) - pad)
            yHi = pow(10, log10(hi) + pad)
            yTicks = NiceTicks.logarithmic(lo: yLo, hi: yHi)
        } else {
            let t = NiceTicks.linear(lo: values.min()!, hi: values.max()!, count: 6)
            (yLo, yHi, yTicks) = (t.lo, t.hi, t.ticks)
        }
        func yPos(_ v: Double) -> Double {
            let r = useLog ? (log10(v) - log10(yLo)) / (log10(yHi) - log10(yLo)) : (v - yLo) / (yHi - yLo)
            return top + (1 - r) * h
        }

        // grid, ticks, axes
        let yStep = useLog ? 0 : (yTicks.count > 1 ? yTicks[1] - yTicks[0] : 1)
        for v in yTicks {
            let yy = yPos(v)
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(yy))\" x2=\"\(f(left + w))\" y2=\"\(f(yy))\" stroke=\"#e6e6e6\"/>\n"
            svg += "<text x=\"\(f(left - 6))\" y=\"\(f(yy + 4))\" text-anchor=\"end\">\(NiceTicks.label(v, step: useLog ? nil : yStep))</text>\n"
        }
        for v in xTicks {
            let xx = x(Int(v))
            svg += "<line x1=\"\(f(xx))\" y1=\"\(f(top + h))\" x2=\"\(f(xx))\" y2=\"\(f(top + h + 4))\" stroke=\"black\"/>\n"
            svg += "<text x=\"\(f(xx))\" y=\"\(f(top + h + 17))\" text-anchor=\"middle\">\(Int(v))</text>\n"
        }
        svg += "<line x1=\"\(f(left))\" y1=\"\(f(top + h))\" x2=\"\(f(left + w))\" y2=\"\(f(top + h))\" stroke=\"black\"/>\n"
        svg += "<line x1=\"\(f(left))\" y1=\"\(f(top))\" x2=\"\(f(left))\" y2=\"\(f(top + h))\" stroke=\"black\"/>\n"
        svg += "<text x=\"\(f(left + w / 2))\" y=\"\(f(Double(height) - 10))\" text-anchor=\"middle\">optimizer step</text>\n"
        let axisTitle = yLabel + (useLog ? " (log scale)" : scale == .log && !values.isEmpty ? " (linear: a value is not positive)" : "")
        svg += "<text transform=\"translate(16 \(f(top + h / 2))) rotate(-90)\" text-anchor=\"middle\">\(escape(axisTitle))</text>\n"

        // epoch boundaries
        for e in s.epochStarts where Double(e.step) <= xHi {
            let xx = x(e.step)
            svg += "<line x1=\"\(f(xx))\" y1=\"\(f(top))\" x2=\"\(f(xx))\" y2=\"\(f(top + h))\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n"
            svg += "<text x=\"\(f(xx + 4))\" y=\"\(f(top + 12))\" fill=\"#666\" font-size=\"11\">epoch \(e.epoch)</text>\n"
        }

        // data
        func polyline(_ pts: [Point], _ style: String) -> String {
            let p = pts.filter { $0.value.isFinite }.map { "\(f(x($0.step))),\(f(yPos($0.value)))" }.joined(separator: " ")
            return "<polyline fill=\"none\" \(style) points=\"\(p)\"/>\n"
        }
        if !train.isEmpty { svg += polyline(train, "stroke=\"#9ecae1\" stroke-width=\"1\"") }
        if !smooth.isEmpty { svg += polyline(smooth, "stroke=\"#08519c\" stroke-width=\"2.2\"") }
        if ev.count > 1 { svg += polyline(ev, "stroke=\"#d94801\" stroke-width=\"1\" stroke-dasharray=\"3 3\"") }
        for p in ev {
            svg += "<circle cx=\"\(f(x(p.step)))\" cy=\"\(f(yPos(p.value)))\" r=\"4.5\" fill=\"#d94801\" stroke=\"white\"/>\n"
        }
        if values.isEmpty {
            svg += "<text x=\"\(f(left + w / 2))\" y=\"\(f(top + h / 2))\" text-anchor=\"middle\" fill=\"#888\">no steps logged yet</text>\n"
        }
        var lx = left
        for entry in legend {
            svg += "<g transform=\"translate(\(f(lx)) \(f(legendY - 4)))\">\(entry.symbol)</g>"
            svg += "<text x=\"\(f(lx + 28))\" y=\"\(f(legendY))\">\(escape(entry.text))</text>\n"
            lx += 28 + Double(entry.text.count) * 6.8 + 18
        }
        svg += "</svg>\n"
        return svg
    }

    static func f(_ v: Double) -> String { String(format: "%.1f", v) }

    static func escape(_ t: String) -> String {
        t.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}

/// Round tick values for chart axes.
public enum NiceTicks {
    /// The nice number near `x`: 1, 2, 5 or 10 times a power of ten; rounded to the nearest when
    /// `round`, else the smallest not below `x`.
    public static func niceNumber(_ x: Double, round: Bool) -> Double {
        guard x > 0, x.isFinite else { return 1 }
        let e = Foundation.floor(log10(x))
        let p = pow(10, e)
        let fr = x / p
        let n: Double = round ? (fr < 1.5 ? 1 : fr < 3 ? 2 : fr < 7 ? 5 : 10) : (fr <= 1 ? 1 : fr <= 2 ? 2 : fr <= 5 ? 5 : 10)
        return n * p
    }

    /// About `count` ticks spanning [lo, hi]: the spacing is the nice number nearest
    /// (hi - lo) / (count - 1), and the axis runs from the tick at or below lo to the tick at or
    /// above hi. `integer` keeps the spacing at least 1 (step counts).
    public static func linear(lo: Double, hi: Double, count: Int = 5, integer: Bool = false) -> (ticks: [Double], lo: Double, hi: Double) {
        var lo = lo, hi = hi
        if !(hi > lo) {
            let d = lo == 0 ? 1 : abs(lo) * 0.1
            lo -= d
            hi += d
        }
        var d = niceNumber((hi - lo) / Double(max(1, count - 1)), round: true)
        if integer { d = max(1, d.rounded()) }
        let first = Foundation.floor(lo / d + 1e-9) * d, last = Foundation.ceil(hi / d - 1e-9) * d
        let n = Int(((last - first) / d).rounded())
        // k * d instead of repeated addition: 0.1 + 0.2 stays 0.3 in the labels
        let ticks = (0...n).map { (first / d + Double($0)).rounded() * d }
        return (ticks, first, last)
    }

    /// Ticks for a log axis over [lo, hi] (both > 0): powers of ten when the range spans several
    /// decades, else 1-2-5 (or 1-2-3-5, or 1…9) times powers of ten, whichever first gives at
    /// least three ticks inside; within less than a factor of about 2, linear nice ticks.
    public static func logarithmic(lo: Double, hi: Double) -> [Double] {
        guard lo > 0, hi > lo else { return [lo] }
        let a = Int(Foundation.floor(log10(lo))), b = Int(Foundation.ceil(log10(hi)))
        for mantissas in [[1.0], [1, 2, 5], [1, 2, 3, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]] {
            if mantissas == [1] && b - a < 4 { continue }
            var ticks: [Double] = []
            for e in a...b {
                for m in mantissas {
                    let v = m * pow(10, Double(e))
                    if v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9) { ticks.append(v) }
                }
            }
            if ticks.count >= 3 { return ticks }
        }
        return linear(lo: lo, hi: hi, count: 4).ticks.filter { $0 >= lo && $0 <= hi }
    }

    /// A tick's label: as many decimals as the spacing `step` needs (linear axes), or as the value
    /// itself needs (log axes, step nil). No float noise: 0.30000000000000004 is "0.3".
    public static func label(_ v: Double, step: Double?) -> String {
        if v == 0 { return "0" }
        let scale = step ?? abs(v)
        let decimals = max(0, Int(-Foundation.floor(log10(scale) + 1e-9)))
        let extra = step == nil ? significantExtra(v, decimals: decimals) : 0
        return String(format: "%.\(decimals + extra)f", v)
    }

    /// Extra decimals a log tick like 0.15 or 1.5 needs beyond its leading digit.
    static func significantExtra(_ v: Double, decimals: Int) -> Int {
        for extra in 0...3 {
            let s = String(format: "%.\(decimals + extra)f", v)
            if abs((Double(s) ?? v) - v) <= abs(v) * 1e-9 { return extra }
        }
        return 3
    }
}
