// The frozen base weights as one value that both executors read: Training multiplies by them
// (as Autograd tensors, or panel by panel from the file's blocks), Inference streams them in its
// KV-cache pass. Laid out by the tensor table (embedding, head, final norm; per layer the norms
// the architecture has and seven projections with optional q/k/v biases), Hugging Face row order,
// checked against the config when built. Matrices are float32 or kept as the file stores them; norms and biases float32.
//
// Dimensions: V vocab, D hidden, F feed-forward; projection shapes in TensorTable.dimensions.
import Foundation
import ModelAssets

/// One frozen weight matrix [rows, columns] (a projection, the embedding or the head), in
/// Hugging Face row order, held either as float32 values or as its file stores it (GGUF blocks,
/// F16, BF16 in a memory-mapped file: never copied whole; see FrozenMatrixKernels.swift).
public struct FrozenMatrix: @unchecked Sendable {
    public enum Storage {
        case float32([Float])  // [rows, columns]
        /// The file's encoding; stored row `rowOrder?[r] ?? r` is Hugging Face row r.
        case stored(StoredTensor, rowOrder: [Int32]?)
    }

    public let rows: Int
    public let columns: Int
    public let storage: Storage

    public init(rows: Int, columns: Int, values: [Float]) {
        precondition(rows * columns == values.count, "[FrozenMatrix] \(rows)x\(columns) does not hold \(values.count) values")
        self.rows = rows
        self.columns = columns
        storage = .float32(values)
    }

    /// A matrix left as stored. `rowOrder[r]` is the stored row that is Hugging Face row r
    /// (llama.cpp's q/k RoPE permutation is kept in the file and undone on output).
    public init(stored: StoredTensor, rowOrder: [Int32]? = nil) {
        precondition(stored.shape.count == 2, "[FrozenMatrix] stored tensor of shape \(stored.shape) is not a matrix")
        rows = stored.shape[0]
        columns = stored.shape[1]
        precondition(rowOrder == nil || rowOrder!.count == rows, "[FrozenMatrix] row order of \(rowOrder!.count) for \(rows) rows")
        storage = .stored(stored, rowOrder: rowOrder)
    }

    public var shape: [Int] { [rows, columns] }

    /// Whether the matrix is kept in its file's encoding.
    public var isStored: Bool {
        if case .stored = storage { return true }
        return false
    }

    /// Bytes the matrix occupies as held (float32 values, or its stored blocks).
    public var heldBytes: Int {
        switch storage {
        case .float32(let v): v.count * 4
        case .stored(let t, _): t.byteCount
        }
    }

    /// Every value as float32, Hugging Face row order: the values themselves for float32
    /// storage, a full dequantized copy for stored matrices (exports, the float32 reference path;
    /// each such copy is counted in `fullCopies`).
    public var values: [Float] {
        switch storage {
        case .float32(let v): return v
        case .stored:
            FrozenMatrix.fullCopies.increment()
            return [Float](unsafeUninitializedCapacity: rows * columns) { buf, n in
                dequantizeRows(0..<rows, into: buf.baseAddress!)
                n = rows * columns
            }
        }
    }
}

extension FrozenMatrix {
    /// How many full float32 copies of stored matrices `values` has made in this process: what
    /// the tests read to show that a path holds no float32 copy of a stored base.
    public static let fullCopies = Counter()

    public final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        public var value: Int { lock.withLock { count } }
        func increment() { lock.withLock { count += 1 } }
    }
}

/// One named base tensor as held: a matrix (float32 or stored), or a vector (norm, bias).
public enum NamedWeight: Sendable {
    case matrix(FrozenMatrix)
    case vector([Float])

    public var shape: [Int] {
        switch self {
        case .matrix(let m): m.shape
        case .vector(let v): [v.count]
        }
    }

    /// The values as float32 (a stored matrix dequantized whole).
    public var tensor: HostTensor {
        switch self {
        case .matrix(let m): HostTensor(shape: m.shape, data: m.values)
        case .vector(let v): HostTensor(shape: [v.count], data: v)
        }
    }
}

/// The weights of one decoder layer.
public struct LayerWeights: Sendable {
    let norms: [[Float]?]  // in NormSlot.allCases order, the ones the architecture has ([D], or q/k sizes)
    let projections: [FrozenMatrix]  // in LoRATarget.allCases order
    let biases: [[Float]?]  // likewise; q/k/v only, when the config has them

    /// The norm weight in `slot`, nil when the architecture has no norm there.
    public func norm(_ slot: NormSlot) -> [Float]? { norms[slot.index] }
    public func projection(_ t: LoRATarget) -> FrozenMatrix { projections[t.index] }
    public func bias(_ t: LoRATarget) -> [Float]? { biases[t.index] }
}

extension LoRATarget {
    var index: Int { LoRATarget.allCases.firstIndex(of: self)! }
}


public final class BaseWeights: @unchecked Sendable {
    public let config: ModelConfig
    public let embedding: FrozenMatrix  // [V, D]
    /// The output head when it is not tied to the embedding.
    public let untiedHead: FrozenMatrix?  // [V, D]
    public let finalNorm: [Float]  // [D]
    public let layers: [LayerWeights]

    /// The output head [V, D]: the embedding when tied.
    public var head: FrozenMatrix { untiedHead ?? embedding }

    /// Builds the weights from Hugging Face-named tensors, refusing a missing tensor or a wrong
    /// shape (named in the error) and configurations neither executor implements.
    public convenience init(config: ModelConfig, tensors: [String: HostTensor]) throws {
        try self.init(config: config, tensors: tensors, matrices: [:])
    }

    /// The weights of a loaded file: its stored matrices as they are, the rest float32.
    public convenience init(file: BaseModelFile) throws {
        try self.init(config: file.config, tensors: file.tensors, matrices: file.matrices)
    }

    /// Builds the weights from float32 tensors and matrices (a matrix under a name wins over a
    /// tensor of that name), checked as `init(config:tensors:)` checks them.
    public init(config: ModelConfig, tensors: [String: HostTensor], matrices: [String: FrozenMatrix]) throws {
        self.config = config
        func tensor(_ name: String, _ shape: [Int]) throws -> HostTensor {
            guard let t = tensors[name] else { throw ModelError.missingTensor(name) }
            guard t.shape == shape else { throw ModelError.wrongShape(name: name, expected: shape, got: t.shape) }
            return t
        }
        func matrix(_ name: String, rows: Int, columns: Int) throws -> FrozenMatrix {
            if let m = matrices[name] {
                guard m.shape == [rows, columns] else { throw ModelError.wrongShape(name: name, expected: [rows, columns], got: m.shape) }
                return m
            }
            return FrozenMatrix(rows: rows, columns: columns, values: try tensor(name, [rows, columns]).data)
        }
        let D = config.hiddenSize, V = config.vocabSize
        embedding = try matrix(TensorTable.embedding, rows: V, columns: D)
        untiedHead = config.tieWordEmbeddings ? nil : try matrix(TensorTable.head, rows: V, columns: D)
        finalNorm = try tensor(TensorTable.finalNorm, [D]).data
        layers = try (0..<config.numLayers).map { i in
            LayerWeights(
                norms: try NormSlot.allCases.map { slot in
                    try TensorTable.norm(slot, layer: i, config: config).map { try tensor($0, [TensorTable.normSize(slot, config: config)]).data }
                },
                projections: try LoRATarget.allCases.map { t in
                    let (inDim, outDim) = TensorTable.dimensions(t, config: config)
                    return try matrix(TensorTable.weight(layer: i, target: t), rows: outDim, columns: inDim)
                },
                biases: try LoRATarget.allCases.map { t in
                    TensorTable.hasBias(t, config: config)
                        ? try tensor(TensorTable.bias(layer: i, target: t), [TensorTable.dimensions(t, config: config).out]).data : nil
                })
        }
    }

    private init(config: ModelConfig, embedding: FrozenMatrix, untiedHead: FrozenMatrix?, finalNorm: [Float], layers: [LayerWeights]) {
        self.config = config
        self.embedding = embedding
        self.untiedHead = untiedHead
        self.finalNorm = finalNorm
        self.layers = layers
    }

    /// A model of the layers `indices` of this one (in that order), with the same embedding,
    /// head and final norm: a draft built from the base's blocks.
    public func selectingLayers(_ indices: [Int]) -> BaseWeights {
        BaseWeights(config: config.selectingLayers(indices), embedding: embedding, untiedHead: untiedHead, finalNorm: finalNorm, layers: indices.map { layers[$0] })
    }

    /// Every tensor under its Hugging Face name (`lm_head.weight` only when untied), in table
    /// order, as held: matrices as `FrozenMatrix` (stored ones never copied here), vectors as values.
    public var namedWeights: [(name: String, weight: NamedWeight)] {
        var out: [(String, NamedWeight)] = [(TensorTable.embedding, .matrix(embedding))]
        for (i, l) in layers.enumerated() {
            for n in config.definition.norms { out.append((TensorTable.norm(n, layer: i), .vector(l.norm(n.slot)!))) }
            for t in LoRATarget.allCases {
                out.append((TensorTable.weight(layer: i, target: t), .matrix(l.projection(t))))
                if let b = l.bias(t) { out.append((TensorTable.bias(layer: i, target: t), .vector(b))) }
            }
        }
        out.append((TensorTable.finalNorm, .vector(finalNorm)))
        if let untiedHead { out.append((TensorTable.head, .matrix(untiedHead))) }
        return out
    }

    /// How many values the weights hold, whatever holds them.
    public var parameterCount: Int { namedWeights.reduce(0) { $0 + $1.weight.shape.reduce(1, *) } }

    /// Every tensor under its Hugging Face name as float32, in table order. Float32 arrays are
    /// shared, not copied; stored matrices are dequantized (a full copy each: exports and tests).
    public var namedTensors: [(name: String, tensor: HostTensor)] {
        namedWeights.map { ($0.name, $0.weight.tensor) }
    }

    /// The tensors as a dictionary keyed by Hugging Face name.
    public var tensorDictionary: [String: HostTensor] {
        Dictionary(uniqueKeysWithValues: namedTensors.map { ($0.name, $0.tensor) })
    }
}
