// Writes the loss curve of a run as a self-contained SVG: training loss per step (raw, faint,
// and smoothed) and eval loss per epoch, on shared axes. No plotting library; any browser or
// image viewer shows the file.
import Foundation

public enum LossCurve {
    public static func svg(train: [(step: Int, loss: Float)], eval: [(step: Int, loss: Float)],
                           title: String, width: Int = 720, height: Int = 420) -> String {
        let left = 64.0, right = 16.0, top = 36.0, bottom = 44.0
        let w = Double(width) - left - right, h = Double(height) - top - bottom
        let all = (train.map(\.loss) + eval.map(\.loss)).filter(\.isFinite)
        let maxStep = Double(max(1, (train.map(\.step) + eval.map(\.step)).max() ?? 1))
        var lo = Double(all.min() ?? 0), hi = Double(all.max() ?? 1)
        if hi - lo < 1e-6 { lo -= 0.5; hi += 0.5 }
        let pad = (hi - lo) * 0.05
        lo -= pad
        hi += pad
        func x(_ s: Int) -> Double { left + Double(s) / maxStep * w }
        func y(_ l: Float) -> Double { top + (1 - (Double(l) - lo) / (hi - lo)) * h }
        func fmt(_ v: Double) -> String { String(format: "%.1f", v) }
        var s = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" font-family="sans-serif" font-size="12">
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(fmt(left))" y="22" font-size="14">\(escape(title))</text>

        """
        // axes and ticks
        s += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top + h))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        s += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top))\" x2=\"\(fmt(left))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        for i in 0...4 {
            let v = lo + (hi - lo) * Double(i) / 4
            let yy = top + (1 - Double(i) / 4) * h
            s += "<line x1=\"\(fmt(left - 4))\" y1=\"\(fmt(yy))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(yy))\" stroke=\"#eee\"/>\n"
            s += "<text x=\"\(fmt(left - 8))\" y=\"\(fmt(yy + 4))\" text-anchor=\"end\">\(String(format: "%.3g", v))</text>\n"
            let st = Int((maxStep * Double(i) / 4).rounded())
            s += "<text x=\"\(fmt(x(st)))\" y=\"\(fmt(top + h + 16))\" text-anchor=\"middle\">\(st)</text>\n"
        }
        s += "<text x=\"\(fmt(left + w / 2))\" y=\"\(fmt(Double(height) - 8))\" text-anchor=\"middle\">optimizer step</text>\n"
        let finite = train.filter { $0.loss.isFinite }
        if !finite.isEmpty {
            let raw = finite.map { "\(fmt(x($0.step))),\(fmt(y($0.loss)))" }.joined(separator: " ")
            s += "<polyline fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\" points=\"\(raw)\"/>\n"
            var ema: Float = finite[0].loss
            let smooth = finite.map { p -> String in
                ema = 0.9 * ema + 0.1 * p.loss
                return "\(fmt(x(p.step))),\(fmt(y(ema)))"
            }.joined(separator: " ")
            s += "<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"2\" points=\"\(smooth)\"/>\n"
        }
        let ev = eval.filter { $0.loss.isFinite }
        if !ev.isEmpty {
            let pts = ev.map { "\(fmt(x($0.step))),\(fmt(y($0.loss)))" }.joined(separator: " ")
            s += "<polyline fill=\"none\" stroke=\"#d94801\" stroke-width=\"2\" points=\"\(pts)\"/>\n"
            for p in ev {
                s += "<circle cx=\"\(fmt(x(p.step)))\" cy=\"\(fmt(y(p.loss)))\" r=\"4\" fill=\"#d94801\"/>\n"
            }
        }
        let lx = left + w - 150
        s += "<line x1=\"\(fmt(lx))\" y1=\"\(fmt(top + 10))\" x2=\"\(fmt(lx + 20))\" y2=\"\(fmt(top + 10))\" stroke=\"#08519c\" stroke-width=\"2\"/>"
        s += "<text x=\"\(fmt(lx + 26))\" y=\"\(fmt(top + 14))\">train (smoothed)</text>\n"
        s += "<line x1=\"\(fmt(lx))\" y1=\"\(fmt(top + 28))\" x2=\"\(fmt(lx + 20))\" y2=\"\(fmt(top + 28))\" stroke=\"#d94801\" stroke-width=\"2\"/>"
        s += "<text x=\"\(fmt(lx + 26))\" y=\"\(fmt(top + 32))\">eval</text>\n"
        s += "</svg>\n"
        return s
    }

    static func escape(_ t: String) -> String {
        t.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
