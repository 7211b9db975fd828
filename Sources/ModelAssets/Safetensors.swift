// Reading and writing safetensors files (F32, F16, BF16 data; the `__metadata__` string map) and
// sharded checkpoints (`model.safetensors.index.json`). Other dtypes are described but not
// converted. Follows the safetensors crate's `Metadata::validate` rules: bounded header, contiguous offsets.
import Foundation

public enum SafetensorsDType: String, Sendable, CaseIterable {
    case f64 = "F64", f32 = "F32", f16 = "F16", bf16 = "BF16"
    case i64 = "I64", i32 = "I32", i16 = "I16", i8 = "I8"
    case u64 = "U64", u32 = "U32", u16 = "U16", u8 = "U8", bool = "BOOL"
    case f8e4m3 = "F8_E4M3", f8e5m2 = "F8_E5M2"

    /// The dtypes converted to and from Float here.
    public static let convertible: [SafetensorsDType] = [.f32, .f16, .bf16]

    public var byteSize: Int {
        switch self {
        case .f64, .i64, .u64: 8
        case .f32, .i32, .u32: 4
        case .f16, .bf16, .i16, .u16: 2
        case .i8, .u8, .bool, .f8e4m3, .f8e5m2: 1
        }
    }
}

public struct SafetensorsTensorInfo: Sendable, Equatable {
    public var name: String
    public var dtype: SafetensorsDType
    /// Row-major shape; `[]` is a scalar.
    public var shape: [Int]
    /// Byte range within the data buffer that follows the header.
    public var dataOffsets: Range<Int>
}

/// A parsed safetensors file; tensors are converted to Float on request.
public struct SafetensorsFile: Sendable {
    /// The safetensors crate refuses headers above 100 MB; so do we.
    public static let maxHeaderSize = 100_000_000

    public let path: String
    public let metadata: [String: String]
    /// Tensors in data order.
    public let tensors: [SafetensorsTensorInfo]
    private let index: [String: Int]
    private let bytes: Data
    private let dataStart: Int
    /// The mapping behind `bytes` when the file was opened by path: what stored tensors point into.
    public let mapping: MappedFile?

    /// Opens and validates a safetensors file, memory-mapped, never copied.
    public init(path: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { throw ModelAssetsError.io(path: path, reason: "no such file") }
        if isDirectory.boolValue { throw ModelAssetsError.io(path: path, reason: "is a folder, not a file") }
        let mapping = try MappedFile(path: path)
        try self.init(data: mapping.data, path: path, mapping: mapping)
    }

    /// Parses safetensors bytes already in memory; `path` names them in errors.
    public init(data: Data, path: String) throws {
        try self.init(data: data, path: path, mapping: nil)
    }

    private init(data: Data, path: String, mapping: MappedFile?) throws {
        self.path = path
        self.mapping = mapping
        bytes = data
        let header: [String: Any]
        (header, dataStart) = try data.withUnsafeBytes { raw -> ([String: Any], Int) in
            var cursor = ByteCursor(raw, path: path)
            let size = try cursor.readLength("header size")
            guard size <= Self.maxHeaderSize else {
                throw ModelAssetsError.malformed(path: path, item: "header", reason: "declares \(size) bytes, above the \(Self.maxHeaderSize)-byte limit")
            }
            let text = try cursor.readBytes(size, "header")
            guard text.first == UInt8(ascii: "{") else {
                throw ModelAssetsError.malformed(path: path, item: "header", reason: "does not start with '{'; not a safetensors file")
            }
            let object: Any
            do {
                object = try JSONSerialization.jsonObject(with: Data(text), options: [])
            } catch {
                throw ModelAssetsError.malformed(path: path, item: "header", reason: "is not valid JSON (\(error.localizedDescription))")
            }
            guard let dict = object as? [String: Any] else {
                throw ModelAssetsError.malformed(path: path, item: "header", reason: "is not a JSON object")
            }
            return (dict, cursor.offset)
        }
        let bufferSize = data.count - dataStart

        var metadata: [String: String] = [:]
        var infos: [SafetensorsTensorInfo] = []
        for (name, entry) in header {
            if name == "__metadata__" {
                guard let map = entry as? [String: Any] else {
                    throw ModelAssetsError.malformed(path: path, item: "__metadata__", reason: "must be an object of strings")
                }
                for (k, v) in map {
                    guard let s = v as? String else {
                        throw ModelAssetsError.malformed(path: path, item: "__metadata__ key '\(k)'", reason: "value is not a string")
                    }
                    metadata[k] = s
                }
                continue
            }
            infos.append(try Self.parseEntry(name: name, entry: entry, path: path))
        }
        infos.sort { ($0.dataOffsets.lowerBound, $0.dataOffsets.upperBound, $0.name) < ($1.dataOffsets.lowerBound, $1.dataOffsets.upperBound, $1.name) }
        var expected = 0
        for info in infos {
            guard info.dataOffsets.lowerBound == expected else {
                throw ModelAssetsError.malformed(
                    path: path, item: "tensor '\(info.name)'",
                    reason: "data_offsets start at \(info.dataOffsets.lowerBound), expected \(expected) (tensors must tile the buffer without gaps or overlaps)")
            }
            guard info.dataOffsets.upperBound <= bufferSize else {
                throw ModelAssetsError.tensorOutOfRange(
                    path: path, tensor: info.name, offset: info.dataOffsets.lowerBound,
                    byteCount: info.dataOffsets.count, dataSize: bufferSize)
            }
            expected = info.dataOffsets.upperBound
        }
        guard expected == bufferSize else {
            throw ModelAssetsError.malformed(
                path: path, item: "data buffer", reason: "tensors cover \(expected) bytes but the file holds \(bufferSize) after the header")
        }
        self.metadata = metadata
        tensors = infos
        index = Dictionary(uniqueKeysWithValues: infos.enumerated().map { ($1.name, $0) })
    }

    private static func parseEntry(name: String, entry: Any, path: String) throws -> SafetensorsTensorInfo {
        func bad(_ reason: String) -> ModelAssetsError { .malformed(path: path, item: "tensor '\(name)'", reason: reason) }
        guard let dict = entry as? [String: Any] else { throw bad("entry is not an object") }
        guard let dtypeName = dict["dtype"] as? String else { throw bad("has no dtype") }
        guard let dtype = SafetensorsDType(rawValue: dtypeName) else {
            throw ModelAssetsError.unsupportedTensorType(
                path: path, tensor: name, type: dtypeName, supported: SafetensorsDType.convertible.map(\.rawValue))
        }
        guard let shapeAny = dict["shape"] as? [Any] else { throw bad("has no shape array") }
        var shape: [Int] = []
        var elements = 1
        for d in shapeAny {
            guard let n = Self.integer(d), n >= 0 else { throw bad("shape \(shapeAny) has a non-integer or negative dimension") }
            let (p, o) = elements.multipliedReportingOverflow(by: n)
            guard !o else { throw bad("shape \(shapeAny) overflows") }
            elements = p
            shape.append(n)
        }
        guard let offsets = dict["data_offsets"] as? [Any], offsets.count == 2,
              let begin = Self.integer(offsets[0]), let end = Self.integer(offsets[1]), begin >= 0, begin <= end
        else { throw bad("data_offsets must be [begin, end] with 0 <= begin <= end") }
        let (bytes, o) = elements.multipliedReportingOverflow(by: dtype.byteSize)
        guard !o, bytes == end - begin else {
            throw bad("shape \(shape) of \(dtype.rawValue) needs \(o ? Int.max : bytes) bytes but data_offsets span \(end - begin)")
        }
        return SafetensorsTensorInfo(name: name, dtype: dtype, shape: shape, dataOffsets: begin..<end)
    }

    /// A JSON number that is an exact integer.
    private static func integer(_ any: Any) -> Int? { jsonInteger(any) }

    public func tensorInfo(named name: String) -> SafetensorsTensorInfo? {
        index[name].map { tensors[$0] }
    }

    /// The tensor as Float in row-major order.
    public func tensor(_ name: String) throws -> HostTensor {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        guard SafetensorsDType.convertible.contains(info.dtype) else {
            throw ModelAssetsError.unsupportedTensorType(
                path: path, tensor: name, type: info.dtype.rawValue, supported: SafetensorsDType.convertible.map(\.rawValue))
        }
        let count = info.shape.reduce(1, *)
        let values = [Float](unsafeUninitializedCapacity: count) { buffer, initialized in
            bytes.withUnsafeBytes { raw in
                let start = dataStart + info.dataOffsets.lowerBound
                let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + info.dataOffsets.count)])
                guard let out = buffer.baseAddress else { return }
                switch info.dtype {
                case .f32: Dequantize.run(.f32, raw: slice, count: count, into: out)
                case .f16: Dequantize.run(.f16, raw: slice, count: count, into: out)
                default: Dequantize.run(.bf16, raw: slice, count: count, into: out)
                }
            }
            initialized = count
        }
        return HostTensor(shape: info.shape, data: values)
    }

    /// An F32, F16 or BF16 tensor as the file stores it, without a copy: the address of its
    /// first byte inside the mapping (which the result keeps alive), with the GGML type of the
    /// same encoding. Only for a file opened by path; nil for other dtypes.
    public func stored(_ name: String) throws -> StoredTensor? {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        guard let mapping, let base = mapping.base else {
            throw ModelAssetsError.io(path: path, reason: "the tensors of in-memory safetensors bytes cannot be kept as stored; open the file by path")
        }
        let type: GGMLType
        switch info.dtype {
        case .f32: type = .f32
        case .f16: type = .f16
        case .bf16: type = .bf16
        default: return nil
        }
        return StoredTensor(type: type, shape: info.shape, bytes: base + dataStart + info.dataOffsets.lowerBound,
                            byteCount: info.dataOffsets.count, owner: mapping)
    }

    /// The tensor's stored bytes.
    public func rawBytes(of name: String) throws -> Data {
        guard let info = tensorInfo(named: name) else { throw ModelAssetsError.missingTensor(path: path, tensor: name) }
        let start = bytes.startIndex + dataStart + info.dataOffsets.lowerBound
        return bytes.subdata(in: start..<(start + info.dataOffsets.count))
    }
}

/// Builds a safetensors file: tensors in the order added, the header padded to 8 bytes.
public struct SafetensorsWriter: Sendable {
    public var metadata: [String: String]
    private var entries: [(name: String, dtype: SafetensorsDType, shape: [Int], bytes: [UInt8])] = []

    public init(metadata: [String: String] = [:]) {
        self.metadata = metadata
    }

    public mutating func add(_ name: String, _ tensor: HostTensor, as dtype: SafetensorsDType = .f32) throws {
        let where_ = "<safetensors being written>"
        guard name != "__metadata__", !entries.contains(where: { $0.name == name }) else {
            throw ModelAssetsError.duplicateTensor(path: where_, tensor: name)
        }
        let bytes = try tensor.data.withUnsafeBufferPointer { try Self.encode($0, as: dtype, tensor: name) }
        entries.append((name, dtype, tensor.shape, bytes))
    }

    public func serialized() -> Data {
        let header = Self.header(metadata: metadata, tensors: entries.map { ($0.name, $0.dtype, $0.shape, $0.bytes.count) })
        var out = ByteSink()
        out.bytes.reserveCapacity(header.count + entries.reduce(0) { $0 + $1.bytes.count })
        out.append(bytes: header)
        for e in entries { out.append(bytes: e.bytes) }
        return Data(out.bytes)
    }

    /// The bytes before the data: the header's length, then the JSON header (metadata, then the
    /// tensors in data order) padded with spaces to 8 bytes.
    static func header(metadata: [String: String], tensors: [(name: String, dtype: SafetensorsDType, shape: [Int], byteCount: Int)]) -> [UInt8] {
        var json = "{"
        var parts: [String] = []
        if !metadata.isEmpty {
            let items = metadata.keys.sorted().map { "\(jsonString($0)):\(jsonString(metadata[$0]!))" }
            parts.append("\"__metadata__\":{\(items.joined(separator: ","))}")
        }
        var offset = 0
        for e in tensors {
            let shape = e.shape.map(String.init).joined(separator: ",")
            parts.append("\(jsonString(e.name)):{\"dtype\":\"\(e.dtype.rawValue)\",\"shape\":[\(shape)],\"data_offsets\":[\(offset),\(offset + e.byteCount)]}")
            offset += e.byteCount
        }
        json += parts.joined(separator: ",") + "}"
        var header = Array(json.utf8)
        while header.count % 8 != 0 { header.append(UInt8(ascii: " ")) }
        var out = ByteSink()
        out.append(UInt64(header.count))
        out.append(bytes: header)
        return out.bytes
    }

    /// Float values as `dtype`'s little-endian bytes (F32, F16, BF16).
    static func encode(_ values: UnsafeBufferPointer<Float>, as dtype: SafetensorsDType, tensor name: String) throws -> [UInt8] {
        var sink = ByteSink()
        sink.bytes.reserveCapacity(values.count * dtype.byteSize)
        switch dtype {
        case .f32: for v in values { sink.append(v) }
        case .f16: for v in values { sink.append(HalfFloat.f16(from: v)) }
        case .bf16: for v in values { sink.append(HalfFloat.bf16(from: v)) }
        default:
            throw ModelAssetsError.unsupportedTensorType(
                path: "<safetensors being written>", tensor: name, type: dtype.rawValue, supported: SafetensorsDType.convertible.map(\.rawValue))
        }
        return sink.bytes
    }

    /// Writes the file atomically (temporary file, fsync, rename).
    public func write(to path: String) throws {
        try FileBytes.writeAtomically(serialized(), to: path)
    }
}

/// Writes a safetensors file too big to hold in memory: the header first (every tensor's name,
/// dtype and shape declared up front), then each tensor's values in declaration order, in pieces
/// of whole values; the file appears under its name only when complete (AtomicFile.Stream). The
/// bytes equal `SafetensorsWriter`'s for the same tensors.
public final class SafetensorsStreamWriter {
    public struct Tensor: Sendable, Equatable {
        public var name: String
        public var dtype: SafetensorsDType
        public var shape: [Int]
        public init(name: String, dtype: SafetensorsDType, shape: [Int]) {
            self.name = name
            self.dtype = dtype
            self.shape = shape
        }
        var byteCount: Int { shape.reduce(1, *) * dtype.byteSize }
    }

    public let path: String
    public let tensors: [Tensor]
    private let file: AtomicFile.Stream
    private var current = 0
    private var writtenInCurrent = 0

    public init(path: String, metadata: [String: String], tensors: [Tensor]) throws {
        var seen = Set<String>()
        for t in tensors {
            guard t.name != "__metadata__", seen.insert(t.name).inserted else { throw ModelAssetsError.duplicateTensor(path: path, tensor: t.name) }
            guard SafetensorsDType.convertible.contains(t.dtype) else {
                throw ModelAssetsError.unsupportedTensorType(path: path, tensor: t.name, type: t.dtype.rawValue, supported: SafetensorsDType.convertible.map(\.rawValue))
            }
        }
        self.path = path
        self.tensors = tensors
        let header = SafetensorsWriter.header(metadata: metadata, tensors: tensors.map { ($0.name, $0.dtype, $0.shape, $0.byteCount) })
        file = try AtomicFile.Stream(path: path)
        try header.withUnsafeBytes { try file.write($0) }
        skipEmpty()
    }

    /// Tensors without values are complete as soon as they are current.
    private func skipEmpty() {
        while current < tensors.count && tensors[current].byteCount == 0 { current += 1 }
    }

    /// The tensor the next `write` belongs to; nil once every tensor is complete.
    public var nextTensor: Tensor? { current < tensors.count ? tensors[current] : nil }

    /// Appends values of the current tensor (converted to its dtype); they may not run past its end.
    public func write(_ values: UnsafeBufferPointer<Float>) throws {
        guard !values.isEmpty else { return }
        guard let t = nextTensor else {
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: tensors.last?.name ?? "<none>", written: values.count, expected: 0)
        }
        let bytes = try SafetensorsWriter.encode(values, as: t.dtype, tensor: t.name)
        guard writtenInCurrent + bytes.count <= t.byteCount else {
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: t.name, written: writtenInCurrent + bytes.count, expected: t.byteCount)
        }
        try bytes.withUnsafeBytes { try file.write($0) }
        writtenInCurrent += bytes.count
        if writtenInCurrent == t.byteCount {
            current += 1
            writtenInCurrent = 0
            skipEmpty()
        }
    }

    public func write(_ values: [Float]) throws {
        try values.withUnsafeBufferPointer { try write($0) }
    }

    /// Checks that every tensor got all its values, then flushes and renames the file into place.
    public func finish() throws {
        if let t = nextTensor {
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: t.name, written: writtenInCurrent, expected: t.byteCount)
        }
        try file.commit()
    }

    /// Stops without creating the file (the temporary file is removed).
    public func abandon() { file.abandon() }
}

/// JSON string literal with the escapes RFC 8259 requires.
func jsonString(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 {
                out += String(format: "\\u%04x", scalar.value)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

/// The weights of a Hugging Face folder: one `model.safetensors`, or shards listed by
/// `model.safetensors.index.json`. Each shard is opened once; every tensor appears exactly once.
public struct SafetensorsCheckpoint: Sendable {
    public let folder: String
    /// Tensor name -> the shard holding it.
    public let shards: [String: SafetensorsFile]

    public init(folder: String) throws {
        self.folder = folder
        let dir = URL(fileURLWithPath: folder)
        let indexPath = dir.appendingPathComponent("model.safetensors.index.json").path
        let singlePath = dir.appendingPathComponent("model.safetensors").path
        var shards: [String: SafetensorsFile] = [:]
        if FileManager.default.fileExists(atPath: indexPath) {
            let weightMap = try Self.readIndex(indexPath)
            var opened: [String: SafetensorsFile] = [:]
            for file in Set(weightMap.values).sorted() {
                opened[file] = try SafetensorsFile(path: dir.appendingPathComponent(file).path)
            }
            for (name, file) in weightMap {
                let shard = opened[file]!
                guard shard.tensorInfo(named: name) != nil else {
                    throw ModelAssetsError.missingTensor(path: shard.path, tensor: name)
                }
                shards[name] = shard
            }
            for shard in opened.values {
                for t in shard.tensors where weightMap[t.name] == nil {
                    throw ModelAssetsError.malformed(
                        path: indexPath, item: "weight_map", reason: "tensor '\(t.name)' in \(shard.path) is not listed")
                }
            }
        } else if FileManager.default.fileExists(atPath: singlePath) {
            let file = try SafetensorsFile(path: singlePath)
            for t in file.tensors { shards[t.name] = file }
        } else {
            throw ModelAssetsError.io(path: folder, reason: "has neither model.safetensors nor model.safetensors.index.json")
        }
        self.shards = shards
    }

    public var tensorNames: [String] { shards.keys.sorted() }

    public func tensor(_ name: String) throws -> HostTensor {
        guard let shard = shards[name] else { throw ModelAssetsError.missingTensor(path: folder, tensor: name) }
        return try shard.tensor(name)
    }

    public func tensorInfo(named name: String) -> SafetensorsTensorInfo? {
        shards[name]?.tensorInfo(named: name)
    }

    /// `weight_map` of an index file; shard names must be plain file names in the same folder.
    static func readIndex(_ path: String) throws -> [String: String] {
        let data = try FileBytes.read(path: path)
        guard let object = try? JSONSerialization.jsonObject(with: data, options: []) as? [String: Any] else {
            throw ModelAssetsError.malformed(path: path, item: "index", reason: "is not a JSON object")
        }
        guard let map = object["weight_map"] as? [String: Any] else {
            throw ModelAssetsError.missingKey(path: path, key: "weight_map")
        }
        var out: [String: String] = [:]
        for (name, value) in map {
            guard let file = value as? String, !file.isEmpty, !file.contains("/"), !file.contains("\\"),
                  file != ".", file != ".."
            else {
                throw ModelAssetsError.malformed(path: path, item: "weight_map entry '\(name)'", reason: "shard must be a file name in the same folder")
            }
            out[name] = file
        }
        return out
    }
}
