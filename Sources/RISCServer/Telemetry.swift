import Metrics
import Prometheus

/// The process's Prometheus registry, bootstrapped into swift-metrics on first use (swift-metrics allows
/// one bootstrap per process, hence the lazily initialised static).
public enum Telemetry {
    public static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(20), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
            .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
        ]
        MetricsSystem.bootstrap(factory)
        return registry
    }()

    /// The registry in the Prometheus text format.
    public static func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
