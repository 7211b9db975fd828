// Data transforms: the `DataTransform` protocol (messages + sample index in, messages out),
// applied after decoding and before validation and rendering, and the built-in
// `SchemaInjectionTransform`, the counterpart of the toolkit's guided-generation transform
// that attaches a response_format to chosen user turns. Leaves out transforms that add samples.
import ModelAssets

/// Rewrites one sample's messages. Throwing rejects that sample with the error's message;
/// the reader reports it as `file:line: data transform: ...`.
public protocol DataTransform: Sendable {
    /// `sampleIndex` is the sample's 0-based position among the file's samples (non-blank
    /// lines, valid or not), so a selection stays stable when other lines are rejected.
    func transform(_ messages: [Message], sampleIndex: Int) throws -> [Message]
}

/// A transform from a closure, for one-off rewrites in library code and tests.
public struct ClosureTransform: DataTransform {
    let body: @Sendable ([Message], Int) throws -> [Message]
    public init(_ body: @escaping @Sendable (_ messages: [Message], _ sampleIndex: Int) throws -> [Message]) {
        self.body = body
    }
    public func transform(_ messages: [Message], sampleIndex: Int) throws -> [Message] {
        try body(messages, sampleIndex)
    }
}

/// A user turn of one sample: both indices 0-based (`turn` indexes the messages array).
public struct TurnReference: Sendable, Hashable, Codable {
    public var sample: Int
    public var turn: Int
    public init(sample: Int, turn: Int) {
        self.sample = sample
        self.turn = turn
    }
}

/// Attaches `responseFormat` to chosen user turns; the validator then checks that each
/// chosen turn's reply conforms to the schema.
public struct SchemaInjectionTransform: DataTransform {
    public enum Selection: Sendable, Equatable {
        /// Every sample.
        case allSamples
        /// Samples whose index lies in the range.
        case samples(Range<Int>)
        /// Exactly these turns; each must be a user turn.
        case turns(Set<TurnReference>)
    }

    /// Which user turns of a selected sample (unused for `.turns`).
    public enum UserTurns: String, Sendable, Codable, CaseIterable {
        case all, first, last
    }

    public var responseFormat: ResponseFormat
    public var selection: Selection
    public var userTurns: UserTurns
    /// A chosen turn that already has a response_format keeps it unless this is true.
    public var replaceExisting: Bool

    public init(responseFormat: ResponseFormat, selection: Selection = .allSamples,
                userTurns: UserTurns = .last, replaceExisting: Bool = false) {
        self.responseFormat = responseFormat
        self.selection = selection
        self.userTurns = userTurns
        self.replaceExisting = replaceExisting
    }

    public func transform(_ messages: [Message], sampleIndex: Int) throws -> [Message] {
        var chosen: [Int]
        switch selection {
        case .turns(let refs):
            chosen = refs.filter { $0.sample == sampleIndex }.map(\.turn).sorted()
            for t in chosen {
                guard t >= 0, t < messages.count else {
                    throw DataSchemaError.invalidTransform(
                        "schema injection names turn index \(t) of sample \(sampleIndex), which has \(messages.count) turns (indices are 0-based)")
                }
                guard messages[t].role == .user else {
                    throw DataSchemaError.invalidTransform(
                        "schema injection names turn index \(t) of sample \(sampleIndex), \(messages[t].role == .assistant ? "an" : "a") \(messages[t].role.rawValue) turn; only user turns take a response_format")
                }
            }
        case .samples(let range) where !range.contains(sampleIndex):
            return messages
        case .allSamples, .samples:
            let users = messages.indices.filter { messages[$0].role == .user }
            switch userTurns {
            case .all: chosen = users
            case .first: chosen = users.first.map { [$0] } ?? []
            case .last: chosen = users.last.map { [$0] } ?? []
            }
        }
        var out = messages
        for t in chosen where out[t].responseFormat == nil || replaceExisting {
            out[t].responseFormat = responseFormat
        }
        return out
    }
}
