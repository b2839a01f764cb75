import Hummingbird
import RISC

/// A refusal with the `{"error": CODE, "description": ...}` body of the session, vault and admin APIs.
/// Handlers throw it; the router renders it. The receiver's RFC 8935 bodies are not this.
public struct APIError: HTTPResponseError, Sendable, CustomStringConvertible {
    public let status: HTTPResponse.Status
    public let code: String
    /// The `description` member, when there is more to say than the code.
    public let message: String?
    /// The `parameter` member of the admin API's `invalid_parameter` answers: which parameter is at fault.
    public let parameter: String?
    /// Sent as a Retry-After header (seconds).
    public let retryAfter: Int?

    public init(
        _ status: HTTPResponse.Status, _ code: String, description: String? = nil, parameter: String? = nil,
        retryAfter: Int? = nil
    ) {
        self.status = status
        self.code = code
        self.message = description
        self.parameter = parameter
        self.retryAfter = retryAfter
    }

    /// For logs: the code and status, never more (a description may echo the request).
    public var description: String { "APIError(\(status.code) \(code))" }

    public func response(from request: Request, context: some RequestContext) throws -> Response { response }

    /// Serialized as a JSONValue, not with JSONEncoder: the session check refuses on a hot path.
    var response: Response {
        var body: [String: JSONValue] = ["error": .string(code)]
        if let message { body["description"] = .string(message) }
        if let parameter { body["parameter"] = .string(parameter) }
        var headers = HTTPFields()
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return JSONResponse.make(status: status, json: .object(body), headers: headers)
    }
}
