import Foundation
import Logging
import RISC
import RISCKeys
import RISCStore
import ServiceLifecycle

/// Registering a transmitter, as the admin API and the CLI do it: its metadata read and checked, then stored with its
/// credential sealed. Lists the built-in google first.
public struct TransmitterRegistry: TransmitterStoring {
    public let store: TransmitterStore
    /// RISC_CONFIGURATION_URL: Google's transmitter, the built-in `google`.
    let googleConfigurationURL: String
    /// RISC_PUBLIC_URL, from which push streams' URLs are made.
    let publicURL: String?
    let tokens = StreamTokenCache()

    public init(store: TransmitterStore, googleConfigurationURL: String, publicURL: String? = nil) {
        (self.store, self.googleConfigurationURL, self.publicURL) = (store, googleConfigurationURL, publicURL)
    }

    /// The metadata could not be read, or does not fit what was asked (another issuer, no such delivery).
    public struct MetadataRefused: Error, CustomStringConvertible {
        public let description: String
    }

    public func transmitters() async throws -> [TransmitterRecord] {
        [TransmitterRecord(google: googleConfigurationURL)] + (try await store.transmitters())
    }

    public func transmitter(named name: TransmitterName) async throws -> TransmitterRecord? {
        name == .google ? TransmitterRecord(google: googleConfigurationURL) : try await store.transmitter(named: name)
    }

    /// The transmitter's metadata, read and checked against what was asked.
    static func metadata(of transmitter: NewTransmitter) async throws -> (url: String, metadata: TransmitterMetadata) {
        let found: (url: String, metadata: TransmitterMetadata)
        do {
            found = try await TransmitterDiscovery.metadata(issuer: transmitter.issuer, configURL: transmitter.configURL)
        } catch {
            throw MetadataRefused(description: error.description)
        }
        guard found.metadata.deliveryMethods.contains(transmitter.delivery) else {
            throw MetadataRefused(
                description: "the transmitter does not offer \(transmitter.delivery.rawValue) delivery (its metadata lists "
                    + "\(found.metadata.deliveryMethods.map(\.rawValue).joined(separator: ", ")))")
        }
        return found
    }

    public func add(_ transmitter: NewTransmitter) async throws -> TransmitterRecord {
        let found = try await Self.metadata(of: transmitter)
        try await store.add(transmitter, configURL: found.url, metadata: found.metadata)
        guard let record = try await store.transmitter(named: transmitter.name) else { throw MetadataRefused(description: "removed meanwhile") }
        return record
    }

    public func remove(named name: TransmitterName) async throws -> Bool {
        try await store.remove(named: name)
    }

    public func stream(of name: TransmitterName) async throws -> ManagedStream {
        try await ManagedStream.open(name, store: store, publicURL: publicURL, tokens: tokens)
    }
}

extension TransmitterRegistry {
    /// Keeps the transmitters from RISC_TRANSMITTERS in step with it, matched by name: configured ones no longer listed
    /// are removed, new ones registered (their metadata read and checked), changed ones registered again; one that is
    /// as configured is not read again. Those added by operators are left alone. A transmitter that cannot be
    /// registered now (its metadata unreachable, say) is logged and left as it was; the others go ahead.
    public func syncConfigured(_ configured: [NewTransmitter], logger: Logger) async {
        do {
            for name in try await store.removeConfigured(keeping: configured.map(\.name)) {
                logger.notice("Removed a transmitter RISC_TRANSMITTERS no longer lists", metadata: ["transmitter": "\(name)"])
            }
        } catch {
            logger.error("Could not keep RISC_TRANSMITTERS in step", metadata: ["error": "\(DatabaseErrors.describe(error))"])
            return
        }
        for transmitter in configured {
            let metadata: Logger.Metadata = ["transmitter": "\(transmitter.name)"]
            do {
                if let record = try await store.transmitter(named: transmitter.name) {
                    guard record.configured else {
                        logger.warning("RISC_TRANSMITTERS names a transmitter added by command; it is left as it is", metadata: metadata)
                        continue
                    }
                    // A credential that cannot be opened (the vault key changed) counts as changed: it is sealed again.
                    if let existing = try? await store.connection(named: transmitter.name), Self.isAsConfigured(existing, transmitter) { continue }
                }
                let found = try await Self.metadata(of: transmitter)
                guard try await store.upsertConfigured(transmitter, configURL: found.url, metadata: found.metadata) else { continue }
                logger.info("Registered a transmitter from RISC_TRANSMITTERS", metadata: metadata)
            } catch {
                logger.error(
                    "Could not register a transmitter from RISC_TRANSMITTERS; it is left as it was",
                    metadata: metadata.merging(["error": "\(error)"]) { first, _ in first })
            }
        }
    }

    static func isAsConfigured(_ existing: TransmitterStore.Connection, _ transmitter: NewTransmitter) -> Bool {
        let record = existing.record
        return record.issuer == transmitter.issuer && (transmitter.configURL == nil || record.configURL == transmitter.configURL)
            && record.delivery == transmitter.delivery && record.eventsRequested == transmitter.eventsRequested
            && existing.authorization == transmitter.authorization
    }
}

/// Keeps RISC_TRANSMITTERS in step once at start-up, then waits for shutdown beside the other services.
public struct ConfiguredTransmitters: Service {
    let registry: TransmitterRegistry
    let configured: [NewTransmitter]
    let logger: Logger

    public init(registry: TransmitterRegistry, configured: [NewTransmitter], logger: Logger) {
        (self.registry, self.configured, self.logger) = (registry, configured, logger)
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown { await registry.syncConfigured(configured, logger: logger) }
        try? await gracefulShutdown()
    }
}
