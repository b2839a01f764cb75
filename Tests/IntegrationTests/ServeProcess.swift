import AsyncHTTPClient
import DevTransmitter
import Foundation
import NIOCore
import ServiceLifecycle
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A free TCP port on 127.0.0.1 (bound, read, released).
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, length) }
    }
    withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// `risc-receiver serve` as a real child process, against an in-process development transmitter, with all of
/// its output in a file.
struct ServeProcess {
    let process: ChildProcess
    let url: String
    let logFile: String
    let databaseURL: String
    let secretFile: String

    var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    /// Starts a transmitter in this process and `serve` beside it, runs `body`, and stops both.
    static func with(
        environment extra: [String: String] = [:], arguments: [String] = [],
        _ body: @escaping @Sendable (ServeProcess, DevTransmitter) async throws -> Void
    ) async throws {
        // A database of its own: the child's worker must not take other tests' events, nor theirs its own.
        try await IsolatedDatabase.with { database in
            try await with(databaseURL: database.url, environment: extra, arguments: arguments, body)
        }
    }

    private static func with(
        databaseURL: String, environment extra: [String: String], arguments: [String],
        _ body: @escaping @Sendable (ServeProcess, DevTransmitter) async throws -> Void
    ) async throws {
        let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
        try await serving(transmitter) {
            let serve = try start(databaseURL: databaseURL, transmitter: transmitter, environment: extra, arguments: arguments)
            defer { serve.stop() }
            try await serve.waitUntilReady()
            try await body(serve, transmitter)
        }
    }

    /// Starts `serve` against `transmitter` (running in this process) on a free port; `stop()` ends it. Several may
    /// share one database.
    /// `launcher` runs the binary (`["/usr/bin/prlimit", "--nofile=256:256"]`), and must exec it, keeping the pid.
    static func start(
        databaseURL: String, transmitter: DevTransmitter, port: Int = freePort(), environment extra: [String: String] = [:],
        arguments: [String] = [], launcher: [String] = []
    ) throws -> ServeProcess {
        let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("client-secret-\(UUID().uuidString).json").path
        #expect(FileManager.default.createFile(atPath: secretFile, contents: Data(transmitter.clientSecretFile().serialized.utf8)))
        var environment: [String: String] = [
            "DATABASE_URL": databaseURL, "RISC_CLIENT_IDS": Harness.audience,
            "RISC_PORT": String(port), "RISC_CONFIGURATION_URL": transmitter.discoveryURL,
            "GOOGLE_OPENID_CONFIGURATION_URL": transmitter.openIDConfigurationURL,
            "RISC_SERVICE_TOKEN": Harness.serviceToken, "RISC_VAULT_KEY": Harness.vaultKey,
            "RISC_ADMIN_TOKEN": Harness.adminToken,
            "GOOGLE_CLIENT_SECRET_FILES": secretFile, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "RISC_MIGRATIONS_DIR": Harness.repositoryRoot.appendingPathComponent("migrations").path,
        ]
        environment.merge(extra) { _, new in new }
        let logFile = FileManager.default.temporaryDirectory.appendingPathComponent("serve-\(UUID().uuidString).log").path
        let command = launcher + [riscReceiverBinary, "serve"] + arguments
        let process = try ChildProcess.spawn(command[0], Array(command.dropFirst()), environment: environment, outputFile: logFile)
        return ServeProcess(process: process, url: "http://127.0.0.1:\(port)", logFile: logFile, databaseURL: databaseURL, secretFile: secretFile)
    }

    /// Kills the process (SIGKILL, if it still runs) and removes its files.
    func stop() {
        process.kill(SIGKILL)
        _ = waitpid(process.pid, nil, WNOHANG)
        try? FileManager.default.removeItem(atPath: secretFile)
        try? FileManager.default.removeItem(atPath: logFile)
    }

    /// SIGTERM, and the exit status with how long the process took to end (killed after `timeout`).
    func terminate(timeout: Duration = .seconds(40)) async throws -> (status: Int32, took: Duration) {
        let signalled = ContinuousClock.now
        process.kill(SIGTERM)
        let status = try await process.wait(timeout: timeout)
        return (status, ContinuousClock.now - signalled)
    }

    func waitUntilReady() async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let reply = try? await get("/readyz"), reply.status == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw SubprocessFailed(description: "serve did not become ready:\n\(log)")
    }

    func get(_ path: String, bearer: String? = nil, timeout: Duration = .seconds(10)) async throws -> Harness.Reply {
        var request = HTTPClientRequest(url: url + path)
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        // A fresh connection each time: a pooled one may be closed by the server's RISC_IDLE_TIMEOUT (2 s in some
        // tests) just as it is reused, which fails the request with "I/O on closed channel" (seen in CI).
        request.headers.add(name: "Connection", value: "close")
        let response = try await HTTPClient.shared.execute(request, timeout: .init(timeout))
        let body = try await response.body.collect(upTo: 4 << 20)
        return Harness.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
    }
}
