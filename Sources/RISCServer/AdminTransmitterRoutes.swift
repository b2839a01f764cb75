import Foundation
import Hummingbird
import RISC
import RISCStore

/// `/admin/v1/transmitters`: the Shared Signals transmitters, the built-in google first. A credential goes in once, with
/// the transmitter, and never comes back out.
struct AdminTransmitterRoutes<Context: RequestContext, Store: TransmitterStoring>: Sendable {
    let store: Store

    func addRoutes(to group: RouterGroup<Context>) {
        group.get("transmitters") { _, _ in
            try JSONResponse.make(status: .ok, encoding: ["transmitters": try await self.store.transmitters()])
        }
        group.post("transmitters") { request, context in try await self.add(request, context: context) }
        group.get("transmitters/:name") { _, context in
            guard let transmitter = try await self.store.transmitter(named: try Self.name(context)) else {
                throw APIError(.notFound, "not_found")
            }
            return try JSONResponse.make(status: .ok, encoding: transmitter)
        }
        group.delete("transmitters/:name") { _, context in
            let name = try Self.name(context)
            guard name != .google else {
                throw APIError(.conflict, "built_in", description: "google is built in: it cannot be removed")
            }
            guard try await self.store.remove(named: name) else { throw APIError(.notFound, "not_found") }
            return Response(status: .noContent)
        }
    }

    static func name(_ context: Context) throws -> TransmitterName {
        do {
            return try TransmitterName(naming: context.parameters.get("name") ?? "")
        } catch {
            throw AdminAPI.invalid(error)
        }
    }

    /// The fields of `transmitters add`, in snake_case; `client_secret`, `client_key` (PEM) or `bearer` is the credential.
    struct NewTransmitterBody: Decodable {
        var name: String?
        var issuer: String?
        var configURL: String?
        var delivery: String?
        var events: [String]?
        var clientID: String?
        var clientSecret: String?
        var clientKey: String?
        var tokenAuth: String?
        var scope: String?
        var tokenEndpoint: String?
        var bearer: String?

        enum CodingKeys: String, CodingKey {
            case name, issuer, delivery, events, scope, bearer
            case configURL = "config_url"
            case clientID = "client_id"
            case clientSecret = "client_secret"
            case clientKey = "client_key"
            case tokenAuth = "token_auth"
            case tokenEndpoint = "token_endpoint"
        }

        func transmitter() throws(InvalidParameter) -> NewTransmitter {
            guard let name else { throw InvalidParameter(name: "name", problem: "is required") }
            guard let issuer else { throw InvalidParameter(name: "issuer", problem: "is required") }
            guard let delivery = DeliveryMethod(rawValue: delivery ?? DeliveryMethod.push.rawValue) else {
                throw InvalidParameter(name: "delivery", problem: "must be push or poll")
            }
            let authorization: StreamAuthorization
            if let bearer {
                guard clientID == nil, clientSecret == nil, clientKey == nil else {
                    throw InvalidParameter(name: "bearer", problem: "is given alone, without client credentials")
                }
                authorization = .bearer(token: bearer)
            } else {
                guard let clientID else { throw InvalidParameter(name: "client_id", problem: "is required without bearer") }
                let method: StreamAuthorization.ClientAuthentication
                if let tokenAuth {
                    guard let given = StreamAuthorization.ClientAuthentication(rawValue: tokenAuth) else {
                        throw InvalidParameter(name: "token_auth", problem: "must be client_secret_basic, client_secret_post or private_key_jwt")
                    }
                    method = given
                } else {
                    method = clientKey != nil ? .privateKeyJWT : .clientSecretBasic
                }
                let secret = method == .privateKeyJWT ? clientKey : clientSecret
                guard let secret else {
                    throw InvalidParameter(
                        name: method == .privateKeyJWT ? "client_key" : "client_secret", problem: "is required for \(method.rawValue)")
                }
                authorization = .clientCredentials(
                    clientID: clientID, method: method, secret: secret, scope: scope ?? StreamAuthorization.defaultScope,
                    tokenEndpoint: tokenEndpoint)
            }
            return try NewTransmitter(
                name: name, issuer: issuer, configURL: configURL, delivery: delivery, events: events, authorization: authorization)
        }
    }

    func add(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: NewTransmitterBody.self, context: context)
        let transmitter: NewTransmitter
        do throws(InvalidParameter) {
            transmitter = try body.transmitter()
        } catch {
            throw AdminAPI.invalid(error)
        }
        do {
            return try JSONResponse.make(status: .created, encoding: try await store.add(transmitter))
        } catch let error as TransmitterRegistry.MetadataRefused {
            throw APIError(.unprocessableContent, "metadata_refused", description: error.description)
        } catch let error as TransmitterStore.AlreadyRegistered {
            throw APIError(.conflict, "already_registered", description: error.description)
        } catch let error as TransmitterStore.VaultKeyMissing {
            throw APIError(.conflict, "vault_key_required", description: error.description)
        }
    }
}
