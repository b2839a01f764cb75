import AsyncHTTPClient
import Foundation
import NIOPosix
import RISC
import RISCStore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where a delivery may go, decided just before it is sent: the subscriber's host, resolved now, and every address
/// it resolves to checked (`IPAddress.isForbiddenDestination`). Registration checked the URL as written; a name
/// can resolve anywhere later.
enum SubscriberAddresses {
    enum Decision: Sendable, Equatable {
        /// Send to `host`, connecting to one of `addresses` only (every one of them checked).
        case connect(host: String, addresses: [IPAddress])
        /// Not sent, and why (the attempt fails without connecting).
        case refused(String)
    }

    static func check(url: String, resolve: @escaping @Sendable (String) async throws -> [IPAddress]) async -> Decision {
        guard let host = URL(string: url)?.host, !host.isEmpty else { return .refused("not sent: the subscriber's URL names no host") }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if IPAddress.metadataNames.contains(name) { return .refused("not sent: the subscriber's host is a cloud metadata service") }
        if let literal = IPAddress(literal: name) {
            // Pinned too: the resolver that connects may not read the host as this parser did ("8.8.8.8.").
            return literal.isForbiddenDestination ? .refused(forbidden) : .connect(host: host, addresses: [literal])
        }
        let addresses: [IPAddress]
        do {
            addresses = try await withTimeout(resolveTimeout) { try await resolve(host) }
        } catch {
            return .refused("not sent: the subscriber's host could not be resolved within \(resolveTimeout.components.seconds) s")
        }
        guard !addresses.isEmpty else { return .refused("not sent: the subscriber's host has no address") }
        // Every address, not only the one used: a name that also resolves somewhere forbidden is not trusted.
        if addresses.contains(where: \.isForbiddenDestination) { return .refused(forbidden) }
        return .connect(host: host, addresses: addresses)
    }

    static let forbidden = "not sent: the subscriber's host is a link-local, unspecified, multicast or broadcast address"

    /// How long a host may take to resolve; a delivery's lease counts it.
    static let resolveTimeout: Duration = .seconds(5)

    /// `getaddrinfo`, on the system resolver's threads.
    static let systemResolve: @Sendable (String) async throws -> [IPAddress] = { host in try await HostResolver.system.resolve(host) }
}

/// Looks host names up with a blocking call (`getaddrinfo`) on threads of its own, never more than one lookup of a
/// name at a time: a call for a name already being looked up waits for that lookup's answer. `getaddrinfo` cannot be
/// cancelled, so a lookup whose name servers never answer keeps its thread until the system resolver gives up; one
/// subscriber's stalled name holds one thread, however many of its deliveries wait, and the other subscribers'
/// lookups go on on the others (nor do they queue in NIO's shared blocking pool).
final class HostResolver: Sendable {
    struct ResolutionFailed: Error {}

    /// The service's: `getaddrinfo` on 8 threads.
    static let system = HostResolver(threads: 8, lookup: HostResolver.systemLookup)

    private typealias Waiter = CheckedContinuation<[IPAddress], any Error>

    private struct State {
        /// The callers waiting for each name being looked up, by their number.
        var waiting: [String: [UInt64: Waiter]] = [:]
        /// Callers not yet waiting, and whether they were cancelled meanwhile.
        var arriving: [UInt64: Bool] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let pool: NIOThreadPool
    private let lookup: @Sendable (String) throws -> [IPAddress]
    private let state = Mutex(State())

    init(threads: Int, lookup: @escaping @Sendable (String) throws -> [IPAddress]) {
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
        self.lookup = lookup
    }

    /// The addresses of `host`, from the lookup of it in flight, or one started now. A caller that is cancelled
    /// (its delivery's time to resolve is up) stops waiting at once; the lookup goes on for the others.
    func resolve(_ host: String) async throws -> [IPAddress] {
        let name = host.lowercased()
        let number = state.withLock { state in
            state.nextWaiter += 1
            state.arriving[state.nextWaiter] = false
            return state.nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (waiter: Waiter) in
                enum Next { case start, join, cancelled }
                let next = state.withLock { state -> Next in
                    if state.arriving.removeValue(forKey: number) == true { return .cancelled }
                    let first = state.waiting[name] == nil
                    state.waiting[name, default: [:]][number] = waiter
                    return first ? .start : .join
                }
                switch next {
                case .cancelled: waiter.resume(throwing: CancellationError())
                case .join: break
                case .start:
                    let lookup = self.lookup
                    pool.submit { work in
                        let result: Result<[IPAddress], any Error> =
                            work == .active ? Result { try lookup(name) } : .failure(ResolutionFailed())
                        let waiters = self.state.withLock { $0.waiting.removeValue(forKey: name) ?? [:] }
                        for waiter in waiters.values { waiter.resume(with: result) }
                    }
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let waiter = state.waiting[name]?.removeValue(forKey: number) { return waiter }
                if state.arriving[number] != nil { state.arriving[number] = true }
                return nil
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// Stops the threads (tests; the service's resolver lives as long as the process).
    func shutdown() async {
        try? await pool.shutdownGracefully()
    }

    static let systemLookup: @Sendable (String) throws -> [IPAddress] = { host in
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0 else { throw ResolutionFailed() }
        defer { freeaddrinfo(result) }
        var addresses: [IPAddress] = []
        var cursor = result
        while let info = cursor {
            if let address = info.pointee.ai_addr.flatMap({ IPAddress(socketAddress: $0) }) { addresses.append(address) }
            cursor = info.pointee.ai_next
        }
        return addresses
    }
}

/// One HTTP client, with its own connection pool, per subscriber, for its host and one address checked for it.
/// Connections go only to that address (AsyncHTTPClient's DNS override; TLS still verifies the host's name), and one
/// subscriber's slow or dead connections never hold a slot another subscriber needs. A client whose address no
/// longer holds, or whose subscriber is gone, is replaced and shut down once its requests can have finished.
final class SubscriberConnections: Sendable {
    private struct Entry {
        var target: String
        var client: HTTPClient

        static func target(host: String, address: IPAddress) -> String { "\(host) \(address)" }
    }

    private struct State {
        var configuration = HTTPClient.Configuration()
        var clients: [Int64: Entry] = [:]
    }

    /// How long a replaced client is kept for the requests still on it.
    static let retirement: Duration = .seconds(30)

    private let state = Mutex(State())
    private let made = Atomic<Int>(0)

    /// How many clients were made (tests).
    var clientsMade: Int { made.load(ordering: .relaxed) }

    /// For the clients made from now on.
    var configuration: HTTPClient.Configuration {
        get { state.withLock { $0.configuration } }
        set { state.withLock { $0.configuration = newValue } }
    }

    /// The subscriber's client for `host`, pinned to one of `addresses` (each of them checked). The client it has is
    /// kept while the address it is pinned to is still among them: a name answered in turn by several addresses
    /// (round-robin DNS) keeps its connections rather than making a client for each order.
    func client(subscriber: Int64, host: String, addresses: [IPAddress]) -> HTTPClient {
        let targets = addresses.map { Entry.target(host: host, address: $0) }
        let (client, replaced) = state.withLock { state -> (HTTPClient, HTTPClient?) in
            if let entry = state.clients[subscriber], targets.contains(entry.target) { return (entry.client, nil) }
            let address = addresses[0]
            let target = targets[0]
            made.add(1, ordering: .relaxed)
            var configuration = state.configuration
            configuration.dnsOverride = [host: address.description]
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            let replaced = state.clients.updateValue(Entry(target: target, client: client), forKey: subscriber)?.client
            return (client, replaced)
        }
        if let replaced { retire(replaced) }
        return client
    }

    /// Drops the clients of subscribers no longer in `subscribers`.
    func keepOnly(_ subscribers: Set<Int64>) {
        let gone = state.withLock { state in
            let gone = state.clients.filter { !subscribers.contains($0.key) }
            for id in gone.keys { state.clients[id] = nil }
            return gone.values.map(\.client)
        }
        gone.forEach(retire)
    }

    private func retire(_ client: HTTPClient) {
        Task {
            try? await Task.sleep(for: Self.retirement)
            try? await client.shutdown()
        }
    }

    func shutdown() async {
        let clients = state.withLock { state in
            defer { state.clients.removeAll() }
            return state.clients.values.map(\.client)
        }
        for client in clients { try? await client.shutdown() }
    }
}
