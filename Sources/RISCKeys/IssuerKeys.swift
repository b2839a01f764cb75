import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import RISCMetrics
import Synchronization

/// Why a token's key could not be had, or its signature did not verify with it.
public enum KeyFailure: Error, Sendable, Equatable {
    /// The `kid` is not in the JWKS, even after a refetch, or the key does not verify the header's algorithm.
    case unknownKey
    /// The discovery document or JWKS could not be fetched and the `kid` is not cached: the sender should retry.
    case keysUnavailable
    /// The `kid` is unknown and the last refetch was too recent to try another: the key may have just been
    /// rotated in, so the sender should retry after this many seconds rather than be refused for good.
    case coolingDown(retryAfter: Int)
    /// The key was found, and the signature does not verify with it.
    case badSignature
}

/// A key's verifier, with the issuer its discovery document names.
public struct ResolvedKey: Sendable {
    public let issuer: String
    public let algorithm: any JWTAlgorithm
}

/// The discovery document and JWKS of one token issuer (the RISC transmitter, or Google's OpenID provider),
/// cached for their `Cache-Control: max-age`. An unknown `kid` triggers one refetch, at most once per
/// `unknownKidRefetchInterval`. Expired keys keep serving while a refresh runs, and after it fails.
public actor IssuerKeys {
    public struct Settings: Sendable {
        public var discoveryURL: String
        public var allowedAlgorithms: Set<String>
        public var unknownKidRefetchInterval: TimeInterval = 30
        /// Used when a response names no `max-age`.
        public var defaultMaxAge: TimeInterval = 300
        /// Whatever `max-age` a response names, keys are kept at least this long (a `max-age=0` would
        /// otherwise refetch on every token) and at most this long (a year-long one would pin a key).
        public var maxAgeRange: ClosedRange<TimeInterval> = 60...86_400
        /// Which issuer this is, in metrics: `risc` or `openid`.
        public var metricsLabel = "risc"

        public init(discoveryURL: String, allowedAlgorithms: Set<String>) {
            self.discoveryURL = discoveryURL
            self.allowedAlgorithms = allowedAlgorithms
        }
    }

    private struct Discovery: Decodable {
        var issuer: String
        var jwks_uri: String
        var token_endpoint: String?
        var revocation_endpoint: String?
    }

    /// The OAuth endpoints an OpenID provider's discovery document names.
    public struct Endpoints: Sendable {
        public var token: String?
        public var revocation: String?
    }

    private let settings: Settings
    private let logger: Logger
    private let clock: @Sendable () -> Date

    private var issuer: String?
    private var endpoints = Endpoints()
    private var keys = KeySet()
    private var expiresAt = Date.distantPast
    private var lastFetchStarted = Date.distantPast
    private var lastFetchFailed = false
    private var refresh: Task<Void, any Error>?

    /// What the last successful fetch produced, readable without entering the actor: the request path
    /// only hops onto the actor when the keys are missing, expired, or do not have the kid.
    private struct Snapshot {
        var issuer: String
        var keys: KeySet
        var expiresAt: Date
    }
    private nonisolated let snapshot = Mutex<Snapshot?>(nil)

    public init(settings: Settings, logger: Logger, clock: @escaping @Sendable () -> Date = { Date() }) {
        self.settings = settings
        self.logger = logger
        self.clock = clock
    }

    /// True once keys have been loaded at least once.
    public var isLoaded: Bool { issuer != nil }

    /// Loads the keys if they never were (at start-up, so that readiness can report them).
    public func load() async -> Bool {
        if issuer == nil { try? await refreshNow() }
        return issuer != nil
    }

    /// A cached, unexpired key, or nil (then ask `key(kid:alg:)`).
    public nonisolated func cachedKey(kid: String, alg: String) -> ResolvedKey? {
        snapshot.withLock { snapshot in
            guard let snapshot, clock() < snapshot.expiresAt, let algorithm = snapshot.keys.algorithm(kid: kid, alg: alg)
            else { return nil }
            return ResolvedKey(issuer: snapshot.issuer, algorithm: algorithm)
        }
    }

    /// The discovery document's OAuth endpoints, loading it first if it never was.
    public func oauthEndpoints() async throws(KeyFailure) -> Endpoints {
        if issuer == nil {
            do { try await refreshNow() } catch { throw .keysUnavailable }
        }
        return endpoints
    }

    /// Checks a JWS signature with the issuer's key for `kid` and `alg`; returns the issuer that key belongs to,
    /// for the caller's issuer check. Shared by SET and ID-token verification.
    public nonisolated func verifySignature(
        kid: String, alg: String, signature: Data, signingInput: Data
    ) async throws(KeyFailure) -> String {
        let key = try await resolve(kid: kid, alg: alg)
        guard (try? key.algorithm.verify(signature, signs: signingInput)) == true else { throw .badSignature }
        return key.issuer
    }

    /// The key for a token's `kid` and `alg`: from the lock-free snapshot when it is there, else from the actor
    /// (which may refetch).
    public nonisolated func resolve(kid: String, alg: String) async throws(KeyFailure) -> ResolvedKey {
        if let cached = cachedKey(kid: kid, alg: alg) { return cached }
        return try await key(kid: kid, alg: alg)
    }

    /// The key for a token's `kid` and `alg`.
    public func key(kid: String, alg: String) async throws(KeyFailure) -> ResolvedKey {
        let now = clock()
        if issuer == nil {
            // Never loaded: try now, but do not hammer a transmitter that just failed.
            if lastFetchFailed, now.timeIntervalSince(lastFetchStarted) < min(5, settings.unknownKidRefetchInterval) {
                throw .keysUnavailable
            }
            do { try await refreshNow() } catch { throw .keysUnavailable }
        } else if now >= expiresAt {
            startBackgroundRefresh()
        }
        if let found = lookup(kid: kid, alg: alg) { return found }
        if keys.knows(kid: kid) { throw .unknownKey }

        // A fetch already under way may be bringing this very key (a rotation seen by several SETs at once).
        if let refresh {
            _ = try? await refresh.value
            if let found = lookup(kid: kid, alg: alg) { return found }
        }
        // An unknown kid may be a freshly rotated key: refetch, but not more than once per interval. (The clock is
        // read again: a fetch joined above may have started after this call did.)
        let sinceLastFetch = clock().timeIntervalSince(lastFetchStarted)
        if sinceLastFetch >= settings.unknownKidRefetchInterval {
            do { try await refreshNow() } catch { throw .keysUnavailable }
            if let found = lookup(kid: kid, alg: alg) { return found }
            throw .unknownKey
        }
        if lastFetchFailed { throw .keysUnavailable }
        // Not refused for good: anyone can spend the refetch with a junk kid, and a key rotated in meanwhile
        // would then be lost. The sender retries once the next refetch is allowed.
        let wait = settings.unknownKidRefetchInterval - sinceLastFetch
        throw .coolingDown(retryAfter: max(1, Int(wait.rounded(.up))))
    }

    private func lookup(kid: String, alg: String) -> ResolvedKey? {
        guard let issuer, let algorithm = keys.algorithm(kid: kid, alg: alg) else { return nil }
        return ResolvedKey(issuer: issuer, algorithm: algorithm)
    }

    private func startBackgroundRefresh() {
        guard refresh == nil else { return }
        let task = Task { try await self.fetch() }
        refresh = task
        Task {
            _ = try? await task.value
            self.clearRefresh(task)
        }
    }

    /// Joins a refresh in progress, or starts one, and waits for it.
    private func refreshNow() async throws {
        if let refresh {
            try await refresh.value
            return
        }
        let task = Task { try await self.fetch() }
        refresh = task
        defer { clearRefresh(task) }
        try await task.value
    }

    private func clearRefresh(_ task: Task<Void, any Error>) {
        if refresh == task { refresh = nil }
    }

    private func fetch() async throws {
        lastFetchStarted = clock()
        do {
            let discovery = try JSONDecoder().decode(
                Discovery.self, from: try await HTTPClient.withoutRedirects.fetchDocument(settings.discoveryURL).body)
            let jwksDocument = try await HTTPClient.withoutRedirects.fetchDocument(discovery.jwks_uri)
            let newKeys = try await KeySet.build(jwksJSON: jwksDocument.body, allowedAlgorithms: settings.allowedAlgorithms)
            // A key set with nothing usable in it never replaces one that works.
            guard !newKeys.isEmpty else { throw NoUsableKey() }
            // The JWKS response's max-age governs, within bounds; the discovery document is re-read with it.
            let asked = jwksDocument.maxAge ?? settings.defaultMaxAge
            let maxAge = min(max(asked, settings.maxAgeRange.lowerBound), settings.maxAgeRange.upperBound)
            // Swap in a whole new key set: removing keys from a live jwt-kit collection is unreliable.
            issuer = discovery.issuer
            endpoints = Endpoints(token: discovery.token_endpoint, revocation: discovery.revocation_endpoint)
            keys = newKeys
            expiresAt = clock().addingTimeInterval(maxAge)
            lastFetchFailed = false
            ServiceMetrics.keysFetched(issuer: settings.metricsLabel, outcome: "success")
            snapshot.withLock { $0 = Snapshot(issuer: discovery.issuer, keys: newKeys, expiresAt: expiresAt) }
            logger.info(
                "Loaded signing keys",
                metadata: ["discovery": "\(settings.discoveryURL)", "keys": "\(newKeys.kids.count)", "max_age": "\(maxAge)"])
        } catch {
            lastFetchFailed = true
            ServiceMetrics.keysFetched(issuer: settings.metricsLabel, outcome: "failure")
            // Keep serving the keys we have; try again in a little while rather than on every request.
            if issuer != nil { expiresAt = clock().addingTimeInterval(min(10, settings.unknownKidRefetchInterval)) }
            logger.warning(
                "Could not load signing keys", metadata: ["discovery": "\(settings.discoveryURL)", "error": "\(error)"])
            throw error
        }
    }
}

/// A JWKS that holds no key this service can use (none with a kid and an allowed algorithm).
struct NoUsableKey: Error, CustomStringConvertible {
    var description: String { "the JWKS holds no usable signing key" }
}
