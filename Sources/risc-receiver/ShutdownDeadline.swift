import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The last resort of a shutdown: once SIGTERM or SIGINT has come, the process ends a fixed time later whatever
/// else happens, with status 1 (what did not finish was not drained, and a supervisor should say so). It waits
/// on a dispatch queue and signal sources of its own, not on Swift's cooperative threads: whatever hangs the
/// shutdown may hold every one of those (a log pipe that nobody reads blocks each thread that logs), and a timer
/// that needed one would hang with it.
enum ShutdownDeadline {
    private static let queue = DispatchQueue(label: "risc-receiver.shutdown-deadline")
    /// Kept for the life of the process; only touched on `queue`.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    static func arm(seconds: Double) {
        queue.sync {
            for number in [SIGTERM, SIGINT] {
                #if canImport(Darwin)
                // As swift-service-lifecycle does for its own sources there: the default action would end the process
                // at once. (On Linux, dispatch installs a handler of its own when the source registers.)
                _ = signal(number, SIG_IGN)
                #endif
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler {
                    queue.asyncAfter(deadline: .now() + seconds) { expire() }
                }
                source.resume()
                sources.append(source)
            }
        }
    }

    private static func expire() -> Never {
        let line = "risc-receiver: shutdown did not finish within RISC_SHUTDOWN_TIMEOUT plus 5 s; exiting with status 1\n"
        // Only if standard error takes the line at once: it may be the very thing that hangs.
        var descriptor = pollfd(fd: 2, events: Int16(POLLOUT), revents: 0)
        if poll(&descriptor, 1, 0) == 1, descriptor.revents & Int16(POLLOUT) != 0 {
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
        // Not exit(): its atexit handlers and stdio flushes may block in turn.
        _exit(1)
    }
}
