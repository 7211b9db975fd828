// Writing GGUF files (version 3 by default, 2 on request): metadata of every value type,
// F32/F16/BF16 tensors from Float, or pre-encoded blocks of any ggml type; data aligned to
// `general.alignment`. Whole files in memory here; files too big for that go through
// GGUFStreamWriter, which shares the header code. Quantizing is in GGUFQuantize.swift.
// Follows gguf-py `GGUFWriter`'s layout.
import Foundation

public struct GGUFWriter: Sendable {
    public let version: UInt32
    public let alignment: Int
    private var keys: [String] = []
    private var values: [String: GGUFValue] = [:]
    private var tensorInfos: [GGUFTensorInfo] = []
    private var tensorData: [[UInt8]] = []
    private var dataSize = 0

    /// `alignment` must be a power of two; a value other than 32 is recorded as `general.alignment`.
    public init(version: UInt32 = 3, alignment: Int = GGUFFile.defaultAlignment) {
        precondition(GGUFFile.supportedVersions.contains(version), "[GGUFWriter] version \(version) is not writable")
        precondition(alignment > 0 && alignment & (alignment - 1) == 0 && alignment <= Int(UInt32.max),
                     "[GGUFWriter] alignment \(alignment) is not a power of two")
        self.version = version
        self.alignment = alignment
        if alignment != GGUFFile.defaultAlignment {
            keys.append("general.alignment")
            values["general.alignment"] = .uint32(UInt32(alignment))
        }
    }

    /// Adds a metadata entry; a key may be set once.
    public mutating func set(_ key: String, _ value: GGUFValue) throws {
        guard values[key] == nil else { throw ModelAssetsError.duplicateKey(path: "<GGUF being written>", key: key) }
        if key == "general.alignment" {
            throw ModelAssetsError.malformed(
                path: "<GGUF being written>", item: "key 'general.alignment'", reason: "set it through GGUFWriter(alignment:)")
        }
        try Self.check(value, key: key)
        keys.append(key)
        values[key] = value
    }

    /// Adds a tensor from row-major Floats (`shape` slowest-varying first), stored as F32, F16 or BF16.
    public mutating func addTensor(_ name: String, _ tensor: HostTensor, as type: GGMLType = .f32) throws {
        try addTensor(name, shape: tensor.shape, type: type, encoded: Self.encode(tensor.data, shape: tensor.shape, as: type, tensor: name))
    }

    /// Row-major values of `shape` (or whole rows of it) encoded as `type`: F32, F16 and BF16
    /// value by value, block types by our quantizer (round to nearest; refuses rows not made of
    /// whole blocks). Rows encode independently, so a tensor may be encoded a slice of rows at a time.
    public static func encode(_ values: [Float], shape: [Int], as type: GGMLType, tensor name: String) throws -> [UInt8] {
        var sink = ByteSink()
        switch type {
        case .f32:
            sink.bytes.reserveCapacity(4 * values.count)
            for v in values { sink.append(v) }
        case .f16:
            sink.bytes.reserveCapacity(2 * values.count)
            for v in values { sink.append(HalfFloat.f16(from: v)) }
        case .bf16:
            sink.bytes.reserveCapacity(2 * values.count)
            for v in values { sink.append(HalfFloat.bf16(from: v)) }
        default:
            let k = shape.last ?? 1
            return try Quantize.run(type, rows: k == 0 ? 0 : values.count / k, k: k, values: values, tensor: name)
        }
        return sink.bytes
    }

    /// Adds a tensor whose bytes are already encoded as `type` (blocks laid out row by row).
    public mutating func addTensor(_ name: String, shape: [Int], type: GGMLType, encoded: [UInt8]) throws {
        let info = try nextInfo(name, shape: shape, type: type)
        guard info.dimensions[0] % type.blockGeometry.blockSize == 0, encoded.count == info.byteCount else {
            throw ModelAssetsError.malformed(
                path: "<GGUF being written>", item: "tensor '\(name)'",
                reason: "\(encoded.count) bytes do not encode shape \(shape) as \(type.name) (\(info.byteCount) expected)")
        }
        tensorInfos.append(info)
        tensorData.append(encoded)
        dataSize += (encoded.count + alignment - 1) / alignment * alignment
    }

    /// The complete file.
    public func serialized() -> Data {
        precondition(tensorData.count == tensorInfos.count, "[GGUFWriter] a declared tensor has no data; stream it with GGUFStreamWriter")
        var out = header()
        for data in tensorData {
            out.append(bytes: data)
            out.pad(toMultipleOf: alignment)
        }
        return Data(out.bytes)
    }

    /// Declares a tensor whose bytes will be streamed (GGUFStreamWriter): checks the name and the
    /// shape as `addTensor` does and places it after the tensors declared so far.
    mutating func declareTensor(_ name: String, shape: [Int], type: GGMLType) throws -> GGUFTensorInfo {
        let info = try nextInfo(name, shape: shape, type: type)
        guard info.dimensions[0] % type.blockGeometry.blockSize == 0 else {
            throw ModelAssetsError.cannotQuantize(
                tensor: name, type: type.name,
                reason: "rows of \(info.dimensions[0]) values are not a whole number of \(type.blockGeometry.blockSize)-value blocks")
        }
        tensorInfos.append(info)
        dataSize += (info.byteCount + alignment - 1) / alignment * alignment
        return info
    }

    /// The descriptor of a new tensor placed after the others; refuses a repeated name or a bad shape.
    private func nextInfo(_ name: String, shape: [Int], type: GGMLType) throws -> GGUFTensorInfo {
        guard !tensorInfos.contains(where: { $0.name == name }) else {
            throw ModelAssetsError.duplicateTensor(path: "<GGUF being written>", tensor: name)
        }
        guard (1...GGUFFile.maxDimensions).contains(shape.count), shape.allSatisfy({ $0 >= 1 }) else {
            throw ModelAssetsError.malformed(path: "<GGUF being written>", item: "tensor '\(name)'", reason: "shape \(shape) is not writable")
        }
        return GGUFTensorInfo(name: name, dimensions: shape.reversed(), type: type, offset: dataSize)
    }

    /// Everything before the data section: magic, version, counts, metadata, tensor descriptors,
    /// padding to the alignment.
    func header() -> ByteSink {
        var out = ByteSink()
        out.append(bytes: GGUFFile.magic)
        out.append(version)
        out.append(UInt64(tensorInfos.count))
        out.append(UInt64(keys.count))
        for key in keys {
            Self.appendString(key, to: &out)
            let value = values[key]!
            out.append(value.type.rawValue)
            Self.append(value, to: &out)
        }
        for info in tensorInfos {
            Self.appendString(info.name, to: &out)
            out.append(UInt32(info.dimensions.count))
            for d in info.dimensions { out.append(UInt64(d)) }
            out.append(info.type.rawValue)
            out.append(UInt64(info.offset))
        }
        out.pad(toMultipleOf: alignment)
        return out
    }

    /// Writes the file atomically (temporary file, fsync, rename).
    public func write(to path: String) throws {
        try FileBytes.writeAtomically(serialized(), to: path)
    }

    private static func appendString(_ s: String, to out: inout ByteSink) {
        let utf8 = Array(s.utf8)
        out.append(UInt64(utf8.count))
        out.append(bytes: utf8)
    }

    private static func append(_ value: GGUFValue, to out: inout ByteSink) {
        switch value {
        case let .uint8(v): out.append(v)
        case let .int8(v): out.append(v)
        case let .uint16(v): out.append(v)
        case let .int16(v): out.append(v)
        case let .uint32(v): out.append(v)
        case let .int32(v): out.append(v)
        case let .uint64(v): out.append(v)
        case let .int64(v): out.append(v)
        case let .float32(v): out.append(v)
        case let .float64(v): out.append(v)
        case let .bool(v): out.append(UInt8(v ? 1 : 0))
        case let .string(s): appendString(s, to: &out)
        case let .array(elementType, items):
            out.append(elementType.rawValue)
            out.append(UInt64(items.count))
            for item in items { append(item, to: &out) }
        }
    }

    /// Arrays must hold values of their declared element type, as the reader will expect.
    private static func check(_ value: GGUFValue, key: String) throws {
        guard case let .array(elementType, items) = value else { return }
        for item in items {
            guard item.type == elementType else {
                throw ModelAssetsError.malformed(
                    path: "<GGUF being written>", item: "key '\(key)'",
                    reason: "array declared as \(elementType) holds a \(item.type)")
            }
            try check(item, key: key)
        }
    }
}
