import AsyncHTTPClient
import DevTransmitter
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCServer
import RISCStore
import RISCWorker
import ServiceLifecycle
import Synchronization
import Testing

/// A running receiver and development transmitter on loopback, against a real PostgreSQL database.
struct Harness {
    static let audience = "test-client.apps.googleusercontent.com"
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    struct Options {
        var databaseURL = Harness.environment("RISC_TEST_DATABASE_URL")
        var unknownKidRefetchInterval: Double = 0
        /// The clock of the receiver's key caches (key expiry, the unknown-kid refetch interval): a test moves it on
        /// (`ShiftedClock`) instead of waiting out a cooldown.
        var keyClock: @Sendable () -> Date = { Date() }
        /// RISC_DATABASE_TIMEOUT: storing a SET, sign-in and the session check. Longer than the service's 5 s:
        /// every suite shares one PostgreSQL on two cores, and at the suite's peak a sign-in once took longer (a 503
        /// in a test about something else). Tests of the bound itself set it (the outage test: 2 s).
        var commitTimeout: Duration = .seconds(15)
        /// Run an in-process worker beside the receiver (as `serve` does by default).
        var worker = false
        /// With the worker: apply new events as they are stored, as `serve` does. False leaves every event
        /// to the worker (as `serve --no-worker` plus a `worker` would).
        var applyOnReceipt = true
        /// Run the Shared Signals poller beside the receiver (as every `serve` does).
        var poller = false
        var maxAttempts = 10
        var maxSessionsPerUser = ConfigVariables.maxSessionsPerUser.defaultValue
        /// Start with the transmitter's discovery documents and JWKS answering 503.
        var keysOutageAtStart = false
        var adminToken: String? = Harness.adminToken
    }

    static let serviceToken = "test-service-token-0123456789"
    static let adminToken = "test-admin-token-0123456789abcdef"
    /// 32 bytes, base64: the vault key of every test receiver.
    static let vaultKey = Data((0..<32).map { UInt8($0) }).base64EncodedString()

    let transmitter: DevTransmitter
    let receiverURL: String
    let database: PostgresClient
    /// The database the receiver uses, for child processes (CLI commands).
    let databaseURL: String
    /// What the receiver logged at warning or above: a failed expectation on a 5xx shows the service's reason.
    let warnings: LoggedWarnings
    /// Told when the receiver (or its worker) commits actions that are notified, as `serve`'s dispatcher is.
    let outboxSignal: OutboxSignal

    var eventsURL: String { receiverURL + "/risc/events" }

    static func environment(_ name: String) -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            fatalError("\(name) is not set: run the tests through scripts/test.sh, which starts PostgreSQL")
        }
        return value
    }

    static var logger: Logger {
        var logger = Logger(label: "test")
        logger.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }

    /// Each database is migrated once per test process, and marked so when IsolatedDatabase made it: the suites'
    /// receivers start together, and each migrating in turn under the migrator's lock queued them for a minute at the
    /// suite's peak. A failed migration is not kept: the next receiver tries again.
    static func migrateOnce(_ url: String) async throws {
        let migration = migrations.withLock { migrations in
            if let running = migrations[url] { return running }
            let migration = Task<Void, any Error> {
                let client = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: logger)
                _ = try await client.whileRunning(timeout: .seconds(240)) { client in
                    try await Migrator(directory: repositoryRoot.appendingPathComponent("migrations").path)
                        .migrate(client: client, logger: logger)
                }
            }
            migrations[url] = migration
            return migration
        }
        do {
            try await migration.value
        } catch {
            // Unless a later receiver has already started another try.
            migrations.withLock { migrations in if migrations[url] == migration { migrations[url] = nil } }
            throw error
        }
    }

    static func markMigrated(_ url: String) {
        migrations.withLock { migrations in migrations[url] = Task {} }
    }

    private static let migrations = Mutex<[String: Task<Void, any Error>]>([:])

    /// Starts everything, runs `body`, and shuts everything down again.
    static func with(_ options: Options = Options(), _ body: (Harness) async throws -> Void) async throws {
        let logger = Self.logger
        let warnings = LoggedWarnings()
        let serviceLogger = warnings.logger(alongside: logger)
        let database = PostgresClient(configuration: try DatabaseURL.configuration(from: options.databaseURL), backgroundLogger: logger)
        let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: audience), logger: logger)
        let (transmitterPorts, transmitterPort) = AsyncStream.makeStream(of: Int.self)
        let transmitterApp = transmitter.makeApplication { port in transmitterPort.yield(port) }

        var configuration = ServiceConfiguration(databaseURL: options.databaseURL, clientIDs: [audience, "another-client"])
        configuration.port = 0
        configuration.databaseTimeoutSeconds = Double(options.commitTimeout.components.seconds)

        let (receiverPorts, receiverPort) = AsyncStream.makeStream(of: Int.self)
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: database), .init(service: transmitterApp)], logger: logger))

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var ports = transmitterPorts.makeAsyncIterator()
            _ = await ports.next()
            if options.keysOutageAtStart { transmitter.setKeysOutage(true) }
            try await migrateOnce(options.databaseURL)

            var receiverConfiguration = configuration
            receiverConfiguration.riscConfigurationURL = transmitter.discoveryURL
            receiverConfiguration.openIDConfigurationURL = transmitter.openIDConfigurationURL
            receiverConfiguration.serviceToken = serviceToken
            receiverConfiguration.adminToken = options.adminToken
            receiverConfiguration.vaultKey = vaultKey
            receiverConfiguration.clientSecrets = [ClientSecret(clientID: audience, clientSecret: "dev-client-secret")]
            receiverConfiguration.worker.maxAttempts = options.maxAttempts
            receiverConfiguration.maxSessionsPerUser = options.maxSessionsPerUser
            // As `serve` does: with a worker in the process, events are applied on receipt.
            let outboxSignal = OutboxSignal()
            var inboxSettings = EventInbox.Settings()
            inboxSettings.applyOnReceipt = options.worker && options.applyOnReceipt
            inboxSettings.outboxSignal = outboxSignal
            let dependencies = try ServiceDependencies(
                configuration: receiverConfiguration, logger: serviceLogger, inboxSettings: inboxSettings,
                unknownKidRefetchInterval: options.unknownKidRefetchInterval, keyClock: options.keyClock)
            var workers: [any Service] = []
            if options.worker {
                var factory = BackgroundServices(receiverConfiguration)
                factory.worker.pollInterval = .milliseconds(200)
                factory.worker.outboxSignal = outboxSignal
                workers.append(factory.makeWorker(client: dependencies.postgres, logger: serviceLogger))
            }
            if options.poller {
                let store = TransmitterStore(
                    client: dependencies.postgres, timeout: options.commitTimeout, cipher: VaultCipher.from(key: vaultKey, previous: []),
                    logger: logger)
                var settings = StreamPoller.Settings()
                settings.lookInterval = .milliseconds(200)
                settings.backoffBase = .milliseconds(100)
                settings.maxBackoff = .seconds(1)
                workers.append(
                    StreamPoller(
                        client: dependencies.postgres, lockConnection: try DatabaseURL.connectionConfiguration(from: options.databaseURL),
                        store: store,
                        receivers: StreamReceivers(
                            store: store, allowedAlgorithms: configuration.allowedAlgorithms,
                            unknownKidRefetchInterval: options.unknownKidRefetchInterval, logger: logger),
                        inbox: dependencies.inbox, settings: settings, logger: logger))
            }
            let receiverApp = buildApplication(
                configuration: receiverConfiguration, dependencies: dependencies, logger: serviceLogger, extraServices: workers,
                onServerRunning: { channel in receiverPort.yield(channel.localAddress?.port ?? 0) })
            let receiverGroup = ServiceGroup(configuration: .init(services: [.init(service: receiverApp)], logger: logger))
            tasks.addTask { try await receiverGroup.run() }
            var receiverPortsIterator = receiverPorts.makeAsyncIterator()
            let port = await receiverPortsIterator.next()!

            let harness = Harness(
                transmitter: transmitter, receiverURL: "http://127.0.0.1:\(port)", database: database, databaseURL: options.databaseURL,
                warnings: warnings, outboxSignal: outboxSignal)
            do {
                try await body(harness)
            } catch {
                await receiverGroup.triggerGracefulShutdown()
                await group.triggerGracefulShutdown()
                throw error
            }
            await receiverGroup.triggerGracefulShutdown()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    struct Reply {
        var status: Int
        var headers: HTTPHeaders
        var body: String

        var json: [String: JSONValue] { (try? JSONValue.parse(Data(body.utf8)))?.objectValue ?? [:] }
        /// The `error` member of a session or vault error body.
        var error: String? { json["error"]?.stringValue }

        /// The RFC 8935 error body, checked to have exactly the keys `err` and `description`.
        var rejection: SETRejection.Body? {
            guard let object = (try? JSONValue.parse(Array(body.utf8)))?.objectValue, Set(object.keys) == ["err", "description"],
                let err = object["err"]?.stringValue, let description = object["description"]?.stringValue
            else { return nil }
            return SETRejection.Body(err: err, description: description)
        }
    }

    /// Any HTTP call to the receiver (or, with a full URL, the transmitter).
    func call(
        _ method: NIOHTTP1.HTTPMethod, _ path: String, bearer: String? = nil, json: JSONValue? = nil, form: [String: String]? = nil
    ) async throws -> Reply {
        try await Client(base: receiverURL).send(
            method, path, bearer: bearer, body: form.map(FormEncoding.encode),
            contentType: form == nil ? nil : "application/x-www-form-urlencoded", json: json)
    }

    /// POSTs a body to the receiver as a transmitter would.
    func post(_ body: String, contentType: String? = "application/secevent+jwt") async throws -> Reply {
        var request = HTTPClientRequest(url: eventsURL)
        request.method = .POST
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await Self.transmitterClient.execute(request, timeout: .seconds(30))
        let data = try await response.body.collect(upTo: 1 << 20)
        return Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: data))
    }

    /// The client SETs are pushed with. A transmitter sends many at once: with AsyncHTTPClient's default of 8
    /// connections a host, a test's 200 concurrent SETs queued 25 deep, each waiting out the commits before it within
    /// its own 30 s deadline, and no more than 8 were ever in flight together.
    static let transmitterClient: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// Signs a fresh SET (new jti, new user) and POSTs it.
    func postNewSET(_ type: String = "sessions-revoked") async throws -> Reply {
        try await post(try await makeSET(type))
    }

    /// Signs a SET of the given type with the transmitter's current key.
    func makeSET(
        _ type: String, sub: String? = "user-\(UUID().uuidString)", configure: (inout SETRequest) -> Void = { _ in }
    )
        async throws -> String
    {
        var request = SETRequest(type: type, sub: sub)
        configure(&request)
        return try await transmitter.makeSET(request)
    }

    /// Signs arbitrary claims (for malformed-but-signed tokens).
    func sign(_ claims: JSONValue, typ: String? = "secevent+jwt", kid: String? = nil) async throws -> String {
        try await transmitter.sign(claims: claims, typ: typ, kid: kid)
    }

    /// Well-formed claims from this harness's transmitter, to be altered by a test.
    func claims(_ change: (inout [String: JSONValue]) -> Void = { _ in }) -> JSONValue {
        var claims: [String: JSONValue] = [
            "iss": .string(transmitter.issuer), "aud": .string(Self.audience),
            "iat": .number(Date().timeIntervalSince1970.rounded(.down)), "jti": .string(UUID().uuidString),
            "events": [
                EventType.sessionsRevoked.rawValue: ["subject": ["subject_type": "iss-sub", "iss": "https://accounts.google.com", "sub": "u-1"]]
            ],
        ]
        change(&claims)
        return .object(claims)
    }

    struct StoredEvent {
        var eventTypes: [String]
        var subjectSub: String?
        var status: String
        var claimsJTI: String
        var hasSignature: Bool
    }

    /// The rows stored for a jti.
    func stored(jti: String) async throws -> [StoredEvent] {
        var rows: [StoredEvent] = []
        let sequence = try await database.query(
            """
            SELECT event_types, subject_sub, status, claims->>'jti', claims::text LIKE '%signature%'
            FROM risc_events WHERE jti = \(jti) AND issuer = \(transmitter.issuer)
            """)
        for try await (types, sub, status, claimsJTI, hasSignature) in sequence.decode(
            (
                [String], String?, String, String, Bool
            ).self)
        {
            rows.append(StoredEvent(eventTypes: types, subjectSub: sub, status: status, claimsJTI: claimsJTI, hasSignature: hasSignature))
        }
        return rows
    }
}

/// The `jti` claim of a compact JWS, or "" when it has none.
func jti(of token: String) -> String {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
        let object = try? JSONSerialization.jsonObject(with: payload) as? [String: Any]
    else { return "" }
    return object["jti"] as? String ?? ""
}

extension Harness {
    /// `with(options)` on a database of the test's own: no other test's worker can take its events, and database
    /// statistics and schema changes stay the test's own.
    static func withIsolatedDatabase(
        _ options: Options = Options(), _ body: @escaping @Sendable (Harness) async throws -> Void
    )
        async throws
    {
        try await IsolatedDatabase.with { database in
            var options = options
            options.databaseURL = database.url
            try await Harness.with(options, body)
        }
    }
}

/// Serves a development transmitter on loopback while `body` runs (an attacker's, or one beside a child process).
func serving<T: Sendable>(_ transmitter: DevTransmitter, _ body: @Sendable () async throws -> T) async throws -> T {
    let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
    let app = transmitter.makeApplication { port in portContinuation.yield(port) }
    let group = ServiceGroup(configuration: .init(services: [.init(service: app)], logger: Harness.logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        _ = await iterator.next()
        let result: T
        do {
            result = try await body()
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
        return result
    }
}

/// The receiver's warnings and errors, kept in memory: the tests log nothing by default, and a 503 alone does not
/// say whether the keys or the database were unavailable, nor why.
final class LoggedWarnings: Sendable {
    private let lines = Mutex<[String]>([])

    /// The last few, oldest first, for an expectation's message.
    var recent: String { lines.withLock { $0.suffix(5).joined(separator: "\n") } }

    /// `base` as it was, and every warning or error also kept here.
    func logger(alongside base: Logger) -> Logger {
        // Each handler keeps its own level: the test's stays as quiet as LOG_LEVEL asks.
        Logger(label: base.label) { _ in MultiplexLogHandler([base.handler, Recorder(lines: self)]) }
    }

    /// A logger that keeps everything it is given at or above its level, alone.
    func logger() -> Logger { Logger(label: "recorded") { _ in Recorder(lines: self) } }

    func contains(_ text: String) -> Bool { lines.withLock { $0.contains { $0.contains(text) } } }

    fileprivate func append(_ line: String) {
        lines.withLock { lines in
            lines.append(line)
            if lines.count > 50 { lines.removeFirst(lines.count - 50) }
        }
    }

    private struct Recorder: LogHandler {
        let lines: LoggedWarnings
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .warning

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            lines.append("\(event.level) \(event.message) \(fields)")
        }
    }
}
