import AsyncHTTPClient
import Foundation
import NIOPosix
import RISC
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where a delivery may go, decided just before it is sent: the subscriber's host, resolved now, and every address
/// it resolves to checked (`IPAddress.isForbiddenDestination`). Registration checked the URL as written; a name
/// can resolve anywhere later.
enum SubscriberAddresses {
    enum Decision: Sendable, Equatable {
        /// Send to `host`, connecting to `address` (nil for a host written as an address).
        case connect(host: String, address: IPAddress?)
        /// Not sent, and why (the attempt fails without connecting).
        case refused(String)
    }

    static func check(url: String, resolve: @Sendable (String) async throws -> [IPAddress]) async -> Decision {
        guard let host = URL(string: url)?.host, !host.isEmpty else { return .refused("not sent: the subscriber's URL names no host") }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if IPAddress.metadataNames.contains(name) { return .refused("not sent: the subscriber's host is a cloud metadata service") }
        if let literal = IPAddress(literal: name) {
            return literal.isForbiddenDestination ? .refused(forbidden) : .connect(host: host, address: nil)
        }
        let addresses: [IPAddress]
        do {
            addresses = try await resolve(host)
        } catch {
            return .refused("not sent: the subscriber's host could not be resolved")
        }
        guard let first = addresses.first else { return .refused("not sent: the subscriber's host has no address") }
        // Every address, not only the one used: a name that also resolves somewhere forbidden is not trusted.
        if addresses.contains(where: \.isForbiddenDestination) { return .refused(forbidden) }
        return .connect(host: host, address: first)
    }

    static let forbidden = "not sent: the subscriber's host is a link-local, unspecified, multicast or broadcast address"

    struct ResolutionFailed: Error {}

    /// `getaddrinfo`, on NIO's blocking-work threads rather than a cooperative one.
    static let systemResolve: @Sendable (String) async throws -> [IPAddress] = { host in
        try await NIOThreadPool.singleton.runIfActive {
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

/// One HTTP client, with its own connection pool, per subscriber host and the address checked for it. Connections
/// go only to that address (AsyncHTTPClient's DNS override; TLS still verifies the host's name), and one subscriber's
/// slow or dead connections never hold a slot another subscriber needs.
final class SubscriberConnections: Sendable {
    private struct State {
        var configuration = HTTPClient.Configuration()
        var clients: [String: HTTPClient] = [:]
    }

    private let state = Mutex(State())

    /// For the clients made from now on.
    var configuration: HTTPClient.Configuration {
        get { state.withLock { $0.configuration } }
        set { state.withLock { $0.configuration = newValue } }
    }

    func client(host: String, pinnedTo address: IPAddress?) -> HTTPClient {
        let key = "\(host) \(address?.description ?? "")"
        return state.withLock { state in
            if let client = state.clients[key] { return client }
            var configuration = state.configuration
            if let address { configuration.dnsOverride = [host: address.description] }
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            state.clients[key] = client
            return client
        }
    }

    func shutdown() async {
        let clients = state.withLock { state in
            defer { state.clients.removeAll() }
            return Array(state.clients.values)
        }
        for client in clients { try? await client.shutdown() }
    }
}
