// The binary container of a package's weights (adapter_weights.bin, draft_weights.bin): magic,
// version, a JSON header (what the tensors are for, their names, shapes and offsets), fp16 data,
// and a SHA-256 trailer over everything before it. Layout and checks: docs/fmadapter-format.md.
// Read as hostile input in the manner of gguf.cpp: sizes bounded before use, truncation and
// checksum reported apart, every tensor range checked. Read as Float, or left as the fp16 values
// in the memory-mapped file (a packaged draft, never copied). Quantized storage is left out.
import Foundation
import ModelAssets

/// What a weights container holds, besides the tensors.
public struct WeightsHeader: Codable, Equatable, Sendable {
    public enum Content: String, Codable, Sendable { case adapter, draft }

    public struct TensorEntry: Codable, Equatable, Sendable {
        public var name: String
        public var shape: [Int]
        /// Byte offset of the tensor's first value from the start of the data section.
        public var offset: Int
    }

    public var content: Content
    public var dtype: String
    public var baseSignature: String
    /// The base model's configuration (adapter), or the draft model's own (draft).
    public var config: ModelConfig
    /// Adapter only.
    public var lora: LoRAConfig?
    public var dataLength: Int
    public var tensors: [TensorEntry]

    enum CodingKeys: String, CodingKey {
        case content, dtype, config, lora, tensors
        case baseSignature = "base_signature"
        case dataLength = "data_length"
    }
}

public enum WeightsContainer {
    public static let magic = Array("FMWEIGHT".utf8)
    public static let version: UInt32 = 1
    public static let alignment = 64
    public static let maxHeaderBytes = 16 << 20
    public static let checksumBytes = 32

    /// Serializes `tensors` (in the given order) as fp16 with `header`'s other fields; the
    /// header's `tensors` and `dataLength` are filled in here. Throws naming a tensor whose
    /// values do not fit fp16 (|x| > 65504 or not finite).
    public static func serialize(content: WeightsHeader.Content, baseSignature: String, config: ModelConfig,
                                 lora: LoRAConfig?, tensors: [(name: String, tensor: HostTensor)],
                                 file: String) throws -> Data {
        var out = [UInt8]()
        try emit(content: content, baseSignature: baseSignature, config: config, lora: lora,
                 tensors: tensors.map { ($0.name, .vector($0.tensor.data), $0.tensor.shape) }, file: file) { out += $0 }
        return Data(out)
    }

    /// `serialize` written straight to `path` (atomically), a tensor at a time: each is converted
    /// to fp16 as it is written, a held matrix a slice of rows at a time (a stored one dequantized
    /// slice by slice), and hashed as it goes. Memory holds one slice, never the container.
    public static func write(to path: String, content: WeightsHeader.Content, baseSignature: String, config: ModelConfig,
                             lora: LoRAConfig?, tensors: [(name: String, weight: NamedWeight)], file: String) throws {
        let stream = try AtomicFile.Stream(path: path)
        do {
            try emit(content: content, baseSignature: baseSignature, config: config, lora: lora,
                     tensors: tensors.map { ($0.name, $0.weight, $0.weight.shape) }, file: file) { bytes in
                try bytes.withUnsafeBytes { try stream.write($0) }
            }
            try stream.commit()
        } catch {
            stream.abandon()
            throw error
        }
    }

    /// The container's bytes in order, handed to `sink` in pieces: preamble and header, each
    /// tensor's fp16 values after its padding, the SHA-256 of everything before it.
    static func emit(content: WeightsHeader.Content, baseSignature: String, config: ModelConfig, lora: LoRAConfig?,
                     tensors: [(name: String, weight: NamedWeight, shape: [Int])], file: String,
                     sink: ([UInt8]) throws -> Void) throws {
        var entries: [WeightsHeader.TensorEntry] = []
        var offset = 0
        for (name, _, shape) in tensors {
            entries.append(.init(name: name, shape: shape, offset: offset))
            offset = roundUp(offset + 2 * shape.reduce(1, *), alignment)
        }
        let dataLength = tensors.isEmpty ? 0 : entries.last!.offset + 2 * tensors.last!.shape.reduce(1, *)
        let header = WeightsHeader(content: content, dtype: "F16", baseSignature: baseSignature, config: config,
                                   lora: lora, dataLength: dataLength, tensors: entries)
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        let json = try enc.encode(header)
        let dataStart = roundUp(16 + json.count, alignment)

        var hasher = SHA256()
        var written = 0
        func put(_ bytes: [UInt8]) throws {
            hasher.update(data: bytes)
            written += bytes.count
            try sink(bytes)
        }
        var head = [UInt8]()
        head += magic
        appendLE(&head, version)
        appendLE(&head, UInt32(json.count))
        head += json
        try put(head)
        for ((name, weight, shape), e) in zip(tensors, entries) {
            try put([UInt8](repeating: 0, count: dataStart + e.offset - written))
            try ModelExport.forEachSlice(.weight(weight), shape: shape) { values, _ in
                var out = [UInt8]()
                out.reserveCapacity(2 * values.count)
                for v in values {
                    let h = Float16(v)
                    guard h.isFinite else {
                        throw ModelError.unsupported("\(file): tensor '\(name)' holds \(v), which fp16 cannot store (largest finite fp16 is 65504); the weights are too large or not finite — check the checkpoint")
                    }
                    appendLE(&out, h.bitPattern)
                }
                try put(out)
            }
        }
        precondition(written == dataStart + dataLength || tensors.isEmpty && written <= dataStart, "[WeightsContainer] layout arithmetic")
        if tensors.isEmpty { try put([UInt8](repeating: 0, count: dataStart - written)) }
        try sink(Array(hasher.finalize()))
    }

    /// Reads and checks a container: magic, version, header, size (truncation), SHA-256,
    /// tensor ranges, finite values. Returns the header and the tensors as Float.
    public static func read(path: String) throws -> (header: WeightsHeader, tensors: [String: HostTensor]) {
        let mapping = try map(path)
        return try parse(mapping.data, path: path)
    }

    /// `read` without converting: every tensor as the fp16 values the file stores, pointing into
    /// the memory-mapped file (which the results keep alive), after the same checks.
    public static func readStored(path: String) throws -> (header: WeightsHeader, tensors: [String: StoredTensor]) {
        let mapping = try map(path)
        guard let base = mapping.base else { throw ModelError.weights(path: path, reason: "truncated: 0 bytes, too short even for the 16-byte preamble; re-export the package") }
        let (header, dataStart) = try check(UnsafeRawBufferPointer(start: base, count: mapping.count), path: path)
        var out: [String: StoredTensor] = [:]
        for e in header.tensors {
            let count = e.shape.reduce(1, *)
            out[e.name] = StoredTensor(type: .f16, shape: e.shape, bytes: base + dataStart + e.offset, byteCount: 2 * count, owner: mapping)
        }
        return (header, out)
    }

    static func map(_ path: String) throws -> MappedFile {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ModelError.weights(path: path, reason: "no such file")
        }
        do { return try MappedFile(path: path) } catch {
            throw ModelError.weights(path: path, reason: "cannot be read: \(error.localizedDescription)")
        }
    }

    public static func parse(_ data: Data, path: String) throws -> (header: WeightsHeader, tensors: [String: HostTensor]) {
        try data.withUnsafeBytes { raw in
            let (header, dataStart) = try check(raw, path: path)
            var tensors: [String: HostTensor] = [:]
            for e in header.tensors {
                let count = e.shape.reduce(1, *), at = dataStart + e.offset
                let values = (0..<count).map { i in Float(Float16(bitPattern: UInt16(raw[at + 2 * i]) | UInt16(raw[at + 2 * i + 1]) << 8)) }
                tensors[e.name] = HostTensor(shape: e.shape, data: values)
            }
            return (header, tensors)
        }
    }

    /// Every check of a container's bytes; returns the header and where the data section starts.
    static func check(_ bytes: UnsafeRawBufferPointer, path: String) throws -> (header: WeightsHeader, dataStart: Int) {
        func bad(_ reason: String) -> ModelError { .weights(path: path, reason: reason) }
        let size = bytes.count
        guard size >= 16 else {
            throw bad("truncated: \(size) bytes, too short even for the 16-byte preamble; re-export the package")
        }
        guard Array(bytes[0..<8]) == magic else {
            throw bad("does not start with the magic 'FMWEIGHT'; it is not a weights file of this toolkit (see docs/fmadapter-format.md)")
        }
        let version = readLE(bytes, 8)
        guard version >= 1, version <= Self.version else {
            throw bad("format version \(version) is not readable by this toolkit (it reads version \(Self.version)); update the toolkit or re-export the package")
        }
        let headerLength = Int(readLE(bytes, 12))
        guard headerLength > 0, headerLength <= maxHeaderBytes else {
            throw bad("declares a header of \(headerLength) bytes (allowed 1...\(maxHeaderBytes)); the file is damaged")
        }
        guard 16 + headerLength <= size else {
            throw bad("truncated: the header needs \(16 + headerLength) bytes but the file holds \(size); re-export the package")
        }
        let header: WeightsHeader
        do { header = try JSONDecoder().decode(WeightsHeader.self, from: Data(bytes[16..<(16 + headerLength)])) } catch {
            throw bad("the JSON header cannot be read (\(describe(error))); the file is damaged, re-export the package")
        }
        guard header.dtype == "F16" else {
            throw bad("stores dtype '\(header.dtype)'; this toolkit reads F16 only")
        }
        guard header.dataLength >= 0, header.dataLength <= Int(UInt32.max) * 64 else {
            throw bad("declares \(header.dataLength) bytes of tensor data, which is not plausible; the file is damaged")
        }
        let dataStart = roundUp(16 + headerLength, alignment)
        let expected = dataStart + header.dataLength + checksumBytes
        guard size >= expected else {
            throw bad("truncated: holds \(size) bytes but its header declares \(expected) (\(header.dataLength) bytes of tensor data and a \(checksumBytes)-byte checksum); the copy is incomplete, copy or re-export the package again")
        }
        guard size == expected else {
            throw bad("holds \(size - expected) bytes after its declared end (\(expected) bytes); the file is damaged, re-export the package")
        }
        let stored = Array(bytes[(size - checksumBytes)...])
        let actual = Array(SHA256.hash(data: UnsafeRawBufferPointer(rebasing: bytes[0..<(size - checksumBytes)])))
        guard stored == actual else {
            throw bad("checksum mismatch: the SHA-256 stored in its last 32 bytes is \(hex(stored)) but the contents hash to \(hex(actual)); the file is corrupted, re-export the package")
        }
        var names = Set<String>()
        var ranges: [(Range<Int>, String)] = []
        for e in header.tensors {
            var count = 1
            for d in e.shape {
                guard d >= 1 else { throw bad("tensor '\(e.name)' has shape \(e.shape) with a dimension below 1") }
                let (p, o) = count.multipliedReportingOverflow(by: d)
                guard !o, p <= header.dataLength else { throw bad("tensor '\(e.name)' has shape \(e.shape), larger than the data section") }
                count = p
            }
            guard !e.shape.isEmpty else { throw bad("tensor '\(e.name)' has an empty shape") }
            guard names.insert(e.name).inserted else { throw bad("tensor '\(e.name)' appears twice") }
            // count <= dataLength, so 2 * count cannot overflow; offset + 2 * count could.
            guard e.offset >= 0, e.offset <= header.dataLength - 2 * count else {
                throw bad("tensor '\(e.name)' (shape \(e.shape), offset \(e.offset)) reaches past the \(header.dataLength)-byte data section")
            }
            ranges.append((e.offset..<(e.offset + 2 * count), e.name))
            let base = dataStart + e.offset
            for i in 0..<count where bytes[base + 2 * i + 1] & 0x7C == 0x7C {  // fp16 exponent all ones: inf or NaN
                throw bad("tensor '\(e.name)' holds a non-finite value at index \(i)")
            }
        }
        ranges.sort { $0.0.lowerBound < $1.0.lowerBound }
        for (a, b) in zip(ranges, ranges.dropFirst()) where a.0.upperBound > b.0.lowerBound {
            throw bad("tensors '\(a.1)' and '\(b.1)' overlap")
        }
        return (header, dataStart)
    }

    // MARK: helpers

    static func roundUp(_ n: Int, _ a: Int) -> Int { (n + a - 1) / a * a }

    static func appendLE<T: FixedWidthInteger>(_ out: inout [UInt8], _ v: T) {
        withUnsafeBytes(of: v.littleEndian) { out += $0 }
    }

    static func readLE(_ b: UnsafeRawBufferPointer, _ at: Int) -> UInt32 {
        UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24
    }

    static func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }

    /// A decoding error in one line, naming the key where possible.
    static func describe(_ error: Error) -> String {
        guard let e = error as? DecodingError else { return error.localizedDescription }
        func path(_ c: DecodingError.Context) -> String {
            c.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        }
        switch e {
        case .keyNotFound(let key, let c):
            let p = path(c)
            return "no key '\(p.isEmpty ? key.stringValue : p + "." + key.stringValue)'"
        case .typeMismatch(_, let c), .valueNotFound(_, let c):
            return "key '\(path(c))' has the wrong type: \(c.debugDescription)"
        case .dataCorrupted(let c):
            return path(c).isEmpty ? c.debugDescription : "key '\(path(c))': \(c.debugDescription)"
        @unknown default:
            return "\(e)"
        }
    }
}
