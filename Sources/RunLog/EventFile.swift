// TensorBoard event files: TFRecord framing (uint64 length, masked CRC-32C of those 8 bytes, the
// bytes, masked CRC-32C of the bytes; little-endian) around serialized `Event` messages
// (proto/tensorboard/event.proto). The writer starts a file with the version record and appends
// scalars; the reader reads a whole file back and checks every CRC (tests, tools). Follows the
// layout of TensorFlow's record_writer.cc and TensorBoard's file names
// (events.out.tfevents.TIME.HOST.PID.N: TensorBoard picks up any name containing "tfevents").
import Foundation
import SwiftProtobuf
#if canImport(Glibc)
import Glibc
#endif

public enum TFRecord {
    /// One record: the framing around `data`.
    public static func frame(_ data: Data) -> Data {
        let lengthBytes = withUnsafeBytes(of: UInt64(data.count).littleEndian) { Data($0) }
        var out = Data(capacity: data.count + 16)
        out += lengthBytes
        appendUInt32(&out, CRC32C.masked(CRC32C.checksum(lengthBytes)))
        out += data
        appendUInt32(&out, CRC32C.masked(CRC32C.checksum(data)))
        return out
    }

    /// The records of a whole file, every length and CRC checked. Throws `RunLogError.corrupt`
    /// naming the byte offset of the first bad record.
    public static func records(in file: Data, path: String) throws -> [Data] {
        let bytes = [UInt8](file)
        var records: [Data] = []
        var at = 0
        func bad(_ why: String) -> RunLogError {
            .corrupt(path: path, reason: "record \(records.count + 1) at byte \(at): \(why); the file is damaged or was cut while being written")
        }
        while at < bytes.count {
            guard bytes.count - at >= 12 else { throw bad("only \(bytes.count - at) bytes left for a 12-byte header") }
            let lengthBytes = bytes[at..<at + 8]
            let length = lengthBytes.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            guard readUInt32(bytes, at + 8) == CRC32C.masked(CRC32C.checksum(lengthBytes)) else { throw bad("the length's CRC does not match") }
            guard length <= UInt64(bytes.count - at - 16) else { throw bad("length \(length) runs past the end of the file") }
            let end = at + 12 + Int(length)
            let data = bytes[at + 12..<end]
            guard readUInt32(bytes, end) == CRC32C.masked(CRC32C.checksum(data)) else { throw bad("the data's CRC does not match") }
            records.append(Data(data))
            at = end + 4
        }
        return records
    }

    static func appendUInt32(_ out: inout Data, _ v: UInt32) {
        withUnsafeBytes(of: v.littleEndian) { out += $0 }
    }

    static func readUInt32(_ b: [UInt8], _ at: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(b[at + $1]) << (8 * UInt32($1)) }
    }
}

/// One scalar of an event file.
public struct ScalarEvent: Sendable, Equatable {
    public var tag: String
    public var step: Int
    public var wallTime: Double
    public var value: Float
}

/// Appends events to a new file in a folder, one record per call, written through at once (a
/// TensorBoard watching the folder shows each step as it comes).
public final class EventFileWriter {
    public static let fileVersion = "brain.Event:2"
    public let path: String
    private let handle: FileHandle
    /// Tags whose description was written (TensorBoard keeps the metadata of a tag's first value).
    private var described: Set<String> = []

    /// Creates `events.out.tfevents.TIME.HOST.PID.N` in `folder` (created if missing; N makes the
    /// name new) and writes the version record.
    public init(folder: String, wallTime: Double = Date().timeIntervalSince1970) throws {
        do { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) } catch {
            throw RunLogError.io(path: folder, reason: "cannot create the folder for TensorBoard events: \(error.localizedDescription)")
        }
        var host = [CChar](repeating: 0, count: 256)
        let hostName = gethostname(&host, host.count) == 0
            ? String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "localhost"
        let stem = folder + "/events.out.tfevents." + String(format: "%010d", Int(wallTime)) + ".\(hostName).\(getpid())."
        var n = 0
        var fd: Int32 = -1
        while fd < 0 {
            fd = open(stem + "\(n)", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            if fd < 0 {
                guard errno == EEXIST, n < 1000 else {
                    throw RunLogError.io(path: stem + "\(n)", reason: "cannot create the TensorBoard event file: \(String(cString: strerror(errno))); check the folder is writable or pass --report-to none")
                }
                n += 1
            }
        }
        path = stem + "\(n)"
        handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var first = Tensorboard_Event()
        first.wallTime = wallTime
        first.fileVersion = Self.fileVersion
        try write(first)
    }

    /// Tells readers that the run (re)starts at `step`: TensorBoard drops what it holds from that
    /// step on (a live TensorBoard that read an older file of a resumed run).
    public func start(step: Int, wallTime: Double) throws {
        var e = Tensorboard_Event()
        e.wallTime = wallTime
        e.step = Int64(step)
        e.sessionLog.status = .start
        try write(e)
    }

    /// One event holding `scalars` at `step` (float32, as TensorBoard stores them). `descriptions`
    /// by tag go with a tag's first value in this file.
    public func write(scalars: [(tag: String, value: Double)], step: Int, wallTime: Double,
                      descriptions: [String: String] = [:]) throws {
        guard !scalars.isEmpty else { return }
        var e = Tensorboard_Event()
        e.wallTime = wallTime
        e.step = Int64(step)
        e.summary.value = scalars.map { s in
            var v = Tensorboard_Summary.Value()
            v.tag = s.tag
            v.simpleValue = Float(s.value)
            if !described.contains(s.tag), let d = descriptions[s.tag] {
                v.metadata.summaryDescription = d
                // Metadata names its plugin (TensorBoard warns about metadata without one).
                v.metadata.pluginData.pluginName = "scalars"
                described.insert(s.tag)
            }
            return v
        }
        try write(e)
    }

    func write(_ event: Tensorboard_Event) throws {
        do { try handle.write(contentsOf: TFRecord.frame(try event.serializedData())) } catch {
            throw RunLogError.io(path: path, reason: "cannot write a TensorBoard event: \(error.localizedDescription)")
        }
    }

    public func close() { try? handle.close() }
}

/// An event file read back.
public struct EventFileContents: Sendable {
    public var fileVersion: String?
    public var scalars: [ScalarEvent]
    /// Steps of SessionLog START records.
    public var starts: [Int]

    public init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw RunLogError.io(path: path, reason: "cannot read the event file")
        }
        fileVersion = nil
        scalars = []
        starts = []
        for (i, record) in try TFRecord.records(in: data, path: path).enumerated() {
            let e: Tensorboard_Event
            do { e = try Tensorboard_Event(serializedBytes: record) } catch {
                throw RunLogError.corrupt(path: path, reason: "record \(i + 1) is not an Event message (\(error))")
            }
            switch e.what {
            case .fileVersion(let v): fileVersion = v
            case .sessionLog(let s) where s.status == .start: starts.append(Int(e.step))
            case .summary(let s):
                for v in s.value {
                    if case .simpleValue(let x) = v.value {
                        scalars.append(ScalarEvent(tag: v.tag, step: Int(e.step), wallTime: e.wallTime, value: x))
                    }
                }
            default: break
            }
        }
    }

    /// The event files of `folder` (not its subfolders), oldest name first.
    public static func files(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [])
            .filter { $0.hasPrefix("events.out.tfevents.") }.sorted().map { folder + "/" + $0 }
    }
}
