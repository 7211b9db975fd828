// The HTTP side of the server, on Hummingbird 2: the routes of docs/openapi.yaml, request bodies
// read up to a limit, replies as JSON or as server-sent events (`text/event-stream`). Every error
// becomes an OpenAI error body `{"error": {"message", "type", "param", "code"}}` with its status
// (a full queue: 503 with Retry-After), including the framework's own (unknown route, body too
// large). A streaming client that disconnects makes the next write fail, which cancels its
// request and frees its slot. With keys (AccessKeys), every route but /health needs
// `Authorization: Bearer KEY`; a refusal is a 401 error body with `WWW-Authenticate: Bearer`.
import DataSchema
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

public enum HTTPServer {
    /// Seconds to the millisecond, as a JSON number.
    static func seconds(_ s: Double) -> JSONValue { .number(JSONNumber((s * 1000).rounded() / 1000) ?? JSONNumber(0)) }

    /// The server's routes over `service`, behind `keys`.
    public static func router(_ service: OpenAIService, keys: AccessKeys = .open) -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: OpenAIErrorMiddleware())
        router.add(middleware: AccessKeyMiddleware(keys: keys))
        router.get("/health") { _, _ -> Response in
            let s = service.scheduler.status, t = service.scheduler.timing, c = service.scheduler.promptCacheUse
            return json(object([("status", .string("ok")), ("active", number(s.active)), ("queued", number(s.queued)),
                                ("passes", number(s.passes)), ("row_steps", number(s.rowSteps)), ("cancelled", number(s.cancelled)),
                                ("prefills", number(t.prefills)), ("prefill_tokens", number(t.prefillTokens)),
                                ("prefill_seconds", seconds(t.prefillSeconds)), ("pass_seconds", seconds(t.passSeconds)),
                                ("choose_seconds", seconds(t.chooseSeconds)),
                                ("prompt_cache_hits", number(c.hits)), ("prompt_tokens_reused", number(c.reusedTokens)),
                                ("unauthorized", number(keys.refused))]))
        }
        router.get("/v1/models") { _, _ -> Response in json(service.models()) }
        router.get("/v1/models/:id") { _, context -> Response in
            json(try service.model(context.parameters.get("id") ?? ""))
        }
        router.post("/v1/chat/completions") { request, _ -> Response in
            reply(try await service.chatCompletions(try await body(request, limit: service.limits.maxBodyBytes)))
        }
        router.post("/v1/completions") { request, _ -> Response in
            reply(try await service.completions(try await body(request, limit: service.limits.maxBodyBytes)))
        }
        return router
    }

    /// An application serving `service` on `host:port` (0: a free port) behind `keys`; `onRunning` gets the port.
    public static func application(_ service: OpenAIService, host: String, port: Int, keys: AccessKeys = .open,
                                   onRunning: @escaping @Sendable (Int) -> Void = { _ in }) -> some ApplicationProtocol {
        var logger = Logger(label: "serve")
        logger.logLevel = .warning
        return Application(router: router(service, keys: keys), configuration: .init(address: .hostname(host, port: port), serverName: "adapter-toolkit-serve"),
                           onServerRunning: { channel in onRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }

    static func body(_ request: Request, limit: Int) async throws -> [UInt8] {
        var buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw ServerError.bodyTooLarge(limit: limit)
        } catch let e as HTTPError where e.status == .contentTooLarge {
            throw ServerError.bodyTooLarge(limit: limit)
        }
        return buffer.readBytes(length: buffer.readableBytes) ?? []
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers extra: HTTPFields = [:]) -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        headers.append(contentsOf: extra)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: value.compactText)))
    }

    static func reply(_ reply: OpenAIService.Reply) -> Response {
        switch reply {
        case .json(let value): return json(value)
        case .stream(let stream):
            let body = ResponseBody { writer in
                defer { stream.cancel() }  // however it ends (a write to a client that left throws), the slot is freed
                while let event = await stream.next() {
                    try await writer.write(ByteBuffer(string: event))
                }
                try await writer.finish(nil)
            }
            return Response(status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"], body: body)
        }
    }

    static func errorResponse(_ error: ServerError) -> Response {
        var headers: HTTPFields = [:]
        if case .overloaded(_, let retryAfter) = error { headers[.retryAfter] = String(retryAfter) }
        if case .unauthorized = error { headers[.wwwAuthenticate] = "Bearer" }
        return json(error.body, status: HTTPResponse.Status(code: error.status), headers: headers)
    }
}

/// Every error as an OpenAI error body: the server's own, the framework's (404, 405, 413, ...),
/// and, should one escape, anything else as a 500 that says what it was.
struct OpenAIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let e as ServerError {
            return HTTPServer.errorResponse(e)
        } catch let e as HTTPError {
            let message = e.body ?? "\(e.status.code) \(e.status.reasonPhrase): \(request.method) \(request.uri.path)"
            let error: ServerError = e.status == .notFound ? .notFound("No route \(request.method) \(request.uri.path); see GET /v1/models, POST /v1/chat/completions, POST /v1/completions.")
                : e.status == .contentTooLarge ? .bodyTooLarge(limit: 0) : .invalidRequest(message)
            var response = HTTPServer.errorResponse(error)
            response.status = e.status
            return response
        } catch {
            return HTTPServer.errorResponse(.internal(String(describing: error)))
        }
    }
}

/// Requests to every route but /health need one of the keys (when there are any).
struct AccessKeyMiddleware<Context: RequestContext>: RouterMiddleware {
    let keys: AccessKeys

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if keys.isRequired, request.uri.path != "/health", let refusal = keys.check(authorization: request.headers[.authorization]) {
            throw refusal
        }
        return try await next(request, context)
    }
}
