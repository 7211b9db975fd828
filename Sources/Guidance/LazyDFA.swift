// Subset construction on demand: a DFA state is the set of NFA states (after epsilon closure)
// a text can be in; its row of transitions, one entry per byte class, is filled the first time
// the state is left. A state is named by the offset of its row in the table (state index ×
// class count), so following a transition is one add and one load; offset 0 is the dead state
// (the empty set), which loops on every byte. Not thread-safe: the owner (`TokenConstraint`)
// holds its lock around every use.

final class LazyDFA {
    static let dead: Int32 = 0

    let nfa: ByteNFA
    let classCount: Int
    /// Row-major transitions to row offsets, -1 until filled: `rows` rows of `classCount`
    /// entries, manually managed so the trie walk reads it through a pointer (refreshed after
    /// each `fill`).
    private(set) var table: UnsafeMutablePointer<Int32>
    private var capacity: Int
    private var rows = 0
    private(set) var accepting: [Bool] = []
    /// Per state: the fewest bytes to completion (the least over its NFA states; the dead
    /// state's is Int32.max).
    private var distances: [Int32] = []
    private var sets: [[Int32]] = []
    private var index: [[Int32]: Int32] = [:]
    private var mark: [UInt32]
    private var stamp: UInt32 = 0
    private var stack: [Int32] = []
    private var buckets: [[Int32]]
    /// Past this many states new sets become the dead state: tokens leading there are masked
    /// out (never wrongly allowed); `exhausted` tells that it happened.
    let maxStates: Int
    private(set) var exhausted = false
    private(set) var start: Int32 = 0

    init(nfa: ByteNFA, maxStates: Int) {
        self.nfa = nfa
        self.classCount = nfa.classCount
        self.maxStates = min(maxStates, Int(Int32.max) / max(nfa.classCount, 1) - 1)
        self.mark = [UInt32](repeating: 0, count: nfa.count)
        self.buckets = [[Int32]](repeating: [], count: nfa.classCount)
        self.capacity = 64 * nfa.classCount
        self.table = UnsafeMutablePointer<Int32>.allocate(capacity: capacity)
        _ = intern([])
        for c in 0..<classCount { table[c] = 0 }
        stamp += 1
        start = intern(nfa.closure([nfa.start], mark: &mark, stamp: stamp, stack: &stack))
    }

    var stateCount: Int { sets.count }

    func isAccepting(_ s: Int32) -> Bool { accepting[Int(s) / classCount] }

    func distance(_ s: Int32) -> Int32 { distances[Int(s) / classCount] }

    /// The NFA states of `s` (sorted).
    func members(_ s: Int32) -> [Int32] { sets[Int(s) / classCount] }

    private func intern(_ set: [Int32]) -> Int32 {
        if let s = index[set] { return s }
        if sets.count >= maxStates {
            exhausted = true
            return Self.dead
        }
        let s = Int32(sets.count * classCount)
        sets.append(set)
        index[set] = s
        accepting.append(set.contains(nfa.accept))
        distances.append(set.lazy.map { self.nfa.distance[Int($0)] }.min() ?? .max)
        if (rows + 1) * classCount > capacity {
            let bigger = UnsafeMutablePointer<Int32>.allocate(capacity: capacity * 2)
            bigger.update(from: table, count: rows * classCount)
            table.deallocate()
            table = bigger
            capacity *= 2
        }
        (table + rows * classCount).initialize(repeating: -1, count: classCount)
        rows += 1
        return s
    }

    deinit { table.deallocate() }

    @inline(__always)
    func next(_ s: Int32, _ byte: UInt8) -> Int32 {
        let k = Int(s) &+ Int(nfa.classOf[Int(byte)])
        let t = table[k]
        if t >= 0 { return t }
        fill(s)
        return table[k]
    }

    /// Computes every transition of `s` at once: targets bucketed by byte class, then closed.
    func fill(_ s: Int32) {
        let row = Int(s)
        guard table[row] < 0 else { return }
        for c in 0..<classCount { buckets[c].removeAll(keepingCapacity: true) }
        for q in sets[row / classCount] {
            let i = Int(q)
            for k in Int(nfa.edgeStart[i])..<Int(nfa.edgeStart[i + 1]) {
                let lo = Int(nfa.classOf[Int(nfa.edgeLo[k])]), hi = Int(nfa.classOf[Int(nfa.edgeHi[k])])
                for c in lo...hi { buckets[c].append(nfa.edgeTo[k]) }
            }
        }
        var targets = [Int32](repeating: Self.dead, count: classCount)
        for c in 0..<classCount where !buckets[c].isEmpty {
            stamp &+= 1
            if stamp == 0 {
                for i in mark.indices { mark[i] = 0 }
                stamp = 1
            }
            targets[c] = intern(nfa.closure(buckets[c], mark: &mark, stamp: stamp, stack: &stack))
        }
        for c in 0..<classCount { table[row + c] = targets[c] }
    }

    /// The lowest byte after which the text is one byte nearer completion, and the state it
    /// leads to; nil when `s` accepts (or is dead).
    func nearerByte(_ s: Int32) -> (UInt8, Int32)? {
        let d = distance(s)
        guard d > 0, d != .max else { return nil }
        fill(s)
        let row = Int(s)
        for c in 0..<classCount {
            let t = table[row + c]
            if t != Self.dead && distance(t) == d - 1 { return (nfa.classFirstByte[c], t) }
        }
        return nil
    }

    /// The one byte that keeps `s` alive, when exactly one does.
    func onlyLiveByte(_ s: Int32) -> UInt8? {
        fill(s)
        let row = Int(s)
        var found: UInt8? = nil
        for c in 0..<classCount where table[row + c] != Self.dead {
            let first = Int(nfa.classFirstByte[c])
            let last = c + 1 < classCount ? Int(nfa.classFirstByte[c + 1]) - 1 : 255
            if found != nil || first != last { return nil }
            found = UInt8(first)
        }
        return found
    }
}
