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
        /// Send to `host`, connecting to `address` only.
        case connect(host: String, address: IPAddress)
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
            return literal.isForbiddenDestination ? .refused(forbidden) : .connect(host: host, address: literal)
        }
        let addresses: [IPAddress]
        do {
            addresses = try await withTimeout(resolveTimeout) { try await resolve(host) }
        } catch {
            return .refused("not sent: the subscriber's host could not be resolved within \(resolveTimeout.components.seconds) s")
        }
        guard let first = addresses.first else { return .refused("not sent: the subscriber's host has no address") }
        // Every address, not only the one used: a name that also resolves somewhere forbidden is not trusted.
        if addresses.contains(where: \.isForbiddenDestination) { return .refused(forbidden) }
        return .connect(host: host, address: first)
    }

    static let forbidden = "not sent: the subscriber's host is a link-local, unspecified, multicast or broadcast address"

    struct ResolutionFailed: Error {}

    /// How long a host may take to resolve; a delivery's lease counts it.
    static let resolveTimeout: Duration = .seconds(5)

    /// Threads of their own for `getaddrinfo`, which blocks: a subscriber whose DNS never answers must not queue every
    /// other subscriber's lookups (nor NIO's shared blocking pool) behind its own.
    static let resolverThreads: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 8)
        pool.start()
        return pool
    }()

    /// `getaddrinfo`, on the resolver's threads rather than a cooperative one.
    static let systemResolve: @Sendable (String) async throws -> [IPAddress] = { host in
        try await resolverThreads.runIfActive {
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
}

/// One HTTP client, with its own connection pool, per subscriber, for the host and address last checked for it.
/// Connections go only to that address (AsyncHTTPClient's DNS override; TLS still verifies the host's name), and one
/// subscriber's slow or dead connections never hold a slot another subscriber needs. A client whose address no
/// longer holds, or whose subscriber is gone, is replaced and shut down once its requests can have finished.
final class SubscriberConnections: Sendable {
    private struct Entry {
        var target: String
        var client: HTTPClient
    }

    private struct State {
        var configuration = HTTPClient.Configuration()
        var clients: [Int64: Entry] = [:]
    }

    /// How long a replaced client is kept for the requests still on it.
    static let retirement: Duration = .seconds(30)

    private let state = Mutex(State())

    /// For the clients made from now on.
    var configuration: HTTPClient.Configuration {
        get { state.withLock { $0.configuration } }
        set { state.withLock { $0.configuration = newValue } }
    }

    func client(subscriber: Int64, host: String, pinnedTo address: IPAddress) -> HTTPClient {
        let target = "\(host) \(address)"
        let (client, replaced) = state.withLock { state -> (HTTPClient, HTTPClient?) in
            if let entry = state.clients[subscriber], entry.target == target { return (entry.client, nil) }
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
