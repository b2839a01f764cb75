import Foundation
import Hummingbird
import NIOCore
import RISC

enum JSONResponse {
    static func make(status: HTTPResponse.Status, _ value: some Encodable, headers extra: HTTPFields = [:]) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        var headers = extra
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(data: data)))
    }

    /// A JSON value, serialized without JSONEncoder (the session check is a hot path).
    static func make(status: HTTPResponse.Status, json value: JSONValue, headers extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: value.serialized)))
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
