import Hummingbird
import Logging
import NIOCore
import RISCConfiguration

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's limit on open file descriptors (RLIMIT_NOFILE).
public enum FileDescriptorLimit {
    /// The soft limit (what open, socket and accept are held to) and the hard one (the most the soft may be raised to).
    public static func current() -> (soft: Int, hard: Int) {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return (1024, 1024) }
        return (count(limit.rlim_cur), count(limit.rlim_max))
    }

    /// Raises the soft limit to the hard one, as Go's runtime does at start-up: the soft limit is often 1024, whatever
    /// the operator allowed as the hard one, and every client connection takes a descriptor. Returns the soft limit
    /// before, and both limits after (unchanged if the raise was refused).
    @discardableResult
    public static func raise() -> (before: Int, soft: Int, hard: Int) {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return (1024, 1024, 1024) }
        let before = count(limit.rlim_cur)
        if limit.rlim_cur != limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            #if canImport(Darwin)
            // macOS refuses a soft limit above OPEN_MAX however high the hard one is.
            raised.rlim_cur = min(limit.rlim_max, rlim_t(OPEN_MAX))
            #endif
            _ = setrlimit(resource, &raised)
        }
        let after = current()
        return (before, after.soft, after.hard)
    }

    #if canImport(Glibc)
    private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resource = RLIMIT_NOFILE
    #endif

    private static func count(_ value: rlim_t) -> Int { value >= rlim_t(Int.max) ? Int.max : Int(value) }
}

extension FileDescriptorLimit {
    /// `raise()`, and a log line saying what the limit is: every connection, database or outbound, draws on it.
    public static func raise(logger: Logger) {
        let (before, soft, hard) = raise()
        logger.info(
            "File descriptor limit", metadata: ["soft": "\(soft)", "hard": "\(hard)", "soft_at_start": "\(before)"])
    }
}

/// Says at start-up how many client connections the server will hold, and warns when RISC_MAX_CONNECTIONS leaves
/// less than the reserve under the descriptor limit.
public func logConnectionCap(configuration: ServiceConfiguration, dependencies: ServiceDependencies, logger: Logger) {
    let cap = connectionCap(configuration: configuration, databaseConnections: dependencies.databaseConnections)
    let limit = FileDescriptorLimit.current().soft
    let reserve = ServiceConfiguration.descriptorReserve(
        databaseConnections: dependencies.databaseConnections, eventLoops: NIOSingletons.groupLoopCountSuggestion)
    let metadata: Logger.Metadata = [
        "max_connections": "\(cap)", "from": "\(configuration.maxConnections == nil ? "the descriptor limit" : "RISC_MAX_CONNECTIONS")",
        "descriptor_limit": "\(limit)", "reserve": "\(reserve)",
    ]
    if cap > limit - reserve {
        logger.warning(
            "RISC_MAX_CONNECTIONS leaves less than the reserve under the descriptor limit: database and outbound connections may fail with EMFILE",
            metadata: metadata)
    } else {
        logger.info("Client connections held at most", metadata: metadata)
    }
}

/// The most client connections the server holds at once: `RISC_MAX_CONNECTIONS`, or what the descriptor limit leaves
/// once the database pool, outbound calls and the event loops have theirs.
public func connectionCap(configuration: ServiceConfiguration, databaseConnections: Int) -> Int {
    configuration.maxConnections
        ?? ServiceConfiguration.defaultMaxConnections(
            fileDescriptorLimit: FileDescriptorLimit.current().soft, databaseConnections: databaseConnections,
            eventLoops: NIOSingletons.groupLoopCountSuggestion)
}

/// When accept fails for want of a descriptor (or of memory), stops accepting for `pause`, then tries again; the
/// connections already open go on being served meanwhile.
///
/// Without it the server spun: when accept(2) fails with EMFILE, SwiftNIO's server channel (2.101) leaves its
/// read-pending flag set (only an accepted connection clears it), so it asks its pipeline for no further read() and
/// leaves the listening socket registered with epoll. epoll is level-triggered and the connection that could not be
/// accepted is still queued, so the socket is reported readable again at once: epoll_wait, accept4 EMFILE, over and
/// over, a whole core (strace counted some 11,000 of each a second). The AcceptBackoffHandler the bootstrap installs
/// only delays the read() calls that pass through the pipeline, and none do. Turning autoRead off takes the socket out
/// of epoll; turning it on again registers it and tries one more accept.
final class AcceptPauseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel

    static let exhaustion: Set<CInt> = [EMFILE, ENFILE, ENOBUFS, ENOMEM]

    private let pause: TimeAmount
    private let logger: Logger
    private var resume: Scheduled<Void>?
    /// Since the last accepted connection.
    private var pauses = 0

    init(pause: TimeAmount = .milliseconds(100), logger: Logger) {
        self.pause = pause
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if pauses > 0 {
            logger.notice("Accepting connections again", metadata: ["pauses": "\(pauses)"])
            pauses = 0
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let ioError = error as? IOError, Self.exhaustion.contains(ioError.errnoCode) else {
            context.fireErrorCaught(error)
            return
        }
        // Not passed on: the AcceptBackoffHandler further on would then hold back the reads after the next accepted
        // connection for a second.
        guard resume == nil else { return }
        if pauses == 0 {
            logger.warning(
                "Out of file descriptors: accepting no connection until one is free, trying again every \(pause.nanoseconds / 1_000_000) ms",
                metadata: ["error": "\(ioError)"])
        }
        pauses += 1
        try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
        resume = context.eventLoop.assumeIsolated().scheduleTask(in: pause) {
            self.resume = nil
            try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        resume?.cancel()
        resume = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // Accepting again now, or never.
        if let resume {
            resume.cancel()
            try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
        }
        resume = nil
    }

    /// Puts the handler first in a listening channel's pipeline, where accept's errors arrive.
    static func install(on channel: any Channel, logger: Logger) async {
        try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.addHandler(AcceptPauseHandler(logger: logger), position: .first)
        }.get()
    }
}
