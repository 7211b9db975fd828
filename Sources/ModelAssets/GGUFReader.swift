// Reading GGUF files (versions 2 and 3, little-endian): header, every metadata value type,
// tensor descriptors, alignment, and per-tensor dequantization to Float. Big-endian files and
// version 1 are refused by name. Follows gguf.cpp `gguf_init_from_file_impl` and its checks.
import Foundation

/// A parsed GGUF file. The file is read (mapped) once; tensors are converted one at a time.
public struct GGUFFile: Sendable {
    public static let magic: [UInt8] = Array("GGUF".utf8)
    public static let supportedVersions: [UInt32] = [2, 3]
    public static let defaultAlignment = 32
    /// ggml's GGML_MAX_DIMS.
    public static let maxDimensions = 4

    /// The file path, or a name given to in-memory bytes; used in every error.
    public let path: String
    public let version: UInt32
    /// Metadata keys in file order.
    public let metadataKeys: [String]
    public let metadata: [String: GGUFValue]
    /// Tensors in file order.
    public let tensors: [GGUFTensorInfo]
    public let alignment: Int
    /// Byte offset of the data section in the file.
    public let dataOffset: Int
    private let tensorIndex: [String: Int]
    private let bytes: Data
    /// The mapping behind `bytes` when the file was opened by path: what stored tensors point into.
    public let mapping: MappedFile?

    /// Opens and validates a GGUF file: header, metadata, tensor descriptors and data bounds.
    /// The file is memory-mapped, never copied.
    public init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else { throw ModelAssetsError.io(path: path, reason: "no such file") }
        let mapping = try MappedFile(path: path)  // refuses a folder
        try self.init(data: mapping.data, path: path, mapping: mapping)
        // The metadata (a vocabulary and merges: ~1.8 MB for SmolLM2) is parsed into values now.
        mapping.dropResidentPages(0..<dataOffset)
    }

    /// Parses GGUF bytes already in memory; `path` names them in errors.
    public init(data: Data, path: String) throws {
        try self.init(data: data, path: path, mapping: nil)
    }

    private init(data: Data, path: String, mapping: MappedFile?) throws {
        self.path = path
        self.bytes = data
        self.mapping = mapping
        let parsed = try data.withUnsafeBytes { raw in
            var parser = GGUFParser(raw, path: path)
            return try parser.parse()
        }
        version = parsed.version
        metadataKeys = parsed.keys
        metadata = parsed.metadata
        tensors = parsed.tensors
        alignment = parsed.alignment
        dataOffset = parsed.dataOffset
        tensorIndex = parsed.index
    }

    public func tensorInfo(named name: String) -> GGUFTensorInfo? {
        tensorIndex[name].map { tensors[$0] }
    }

    /// A tensor as the file stores it, without a copy: its type, shape and the address of its
    /// first byte inside the mapping (which `owner` keeps alive). Only for a file opened by path.
    public func stored(_ name: String) throws -> StoredTensor {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        guard let mapping, let base = mapping.base else {
            throw ModelAssetsError.io(path: path, reason: "the tensors of in-memory GGUF bytes cannot be kept as stored; open the file by path")
        }
        return StoredTensor(type: info.type, shape: info.shape, bytes: base + dataOffset + info.offset, byteCount: info.byteCount, owner: mapping)
    }

    /// The tensor's stored bytes, exactly as in the file.
    public func rawBytes(of name: String) throws -> Data {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        let start = dataOffset + info.offset
        return bytes.subdata(in: (bytes.startIndex + start)..<(bytes.startIndex + start + info.byteCount))
    }

    /// The tensor converted to Float, in row-major order with `info.shape` (ggml's `ne` reversed).
    public func dequantize(_ name: String) throws -> HostTensor {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        guard info.type.isDequantizable else {
            throw ModelAssetsError.unsupportedTensorType(
                path: path, tensor: name, type: info.type.name, supported: GGMLType.dequantizable.map(\.name))
        }
        let count = info.elementCount
        let values = [Float](unsafeUninitializedCapacity: count) { buffer, initialized in
            bytes.withUnsafeBytes { raw in
                let start = dataOffset + info.offset
                let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + info.byteCount)])
                if let out = buffer.baseAddress { Dequantize.run(info.type, raw: slice, count: count, into: out) }
            }
            initialized = count
        }
        return HostTensor(shape: info.shape, data: values)
    }

    /// Every tensor dequantized, converted in parallel; fails as a whole if any tensor fails.
    public func dequantizeAll(names: [String]? = nil) throws -> [String: HostTensor] {
        let wanted = names ?? tensors.map(\.name)
        let results = ResultSlots<HostTensor>(count: wanted.count)
        DispatchQueue.concurrentPerform(iterations: wanted.count) { i in
            results.set(i, Result { try dequantize(wanted[i]) })
        }
        var out: [String: HostTensor] = [:]
        out.reserveCapacity(wanted.count)
        for (i, name) in wanted.enumerated() { out[name] = try results.get(i) }
        return out
    }

    // MARK: typed metadata access, errors naming the key

    public func value(_ key: String) throws -> GGUFValue {
        guard let v = metadata[key] else { throw ModelAssetsError.missingKey(path: path, key: key) }
        return v
    }

    public func int(_ key: String) throws -> Int {
        guard let v = try value(key).intValue else { throw wrongType(key, "an integer") }
        return v
    }

    public func double(_ key: String) throws -> Double {
        guard let v = try value(key).doubleValue else { throw wrongType(key, "a number") }
        return v
    }

    public func string(_ key: String) throws -> String {
        guard let v = try value(key).stringValue else { throw wrongType(key, "a string") }
        return v
    }

    public func stringArray(_ key: String) throws -> [String] {
        guard let v = try value(key).stringArray else { throw wrongType(key, "an array of strings") }
        return v
    }

    private func wrongType(_ key: String, _ expected: String) -> ModelAssetsError {
        .malformed(path: path, item: "key '\(key)'", reason: "expected \(expected), found \(metadata[key].map { "\($0.type)" } ?? "nothing")")
    }
}

/// A tensor left in its file's encoding (F32, F16, BF16 or ggml blocks): a row-major shape whose
/// rows are `shape.last` values each, and the bytes, kept alive by `owner` (a mapping).
public struct StoredTensor: @unchecked Sendable {
    public let type: GGMLType
    public let shape: [Int]
    public let bytes: UnsafeRawPointer
    public let byteCount: Int
    public let owner: AnyObject

    public init(type: GGMLType, shape: [Int], bytes: UnsafeRawPointer, byteCount: Int, owner: AnyObject) {
        self.type = type
        self.shape = shape
        self.bytes = bytes
        self.byteCount = byteCount
        self.owner = owner
    }

    /// Bytes per row (a row is `shape.last` values).
    public var rowBytes: Int {
        let (block, size) = type.blockGeometry
        return (shape.last ?? 1) / block * size
    }

    /// Rows `rows` converted to Float (row-major) into `out`.
    public func dequantizeRows(_ rows: Range<Int>, into out: UnsafeMutablePointer<Float>) {
        let k = shape.last ?? 1
        Dequantize.run(type, raw: UnsafeRawBufferPointer(start: bytes + rows.lowerBound * rowBytes, count: rows.count * rowBytes),
                       count: rows.count * k, into: out)
    }
}

/// Per-index results filled from concurrent workers; each slot is written by exactly one worker.
public final class ResultSlots<T>: @unchecked Sendable {
    private var slots: [Result<T, Error>?]
    private let lock = NSLock()
    public init(count: Int) { slots = Array(repeating: nil, count: count) }
    public func set(_ i: Int, _ r: Result<T, Error>) { lock.lock(); slots[i] = r; lock.unlock() }
    public func get(_ i: Int) throws -> T { try slots[i]!.get() }
}

/// The one-pass parser behind `GGUFFile`.
private struct GGUFParser {
    struct Parsed {
        var version: UInt32
        var keys: [String]
        var metadata: [String: GGUFValue]
        var tensors: [GGUFTensorInfo]
        var index: [String: Int]
        var alignment: Int
        var dataOffset: Int
    }

    var cursor: ByteCursor
    let path: String

    init(_ raw: UnsafeRawBufferPointer, path: String) {
        cursor = ByteCursor(raw, path: path)
        self.path = path
    }

    mutating func parse() throws -> Parsed {
        let magicCount = min(4, cursor.remaining)
        let head = Array(try cursor.readBytes(magicCount, "magic"))
        guard head == GGUFFile.magic else {
            throw ModelAssetsError.badMagic(path: path, expected: "GGUF", found: Self.describe(head))
        }
        let version = try cursor.read(UInt32.self, "version")
        guard GGUFFile.supportedVersions.contains(version) else {
            if version & 0xFFFF == 0, (1...3).contains(version.byteSwapped) {
                throw ModelAssetsError.malformed(
                    path: path, item: "header", reason: "this is a big-endian GGUF (version \(version.byteSwapped)); only little-endian files are supported")
            }
            throw ModelAssetsError.unsupportedVersion(path: path, version: version, supported: GGUFFile.supportedVersions)
        }
        let tensorCount = try cursor.readLength("tensor count")
        let kvCount = try cursor.readLength("metadata count")
        // Bound counts by the smallest on-disk record before allocating anything.
        try cursor.require(Self.multiply(kvCount, 8 + 4 + 1), "\(kvCount) metadata entries")
        try cursor.require(Self.multiply(tensorCount, 8 + 4 + 4 + 8), "\(tensorCount) tensor descriptors")

        var keys: [String] = []
        var metadata: [String: GGUFValue] = [:]
        keys.reserveCapacity(kvCount)
        for i in 0..<kvCount {
            let key = try readString("metadata key #\(i)")
            let rawType = try cursor.read(UInt32.self, "type of key '\(key)'")
            guard let type = GGUFValueType(rawValue: rawType) else {
                throw ModelAssetsError.malformed(path: path, item: "key '\(key)'", reason: "unknown value type \(rawType)")
            }
            let value = try readValue(type, key: key, depth: 0)
            guard metadata[key] == nil else { throw ModelAssetsError.duplicateKey(path: path, key: key) }
            metadata[key] = value
            keys.append(key)
        }

        var alignment = GGUFFile.defaultAlignment
        if let a = metadata["general.alignment"] {
            guard case let .uint32(v) = a, v > 0, v & (v - 1) == 0 else {
                throw ModelAssetsError.malformed(
                    path: path, item: "key 'general.alignment'", reason: "must be a power-of-two uint32, found \(a)")
            }
            alignment = Int(v)
        }

        var tensors: [GGUFTensorInfo] = []
        var index: [String: Int] = [:]
        tensors.reserveCapacity(tensorCount)
        for i in 0..<tensorCount {
            let name = try readString("name of tensor #\(i)")
            let nDims = try cursor.read(UInt32.self, "dimension count of tensor '\(name)'")
            guard nDims >= 1, nDims <= GGUFFile.maxDimensions else {
                throw ModelAssetsError.malformed(
                    path: path, item: "tensor '\(name)'", reason: "has \(nDims) dimensions; 1...\(GGUFFile.maxDimensions) allowed")
            }
            var dims: [Int] = []
            var elements = 1
            for d in 0..<Int(nDims) {
                let raw = try cursor.read(UInt64.self, "dimension \(d) of tensor '\(name)'")
                guard raw >= 1, raw <= UInt64(Int32.max) else {
                    throw ModelAssetsError.malformed(path: path, item: "tensor '\(name)'", reason: "dimension \(d) is \(raw)")
                }
                let (product, overflow) = elements.multipliedReportingOverflow(by: Int(raw))
                guard !overflow, product <= Int(Int64.max) / 8 else {
                    throw ModelAssetsError.malformed(path: path, item: "tensor '\(name)'", reason: "element count overflows")
                }
                elements = product
                dims.append(Int(raw))
            }
            let rawType = try cursor.read(UInt32.self, "type of tensor '\(name)'")
            guard let type = GGMLType(rawValue: rawType) else {
                throw ModelAssetsError.unknownTensorType(path: path, tensor: name, typeID: rawType)
            }
            let blockSize = type.blockGeometry.blockSize
            guard dims[0] % blockSize == 0 else {
                throw ModelAssetsError.malformed(
                    path: path, item: "tensor '\(name)'",
                    reason: "row length \(dims[0]) is not a multiple of the \(type.name) block size \(blockSize)")
            }
            let offset = try cursor.readLength("offset of tensor '\(name)'")
            guard index[name] == nil else { throw ModelAssetsError.duplicateTensor(path: path, tensor: name) }
            index[name] = tensors.count
            tensors.append(GGUFTensorInfo(name: name, dimensions: dims, type: type, offset: offset))
        }

        let (dataOffset, overflow) = cursor.offset.addingReportingOverflow((alignment - cursor.offset % alignment) % alignment)
        guard !overflow else { throw ModelAssetsError.truncated(path: path, item: "data section", needed: alignment, available: 0) }
        let dataSize = max(0, cursor.bytes.count - dataOffset)
        if !tensors.isEmpty, dataOffset > cursor.bytes.count {
            throw ModelAssetsError.truncated(
                path: path, item: "padding before the data section", needed: dataOffset - cursor.offset, available: cursor.remaining)
        }
        for t in tensors {
            guard t.offset % alignment == 0 else {
                throw ModelAssetsError.misalignedTensor(path: path, tensor: t.name, offset: t.offset, alignment: alignment)
            }
            guard t.offset <= dataSize, t.byteCount <= dataSize - t.offset else {
                throw ModelAssetsError.tensorOutOfRange(path: path, tensor: t.name, offset: t.offset, byteCount: t.byteCount, dataSize: dataSize)
            }
        }
        // Tensors may come in any order but must not share bytes.
        let sorted = tensors.filter { $0.byteCount > 0 }.sorted { $0.offset < $1.offset }
        for (a, b) in zip(sorted, sorted.dropFirst()) where a.offset + a.byteCount > b.offset {
            throw ModelAssetsError.malformed(
                path: path, item: "tensor '\(b.name)'", reason: "its data overlaps tensor '\(a.name)'")
        }
        return Parsed(version: version, keys: keys, metadata: metadata, tensors: tensors, index: index,
                      alignment: alignment, dataOffset: dataOffset)
    }

    private mutating func readString(_ item: @autoclosure () -> String) throws -> String {
        let length = try cursor.readLength(item())
        return try cursor.readUTF8(length, item())
    }

    /// GGUF arrays may nest; a depth cap keeps a hostile file from exhausting the stack.
    private mutating func readValue(_ type: GGUFValueType, key: String, depth: Int) throws -> GGUFValue {
        let item = { "value of key '\(key)'" }
        switch type {
        case .uint8: return .uint8(try cursor.read(UInt8.self, item()))
        case .int8: return .int8(try cursor.read(Int8.self, item()))
        case .uint16: return .uint16(try cursor.read(UInt16.self, item()))
        case .int16: return .int16(try cursor.read(Int16.self, item()))
        case .uint32: return .uint32(try cursor.read(UInt32.self, item()))
        case .int32: return .int32(try cursor.read(Int32.self, item()))
        case .uint64: return .uint64(try cursor.read(UInt64.self, item()))
        case .int64: return .int64(try cursor.read(Int64.self, item()))
        case .float32: return .float32(try cursor.readFloat(item()))
        case .float64: return .float64(try cursor.readDouble(item()))
        case .bool:
            let b = try cursor.read(UInt8.self, item())
            guard b <= 1 else { throw ModelAssetsError.malformed(path: path, item: "key '\(key)'", reason: "bool byte is \(b)") }
            return .bool(b == 1)
        case .string:
            return .string(try readString(item()))
        case .array:
            guard depth < 8 else {
                throw ModelAssetsError.malformed(path: path, item: "key '\(key)'", reason: "arrays nested deeper than 8 levels")
            }
            let rawElement = try cursor.read(UInt32.self, "element type of key '\(key)'")
            guard let element = GGUFValueType(rawValue: rawElement) else {
                throw ModelAssetsError.malformed(path: path, item: "key '\(key)'", reason: "unknown array element type \(rawElement)")
            }
            let count = try cursor.readLength("element count of key '\(key)'")
            try cursor.require(Self.multiply(count, element.minimumSize), "\(count) elements of key '\(key)'")
            var values: [GGUFValue] = []
            values.reserveCapacity(count)
            for _ in 0..<count {
                values.append(try readValue(element, key: key, depth: depth + 1))
            }
            return .array(elementType: element, values: values)
        }
    }

    /// a * b, saturating at Int.max so the following bound check fails cleanly.
    static func multiply(_ a: Int, _ b: Int) -> Int {
        let (p, o) = a.multipliedReportingOverflow(by: b)
        return o ? Int.max : p
    }

    static func describe(_ bytes: [UInt8]) -> String {
        if bytes.isEmpty { return "none (empty file)" }
        let hex = bytes.map { String(format: "%02x", $0) }.joined(separator: " ")
        return "\(hex)"
    }
}
