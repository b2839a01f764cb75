import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `scripts/lib/fault_proxy.py` in front of the test cluster: a loopback TCP proxy whose control port makes the
/// database go silent (`blackhole`), reset its connections, or answer again (`forward`), as the network-fault
/// suite does to a whole service.
struct FaultProxy {
    let controlPort: Int

    /// Runs `body` with a proxy in front of the server of `url`, and `url` through the proxy.
    static func with(in url: String, _ body: (FaultProxy, String) async throws -> Void) async throws {
        guard var components = URLComponents(string: url), let target = components.port else {
            throw SubprocessFailed(description: "no port in \(url)")
        }
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("fault-proxy-\(UUID().uuidString).log").path
        let process = try ChildProcess.spawn(
            "/usr/bin/env", ["python3", script, "--listen", "0", "--target", String(target), "--control", "0"], outputFile: log)
        defer {
            process.kill(SIGKILL)
            _ = waitpid(process.pid, nil, 0)
            try? FileManager.default.removeItem(atPath: log)
        }
        // It prints both ports once it listens.
        var ports: (listen: Int, control: Int)?
        try await eventually("the fault proxy listens", timeout: .seconds(30)) {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("listen=") }) else { return false }
            let numbers = line.split(separator: " ").compactMap { Int($0.split(separator: "=").last ?? "") }
            guard numbers.count == 2 else { return false }
            ports = (numbers[0], numbers[1])
            return true
        }
        components.port = ports!.listen
        try await body(FaultProxy(controlPort: ports!.control), components.string!)
    }

    /// Sends one control command (`blackhole`, `reset`, `forward`, ...); throws unless the proxy took it.
    func send(_ command: String) async throws {
        try await shell("python3 \(Self.script) --control-port \(controlPort) \(command) >/dev/null")
    }

    private static let script = Harness.repositoryRoot.appendingPathComponent("scripts/lib/fault_proxy.py").path
}
