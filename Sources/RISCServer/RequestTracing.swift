import Hummingbird
import RISCStore
import Tracing

/// The server span of every request, named `METHOD ROUTE` (`POST /risc/events`) as OpenTelemetry's HTTP conventions
/// name it, with their attributes; a well-formed incoming `traceparent` makes it a child of the caller's span.
/// Added only when tracing is on. Not Hummingbird's `TracingMiddleware`: that one names the span by the route
/// alone, records the query string, and hands every header to the propagator, whose warning about an unreadable
/// `traceparent` prints them all (Authorization included).
struct RequestTracingMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let incoming = request.headers.first { $0.name.canonicalName == "traceparent" }?.value
        let parent = incoming.flatMap { TraceContext.context(traceparent: $0) } ?? ServiceContext.current ?? .topLevel
        let span = startSpan(request.method.rawValue, context: parent, ofKind: .server)
        span.updateAttributes { attributes in
            attributes["http.request.method"] = request.method.rawValue
            attributes["url.path"] = request.uri.path
            attributes["url.scheme"] = "http"
            attributes["user_agent.original"] = request.headers[.userAgent]
        }
        defer { span.end() }
        do {
            let response = try await ServiceContext.$current.withValue(span.context) { try await next(request, context) }
            finish(span, route: context.endpointPath, method: request.method, status: Int(response.status.code))
            return response
        } catch {
            finish(span, route: context.endpointPath, method: request.method, status: Int((error as? any HTTPResponseError)?.status.code ?? 500))
            throw error
        }
    }

    private func finish(_ span: any Span, route: String?, method: HTTPRequest.Method, status: Int) {
        if let route { span.operationName = "\(method.rawValue) \(route)" }
        span.updateAttributes { attributes in
            attributes["http.route"] = route
            attributes["http.response.status_code"] = status
        }
        if status >= 500 { span.setStatus(.init(code: .error)) }
    }
}

/// A span of its own for an operation of the service's (sign-in, the session check, each vault call), under the
/// request's, with the status it answered; nothing about the user or the token.
func operationSpan(_ name: String, _ body: () async throws -> Response) async throws -> Response {
    try await TraceContext.span(name) { span in
        do {
            let response = try await body()
            span?.attributes["risc.status_code"] = Int(response.status.code)
            return response
        } catch {
            span?.attributes["risc.status_code"] = Int((error as? any HTTPResponseError)?.status.code ?? 500)
            throw error
        }
    }
}
