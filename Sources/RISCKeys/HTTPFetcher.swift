import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat

/// A JSON document fetched over HTTP with the lifetime its `Cache-Control: max-age` grants.
struct FetchedDocument: Sendable {
    var body: Data
    var maxAge: TimeInterval?
}

enum FetchError: Error, CustomStringConvertible {
    case status(Int, url: String)
    case transport(String, url: String)

    var description: String {
        switch self {
        case .status(let status, let url): "GET \(url) answered HTTP \(status)"
        case .transport(let error, let url): "GET \(url) failed: \(error)"
        }
    }
}

extension HTTPClient {
    /// GETs a small JSON document; any non-200 answer is an error.
    func fetchDocument(_ url: String, timeout: TimeAmount = .seconds(10)) async throws -> FetchedDocument {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        let response: HTTPClientResponse
        do {
            response = try await execute(request, timeout: timeout)
        } catch {
            throw FetchError.transport(String(describing: error), url: url)
        }
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok else { throw FetchError.status(Int(response.status.code), url: url) }
        return FetchedDocument(
            body: Data(buffer: body),
            maxAge: CacheControl.maxAge(response.headers["Cache-Control"].joined(separator: ","))
        )
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
