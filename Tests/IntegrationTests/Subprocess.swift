import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct SubprocessFailed: Error, CustomStringConvertible {
    let description: String
}

/// Starts a process with posix_spawn. Foundation's `Process` is avoided on purpose: on Linux it can miss
/// a child's exit (leaving a zombie and a waiter that never returns) when the child forks daemons.
struct ChildProcess: Sendable {
    let pid: pid_t

    static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, outputFile: String? = nil
    ) throws -> ChildProcess {
        var pid: pid_t = 0
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let outputFile {
            // Standard output and standard error both go to the file.
            posix_spawn_file_actions_addopen(&actions, 1, outputFile, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        // Nothing else of this process: the test runner's descriptors not marked close-on-exec (its database
        // connections, other tests' sockets) would count against a child's descriptor limit, and keep a connection
        // open after its test closed it, as long as the child lives.
        _ = closeFrom(&actions, 3)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envStrings = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp = envStrings.map { strdup($0) } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard result == 0 else { throw SubprocessFailed(description: "cannot start \(executable): error \(result)") }
        return ChildProcess(pid: pid)
    }

    /// glibc's posix_spawn_file_actions_addclosefrom_np (2.34 and later), which Swift's Glibc module does not export.
    private static let closeFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("posix_spawn_file_actions_addclosefrom_np is missing: glibc 2.34 or later is needed")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// Waits for the exit without blocking a concurrency thread; returns the exit status
    /// (128 + signal number when killed by a signal). A child still running after `timeout` is killed, so a
    /// hung child fails its test instead of hanging the suite.
    func wait(timeout: Duration = .seconds(180)) async throws -> Int32 {
        var status: Int32 = 0
        let deadline = ContinuousClock.now + timeout
        var killed = false
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { break }
            if result < 0 { throw SubprocessFailed(description: "waitpid failed for \(pid)") }
            if !killed, ContinuousClock.now > deadline {
                kill(SIGKILL)
                killed = true
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    func kill(_ signal: Int32) {
        _ = Glibc.kill(pid, signal)
    }
}

/// Runs a bash script and waits for it.
func shell(_ script: String) async throws {
    let status = try await ChildProcess.spawn("/bin/bash", ["-c", script]).wait()
    guard status == 0 else { throw SubprocessFailed(description: "exit \(status): \(script)") }
}
