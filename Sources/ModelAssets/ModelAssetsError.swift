// The one error type of ModelAssets: every way a model file, config or tensor set can be
// refused. Each message names the file and the key or tensor at fault and says what to do.
// Engine bugs use `precondition` instead. Follows gguf.cpp's habit of naming the culprit.
import Foundation

public enum ModelAssetsError: LocalizedError, Equatable, Sendable {
    /// The file could not be opened, read or written at all.
    case io(path: String, reason: String)
    /// The first bytes are not the format's magic.
    case badMagic(path: String, expected: String, found: String)
    case unsupportedVersion(path: String, version: UInt32, supported: [UInt32])
    /// A count or size claims more bytes than the file has left.
    case truncated(path: String, item: String, needed: Int, available: Int)
    /// A structurally readable value with an impossible content (bad type id, bad UTF-8, ...).
    case malformed(path: String, item: String, reason: String)
    case duplicateKey(path: String, key: String)
    case duplicateTensor(path: String, tensor: String)
    case missingKey(path: String, key: String)
    /// A GGUF tensor type id that this reader does not know at all.
    case unknownTensorType(path: String, tensor: String, typeID: UInt32)
    /// A known tensor type that cannot be converted to Float here.
    case unsupportedTensorType(path: String, tensor: String, type: String, supported: [String])
    case tensorOutOfRange(path: String, tensor: String, offset: Int, byteCount: Int, dataSize: Int)
    case misalignedTensor(path: String, tensor: String, offset: Int, alignment: Int)
    case missingTensor(path: String, tensor: String)
    case unexpectedTensor(path: String, tensor: String)
    case shapeMismatch(path: String, tensor: String, expected: [Int], found: [Int])
    case invalidConfig(path: String, field: String, reason: String)
    /// Values that cannot be stored as the requested tensor type (row length, non-finite values, ...).
    case cannotQuantize(tensor: String, type: String, reason: String)
    /// A streamed GGUF whose tensors did not receive the bytes their descriptors declared.
    case incompleteWrite(path: String, tensor: String, written: Int, expected: Int)

    public var errorDescription: String? {
        switch self {
        case let .io(path, reason):
            return "\(path): \(reason). Check that the path exists and is readable (or writable)."
        case let .badMagic(path, expected, found):
            return "\(path): not a \(expected) file (first bytes are \(found)). Pass a \(expected) file."
        case let .unsupportedVersion(path, version, supported):
            let list = supported.map(String.init).joined(separator: ", ")
            return "\(path): format version \(version) is not supported (supported: \(list)). Re-convert the model with a current converter."
        case let .truncated(path, item, needed, available):
            return "\(path): \(item) needs \(needed) bytes but only \(available) remain; the file is truncated or corrupt. Download or convert it again."
        case let .malformed(path, item, reason):
            return "\(path): \(item): \(reason). The file is corrupt or was written by an incompatible tool."
        case let .duplicateKey(path, key):
            return "\(path): key '\(key)' appears more than once; the file is corrupt."
        case let .duplicateTensor(path, tensor):
            return "\(path): tensor '\(tensor)' appears more than once; the file is corrupt."
        case let .missingKey(path, key):
            return "\(path): required key '\(key)' is missing. Use a file converted with its full metadata."
        case let .unknownTensorType(path, tensor, typeID):
            return "\(path): tensor '\(tensor)' has unknown ggml type id \(typeID). Supported for loading: \(GGMLType.dequantizable.map(\.name).joined(separator: ", "))."
        case let .unsupportedTensorType(path, tensor, type, supported):
            return "\(path): tensor '\(tensor)' has type \(type), which cannot be loaded. Supported: \(supported.joined(separator: ", ")). Re-quantize the model to one of these."
        case let .tensorOutOfRange(path, tensor, offset, byteCount, dataSize):
            return "\(path): tensor '\(tensor)' spans bytes \(offset)..<\(offset + byteCount) of a \(dataSize)-byte data section; the file is truncated or corrupt."
        case let .misalignedTensor(path, tensor, offset, alignment):
            return "\(path): tensor '\(tensor)' starts at data offset \(offset), which is not a multiple of the alignment \(alignment); the file is corrupt."
        case let .missingTensor(path, tensor):
            return "\(path): tensor '\(tensor)' is missing. The checkpoint is incomplete or not of the expected architecture."
        case let .unexpectedTensor(path, tensor):
            return "\(path): tensor '\(tensor)' is not part of the expected architecture; refusing to drop it silently. Use a decoder checkpoint of a supported architecture (\(ModelArchitecture.allCases.map(\.rawValue).joined(separator: ", ")))."
        case let .shapeMismatch(path, tensor, expected, found):
            return "\(path): tensor '\(tensor)' has shape \(found) but the config implies \(expected). The weights do not match the config."
        case let .invalidConfig(path, field, reason):
            return "\(path): config field '\(field)': \(reason)."
        case let .cannotQuantize(tensor, type, reason):
            return "tensor '\(tensor)' cannot be stored as \(type): \(reason)."
        case let .incompleteWrite(path, tensor, written, expected):
            return "\(path): tensor '\(tensor)' was given \(written) bytes but its descriptor declares \(expected); write each tensor's bytes completely, in the declared order. The file was not created."
        }
    }
}
