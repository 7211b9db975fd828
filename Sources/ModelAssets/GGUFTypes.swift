// The vocabulary of GGUF files: ggml tensor types with their block geometry, metadata value
// types and values, and tensor descriptors. Parsing and writing live in GGUFReader/GGUFWriter.
// Ids and block sizes follow ggml.h / gguf-py `GGMLQuantizationType` and `GGML_QUANT_SIZES`.

/// A ggml tensor type. Every type ggml defines is listed so that files can be described and
/// refused by name; only `dequantizable` ones can be turned into Float.
public enum GGMLType: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    case f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9
    case q2_K = 10, q3_K = 11, q4_K = 12, q5_K = 13, q6_K = 14, q8_K = 15
    case iq2_XXS = 16, iq2_XS = 17, iq3_XXS = 18, iq1_S = 19, iq4_NL = 20, iq3_S = 21, iq2_S = 22, iq4_XS = 23
    case i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_M = 29, bf16 = 30
    case tq1_0 = 34, tq2_0 = 35, mxfp4 = 39, nvfp4 = 40, q1_0 = 41

    /// The types this package converts to Float.
    public static let dequantizable: [GGMLType] = [.f32, .f16, .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .iq4_NL, .q2_K, .q3_K, .q4_K, .q5_K, .q6_K]

    public var isDequantizable: Bool { Self.dequantizable.contains(self) }

    /// The name as ggml prints it ("Q4_K", "BF16", ...).
    public var name: String {
        switch self {
        case .f32: "F32"
        case .f16: "F16"
        case .q4_0: "Q4_0"
        case .q4_1: "Q4_1"
        case .q5_0: "Q5_0"
        case .q5_1: "Q5_1"
        case .q8_0: "Q8_0"
        case .q8_1: "Q8_1"
        case .q2_K: "Q2_K"
        case .q3_K: "Q3_K"
        case .q4_K: "Q4_K"
        case .q5_K: "Q5_K"
        case .q6_K: "Q6_K"
        case .q8_K: "Q8_K"
        case .iq2_XXS: "IQ2_XXS"
        case .iq2_XS: "IQ2_XS"
        case .iq3_XXS: "IQ3_XXS"
        case .iq1_S: "IQ1_S"
        case .iq4_NL: "IQ4_NL"
        case .iq3_S: "IQ3_S"
        case .iq2_S: "IQ2_S"
        case .iq4_XS: "IQ4_XS"
        case .i8: "I8"
        case .i16: "I16"
        case .i32: "I32"
        case .i64: "I64"
        case .f64: "F64"
        case .iq1_M: "IQ1_M"
        case .bf16: "BF16"
        case .tq1_0: "TQ1_0"
        case .tq2_0: "TQ2_0"
        case .mxfp4: "MXFP4"
        case .nvfp4: "NVFP4"
        case .q1_0: "Q1_0"
        }
    }

    public var description: String { name }

    /// (values per block, bytes per block), as `GGML_QUANT_SIZES`.
    public var blockGeometry: (blockSize: Int, typeSize: Int) {
        let qk = 256
        switch self {
        case .f32: return (1, 4)
        case .f16: return (1, 2)
        case .q4_0: return (32, 2 + 16)
        case .q4_1: return (32, 2 + 2 + 16)
        case .q5_0: return (32, 2 + 4 + 16)
        case .q5_1: return (32, 2 + 2 + 4 + 16)
        case .q8_0: return (32, 2 + 32)
        case .q8_1: return (32, 4 + 4 + 32)
        case .q2_K: return (qk, 2 + 2 + qk / 16 + qk / 4)
        case .q3_K: return (qk, 2 + qk / 4 + qk / 8 + 12)
        case .q4_K: return (qk, 2 + 2 + qk / 2 + 12)
        case .q5_K: return (qk, 2 + 2 + qk / 2 + qk / 8 + 12)
        case .q6_K: return (qk, 2 + qk / 2 + qk / 4 + qk / 16)
        case .q8_K: return (qk, 4 + qk + qk / 8)
        case .iq2_XXS: return (qk, 2 + qk / 4)
        case .iq2_XS: return (qk, 2 + qk / 4 + qk / 32)
        case .iq3_XXS: return (qk, 2 + qk / 4 + qk / 8)
        case .iq1_S: return (qk, 2 + qk / 8 + qk / 16)
        case .iq4_NL: return (32, 2 + 16)
        case .iq3_S: return (qk, 2 + qk / 4 + qk / 8 + qk / 32 + 4)
        case .iq2_S: return (qk, 2 + qk / 4 + qk / 16)
        case .iq4_XS: return (qk, 2 + 2 + qk / 2 + qk / 64)
        case .i8: return (1, 1)
        case .i16: return (1, 2)
        case .i32: return (1, 4)
        case .i64: return (1, 8)
        case .f64: return (1, 8)
        case .iq1_M: return (qk, qk / 8 + qk / 16 + qk / 32)
        case .bf16: return (1, 2)
        case .tq1_0: return (qk, 2 + 4 * 13)
        case .tq2_0: return (qk, 2 + 64)
        case .mxfp4: return (32, 1 + 16)
        case .nvfp4: return (64, 4 + 32)
        case .q1_0: return (128, 2 + 16)
        }
    }
}

/// The type tag of a GGUF metadata value (gguf.h `gguf_type`).
public enum GGUFValueType: UInt32, Sendable, CaseIterable {
    case uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6
    case bool = 7, string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12

    /// Bytes of one value on disk; nil for variable-size types (string, array).
    var fixedSize: Int? {
        switch self {
        case .uint8, .int8, .bool: 1
        case .uint16, .int16: 2
        case .uint32, .int32, .float32: 4
        case .uint64, .int64, .float64: 8
        case .string, .array: nil
        }
    }

    /// The fewest bytes one value can take, used to bound counts before allocating.
    var minimumSize: Int {
        switch self {
        case .string: 8  // the length
        case .array: 12  // element type + count
        default: fixedSize!
        }
    }
}

/// One metadata value. Arrays carry their element type so that empty arrays round-trip.
public enum GGUFValue: Sendable, Equatable {
    case uint8(UInt8), int8(Int8), uint16(UInt16), int16(Int16), uint32(UInt32), int32(Int32)
    case uint64(UInt64), int64(Int64), float32(Float), float64(Double), bool(Bool), string(String)
    /// Every element has type `elementType`; nested arrays have `elementType == .array`.
    case array(elementType: GGUFValueType, values: [GGUFValue])

    public var type: GGUFValueType {
        switch self {
        case .uint8: .uint8
        case .int8: .int8
        case .uint16: .uint16
        case .int16: .int16
        case .uint32: .uint32
        case .int32: .int32
        case .uint64: .uint64
        case .int64: .int64
        case .float32: .float32
        case .float64: .float64
        case .bool: .bool
        case .string: .string
        case .array: .array
        }
    }

    /// Any integer type as Int (nil for non-integers and for a UInt64 above Int.max).
    public var intValue: Int? {
        switch self {
        case let .uint8(v): Int(v)
        case let .int8(v): Int(v)
        case let .uint16(v): Int(v)
        case let .int16(v): Int(v)
        case let .uint32(v): Int(v)
        case let .int32(v): Int(v)
        case let .uint64(v): v <= UInt64(Int.max) ? Int(v) : nil
        case let .int64(v): Int(v)
        default: nil
        }
    }

    /// Any float or integer type as Double.
    public var doubleValue: Double? {
        switch self {
        case let .float32(v): Double(v)
        case let .float64(v): v
        default: intValue.map(Double.init)
        }
    }

    public var stringValue: String? {
        if case let .string(s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case let .bool(b) = self { return b }
        return nil
    }

    public var arrayValue: [GGUFValue]? {
        if case let .array(_, values) = self { return values }
        return nil
    }

    /// An array of strings, or nil if this is not one.
    public var stringArray: [String]? {
        guard case let .array(type, values) = self, type == .string else { return nil }
        return values.map { $0.stringValue! }
    }

    /// An array of integers (any integer element type), or nil if this is not one.
    public var intArray: [Int]? {
        guard case let .array(_, values) = self else { return nil }
        var out: [Int] = []
        out.reserveCapacity(values.count)
        for v in values {
            guard let i = v.intValue else { return nil }
            out.append(i)
        }
        return out
    }
}

/// One tensor as a GGUF file describes it.
public struct GGUFTensorInfo: Sendable, Equatable {
    public var name: String
    /// ggml's `ne`: fastest-varying dimension first (`dimensions[0]` is the row length).
    public var dimensions: [Int]
    public var type: GGMLType
    /// Byte offset from the start of the data section.
    public var offset: Int

    public init(name: String, dimensions: [Int], type: GGMLType, offset: Int) {
        self.name = name
        self.dimensions = dimensions
        self.type = type
        self.offset = offset
    }

    /// Row-major shape, slowest-varying first (`[rows, columns]` for a matrix).
    public var shape: [Int] { dimensions.reversed() }
    public var elementCount: Int { dimensions.reduce(1, *) }
    public var byteCount: Int {
        let (blockSize, typeSize) = type.blockGeometry
        return elementCount / blockSize * typeSize
    }
}
