import Foundation
import Logging

/// One JSON object per line on standard error: `ts`, `level`, `label`, `message`, `source`, and the metadata
/// (the request's `hb.request.id` among it). Metadata never holds a secret: callers log ids, not tokens.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String) { self.label = label }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        var object: [String: Any] = [
            "ts": ISO8601DateFormatter().string(from: Date()), "level": event.level.rawValue, "label": label,
            "message": event.message.description, "source": event.source,
        ]
        if let error = event.error { object["error"] = String(describing: error) }
        for (key, value) in merged where object[key] == nil { object[key] = Self.plain(value) }
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        data.append(0x0A)
        StandardErrorWriter.shared.write(data)
    }

    static func plain(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let string): string
        case .stringConvertible(let convertible): convertible.description
        case .array(let array): array.map(plain)
        case .dictionary(let dictionary): dictionary.mapValues(plain)
        }
    }
}
