// The byte-level NFA every grammar compiles to: Thompson fragments (one start, one end) joined
// by epsilon edges, transitions on byte ranges. `NFABuilder` assembles fragments; `ByteNFA` is
// the finished, pruned automaton (states that cannot reach the accepting state removed, so
// every surviving state lies on some accepted path) with byte classes for the lazy DFA.

struct ByteEdge: Sendable {
    var lo: UInt8
    var hi: UInt8
    var to: Int32
}

/// A piece of automaton under construction: the language of paths from `start` to `end`.
/// Nothing leaves `end` until the fragment is joined to another.
struct Fragment {
    var start: Int32
    var end: Int32
}

/// A state inside a string with a length window: its place in the string's automaton
/// (`template`, the same for every count), the scalars counted so far and the window. Two such
/// states with the same template behave alike for the next H bytes when their remaining
/// "scalars still needed" and "scalars still allowed" agree once clamped to H + 1, which lets
/// token masks be shared between string positions far from both ends.
struct CountedState: Sendable {
    var template: Int32
    var count: Int32
    var window: Int32
}

/// A string's length window, in scalars.
struct LengthWindow: Sendable {
    var minLength: Int
    var maxLength: Int?
}

final class NFABuilder {
    private(set) var epsilon: [[Int32]] = []
    private(set) var edges: [[ByteEdge]] = []
    /// Per state; template -1 outside counted strings.
    private(set) var counted: [CountedState] = []
    private(set) var windows: [LengthWindow] = []
    private var templates: Int32 = 0
    /// More states than this and compilation stops with `GuidanceError.tooLarge`.
    let stateLimit: Int

    init(stateLimit: Int) { self.stateLimit = stateLimit }

    var count: Int { epsilon.count }
    var isOverLimit: Bool { epsilon.count > stateLimit }

    func state() -> Int32 {
        epsilon.append([])
        edges.append([])
        counted.append(CountedState(template: -1, count: 0, window: 0))
        return Int32(epsilon.count - 1)
    }

    func connect(_ a: Int32, _ b: Int32) { epsilon[Int(a)].append(b) }

    func newWindow(_ w: LengthWindow) -> Int32 {
        windows.append(w)
        return Int32(windows.count - 1)
    }

    func newTemplate() -> Int32 {
        templates += 1
        return templates - 1
    }

    func annotate(_ s: Int32, _ c: CountedState) { counted[Int(s)] = c }

    func edge(_ a: Int32, _ lo: UInt8, _ hi: UInt8, _ b: Int32) {
        edges[Int(a)].append(ByteEdge(lo: lo, hi: hi, to: b))
    }

    func edge(_ a: Int32, _ ranges: ByteRanges, _ b: Int32) {
        for r in ranges { edge(a, r.lowerBound, r.upperBound, b) }
    }

    func empty() -> Fragment {
        let s = state()
        return Fragment(start: s, end: s)
    }

    func literal(_ bytes: [UInt8]) -> Fragment {
        let start = state()
        var cur = start
        for b in bytes {
            let next = state()
            edge(cur, b, b, next)
            cur = next
        }
        return Fragment(start: start, end: cur)
    }

    func literal(_ text: String) -> Fragment { literal(Array(text.utf8)) }

    func byteSet(_ ranges: ByteRanges) -> Fragment {
        let a = state(), b = state()
        edge(a, ranges, b)
        return Fragment(start: a, end: b)
    }

    func concat(_ parts: [Fragment]) -> Fragment {
        guard var result = parts.first else { return empty() }
        for p in parts.dropFirst() {
            connect(result.end, p.start)
            result.end = p.end
        }
        return result
    }

    func union(_ parts: [Fragment]) -> Fragment {
        if parts.count == 1 { return parts[0] }
        let a = state(), b = state()
        for p in parts {
            connect(a, p.start)
            connect(p.end, b)
        }
        return Fragment(start: a, end: b)
    }

    func optional(_ f: Fragment) -> Fragment {
        let a = state(), b = state()
        connect(a, f.start)
        connect(f.end, b)
        connect(a, b)
        return Fragment(start: a, end: b)
    }

    /// Zero or more times, with one copy of `f`.
    func star(_ f: Fragment) -> Fragment {
        let a = state(), b = state()
        connect(a, f.start)
        connect(f.end, a)
        connect(a, b)
        return Fragment(start: a, end: b)
    }

    /// `min` to `max` (nil: unbounded) repetitions; `make` builds a fresh copy each call.
    func repeated(min: Int, max: Int?, _ make: () throws(GuidanceError) -> Fragment) throws(GuidanceError) -> Fragment {
        var parts: [Fragment] = []
        for _ in 0..<min { parts.append(try make()); if isOverLimit { return empty() } }
        if let max {
            // Each further copy is optional; skipping one ends the repetition.
            if max > min {
                let entry = state(), end = state()
                var cur = entry
                for _ in min..<max {
                    connect(cur, end)
                    let f = try make()
                    if isOverLimit { return empty() }
                    connect(cur, f.start)
                    cur = f.end
                }
                connect(cur, end)
                parts.append(Fragment(start: entry, end: end))
            }
        } else {
            parts.append(star(try make()))
        }
        return concat(parts)
    }

    /// Adds paths from `a` to `b` for each sequence of byte ranges, sharing states for equal
    /// suffixes (keyed in `memo`, which belongs to this target `b`).
    func sequences(from a: Int32, to b: Int32, _ seqs: [[ByteRanges]], memo: inout [[ByteRanges]: Int32]) {
        for seq in seqs {
            guard !seq.isEmpty else { connect(a, b); continue }
            var cur = b
            var j = seq.count - 1
            while j >= 1 {
                let key = Array(seq[j...])
                if let s = memo[key] {
                    cur = s
                } else {
                    let s = state()
                    edge(s, seq[j], cur)
                    memo[key] = s
                    cur = s
                }
                j -= 1
            }
            edge(a, seq[0], cur)
        }
    }

    /// True when some path leads from `start` to `end` (the fragment's language is not empty).
    func reaches(_ f: Fragment) -> Bool {
        var seen = [Bool](repeating: false, count: count)
        seen[Int(f.start)] = true
        var stack = [f.start]
        while let s = stack.popLast() {
            if s == f.end { return true }
            for t in epsilon[Int(s)] where !seen[Int(t)] {
                seen[Int(t)] = true
                stack.append(t)
            }
            for e in edges[Int(s)] where !seen[Int(e.to)] {
                seen[Int(e.to)] = true
                stack.append(e.to)
            }
        }
        return false
    }

    /// The bytes that can come first on a path from `f.start` (through epsilon edges).
    func firstBytes(_ f: Fragment) -> Set<UInt8> {
        var seen = Set<Int32>([f.start])
        var stack = [f.start]
        var out = Set<UInt8>()
        while let s = stack.popLast() {
            for t in epsilon[Int(s)] where seen.insert(t).inserted { stack.append(t) }
            for e in edges[Int(s)] { for b in e.lo...e.hi { out.insert(b) } }
        }
        return out
    }

    /// The finished automaton of `f`, pruned; nil when its language is empty.
    func finish(_ f: Fragment) -> ByteNFA? {
        ByteNFA(epsilon: epsilon, edges: edges, start: f.start, accept: f.end, counted: counted, windows: windows)
    }
}

/// A finished byte NFA in flat arrays. State 0..<count; one start, one accepting state; every
/// state is reachable from the start and can reach the accepting state.
struct ByteNFA: Sendable {
    let start: Int32
    let accept: Int32
    let count: Int
    /// Epsilon targets of state s: epsilonTargets[epsilonStart[s]..<epsilonStart[s+1]].
    let epsilonStart: [Int32]
    let epsilonTargets: [Int32]
    let edgeStart: [Int32]
    let edgeLo: [UInt8]
    let edgeHi: [UInt8]
    let edgeTo: [Int32]
    /// Bytes split into intervals no edge boundary falls inside; classOf[b] is b's interval.
    let classOf: [UInt8]
    let classCount: Int
    /// The lowest byte of each class.
    let classFirstByte: [UInt8]
    /// Per state: its `CountedState` when it lies inside a string with a length window
    /// (template -1 otherwise), and the windows they refer to.
    let countedTemplate: [Int32]
    let countedCount: [Int32]
    let countedWindow: [Int32]
    let windows: [LengthWindow]
    /// Per state: the fewest bytes that lead from it to the accepting state (a budget's floor:
    /// a text there needs at least this many more bytes to be complete).
    let distance: [Int32]
    /// The largest `distance` of any state: no text is ever further from completion.
    let maxDistance: Int32

    init?(epsilon: [[Int32]], edges: [[ByteEdge]], start: Int32, accept: Int32,
          counted: [CountedState] = [], windows: [LengthWindow] = []) {
        let n = epsilon.count
        // Forward reachability from the start, then backward from the accepting state.
        var forward = [Bool](repeating: false, count: n)
        var stack: [Int32] = [start]
        forward[Int(start)] = true
        while let s = stack.popLast() {
            for t in epsilon[Int(s)] where !forward[Int(t)] { forward[Int(t)] = true; stack.append(t) }
            for e in edges[Int(s)] where !forward[Int(e.to)] { forward[Int(e.to)] = true; stack.append(e.to) }
        }
        guard forward[Int(accept)] else { return nil }
        // Predecessors in flat arrays: reverseStart[t]..<reverseStart[t + 1] in `reverse`.
        var reverseStart = [Int32](repeating: 0, count: n + 1)
        for s in 0..<n where forward[s] {
            for t in epsilon[s] { reverseStart[Int(t) + 1] += 1 }
            for e in edges[s] { reverseStart[Int(e.to) + 1] += 1 }
        }
        for i in 0..<n { reverseStart[i + 1] += reverseStart[i] }
        var fill = reverseStart
        var reverse = [Int32](repeating: 0, count: Int(reverseStart[n]))
        for s in 0..<n where forward[s] {
            for t in epsilon[s] { reverse[Int(fill[Int(t)])] = Int32(s); fill[Int(t)] += 1 }
            for e in edges[s] { reverse[Int(fill[Int(e.to)])] = Int32(s); fill[Int(e.to)] += 1 }
        }
        var alive = [Bool](repeating: false, count: n)
        alive[Int(accept)] = true
        stack = [accept]
        while let s = stack.popLast() {
            for k in Int(reverseStart[Int(s)])..<Int(reverseStart[Int(s) + 1]) {
                let p = reverse[k]
                if !alive[Int(p)] {
                    alive[Int(p)] = true
                    stack.append(p)
                }
            }
        }
        // Renumber the living states in order.
        var newId = [Int32](repeating: -1, count: n)
        var count: Int32 = 0
        for s in 0..<n where alive[s] { newId[s] = count; count += 1 }
        var epsilonStart: [Int32] = [0], epsilonTargets: [Int32] = []
        var edgeStart: [Int32] = [0], edgeLo: [UInt8] = [], edgeHi: [UInt8] = [], edgeTo: [Int32] = []
        var boundaries = [Bool](repeating: false, count: 257)
        boundaries[0] = true
        for s in 0..<n where alive[s] {
            for t in epsilon[s] where alive[Int(t)] { epsilonTargets.append(newId[Int(t)]) }
            epsilonStart.append(Int32(epsilonTargets.count))
            for e in edges[s] where alive[Int(e.to)] {
                edgeLo.append(e.lo)
                edgeHi.append(e.hi)
                edgeTo.append(newId[Int(e.to)])
                boundaries[Int(e.lo)] = true
                boundaries[Int(e.hi) + 1] = true
            }
            edgeStart.append(Int32(edgeTo.count))
        }
        var classOf = [UInt8](repeating: 0, count: 256)
        var firstByte: [UInt8] = []
        var c = -1
        for b in 0..<256 {
            if boundaries[b] { c += 1; firstByte.append(UInt8(b)) }
            classOf[b] = UInt8(c)
        }
        self.start = newId[Int(start)]
        self.accept = newId[Int(accept)]
        self.count = Int(count)
        self.epsilonStart = epsilonStart
        self.epsilonTargets = epsilonTargets
        self.edgeStart = edgeStart
        self.edgeLo = edgeLo
        self.edgeHi = edgeHi
        self.edgeTo = edgeTo
        self.classOf = classOf
        self.classCount = c + 1
        self.classFirstByte = firstByte
        var template = [Int32](repeating: -1, count: Int(count))
        var countValue = [Int32](repeating: 0, count: Int(count))
        var window = [Int32](repeating: 0, count: Int(count))
        for (old, c) in counted.enumerated() where c.template >= 0 && newId[old] >= 0 {
            let k = Int(newId[old])
            template[k] = c.template
            countValue[k] = c.count
            window[k] = c.window
        }
        self.countedTemplate = template
        self.countedCount = countValue
        self.countedWindow = window
        self.windows = windows
        self.distance = Self.distances(count: Int(count), accept: self.accept, epsilonStart: epsilonStart, epsilonTargets: epsilonTargets,
                                       edgeStart: edgeStart, edgeTo: edgeTo)
        self.maxDistance = distance.max() ?? 0
    }

    /// Bytes to the accepting state from every state: breadth-first backwards from it, level by
    /// level, an epsilon edge keeping the level and a byte edge adding one.
    private static func distances(count n: Int, accept: Int32, epsilonStart: [Int32], epsilonTargets: [Int32],
                                  edgeStart: [Int32], edgeTo: [Int32]) -> [Int32] {
        var byEpsilon = [[Int32]](repeating: [], count: n), byByte = [[Int32]](repeating: [], count: n)
        for s in 0..<n {
            for k in Int(epsilonStart[s])..<Int(epsilonStart[s + 1]) { byEpsilon[Int(epsilonTargets[k])].append(Int32(s)) }
            for k in Int(edgeStart[s])..<Int(edgeStart[s + 1]) { byByte[Int(edgeTo[k])].append(Int32(s)) }
        }
        var distance = [Int32](repeating: .max, count: n)
        distance[Int(accept)] = 0
        var level: Int32 = 0
        var current: [Int32] = [accept]
        while !current.isEmpty {
            var i = 0
            while i < current.count {
                let t = Int(current[i])
                i += 1
                for p in byEpsilon[t] where distance[Int(p)] > level {
                    distance[Int(p)] = level
                    current.append(p)
                }
            }
            var next: [Int32] = []
            for t in current {
                for p in byByte[Int(t)] where distance[Int(p)] > level + 1 {
                    distance[Int(p)] = level + 1
                    next.append(p)
                }
            }
            current = next
            level += 1
        }
        return distance
    }

    /// The epsilon closure of `seeds`, keeping only states that consume bytes or accept, sorted.
    /// `mark` is scratch space of `count` entries; `stamp` must be new for each call.
    func closure(_ seeds: [Int32], mark: inout [UInt32], stamp: UInt32, stack: inout [Int32]) -> [Int32] {
        var out: [Int32] = []
        stack.removeAll(keepingCapacity: true)
        for s in seeds where mark[Int(s)] != stamp {
            mark[Int(s)] = stamp
            stack.append(s)
        }
        while let s = stack.popLast() {
            let i = Int(s)
            if edgeStart[i] != edgeStart[i + 1] || s == accept { out.append(s) }
            for k in Int(epsilonStart[i])..<Int(epsilonStart[i + 1]) {
                let t = epsilonTargets[k]
                if mark[Int(t)] != stamp {
                    mark[Int(t)] = stamp
                    stack.append(t)
                }
            }
        }
        out.sort()
        return out
    }

    /// Whether the automaton accepts exactly `bytes` (prefix: whether `bytes` can be continued
    /// to an accepted string). Simulates the NFA directly; for tests and one-off checks.
    func matches<C: Collection>(_ bytes: C, prefixOnly: Bool = false) -> Bool where C.Element == UInt8 {
        var mark = [UInt32](repeating: 0, count: count)
        var stack: [Int32] = []
        var stamp: UInt32 = 1
        var current = closure([start], mark: &mark, stamp: stamp, stack: &stack)
        for b in bytes {
            var next: [Int32] = []
            for s in current {
                let i = Int(s)
                for k in Int(edgeStart[i])..<Int(edgeStart[i + 1]) where edgeLo[k] <= b && b <= edgeHi[k] {
                    next.append(edgeTo[k])
                }
            }
            stamp += 1
            current = closure(next, mark: &mark, stamp: stamp, stack: &stack)
            if current.isEmpty { return false }
        }
        return prefixOnly || current.contains(accept)
    }
}
