import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Standard error, written by a thread of its own. Written directly, a log collector that stops reading (a container
/// runtime's blocking log mode when it falls behind, or a full disk under it) would block every thread that logs,
/// the event loops and Swift's cooperative threads included, and the service would stop answering altogether, even
/// `/healthz`. Lines wait here instead, up to `capacity` bytes; past that they are dropped and counted, and a line
/// saying how many is written once standard error takes lines again.
///
/// At exit the lines still waiting are written first (an `atexit` handler): a command's last lines are not lost. If
/// standard error does not take them within `exitFlushTimeout`, the process ends all the same, with status 1: it did
/// not finish what it had to say. (Lines taken in the last moments before a crash may be lost.)
final class StandardErrorWriter: Sendable {
    static let shared = StandardErrorWriter(descriptor: 2)

    /// Enough for a burst of lines at any level; a bound on what a stalled collector costs in memory.
    static let capacity = 1 << 20

    private struct State {
        var pending: [UInt8] = []
        /// True while the thread writes what it took from `pending`.
        var writing = false
        var dropped = 0
        var started = false
    }

    private let descriptor: Int32
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)

    private init(descriptor: Int32) { self.descriptor = descriptor }

    func write(_ bytes: some Collection<UInt8>) {
        let start = state.withLock { state -> Bool in
            if state.pending.count + bytes.count <= Self.capacity {
                state.pending.append(contentsOf: bytes)
            } else {
                state.dropped += 1
            }
            defer { state.started = true }
            return !state.started
        }
        if start { startThread() }
        wake.signal()
    }

    func write(_ text: String) { write(Array(text.utf8)) }

    static let exitFlushTimeout: Duration = .seconds(5)

    /// Waits until every line taken so far is written, for `timeout` at most; false if some still wait.
    @discardableResult
    func flush(timeout: Duration = exitFlushTimeout) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while state.withLock({ !$0.pending.isEmpty || $0.writing }) {
            guard ContinuousClock.now < deadline else { return false }
            usleep(1000)
        }
        return true
    }

    private func startThread() {
        // _exit, not exit: this runs inside exit() already.
        atexit { if !StandardErrorWriter.shared.flush() { _exit(1) } }
        let thread = Thread { [self] in
            while true {
                wake.wait()
                let (bytes, dropped) = state.withLock { state -> ([UInt8], Int) in
                    defer {
                        state.pending.removeAll(keepingCapacity: state.pending.count <= 64 << 10)
                        state.dropped = 0
                    }
                    state.writing = !state.pending.isEmpty || state.dropped > 0
                    return (state.pending, state.dropped)
                }
                guard !bytes.isEmpty || dropped > 0 else { continue }
                writeAll(bytes)
                if dropped > 0 {
                    writeAll(Array("risc-receiver: \(dropped) log lines were dropped: standard error was not being read\n".utf8))
                }
                state.withLock { $0.writing = false }
            }
        }
        thread.name = "risc-receiver.stderr"
        thread.start()
    }

    /// Blocks for as long as standard error does: only this thread waits on it.
    private func writeAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = systemWrite(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    // Standard error shares a non-blocking description (some supervisors make it so): wait for room.
                    var ready = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&ready, 1, -1)
                } else {
                    return  // closed or broken: nothing more can be written
                }
            }
        }
    }

    /// A `TextOutputStream` over the shared writer, for swift-log's `StreamLogHandler`.
    struct Stream: TextOutputStream, Sendable {
        func write(_ string: String) { StandardErrorWriter.shared.write(string) }
    }
}

/// write(2), under a name of its own: `StandardErrorWriter` has a `write` of its own.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}
