import Foundation
import Logging
import PostgresNIO
import RISC

/// The refresh-token vault (SPEC §5): tokens encrypted at rest, indexed by the two identifiers Google's
/// token-revoked events use.
public struct GrantStore: Sendable {
    public struct Grant: Sendable {
        public var id: UUID
        public var sub: String
        public var clientID: String
        public var scopes: [String]
        public var refreshToken: String
    }

    public enum Lookup: Sendable {
        case active(Grant)
        /// A RISC event deleted the token: its secret is gone.
        case revoked
        case notFound
    }

    let client: PostgresClient
    let cipher: VaultCipher
    let logger: Logger

    public init(client: PostgresClient, cipher: VaultCipher, logger: Logger) {
        self.client = client
        self.cipher = cipher
        self.logger = logger
    }

    public func store(sub: String, clientID: String, scopes: [String], refreshToken: String) async throws -> UUID {
        let id = UUID()
        let ciphertext = try cipher.seal(refreshToken, grantID: id)
        let prefix = TokenIdentifier.prefix(of: refreshToken)
        let hash = TokenIdentifier.doubleSHA512Base64(of: refreshToken)
        try await client.query(
            """
            INSERT INTO risc_grants (id, sub, client_id, scopes, token_prefix, token_hash, ciphertext, vault_key_id)
            VALUES (\(id), \(sub), \(clientID), \(scopes), \(prefix), \(hash), \(ciphertext), \(cipher.currentKeyID))
            """, logger: logger)
        return id
    }

    public func lookup(id: UUID) async throws -> Lookup {
        let rows = try await client.query(
            "SELECT sub, client_id, scopes, ciphertext, vault_key_id FROM risc_grants WHERE id = \(id)", logger: logger)
        for try await (sub, clientID, scopes, ciphertext, keyID) in rows.decode((String, String, [String], Data?, String?).self) {
            guard let ciphertext, let keyID else { return .revoked }
            let token = try cipher.open(ciphertext, keyID: keyID, grantID: id)
            return .active(Grant(id: id, sub: sub, clientID: clientID, scopes: scopes, refreshToken: token))
        }
        return .notFound
    }

    /// Deletes the grant's row, secret and all. False when there was none.
    public func delete(id: UUID) async throws -> Bool {
        var deleted = false
        for try await _ in try await client.query("DELETE FROM risc_grants WHERE id = \(id) RETURNING id", logger: logger) {
            deleted = true
        }
        return deleted
    }
}
