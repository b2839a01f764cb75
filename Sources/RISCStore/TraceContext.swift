import Synchronization
import Tracing

/// W3C trace context as text, for what outlives a request: the `traceparent` stored with an event (a worker's
/// span, and a notification's delivery, refer back to the request that stored it) and sent with a notification.
public enum TraceContext {
    /// Set once, when `serve` or `worker` starts exporting spans. Off, nothing here does any work: no context is
    /// read, serialised or stored, so tracing that is off costs nothing.
    public static var isEnabled: Bool { enabled.load(ordering: .relaxed) }

    public static func enable() { enabled.store(true, ordering: .relaxed) }

    private static let enabled = Atomic(false)

    /// The current span's context, to be carried to work done elsewhere (nil when tracing is off).
    public static var current: ServiceContext? { isEnabled ? ServiceContext.current : nil }

    /// `00-<trace id>-<span id>-<flags>` of the context's span; nil when tracing is off or it has no span.
    public static func traceparent(of context: ServiceContext?) -> String? {
        guard isEnabled, let context else { return nil }
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
        return carrier["traceparent"]
    }

    /// A context from a stored `traceparent`, as a parent or a link target; nil when tracing is off or it is not one.
    public static func context(traceparent: String?) -> ServiceContext? {
        guard isEnabled, let traceparent, isWellFormed(traceparent) else { return nil }
        var context = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(["traceparent": traceparent], into: &context, using: DictionaryExtractor())
        return context
    }

    /// A link to the span a stored `traceparent` names.
    public static func link(traceparent: String?) -> SpanLink? {
        context(traceparent: traceparent).map { SpanLink(context: $0, attributes: [:]) }
    }

    /// The most bytes of any span attribute taken from a request (a header, the path, a claim): what a caller sends
    /// must not make a span, and each export of it, as large as the request.
    public static let maxAttributeBytes = 256

    /// `value` cut to `maxAttributeBytes` bytes of UTF-8, at the end of a character: the exporter must send valid
    /// UTF-8, or the collector refuses the whole export.
    public static func attribute(_ value: String) -> String {
        let bytes = value.utf8
        guard bytes.count > maxAttributeBytes else { return value }
        var end = bytes.index(bytes.startIndex, offsetBy: maxAttributeBytes)
        // `end` is the first byte left out: step back while it continues the character before it.
        while end > bytes.startIndex, UTF8.isContinuation(bytes[end]) { bytes.formIndex(before: &end) }
        return String(decoding: bytes[..<end], as: UTF8.self)
    }

    /// Version 00, lowercase hex, trace and span ids not all zero: what the exporter's parser accepts. Anything else
    /// is dropped here, so that nothing but this one value ever reaches the parser (which logs what it cannot read).
    public static func isWellFormed(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count == 55, bytes[0] == UInt8(ascii: "0"), bytes[1] == UInt8(ascii: "0"), bytes[2] == UInt8(ascii: "-"),
            bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-")
        else { return false }
        let isHex = { (byte: UInt8) in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
        }
        for range in [3..<35, 36..<52, 53..<55] where !bytes[range].allSatisfy(isHex) { return false }
        return bytes[3..<35].contains { $0 != UInt8(ascii: "0") } && bytes[36..<52].contains { $0 != UInt8(ascii: "0") }
    }
}

private struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

private struct DictionaryExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}

extension TraceContext {
    /// `body` inside a span when tracing is on; off, `body(nil)` and nothing else.
    public static func span<T>(
        _ name: String, context: ServiceContext? = nil, ofKind kind: SpanKind = .internal, _ body: ((any Span)?) async throws -> T
    ) async rethrows -> T {
        guard isEnabled else { return try await body(nil) }
        return try await withSpan(name, context: context ?? .current ?? .topLevel, ofKind: kind) { span in try await body(span) }
    }
}
