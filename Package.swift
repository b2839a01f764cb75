// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "risc-receiver",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "risc-receiver", targets: ["risc-receiver"])
    ],
    dependencies: [
        // No traits: Hummingbird's defaults (swift-configuration support, full Foundation) are unused here, and a
        // package with two traits gets its flags in a different order from one build plan to the next, which
        // recompiles it (see Bootstrap.configReader).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Already in the graph through postgres-nio; named for the TLS context of a single checking connection.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: ["YAML"]),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // Traces: the API our spans use, and the OTLP exporter. OTLP over HTTP only: the gRPC trait would bring
        // grpc-swift into the build for an exporter we do not offer.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // Pure protocol core: SET claims, events, subjects, validation, token identifiers. No I/O.
        .target(
            name: "RISC",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto")
            ]
        ),
        // Every metric the service records, named in one place (swift-metrics API only).
        .target(
            name: "RISCMetrics",
            dependencies: [
                .product(name: "Metrics", package: "swift-metrics")
            ]
        ),
        // Discovery + JWKS fetching and caching; SET verification on top of jwt-kit.
        .target(
            name: "RISCKeys",
            dependencies: [
                "RISC", "RISCMetrics",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // PostgreSQL, and every query on the service's tables: migrations, the group-commit inbox, the event queue,
        // sessions, the vault, notifications, probes, retention, the admin queries.
        .target(
            name: "RISCStore",
            dependencies: [
                "RISC", "RISCMetrics",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // migrations/*.sql, compiled in: the binary can migrate without the files beside it.
            plugins: ["EmbedMigrations"]
        ),
        .executableTarget(name: "embed-migrations"),
        .plugin(name: "EmbedMigrations", capability: .buildTool(), dependencies: ["embed-migrations"]),
        .executableTarget(name: "embed-build-info"),
        .plugin(name: "EmbedBuildInfo", capability: .buildTool(), dependencies: ["embed-build-info"]),
        // The configuration: every variable, its default and rule, read once and validated (swift-configuration).
        .target(
            name: "RISCConfiguration",
            dependencies: [
                "RISC", "RISCKeys",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The background Services: turns stored events into account actions, delivers notifications of them, probes
        // delivery, sweeps the retention; and the one factory that builds them from the configuration.
        .target(
            name: "RISCWorker",
            dependencies: [
                "RISC", "RISCKeys", "RISCStore", "RISCMetrics", "RISCConfiguration",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // Hummingbird routes and buildApplication.
        .target(
            name: "RISCServer",
            dependencies: [
                "RISC", "RISCKeys", "RISCStore", "RISCMetrics", "RISCConfiguration",
                .product(name: "Hummingbird", package: "hummingbird"),
                // The connection cap's delegate (MaximumAvailableConnections), and the listening channel's options.
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // The admin API's OpenAPI document: committed as a file, compiled into the binary.
            resources: [.embedInCode("Resources/admin-openapi.json")]
        ),
        // Local stand-in for Google: discovery, JWKS with rotation, SET signing and sending.
        .target(
            name: "DevTransmitter",
            dependencies: [
                "RISC", "RISCKeys",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .executableTarget(
            name: "risc-receiver",
            dependencies: [
                "RISC", "RISCKeys", "RISCStore", "RISCConfiguration", "RISCServer", "RISCWorker", "DevTransmitter",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // The commit it was built from, for --version.
            plugins: ["EmbedBuildInfo"]
        ),
        // What parsing a SET costs, beside Foundation doing the same (scripts/bench-parse.sh).
        .executableTarget(name: "bench-parse", dependencies: ["RISC"], path: "benchmarks/parse"),
        .testTarget(
            name: "RISCTests",
            dependencies: ["RISC", "TestSupport"],
            resources: [.copy("Fixtures")]
        ),
        // The routes in-process (HummingbirdTesting), with fake stores: no PostgreSQL, no network.
        .testTarget(
            name: "RouteTests",
            dependencies: [
                "RISC", "RISCKeys", "RISCStore", "RISCServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "RISC", "RISCKeys", "RISCStore", "RISCConfiguration", "RISCServer", "RISCWorker", "DevTransmitter", "TestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            // The schema history before 0.1.0, read by the baseline test from the repository (not a resource).
            exclude: ["Fixtures"]
        ),
        // What both test targets share: reproducible random inputs (SeededGenerator).
        .target(name: "TestSupport", path: "Tests/TestSupport"),
    ]
)

// Our own code builds without a warning: one fails a debug build (scripts/test.sh builds everything). Not release
// builds: the image resolves dependencies afresh, and a newly deprecated API must not stop a deployment.
// Dependencies' warnings are not ours to fix and are unaffected.
for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-warnings-as-errors"], .when(configuration: .debug))]
}
