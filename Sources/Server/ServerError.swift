// The one error type of the server: every case carries the HTTP status it is answered with and
// the OpenAI error fields (`type`, `param`, `code`), and says what was wrong and what to do.
// A request that is refused never takes a decoding slot.
import Foundation

public enum ServerError: Error, LocalizedError, Equatable, Sendable {
    /// The request body or a field of it is not what the API takes (`param`: the field's path).
    case invalidRequest(String, param: String? = nil, code: String? = nil)
    /// No served model has this id (base, or an adapter in the adapters folder).
    case unknownModel(String, known: [String])
    /// The id names an adapter in the folder that cannot be used on the loaded base.
    case refusedModel(String, reason: String)
    /// Prompt and reply do not fit the model's context.
    case contextExceeded(promptTokens: Int, maxTokens: Int, limit: Int)
    /// A schema, pattern or tool list that constrained decoding cannot enforce.
    case unsupportedGuide(String, param: String)
    /// The queue is full: try again after `retryAfter` seconds.
    case overloaded(queued: Int, retryAfter: Int)
    /// The body is larger than the server takes.
    case bodyTooLarge(limit: Int)
    case notFound(String)
    /// The server requires a key (`serve --api-key`) and the request gave none or another
    /// (`missing`: no `Authorization: Bearer` header at all).
    case unauthorized(missing: Bool)
    /// The server is shutting down.
    case unavailable
    /// A bug: never expected; answered 500 with what happened.
    case `internal`(String)

    public var status: Int {
        switch self {
        case .invalidRequest, .contextExceeded, .unsupportedGuide, .refusedModel: return 400
        case .unknownModel, .notFound: return 404
        case .unauthorized: return 401
        case .bodyTooLarge: return 413
        case .overloaded, .unavailable: return 503
        case .internal: return 500
        }
    }

    /// OpenAI's error `type`.
    public var type: String {
        switch self {
        case .invalidRequest, .unknownModel, .refusedModel, .contextExceeded, .unsupportedGuide, .bodyTooLarge, .notFound, .unauthorized:
            return "invalid_request_error"
        case .overloaded, .unavailable: return "server_overloaded"
        case .internal: return "server_error"
        }
    }

    public var param: String? {
        switch self {
        case .invalidRequest(_, let param, _): return param
        case .unknownModel, .refusedModel: return "model"
        case .contextExceeded: return "messages"
        case .unsupportedGuide(_, let param): return param
        default: return nil
        }
    }

    public var code: String? {
        switch self {
        case .invalidRequest(_, _, let code): return code
        case .unknownModel: return "model_not_found"
        case .refusedModel: return "model_refused"
        case .contextExceeded: return "context_length_exceeded"
        case .unsupportedGuide: return "unsupported_schema"
        case .overloaded: return "queue_full"
        case .bodyTooLarge: return "body_too_large"
        case .unauthorized(let missing): return missing ? "missing_api_key" : "invalid_api_key"
        default: return nil
        }
    }

    public var errorDescription: String? {
        switch self {
        case let .invalidRequest(message, _, _): return message
        case let .unknownModel(id, known):
            return "The model '\(id)' does not exist. Served models: \(known.joined(separator: ", ")) (GET /v1/models lists them; put an adapter in the adapters folder to add one)."
        case let .refusedModel(id, reason): return "The model '\(id)' cannot be served: \(reason)"
        case let .contextExceeded(prompt, maxTokens, limit):
            return "This model's maximum context length is \(limit) tokens, but \(prompt) prompt tokens and max_tokens \(maxTokens) need \(prompt + maxTokens). Shorten the messages or lower max_tokens."
        case let .unsupportedGuide(message, _): return "Constrained decoding cannot enforce this: \(message)"
        case let .overloaded(queued, retryAfter):
            return "The server is at capacity (\(queued) requests waiting); retry after \(retryAfter) s."
        case let .bodyTooLarge(limit): return "The request body is larger than \(limit) bytes."
        case let .notFound(what): return what
        case .unauthorized(true):
            return "This server requires an API key: send the header 'Authorization: Bearer KEY' with a key it was started with (serve --api-key, --api-key-file)."
        case .unauthorized(false):
            return "The API key given is not one this server accepts: send 'Authorization: Bearer KEY' with a key it was started with (serve --api-key, --api-key-file)."
        case .unavailable: return "The server is shutting down."
        case let .internal(what): return "Internal error: \(what)"
        }
    }
}
