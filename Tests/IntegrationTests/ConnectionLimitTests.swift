import DevTransmitter
import Foundation
import NIOCore
import RISCConfiguration
import RISCServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `serve` under a low file-descriptor limit, flooded with more idle connections than the limit allows: a client
/// connected before the flood is still served, the server does not spin, and new clients are served once the flood
/// has gone.
@Suite("Connection limit: a flood of idle connections under a low descriptor limit", .serialized, .timeLimit(.minutes(3)))
struct ConnectionLimitTests {
    static let descriptorLimit = 256
    static let flood = 600

    @Test("At the default RISC_MAX_CONNECTIONS the server holds fewer descriptors than its limit and keeps serving")
    func defaultCap() async throws {
        let (descriptors, _) = try await flooded(environment: [:])
        // The cap leaves descriptors free for the database and outbound calls: the flood never takes the last one.
        #expect(descriptors < Self.descriptorLimit - 16, "the flood took the server to \(descriptors) of \(Self.descriptorLimit) descriptors")
    }

    @Test("With a cap above the limit the descriptors run out, and the server waits for one instead of spinning")
    func descriptorsRunOut() async throws {
        let (descriptors, log) = try await flooded(environment: ["RISC_MAX_CONNECTIONS": "100000"])
        // The barrier that shows accept failed (so the backoff, not the cap, kept the CPU down).
        #expect(descriptors == Self.descriptorLimit)
        #expect(log.contains("Out of file descriptors"), "\(log.suffix(2000))")
    }

    /// Starts `serve` under the limit, connects a client, floods, and checks what both tests check: the client's
    /// requests each answered within a second, the server's CPU, new connections after the flood. Returns the most
    /// descriptors the server held during the flood, and its log.
    func flooded(environment: [String: String]) async throws -> (Int, String) {
        let outcome = Outcome()
        try await IsolatedDatabase.with { database in
            let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(transmitter) {
                let serve = try ServeProcess.start(
                    databaseURL: database.url, transmitter: transmitter, environment: environment,
                    launcher: ["/usr/bin/prlimit", "--nofile=\(Self.descriptorLimit):\(Self.descriptorLimit)"])
                defer { serve.stop() }
                try await serve.waitUntilReady()
                let port = try #require(URL(string: serve.url)?.port)
                let pid = serve.process.pid

                let client = try RawConnection(port: port)
                defer { client.close() }
                #expect(await client.get("/healthz", within: .seconds(5)) == 200)
                #expect(await client.get("/v1/session", bearer: "no-such-session-0123456789", within: .seconds(5)) == 401)

                var idle = idleConnections(Self.flood, port: port)
                defer { for socket in idle { _ = close(socket) } }
                // The server has taken what it will take once its descriptor count stops moving.
                var descriptors = openDescriptors(pid)
                var settled = 0
                while settled < 5 {
                    try await Task.sleep(for: .milliseconds(100))
                    let now = openDescriptors(pid)
                    settled = now == descriptors ? settled + 1 : 0
                    descriptors = max(descriptors, now)
                }

                let cpuBefore = try cpuSeconds(pid)
                let started = ContinuousClock.now
                var answers: [Int?] = []
                for index in 0..<6 {
                    // 5 s, not 1: on a loaded machine the first answer once took longer, and each later read then
                    // took the answer before its own. A server that stopped serving this client never answers.
                    let answer =
                        index % 2 == 0
                        ? await client.get("/healthz", within: .seconds(5))
                        : await client.get("/v1/session", bearer: "no-such-session-0123456789", within: .seconds(5))
                    answers.append(answer)
                    try await Task.sleep(for: .milliseconds(300))
                }
                let elapsed = ContinuousClock.now - started
                let cores = (try cpuSeconds(pid) - cpuBefore) / (elapsed / .seconds(1))
                descriptors = max(descriptors, openDescriptors(pid))
                #expect(answers == [200, 401, 200, 401, 200, 401], "the client connected before the flood got \(answers)")
                // A server that retries accept at once burns a whole core; one that waits, almost nothing.
                #expect(cores < 0.3, "the server used \(cores) cores while flooded")

                for socket in idle { _ = close(socket) }
                idle = []
                try await eventually("a new connection is served after the flood", timeout: .seconds(15)) {
                    (try? await serve.get("/healthz").status) == 200
                }
                #expect(await client.get("/healthz", within: .seconds(5)) == 200)
                outcome.set(descriptors, serve.log)
            }
        }
        return outcome.value
    }

    final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var stored = (0, "")
        func set(_ descriptors: Int, _ log: String) {
            lock.lock()
            defer { lock.unlock() }
            stored = (descriptors, log)
        }
        var value: (Int, String) {
            lock.lock()
            defer { lock.unlock() }
            return stored
        }
    }
}

/// `count` connections to loopback that send nothing; their connects finish (or wait in the backlog) on their own.
func idleConnections(_ count: Int, port: Int) -> [Int32] {
    (0..<count).map { _ in
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return fd
    }
}

/// The descriptors a process has open.
func openDescriptors(_ pid: pid_t) -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
}

/// User plus system CPU time a process has used, in seconds.
func cpuSeconds(_ pid: pid_t) throws -> Double {
    let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    // The fields after the command name, which is in parentheses and may hold spaces: utime and stime are 14 and 15.
    guard let close = stat.lastIndex(of: ")") else { throw SubprocessFailed(description: "unreadable /proc/\(pid)/stat") }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
        throw SubprocessFailed(description: "unreadable /proc/\(pid)/stat")
    }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

extension RawConnection {
    /// A GET on this (keep-alive) connection: the response's status, or nil if it did not arrive whole within `limit`.
    func get(_ path: String, bearer: String? = nil, within limit: Duration) async -> Int? {
        send("GET \(path) HTTP/1.1\r\nHost: x\r\n" + (bearer.map { "Authorization: Bearer \($0)\r\n" } ?? "") + "\r\n")
        let deadline = ContinuousClock.now + limit
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 0) > 0 {
                let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if count == 0 { return nil }
                if count > 0 { received += buffer[0..<count] }
                if let status = Self.completeResponse(received) { return status }
            } else {
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        return nil
    }

    /// The status of `bytes` if they hold a whole response (headers, and the body Content-Length promises).
    static func completeResponse(_ bytes: [UInt8]) -> Int? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return nil }
        let head = text[..<end.lowerBound].split(separator: "\r\n")
        let length =
            head.dropFirst().first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        guard text.utf8.count - text[..<end.upperBound].utf8.count >= length, head.first?.split(separator: " ").count ?? 0 >= 2 else {
            return nil
        }
        return Int(head[0].split(separator: " ")[1])
    }
}

@Suite("Connection limit: RISC_MAX_CONNECTIONS and its default")
struct ConnectionCapConfigurationTests {
    @Test("The default is the descriptor limit less the database pool, 128 for outbound calls and files, and 3 per event loop")
    func defaultFormula() {
        #expect(ServiceConfiguration.descriptorReserve(databaseConnections: 20, eventLoops: 2) == 154)
        #expect(ServiceConfiguration.defaultMaxConnections(fileDescriptorLimit: 1024, databaseConnections: 20, eventLoops: 2) == 870)
        #expect(ServiceConfiguration.defaultMaxConnections(fileDescriptorLimit: 256, databaseConnections: 20, eventLoops: 2) == 102)
        #expect(ServiceConfiguration.defaultMaxConnections(fileDescriptorLimit: 65536, databaseConnections: 40, eventLoops: 8) == 65344)
        // A limit below the reserve still lets one client in.
        #expect(ServiceConfiguration.defaultMaxConnections(fileDescriptorLimit: 100, databaseConnections: 20, eventLoops: 2) == 1)
    }

    @Test("Unset, the cap follows this process's descriptor limit; set, it is the value")
    func cap() throws {
        let unset = try ConfigurationTests.configuration([:])
        #expect(unset.maxConnections == nil)
        let reserve = ServiceConfiguration.descriptorReserve(databaseConnections: 20, eventLoops: NIOSingletons.groupLoopCountSuggestion)
        #expect(connectionCap(configuration: unset, databaseConnections: 20) == max(1, FileDescriptorLimit.current().soft - reserve))
        let set = try ConfigurationTests.configuration(["RISC_MAX_CONNECTIONS": " 500 "])
        #expect(set.maxConnections == 500)
        #expect(connectionCap(configuration: set, databaseConnections: 20) == 500)
        #expect(set.redactedSummary.contains { $0 == ("RISC_MAX_CONNECTIONS", "500") })
    }

    @Test("A bad RISC_MAX_CONNECTIONS is one line naming it", arguments: ["0", "-5", "many", "1000001", "2.5"])
    func badValue(_ value: String) throws {
        let error = try ConfigurationTests.invalid("RISC_MAX_CONNECTIONS") { () throws(ServiceConfiguration.Invalid) in
            try ConfigurationTests.configuration(["RISC_MAX_CONNECTIONS": value])
        }
        #expect(error.problem == "must be a number from 1 to 1000000")
    }
}
