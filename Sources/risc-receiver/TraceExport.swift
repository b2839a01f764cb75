import Foundation
import Logging
import OTel
import RISCStore
import ServiceLifecycle
import Tracing

/// OpenTelemetry traces, exported with OTLP over HTTP: on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, with the standard `OTEL_*` variables of swift-otel. Off, nothing is
/// bootstrapped: no middleware, no span, no trace context is read or stored.
enum TraceExport {
    static var isRequested: Bool {
        let environment = ProcessInfo.processInfo.environment
        return ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].contains { environment[$0]?.isEmpty == false }
            && environment["OTEL_SDK_DISABLED"]?.lowercased() != "true"
    }

    /// Values swift-otel would stop the process on (a `fatalError`) or throw for, refused first with one line
    /// naming the variable.
    static let supported: [String: Set<String>] = [
        "OTEL_EXPORTER_OTLP_PROTOCOL": ["http/protobuf", "http/json"],
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": ["http/protobuf", "http/json"],
        "OTEL_PROPAGATORS": ["tracecontext", "none"],
        "OTEL_TRACES_EXPORTER": ["otlp", "none"],
        "OTEL_TRACES_SAMPLER": [
            "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
        ],
    ]

    /// Bootstraps the tracer (once per process) and returns the exporter's service, to run first so that it stops
    /// last and flushes; nil when tracing is off. Export never blocks a request: spans wait in a bounded queue, and
    /// a collector that is down loses them.
    static func start(logger: Logger) throws -> (any Service)? {
        guard isRequested else { return nil }
        let environment = ProcessInfo.processInfo.environment
        for (name, values) in supported.sorted(by: { $0.key < $1.key }) {
            guard let value = environment[name], !value.isEmpty else { continue }
            let items = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard items.allSatisfy(values.contains) else {
                throw Bootstrap.fail("configuration error: \(name): must be one of \(values.sorted().joined(separator: ", "))", code: 2)
            }
        }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "risc-receiver"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        // Its lines in the service's log format; warnings and worse only (at info it prints OTEL_* values, headers
        // with their credentials included).
        configuration.diagnosticLogger = .custom(logger)
        configuration.diagnosticLogLevel = .warning
        let backend: (factory: any Tracer, service: any Service)
        do {
            let made = try OTel.makeTracingBackend(configuration: configuration)
            backend = (made.factory, made.service)
        } catch {
            throw Bootstrap.fail("configuration error: OTEL_EXPORTER_OTLP_ENDPOINT: cannot export traces: \(error)", code: 2)
        }
        InstrumentationSystem.bootstrap(backend.factory)
        TraceContext.enable()
        return backend.service
    }

    /// Adds `trace_id` and `span_id` to every log line written inside a span.
    static var logMetadata: Logger.MetadataProvider { OTel.makeLoggingMetadataProvider() }
}
