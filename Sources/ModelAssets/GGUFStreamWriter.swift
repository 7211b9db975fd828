// Writing a GGUF file too big to hold in memory: the header and every tensor descriptor first
// (the data offsets follow from the declared shapes and types), then each tensor's bytes in
// declaration order, in pieces of any size, padded to the alignment; the file appears under its
// name only when complete (AtomicFile.Stream). Producing the bytes is the caller's; reading is
// GGUFReader's. Layout as GGUFWriter (gguf-py `GGUFWriter` with `use_temp_file`'s streaming order).
import Foundation

public final class GGUFStreamWriter {
    /// A tensor to be written: row-major `shape` (slowest-varying first) stored as `type`.
    public struct Tensor: Sendable, Equatable {
        public var name: String
        public var shape: [Int]
        public var type: GGMLType
        public init(name: String, shape: [Int], type: GGMLType) {
            self.name = name
            self.shape = shape
            self.type = type
        }
    }

    public let path: String
    /// The descriptors as written, with their data offsets.
    public let tensors: [GGUFTensorInfo]
    /// Size of the finished file in bytes.
    public let fileSize: Int
    private let alignment: Int
    private let file: AtomicFile.Stream
    private var current = 0
    private var writtenInCurrent = 0

    /// Creates the temporary file and writes the header: metadata in the given order (checked as
    /// `GGUFWriter.set` checks it), then the descriptors. Data is expected next, tensor by tensor.
    public init(path: String, metadata: [(String, GGUFValue)], tensors: [Tensor],
                version: UInt32 = 3, alignment: Int = GGUFFile.defaultAlignment) throws {
        var header = GGUFWriter(version: version, alignment: alignment)
        for (key, value) in metadata { try header.set(key, value) }
        var infos: [GGUFTensorInfo] = []
        for t in tensors { infos.append(try header.declareTensor(t.name, shape: t.shape, type: t.type)) }
        let head = header.header()
        self.path = path
        self.tensors = infos
        self.alignment = alignment
        let dataSize = infos.last.map { ($0.offset + $0.byteCount + alignment - 1) / alignment * alignment } ?? 0
        fileSize = head.bytes.count + dataSize
        file = try AtomicFile.Stream(path: path)
        try head.bytes.withUnsafeBytes { try file.write($0) }
    }

    /// Bytes in the file so far (header, data and padding).
    public var bytesWritten: Int { file.bytesWritten }

    /// The tensor the next `write` belongs to; nil once every tensor is complete.
    public var nextTensor: GGUFTensorInfo? { current < tensors.count ? tensors[current] : nil }

    /// Appends bytes of the current tensor. A piece may not run past the current tensor's end;
    /// when a tensor is complete the padding is written and the next tensor becomes current.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count > 0 else { return }
        guard let info = nextTensor else {
            let last = tensors.last?.name ?? "<none>"
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: last, written: (tensors.last?.byteCount ?? 0) + bytes.count,
                                                   expected: tensors.last?.byteCount ?? 0)
        }
        guard writtenInCurrent + bytes.count <= info.byteCount else {
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: info.name, written: writtenInCurrent + bytes.count, expected: info.byteCount)
        }
        try file.write(bytes)
        writtenInCurrent += bytes.count
        try padIfComplete()
    }

    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Checks that every tensor got all its bytes, then flushes and renames the file into place.
    /// Returns the file size.
    @discardableResult
    public func finish() throws -> Int {
        if let info = nextTensor {
            file.abandon()
            throw ModelAssetsError.incompleteWrite(path: path, tensor: info.name, written: writtenInCurrent, expected: info.byteCount)
        }
        precondition(file.bytesWritten == fileSize, "[GGUFStreamWriter] wrote \(file.bytesWritten) bytes of a \(fileSize)-byte file")
        try file.commit()
        return fileSize
    }

    /// Stops without creating the file (the temporary file is removed).
    public func abandon() { file.abandon() }

    /// A completed tensor gets its padding, and the next one becomes current.
    private func padIfComplete() throws {
        if let info = nextTensor, writtenInCurrent == info.byteCount {
            let padding = (alignment - info.byteCount % alignment) % alignment
            if padding > 0 {
                try [UInt8](repeating: 0, count: padding).withUnsafeBytes { try file.write($0) }
            }
            current += 1
            writtenInCurrent = 0
        }
    }
}
