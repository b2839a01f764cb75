import Foundation
import Hummingbird
import HummingbirdAuth
import NIOCore
import RISC

/// Which configured bearer secret a request presented; set by `BearerTokenAuthenticator`.
public enum BearerIdentity: String, Sendable, Equatable {
    /// RISC_ADMIN_TOKEN: the admin API.
    case admin
    /// RISC_SERVICE_TOKEN: the vault, called by the app's own backend.
    case service
}

/// The context of every request to the receiver.
public struct AppRequestContext: AuthRequestContext, RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: BearerIdentity?

    public init(source: Source) {
        self.coreContext = .init(source: source)
        self.identity = nil
    }

    public var maxUploadSize: Int { RequestLimits.maxBodyBytes }
    public var requestDecoder: APIRequestDecoder { APIRequestDecoder() }
}

/// JSON bodies for `request.decode(as:context:)`, refused with `APIError` bodies: Hummingbird's own decoding
/// errors would answer `{"error": {"message": ...}}`, which is not the API's shape.
public struct APIRequestDecoder: RequestDecoder, Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from request: Request, context: some RequestContext) async throws -> T {
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: context.maxUploadSize)
        } catch {
            throw APIError(.contentTooLarge, "invalid_request", description: "the body is too large")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer: body))
        } catch DecodingError.keyNotFound(let key, _) {
            throw APIError(.badRequest, "invalid_request", description: "\(key.stringValue) is required")
        } catch {
            throw APIError(.badRequest, "invalid_request", description: "the body is not the expected JSON object")
        }
    }
}
