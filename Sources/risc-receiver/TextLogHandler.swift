import Logging

/// swift-log's `StreamLogHandler` on standard error (through `StandardErrorWriter`), with the logger's own metadata kept here and handed over
/// only when a line is written. `StreamLogHandler` renders its metadata to text on every change, and Hummingbird
/// sets a request id on every request's logger: that rendering cost each request about 3% of the server's CPU
/// at saturation, logged or not. The lines are the same.
struct TextLogHandler: LogHandler {
    private var stream: StreamLogHandler
    var metadata: Logger.Metadata = [:]

    init(label: String) { stream = StreamLogHandler(label: label, stream: StandardErrorWriter.Stream()) }

    var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        if !metadata.isEmpty { event.metadata = metadata.merging(event.metadata ?? [:]) { _, explicit in explicit } }
        stream.log(event: event)
    }
}
