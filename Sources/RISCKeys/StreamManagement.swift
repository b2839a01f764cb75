import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import RISC

/// A Shared Signals transmitter's stream management API (SSF 1.0 §8): the configuration, status, verification and
/// subject endpoints its metadata names, called with the stream's access token. A 401 fetches a new token and tries
/// once more.
public struct StreamManagement: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        /// The HTTP status the transmitter answered, when it answered.
        public let status: Int?

        init(_ description: String, status: Int? = nil) { (self.description, self.status) = (description, status) }
    }

    public let metadata: TransmitterMetadata
    let tokens: StreamAccessTokens

    public init(metadata: TransmitterMetadata, tokens: StreamAccessTokens) {
        (self.metadata, self.tokens) = (metadata, tokens)
    }

    public enum Created: Sendable, Equatable {
        case created(StreamConfiguration)
        /// 409: the transmitter keeps one stream per receiver, and this receiver has one.
        case conflict
        /// The answer's `iss` was not the transmitter's: the stream it made was deleted at once (or could not be).
        case foreign(streamID: String, deleted: Bool)
    }

    /// `POST configuration_endpoint`.
    public func create(_ request: StreamRequest) async throws(Failure) -> Created {
        let (status, body) = try await call(.POST, try endpoint(metadata.configurationEndpoint, "configuration_endpoint"), json: request.json())
        if status == 409 { return .conflict }
        guard status == 200 || status == 201 else { throw Self.refused("creating the stream", status) }
        do throws(StreamConfiguration.Problem) {
            return .created(try StreamConfiguration(json: body, expectedIssuer: metadata.issuer))
        } catch .wrongIssuer(let streamID) {
            // Never used: not verified, polled or read again; only deleted.
            let deleted = (try? await delete(streamID: streamID)) != nil
            return .foreign(streamID: streamID, deleted: deleted)
        } catch {
            throw Failure(error.description, status: status)
        }
    }

    /// `GET configuration_endpoint` without `stream_id`: every stream this receiver has there (another issuer's are left
    /// out).
    public func streams() async throws(Failure) -> (streams: [StreamConfiguration], foreign: [String]) {
        let (status, body) = try await call(.GET, try endpoint(metadata.configurationEndpoint, "configuration_endpoint"))
        guard status == 200 else { throw Self.refused("listing the streams", status) }
        return StreamConfiguration.list(json: body, expectedIssuer: metadata.issuer)
    }

    /// `GET configuration_endpoint?stream_id=`; nil for 404.
    public func stream(id: String) async throws(Failure) -> StreamConfiguration? {
        let url = try endpoint(metadata.configurationEndpoint, "configuration_endpoint", streamID: id)
        let (status, body) = try await call(.GET, url)
        if status == 404 { return nil }
        guard status == 200 else { throw Self.refused("reading the stream", status) }
        return try Self.configuration(body, issuer: metadata.issuer, status: status)
    }

    /// `PATCH` (only the fields given) or `PUT` (the whole configuration the receiver sets).
    public func change(streamID: String, _ request: StreamRequest, replace: Bool) async throws(Failure) -> StreamConfiguration {
        var body = request.json(streamID: streamID).objectValue ?? [:]
        if !replace { body["delivery"] = nil }
        let (status, answer) = try await call(
            replace ? .PUT : .PATCH, try endpoint(metadata.configurationEndpoint, "configuration_endpoint"), json: .object(body))
        guard status == 200 || status == 202 else { throw Self.refused(replace ? "replacing the stream" : "updating the stream", status) }
        return try Self.configuration(answer, issuer: metadata.issuer, status: status)
    }

    /// `DELETE configuration_endpoint?stream_id=`; a stream already gone (404) counts as deleted.
    public func delete(streamID: String) async throws(Failure) {
        let (status, _) = try await call(.DELETE, try endpoint(metadata.configurationEndpoint, "configuration_endpoint", streamID: streamID))
        guard (200..<300).contains(status) || status == 404 else { throw Self.refused("deleting the stream", status) }
    }

    /// `GET status_endpoint?stream_id=`.
    public func status(streamID: String) async throws(Failure) -> StreamStatus {
        let (status, body) = try await call(.GET, try endpoint(metadata.statusEndpoint, "status_endpoint", streamID: streamID))
        guard status == 200 else { throw Self.refused("reading the stream's status", status) }
        guard let read = StreamStatus(json: body) else { throw Failure("the status endpoint's answer holds no status", status: status) }
        return read
    }

    /// `POST status_endpoint {stream_id, status, reason}`.
    public func setStatus(streamID: String, _ wanted: StreamStatus) async throws(Failure) -> StreamStatus {
        var body: [String: JSONValue] = ["stream_id": .string(streamID), "status": .string(wanted.state.rawValue)]
        if let reason = wanted.reason { body["reason"] = .string(reason) }
        let (status, answer) = try await call(.POST, try endpoint(metadata.statusEndpoint, "status_endpoint"), json: .object(body))
        guard (200..<300).contains(status) else { throw Self.refused("changing the stream's status", status) }
        return StreamStatus(json: answer) ?? wanted
    }

    /// `POST verification_endpoint {stream_id, state}`: the transmitter then sends a verification event with `state`.
    public func verify(streamID: String, state: String) async throws(Failure) {
        let (status, _) = try await call(
            .POST, try endpoint(metadata.verificationEndpoint, "verification_endpoint"),
            json: ["stream_id": .string(streamID), "state": .string(state)])
        guard (200..<300).contains(status) else { throw Self.refused("asking for a verification", status) }
    }

    /// `POST add_subject_endpoint` or `remove_subject_endpoint` `{stream_id, subject}`.
    public func subject(streamID: String, _ subject: Subject, add: Bool) async throws(Failure) {
        let url =
            add
            ? try endpoint(metadata.addSubjectEndpoint, "add_subject_endpoint")
            : try endpoint(metadata.removeSubjectEndpoint, "remove_subject_endpoint")
        let (status, _) = try await call(.POST, url, json: ["stream_id": .string(streamID), "subject": subject.jsonValue])
        guard (200..<300).contains(status) else { throw Self.refused(add ? "adding the subject" : "removing the subject", status) }
    }

    static func configuration(_ body: JSONValue, issuer: String, status: Int) throws(Failure) -> StreamConfiguration {
        do {
            return try StreamConfiguration(json: body, expectedIssuer: issuer)
        } catch {
            throw Failure(error.description, status: status)
        }
    }

    static func refused(_ what: String, _ status: Int) -> Failure {
        Failure("the transmitter answered HTTP \(status) to \(what)", status: status)
    }

    private func endpoint(_ url: String?, _ name: String, streamID: String? = nil) throws(Failure) -> String {
        guard let url else { throw Failure("the transmitter's metadata names no \(name)") }
        guard let streamID else { return url }
        guard var components = URLComponents(string: url) else { throw Failure("the transmitter's \(name) is not a URL") }
        components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "stream_id", value: streamID)]
        return components.string ?? url
    }

    /// RFC 8936: one poll of the stream's `endpoint_url`, which the transmitter may hold open (long polling), for at most
    /// 60 s; the answer's status and body. A large answer is allowed: up to `maxEvents` SETs.
    public func poll(url: String, _ request: JSONValue) async throws(Failure) -> (status: Int, body: JSONValue) {
        try await call(.POST, url, json: request, timeout: .seconds(60), maxBody: 64 << 20)
    }

    /// One call with the current access token; on 401, once more with a new one.
    private func call(
        _ method: HTTPMethod, _ url: String, json: JSONValue? = nil, timeout: TimeAmount = .seconds(30), maxBody: Int = 1 << 20
    ) async throws(Failure) -> (Int, JSONValue) {
        var lastStatus = 0
        for _ in 0..<2 {
            let token: String
            do {
                token = try await tokens.token()
            } catch {
                throw Failure(error.description)
            }
            let status: Int
            let body: Data
            do {
                (status, body) = try await HTTPClient.withoutRedirects.callJSON(
                    method, url, bearer: token, json: json, timeout: timeout, maxBody: maxBody)
            } catch {
                throw Failure("\(method.rawValue) \(url) failed: \(NetworkErrors.describe(error))")
            }
            if status == 401 {
                await tokens.invalidate(token)
                lastStatus = status
                continue
            }
            return (status, (try? JSONValue.parse(body)) ?? .null)
        }
        throw Self.refused("\(method.rawValue) \(url) (a new access token was refused too)", lastStatus)
    }
}
