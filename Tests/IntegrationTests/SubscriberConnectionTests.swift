import AsyncHTTPClient
import Foundation
import RISC
import Synchronization
import Testing

@testable import RISCWorker

@Suite("Subscribers' lookups and connections", .timeLimit(.minutes(1)))
struct SubscriberConnectionTests {
    @Test("A reply's body is read without a bound only when HTTP/1 says it ended with the head; over HTTP/2 never")
    func replyEndedWithHead() {
        #expect(NotificationDispatcher.endedWithHead(httpMajorVersion: 1, status: 204, contentLength: nil))
        #expect(NotificationDispatcher.endedWithHead(httpMajorVersion: 1, status: 304, contentLength: nil))
        #expect(NotificationDispatcher.endedWithHead(httpMajorVersion: 1, status: 200, contentLength: "0"))
        #expect(!NotificationDispatcher.endedWithHead(httpMajorVersion: 1, status: 200, contentLength: nil))
        #expect(!NotificationDispatcher.endedWithHead(httpMajorVersion: 1, status: 200, contentLength: "12"))
        // An HTTP/2 body ends only with END_STREAM, which a subscriber may never send, even after a 204.
        #expect(!NotificationDispatcher.endedWithHead(httpMajorVersion: 2, status: 204, contentLength: nil))
        #expect(!NotificationDispatcher.endedWithHead(httpMajorVersion: 2, status: 200, contentLength: "0"))
    }

    @Test("A host whose DNS never answers holds one resolver thread, however many deliveries wait on it: another host resolves at once")
    func stalledHostDoesNotStallOthers() async throws {
        // Released when the test is done: until then the stalled host's lookup holds its thread, as a getaddrinfo
        // whose name servers drop every query would (it cannot be cancelled).
        let gate = DispatchSemaphore(value: 0)
        let stalledLookups = Atomic<Int>(0)
        let resolver = HostResolver(threads: 2) { host in
            guard host == "stalled.risc.test" else { return [IPAddress(literal: "10.0.0.7")!] }
            stalledLookups.add(1, ordering: .relaxed)
            gate.wait()
            return []
        }
        let resolve: @Sendable (String) async throws -> [IPAddress] = { try await resolver.resolve($0) }
        // Ten deliveries to the stalled subscriber at once, each checking its address as the dispatcher does.
        let stalled = (0..<10).map { _ in
            Task { await SubscriberAddresses.check(url: "https://stalled.risc.test/hook", resolve: resolve) }
        }
        try await eventually("the stalled host's lookup has started") { stalledLookups.load(ordering: .relaxed) >= 1 }
        // Time for the other nine to reach the resolver (with one thread per lookup, they would now hold both).
        try await Task.sleep(for: .milliseconds(300))

        let started = ContinuousClock.now
        let healthy = await SubscriberAddresses.check(url: "https://healthy.risc.test/hook", resolve: resolve)
        #expect(healthy == .connect(host: "healthy.risc.test", addresses: [IPAddress(literal: "10.0.0.7")!]))
        #expect(ContinuousClock.now - started < .seconds(2))
        #expect(stalledLookups.load(ordering: .relaxed) == 1, "the other deliveries joined the lookup in flight")
        for task in stalled {
            guard case .refused(let reason) = await task.value else {
                Issue.record("a stalled lookup was answered")
                continue
            }
            #expect(reason.contains("could not be resolved"))
        }
        for _ in 0..<10 { gate.signal() }
        await resolver.shutdown()
    }

    @Test("A lookup that ends lets the next one start afresh: its answer is not kept")
    func nextLookupStartsAfresh() async throws {
        let lookups = Atomic<Int>(0)
        let resolver = HostResolver(threads: 2) { _ in
            let count = lookups.add(1, ordering: .relaxed).newValue
            return [IPAddress(literal: "10.0.0.\(count)")!]
        }
        #expect(try await resolver.resolve("hooks.risc.test") == [IPAddress(literal: "10.0.0.1")!])
        #expect(try await resolver.resolve("hooks.risc.test") == [IPAddress(literal: "10.0.0.2")!])
        await resolver.shutdown()
    }

    @Test("A name whose addresses come back in changing order keeps one client; it is replaced only when its address is gone")
    func roundRobinKeepsClient() async throws {
        let connections = SubscriberConnections()
        let (a, b, c) = (IPAddress(literal: "10.0.0.1")!, IPAddress(literal: "10.0.0.2")!, IPAddress(literal: "10.0.0.3")!)
        let first = connections.client(subscriber: 1, host: "rr.risc.test", addresses: [a, b])
        for round in 1..<6 {
            let client = connections.client(subscriber: 1, host: "rr.risc.test", addresses: round % 2 == 0 ? [a, b] : [b, a])
            #expect(client === first)
        }
        #expect(connections.clientsMade == 1)
        // The address it was pinned to is no longer among the answers: a new client, pinned to one that is.
        let moved = connections.client(subscriber: 1, host: "rr.risc.test", addresses: [c, b])
        #expect(moved !== first)
        #expect(connections.client(subscriber: 1, host: "rr.risc.test", addresses: [b, c]) === moved)
        // Another host (the subscriber's URL changed): a new client too, even at a same address.
        _ = connections.client(subscriber: 1, host: "other.risc.test", addresses: [b, c])
        #expect(connections.clientsMade == 3)
        await connections.shutdown()
    }
}
