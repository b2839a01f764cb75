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

    func add(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: JSONValue.self, context: context)
        let transmitter: NewTransmitter
        do throws(InvalidParameter) {
            transmitter = try NewTransmitter(json: body)
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
