import AsyncHTTPClient
import Foundation
import RISC

/// Reads a Shared Signals transmitter's metadata: from the URL the operator gave, or else from the issuer's well-known
/// `ssf-configuration`, then `risc-configuration` (a RISC-only transmitter). The metadata's issuer must be the one given.
public enum TransmitterDiscovery {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The metadata and the URL it was read from.
    public static func metadata(issuer: String, configURL: String?) async throws(Failure) -> (url: String, metadata: TransmitterMetadata) {
        let candidates: [String]
        if let configURL {
            candidates = [configURL]
        } else {
            candidates = [WellKnownURL.sharedSignals, WellKnownURL.riscConfiguration].compactMap {
                WellKnownURL.inserting($0, into: issuer)
            }
        }
        var problems: [String] = []
        for url in candidates {
            let document: FetchedDocument
            do {
                document = try await HTTPClient.withoutRedirects.fetchDocument(url)
            } catch let error as FetchError {
                problems.append(error.description)
                // Only a missing document sends us to the next well-known name; any other failure is the answer.
                if case .status(404, _) = error { continue }
                break
            } catch {
                problems.append("GET \(url) failed")
                break
            }
            do {
                return (url, try TransmitterMetadata(json: document.body, expectedIssuer: issuer))
            } catch {
                throw Failure(description: "the transmitter's metadata (\(url)): \(error.problem)")
            }
        }
        throw Failure(description: "the transmitter's metadata could not be read: \(problems.joined(separator: "; "))")
    }
}
