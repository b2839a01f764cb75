import Foundation
import RISC
import RISCKeys
import RISCStore

/// Registering a transmitter, as the admin API and the CLI do it: its metadata read and checked, then stored with its
/// credential sealed. Lists the built-in google first.
public struct TransmitterRegistry: TransmitterStoring {
    public let store: TransmitterStore
    /// RISC_CONFIGURATION_URL: Google's transmitter, the built-in `google`.
    let googleConfigurationURL: String

    public init(store: TransmitterStore, googleConfigurationURL: String) {
        (self.store, self.googleConfigurationURL) = (store, googleConfigurationURL)
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

    public func add(_ transmitter: NewTransmitter) async throws -> TransmitterRecord {
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
        try await store.add(transmitter, configURL: found.url, metadata: found.metadata)
        guard let record = try await store.transmitter(named: transmitter.name) else { throw MetadataRefused(description: "removed meanwhile") }
        return record
    }

    public func remove(named name: TransmitterName) async throws -> Bool {
        try await store.remove(named: name)
    }
}
