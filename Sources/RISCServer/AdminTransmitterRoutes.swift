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

    /// The fields of `transmitters add`, in snake_case: `name`, `issuer`, `config_url`, `delivery`, `events`, and
    /// `client_id` with `client_secret` (or `client_key`, PEM, for private_key_jwt), `token_auth`, `scope`,
    /// `token_endpoint`; or `bearer`. The credential is sealed and never returned.
    static func transmitter(_ body: JSONValue) throws(InvalidParameter) -> NewTransmitter {
        guard let fields = body.objectValue else { throw InvalidParameter(name: "body", problem: "must be a JSON object") }
        func text(_ name: String) throws(InvalidParameter) -> String? {
            guard let value = fields[name], value != .null else { return nil }
            guard let text = value.stringValue else { throw InvalidParameter(name: name, problem: "must be a string") }
            return text
        }
        guard let name = try text("name") else { throw InvalidParameter(name: "name", problem: "is required") }
        guard let issuer = try text("issuer") else { throw InvalidParameter(name: "issuer", problem: "is required") }
        guard let delivery = DeliveryMethod(rawValue: try text("delivery") ?? DeliveryMethod.push.rawValue) else {
            throw InvalidParameter(name: "delivery", problem: "must be push or poll")
        }
        var events: [String]?
        if let value = fields["events"], value != .null {
            guard let list = value.arrayValue?.compactMap(\.stringValue), list.count == value.arrayValue?.count else {
                throw InvalidParameter(name: "events", problem: "must be a list of strings")
            }
            events = list
        }
        let (clientID, clientSecret, clientKey) = (try text("client_id"), try text("client_secret"), try text("client_key"))
        let authorization: StreamAuthorization
        if let bearer = try text("bearer") {
            guard clientID == nil, clientSecret == nil, clientKey == nil else {
                throw InvalidParameter(name: "bearer", problem: "is given alone, without client credentials")
            }
            authorization = .bearer(token: bearer)
        } else {
            guard let clientID else { throw InvalidParameter(name: "client_id", problem: "is required without bearer") }
            let method: StreamAuthorization.ClientAuthentication
            if let tokenAuth = try text("token_auth") {
                guard let given = StreamAuthorization.ClientAuthentication(rawValue: tokenAuth) else {
                    throw InvalidParameter(name: "token_auth", problem: "must be client_secret_basic, client_secret_post or private_key_jwt")
                }
                method = given
            } else {
                method = clientKey != nil ? .privateKeyJWT : .clientSecretBasic
            }
            let secretField = method == .privateKeyJWT ? "client_key" : "client_secret"
            guard let secret = method == .privateKeyJWT ? clientKey : clientSecret else {
                throw InvalidParameter(name: secretField, problem: "is required for \(method.rawValue)")
            }
            authorization = .clientCredentials(
                clientID: clientID, method: method, secret: secret, scope: try text("scope") ?? StreamAuthorization.defaultScope,
                tokenEndpoint: try text("token_endpoint"))
        }
        return try NewTransmitter(
            name: name, issuer: issuer, configURL: try text("config_url"), delivery: delivery, events: events, authorization: authorization)
    }

    func add(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: JSONValue.self, context: context)
        let transmitter: NewTransmitter
        do throws(InvalidParameter) {
            transmitter = try Self.transmitter(body)
        } catch {
            throw AdminAPI.invalid(error)
        }
        do {
            return try JSONResponse.make(status: .created, encoding: try await store.add(transmitter))
        } catch let error as TransmitterRegistry.MetadataRefused {
            throw APIError(.unprocessableContent, "metadata_refused", description: error.description)
        } catch let error as TransmitterStore.AlreadyRegistered {
            throw APIError(.conflict, "already_registered", description: error.description)
        } catch let error as VaultKeyMissing {
            throw APIError(.conflict, "vault_key_required", description: error.description)
        }
    }
}
