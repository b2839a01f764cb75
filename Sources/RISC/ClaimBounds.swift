/// Upper bounds on the identifiers the service stores and indexes.
///
/// PostgreSQL refuses a btree index entry over about 2,700 bytes, and a NOTIFY payload over 8,000; one
/// oversized claim must be refused on its own, before it reaches the database and fails a whole group
/// commit. Google's identifiers are far shorter: a `sub` is at most 255 ASCII characters (OpenID Connect
/// Core §2), a `jti` 32 to 36.
public enum ClaimBounds {
    /// For `iss`, `jti`, and every string member of a subject identifier (`iss`, `sub`, `email`, `id`, …).
    public static let maxIdentifierBytes = 256

    public static func fits(_ value: String) -> Bool {
        value.utf8.count <= maxIdentifierBytes
    }
}
