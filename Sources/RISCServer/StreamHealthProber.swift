import Foundation
import Logging
import PostgresNIO
import RISC
import RISCKeys
import RISCStore
import ServiceLifecycle

/// Checks every Shared Signals stream end to end on RISC_VERIFY_INTERVAL, as the delivery prober checks Google's: reads
/// the stream and its status from the transmitter, and asks for a verification event with a fresh state, which the
/// receiving route records as it arrives. One probe per stream per interval, whichever instances run: each claims
/// the streams that are due (`StreamProbes.claimDue`). `streams health` judges what was recorded.
public struct StreamHealthProber: Service {
    let probes: StreamProbes
    let store: TransmitterStore
    let interval: Duration
    /// RISC_PUBLIC_URL.
    let publicURL: String?
    let logger: Logger
    let tokens = StreamTokenCache()

    public init(client: PostgresClient, store: TransmitterStore, interval: Duration, publicURL: String?, logger: Logger) {
        self.probes = StreamProbes(client: client, logger: logger)
        (self.store, self.interval, self.publicURL, self.logger) = (store, interval, publicURL, logger)
    }

    /// How often an instance looks for a stream that is due: a new stream is probed within this.
    static let pause: Duration = .seconds(2)

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let due = try await probes.claimDue(interval: interval)
                    await withDiscardingTaskGroup { group in
                        for name in due { group.addTask { await self.probe(name) } }
                    }
                } catch {
                    if Task.isCancelled { return }
                    logger.warning("Could not look for streams to probe; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                }
                try? await Task.sleep(for: min(interval, Self.pause))
            }
        }
    }

    /// One probe: what the transmitter says of the stream now, then a verification with a fresh state.
    func probe(_ name: TransmitterName) async {
        var endpointURL: String?
        var problems: [String] = []
        do {
            let stream = try await ManagedStream.open(name, store: store, publicURL: publicURL, tokens: tokens)
            do {
                // Reading the stream records its status too.
                endpointURL = try await stream.show().first { $0.0 == "endpoint_url" }?.1.stringValue
            } catch {
                problems.append("\(error)")
            }
            let state = "risc-probe-" + Base64URL.random(bytes: 16)
            try await probes.requestVerification(of: name, state: state)
            do {
                try await stream.verifyRecorded(state: state)
            } catch {
                problems.append("verification not requested: \(error)")
            }
            try await probes.recordProbe(
                of: name, endpointURL: endpointURL, error: problems.isEmpty ? nil : problems.joined(separator: "; "), interval: interval)
        } catch {
            logger.warning("A stream's delivery probe failed", metadata: ["transmitter": "\(name)", "error": "\(error)"])
        }
    }
}
