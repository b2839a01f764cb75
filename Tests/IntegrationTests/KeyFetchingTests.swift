import DevTransmitter
import Foundation
import Hummingbird
import Logging
import RISC
import RISCKeys
import ServiceLifecycle
import Synchronization
import Testing

/// Where keys may come from: https or loopback http only, redirects checked hop by hop, a
/// JWKS with nothing usable never replaces working keys, and max-age within bounds.
@Suite("Key fetching cannot be steered", .timeLimit(.minutes(2)))
struct KeyFetchingTests {
    /// A key publisher on loopback whose answers each test sets.
    final class Publisher: Sendable {
        struct Answers {
            var jwksPath = "/jwks"
            var jwks = JSONValue.object(["keys": []])
            var cacheControl = "max-age=300"
        }

        let answers = Mutex(Answers())
        let port = Mutex(0)
        var base: String { "http://127.0.0.1:\(port.withLock { $0 })" }

        func application() -> some ApplicationProtocol {
            let router = Router()
            router.get("/discovery") { _, _ in
                let path = self.answers.withLock { $0.jwksPath }
                return Self.json(["issuer": "https://issuer.example", "jwks_uri": .string(self.base + path)])
            }
            router.get("/jwks") { _, _ in
                let (jwks, cacheControl) = self.answers.withLock { ($0.jwks, $0.cacheControl) }
                var response = Self.json(jwks)
                response.headers[.cacheControl] = cacheControl
                return response
            }
            // A redirect off loopback to plain http: a network attacker's downgrade. Never followed.
            router.get("/redirect-insecure") { _, _ in
                Response(status: .found, headers: [.location: "http://example.invalid/jwks"])
            }
            router.get("/redirect-loopback") { _, _ in
                Response(status: .found, headers: [.location: self.base + "/jwks"])
            }
            return Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in self.port.withLock { $0 = channel.localAddress?.port ?? 0 } },
                logger: Harness.logger)
        }

        static func json(_ value: JSONValue) -> Response {
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: .init(string: value.serialized)))
        }
    }

    /// A clock the test moves.
    final class TestClock: Sendable {
        let now = Mutex(Date())
        func advance(_ seconds: TimeInterval) { now.withLock { $0 = $0.addingTimeInterval(seconds) } }
    }

    func with(_ body: (Publisher, DevTransmitter) async throws -> Void) async throws {
        let publisher = Publisher()
        let signer = try await DevTransmitter(settings: .init(port: 0), logger: Harness.logger)
        publisher.answers.withLock { $0.jwks = try! signer.jwks() }
        let group = ServiceGroup(configuration: .init(services: [.init(service: publisher.application())], logger: Harness.logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            while publisher.port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
            do { try await body(publisher, signer) } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    /// What a logger was told, to see why a fetch failed.
    final class CapturedLog: LogHandler, @unchecked Sendable {
        let lines = Mutex<[String]>([])
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            lines.withLock { $0.append("\(event.message) \(event.metadata ?? [:])") }
        }
        var text: String { lines.withLock { $0.joined(separator: "\n") } }
    }

    func keys(
        _ discoveryURL: String, clock: TestClock = TestClock(), refetchInterval: Double = 0, log: CapturedLog? = nil
    ) -> IssuerKeys {
        var settings = IssuerKeys.Settings(discoveryURL: discoveryURL, allowedAlgorithms: ["RS256"])
        settings.unknownKidRefetchInterval = refetchInterval
        let logger = log.map { log in Logger(label: "keys", factory: { _ in log }) } ?? Harness.logger
        return IssuerKeys(settings: settings, logger: logger, clock: { clock.now.withLock { $0 } })
    }

    @Test("A discovery URL, JWKS URL or redirect that is plain http off loopback is refused, never fetched")
    func httpsOnly() async throws {
        try await with { publisher, signer in
            // Refused by the policy before any connection is tried (example.invalid would not resolve anyway:
            // the log says which of the two stopped it).
            let direct = CapturedLog()
            #expect(await keys("http://example.invalid/.well-known/risc-configuration", log: direct).load() == false)
            #expect(direct.text.contains("is not an https:// URL"), "\(direct.text)")
            publisher.answers.withLock { $0.jwksPath = "/redirect-insecure" }
            let redirected = CapturedLog()
            #expect(await keys(publisher.base + "/discovery", log: redirected).load() == false)
            #expect(redirected.text.contains("http://example.invalid/jwks is not an https:// URL"), "\(redirected.text)")
            publisher.answers.withLock { $0.jwksPath = "/redirect-loopback" }
            let followed = keys(publisher.base + "/discovery")
            #expect(await followed.load())
            #expect(followed.cachedKey(kid: signer.currentKid, alg: "RS256") != nil)
        }
    }

    @Test("A JWKS with no usable key never replaces a working key set")
    func emptyJWKSKeepsKeys() async throws {
        try await with { publisher, signer in
            let clock = TestClock()
            let keys = keys(publisher.base + "/discovery", clock: clock)
            #expect(await keys.load())
            for useless: JSONValue in [["keys": []], ["keys": [["kty": "oct", "kid": "h", "k": "c2VjcmV0"]]]] {
                publisher.answers.withLock { $0.jwks = useless }
                clock.advance(3600)
                // An unknown kid forces a refetch; it brings nothing usable.
                await #expect(throws: KeyFailure.self) { try await keys.key(kid: "unknown", alg: "RS256") }
                let kept = try? await keys.key(kid: signer.currentKid, alg: "RS256")
                #expect(kept != nil, "the working key was dropped for \(useless.serialized)")
            }
        }
    }

    @Test("max-age is clamped: max-age=0 does not expire the keys at once, a year is cut to a day")
    func maxAgeClamped() async throws {
        try await with { publisher, signer in
            for (cacheControl, stillCachedAfter, expiredAfter) in [
                ("max-age=0", 30.0, 61.0), ("no-store", 30, 61), ("max-age=31536000", 80_000, 86_401),
            ] {
                publisher.answers.withLock { $0.cacheControl = cacheControl }
                let clock = TestClock()
                let keys = keys(publisher.base + "/discovery", clock: clock)
                #expect(await keys.load())
                clock.advance(stillCachedAfter)
                #expect(keys.cachedKey(kid: signer.currentKid, alg: "RS256") != nil, "\(cacheControl)")
                clock.advance(expiredAfter - stillCachedAfter)
                #expect(keys.cachedKey(kid: signer.currentKid, alg: "RS256") == nil, "\(cacheControl)")
            }
        }
    }
}
