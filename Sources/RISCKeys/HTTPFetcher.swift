import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import RISC

/// A JSON document fetched over HTTP with the lifetime its `Cache-Control: max-age` grants.
struct FetchedDocument: Sendable {
    var body: Data
    var maxAge: TimeInterval?
}

enum FetchError: Error, CustomStringConvertible {
    case status(Int, url: String)
    case transport(String, url: String)
    /// The URL, or a redirect's target, is neither https nor loopback http.
    case insecureURL(String)
    case tooManyRedirects(url: String)

    var description: String {
        switch self {
        case .status(let status, let url): "GET \(url) answered HTTP \(status)"
        case .transport(let error, let url): "GET \(url) failed: \(error)"
        case .insecureURL(let url): "\(url) is not an https:// URL (http:// only on loopback)"
        case .tooManyRedirects(let url): "GET \(url) redirected too many times"
        }
    }
}

extension HTTPClient {
    /// Follows no redirect. For key documents, which decide what is accepted, so that `fetchDocument` can check
    /// every hop (AsyncHTTPClient would follow https to http); and for the OAuth calls, whose bodies hold a client
    /// secret and a refresh token (AsyncHTTPClient keeps the body on a 307 or 308, to wherever it points).
    /// No spans of AsyncHTTPClient's: they would record URLs, and send a traceparent to Google.
    static let withoutRedirects: HTTPClient = {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// GETs a small JSON document over https (or loopback http), following at most 3 redirects that stay so;
    /// any other answer than 200 is an error.
    func fetchDocument(_ url: String, timeout: TimeAmount = .seconds(10)) async throws -> FetchedDocument {
        var current = url
        for _ in 0...3 {
            guard URLPolicy.isHTTPSOrLoopback(current) else { throw FetchError.insecureURL(current) }
            var request = HTTPClientRequest(url: current)
            request.headers.add(name: "Accept", value: "application/json")
            let response: HTTPClientResponse
            do {
                response = try await execute(request, timeout: timeout)
            } catch {
                throw FetchError.transport(NetworkErrors.describe(error), url: current)
            }
            let body = try await response.body.collect(upTo: 1 << 20)
            if (300...399).contains(response.status.code), let location = response.headers["Location"].first,
                let target = URL(string: location, relativeTo: URL(string: current))?.absoluteString
            {
                current = target
                continue
            }
            guard response.status == .ok else { throw FetchError.status(Int(response.status.code), url: current) }
            return FetchedDocument(
                body: Data(buffer: body),
                maxAge: CacheControl.maxAge(response.headers["Cache-Control"].joined(separator: ","))
            )
        }
        throw FetchError.tooManyRedirects(url: url)
    }
}

enum CacheControl {
    /// The `max-age` directive in seconds; nil when absent. `no-cache`/`no-store` count as zero.
    static func maxAge(_ header: String) -> TimeInterval? {
        var result: TimeInterval?
        for directive in header.split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            let name = parts.first.map { $0.lowercased() } ?? ""
            if name == "no-cache" || name == "no-store" { return 0 }
            if name == "max-age", parts.count == 2, let seconds = TimeInterval(parts[1].trimmingCharacters(in: .whitespaces)) {
                result = max(0, seconds)
            }
        }
        return result
    }
}

extension HTTPClient {
    /// A call to a JSON API with a bearer token (Google's management API, a transmitter's stream endpoints): the status,
    /// and the body (up to 1 MiB) as it came.
    func callJSON(
        _ method: HTTPMethod, _ url: String, bearer: String, json: JSONValue?, timeout: TimeAmount = .seconds(30), maxBody: Int = 1 << 20
    ) async throws -> (status: Int, body: Data) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
        request.headers.add(name: "Accept", value: "application/json")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json.serialized))
        }
        let response = try await execute(request, timeout: timeout)
        return (Int(response.status.code), Data(buffer: try await response.body.collect(upTo: maxBody)))
    }
}
