import Hummingbird
import RISCStore
import Tracing

/// The server span of every request, named `METHOD ROUTE` (`POST /risc/events`) as OpenTelemetry's HTTP conventions
/// name it, with their attributes, each cut at 256 bytes. A well-formed incoming `traceparent` makes it a child of the
/// caller's span only on the routes that authenticate a bearer token (the admin API, the vault); on every other route
/// anyone can call (SETs, sign-in, the session check, health, metrics) the span starts a trace of its own, which the
/// local sampler decides, and links to the caller's: a stranger can neither force sampling (a `01` flag) nor add
/// spans to a trace of its choosing. Added only when tracing is on. Not Hummingbird's `TracingMiddleware`: that one
/// names the span by the route alone, records the query string, and hands every header to the propagator, whose
/// warning about an unreadable `traceparent` prints them all (Authorization included).
struct RequestTracingMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let incoming = request.headers.first { $0.name.canonicalName == "traceparent" }
            .flatMap { TraceContext.context(traceparent: $0.value) }
        // The router has matched the route before any middleware runs, so this is the route pattern, not the raw path.
        let trusted = Self.authenticatesBearer(route: context.endpointPath)
        let parent = (trusted ? incoming : nil) ?? ServiceContext.current ?? .topLevel
        let span = startSpan(request.method.rawValue, context: parent, ofKind: .server)
        if !trusted, let incoming { span.addLink(SpanLink(context: incoming, attributes: [:])) }
        span.updateAttributes { attributes in
            attributes["http.request.method"] = request.method.rawValue
            attributes["url.path"] = TraceContext.attribute(request.uri.path)
            attributes["url.scheme"] = "http"
            attributes["user_agent.original"] = request.headers[.userAgent].map(TraceContext.attribute)
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

    /// The admin API and the vault, whose every request must carry the admin or the service token.
    ///
    /// Decided by the route, before the token is checked (the span must start first, to time the whole request), so
    /// a request there with a wrong token still continues the caller's trace, sampling flag included. That costs
    /// little: authentication is the first thing those routes do, so such a request gets one short server span
    /// (answered 401) with nothing under it, no database work, and nothing stored that carries the trace on. One
    /// span per request is all a caller without the token can make exported; anything more needs the token.
    static func authenticatesBearer(route: String?) -> Bool {
        guard let route else { return false }
        return route.hasPrefix("/admin/") || route == "/v1/grants" || route.hasPrefix("/v1/grants/")
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
