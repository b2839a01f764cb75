import Foundation
import Hummingbird
import NIOCore
import RISC

enum JSONResponse {
    /// Every JSON answer of the service: one serializer (sorted keys, RFC 3339 timestamps), no JSONEncoder,
    /// whose per-call setup the session check, a hot path, would pay.
    static func make(status: HTTPResponse.Status, json value: JSONValue, headers extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: value.serialized)))
    }

    /// A typed answer (the admin API's), through the same serializer.
    static func make(status: HTTPResponse.Status, encoding value: some Encodable, headers: HTTPFields = [:]) throws -> Response {
        make(status: status, json: try JSONValueEncoder().encode(value), headers: headers)
    }

    static func timestamp(_ date: Date) -> JSONValue { .timestamp(date) }
}

extension Request {
    /// The token of an `Authorization: Bearer` header, the scheme in any case: session tokens and the
    /// admin and service secrets alike.
    var bearerToken: String? {
        guard let value = headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }
}
