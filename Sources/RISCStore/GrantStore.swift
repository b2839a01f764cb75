import Foundation
import Logging
import PostgresNIO
import RISC

/// The refresh-token vault: tokens encrypted at rest, indexed by the two identifiers Google's
/// token-revoked events use.
public struct GrantStore: BoundedStore {
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
    /// Each call's bound (RISC_DATABASE_TIMEOUT).
    let timeout: Duration

    public init(client: PostgresClient, cipher: VaultCipher, timeout: Duration = .seconds(5), logger: Logger) {
        self.client = client
        self.cipher = cipher
        self.timeout = timeout
        self.logger = logger
    }

    public func store(sub: String, clientID: String, scopes: [String], refreshToken: String) async throws -> UUID {
        try await bounded { connection in
            let id = UUID()
            let ciphertext = try cipher.seal(refreshToken, grantID: id)
            let prefix = TokenIdentifier.prefix(of: refreshToken)
            let hash = TokenIdentifier.doubleSHA512Base64(of: refreshToken)
            try await connection.query(
                """
                INSERT INTO risc_grants (id, sub, client_id, scopes, token_prefix, token_hash, ciphertext, vault_key_id)
                VALUES (\(id), \(sub), \(clientID), \(scopes), \(prefix), \(hash), \(ciphertext), \(cipher.currentKeyID))
                """, logger: logger)
            return id
        }
    }

    public func lookup(id: UUID) async throws -> Lookup {
        try await bounded { connection in
            let rows = try await connection.query(
                "SELECT sub, client_id, scopes, ciphertext, vault_key_id FROM risc_grants WHERE id = \(id)", logger: logger)
            for try await (sub, clientID, scopes, ciphertext, keyID) in rows.decode((String, String, [String], Data?, String?).self) {
                guard let ciphertext, let keyID else { return .revoked }
                let token = try cipher.open(ciphertext, keyID: keyID, grantID: id)
                return .active(Grant(id: id, sub: sub, clientID: clientID, scopes: scopes, refreshToken: token))
            }
            return .notFound
        }
    }

    /// Grants still sealed under a key other than the current one.
    public func countToRotate() async throws -> Int {
        try await bounded { connection in
            let rows = try await connection.query(
                "SELECT count(*)::int8 FROM risc_grants WHERE ciphertext IS NOT NULL AND vault_key_id <> \(cipher.currentKeyID)",
                logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    /// Re-encrypts up to `limit` grants under the current key, in one transaction; returns how many.
    /// Zero means nothing is left. Rows locked by a concurrent rotation are skipped, not waited for.
    public func rotateBatch(limit: Int) async throws -> Int {
        try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                let rows = try await connection.query(
                    """
                    SELECT id, ciphertext, vault_key_id FROM risc_grants
                    WHERE ciphertext IS NOT NULL AND vault_key_id <> \(cipher.currentKeyID)
                    ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED
                    """, logger: logger)
                var sealed: [(UUID, Data)] = []
                for try await (id, ciphertext, keyID) in rows.decode((UUID, Data, String).self) {
                    let token = try cipher.open(ciphertext, keyID: keyID, grantID: id)
                    sealed.append((id, try cipher.seal(token, grantID: id)))
                }
                for (id, ciphertext) in sealed {
                    try await connection.query(
                        """
                        UPDATE risc_grants SET ciphertext = \(ciphertext), vault_key_id = \(cipher.currentKeyID), updated_at = now()
                        WHERE id = \(id)
                        """, logger: logger)
                }
                return sealed.count
            }
        }
    }

    /// Deletes the grant's row, secret and all. False when there was none.
    public func delete(id: UUID) async throws -> Bool {
        try await bounded { connection in
            var deleted = false
            for try await _ in try await connection.query("DELETE FROM risc_grants WHERE id = \(id) RETURNING id", logger: logger) {
                deleted = true
            }
            return deleted
        }
    }
}
