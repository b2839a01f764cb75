import ArgumentParser
import Configuration
import Foundation
import Logging
import PostgresNIO
import RISCConfiguration
import RISCKeys
import RISCServer
import RISCStore
import ServiceLifecycle
import SystemPackage

/// `--config FILE`: an optional JSON or YAML file of the same variables as the environment.
struct ConfigFileOption: ParsableArguments {
    @Option(name: .customLong("config"), help: "A JSON or YAML file of configuration variables; the environment overrides it.")
    var file: String?
}

enum Bootstrap {
    /// Logs go to standard error, at `LOG_LEVEL` (default `info`); `LOG_FORMAT=json` writes one JSON object per
    /// line for log collectors, otherwise lines are `key=value` text. Both are read like every other variable, so
    /// `--config FILE` may set them and a bad value is a configuration error.
    static func logger(_ label: String, file: String?) async throws -> Logger {
        let (level, format) = try await configuration(file: file) { reader throws(ServiceConfiguration.Invalid) in
            (try ConfigVariables.logLevel.value(from: reader), try ConfigVariables.logFormat.value(from: reader))
        }
        return logger(label, level: level, format: format)
    }

    /// Sets up logging (once per process, as swift-log allows) and returns the command's logger. With tracing on,
    /// each line written inside a span carries its `trace_id` and `span_id`.
    static func logger(_ label: String, level: Logger.Level, format: LogFormat) -> Logger {
        LoggingSystem.bootstrap(
            { label, provider in
                switch format {
                case .json:
                    var handler = JSONLogHandler(label: label)
                    handler.logLevel = level
                    handler.metadataProvider = provider
                    return handler
                case .text:
                    var handler = TextLogHandler(label: label)
                    handler.logLevel = level
                    handler.metadataProvider = provider
                    return handler
                }
            }, metadataProvider: TraceExport.isRequested ? TraceExport.logMetadata : nil)
        return Logger(label: label)
    }

    /// The environment, then the file: the first provider that has a value wins. The file's keys are the
    /// variables' names (`RISC_PORT: 8080`), as are the lookup keys (`ConfigVariable` reads the key `RISC_PORT`).
    static func configReader(file: String?) async throws -> ConfigReader {
        var providers: [any ConfigProvider] = [EnvironmentVariablesProvider()]
        if let file {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw fail("--config \(file): cannot read the file", code: 2)
            }
            do {
                // A JSON file is read as YAML, of which JSON is a subset: swift-configuration's JSON trait would be a
                // second trait, and SwiftPM orders a package's trait flags differently from one build plan to the
                // next, which recompiled Configuration and everything above it after every `swift test`.
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: FilePath(file)))
            } catch {
                // The parser's own message may quote the offending line, which may hold a secret.
                throw fail("--config \(file): not a valid \(file.lowercased().hasSuffix(".json") ? "JSON" : "YAML") object of variables", code: 2)
            }
        }
        return ConfigReader(providers: providers)
    }

    /// Reads configuration; a problem ends the process with one line naming the variable, and exit code 2.
    static func configuration<T>(
        file: String? = nil, _ read: (ConfigReader) throws(ServiceConfiguration.Invalid) -> T
    ) async throws -> T {
        let reader = try await configReader(file: file)
        do {
            return try read(reader)
        } catch {
            StandardErrorWriter.shared.write("risc-receiver: configuration error: \(error)\n")
            throw ExitCode(2)
        }
    }

    /// The migrations to apply or expect: those compiled into this binary, unless `--migrations DIR` or
    /// `RISC_MIGRATIONS_DIR` (`directory`) names a directory of `NNNN_name.sql` files to use instead.
    static func migrator(_ option: String?, directory: String?) throws -> Migrator {
        guard let directory = option ?? directory else { return .embedded }
        return try Migrator(directory: directory)
    }

    /// Runs long-lived services until SIGTERM or SIGINT. The services drain gracefully; after `shutdownTimeout`
    /// seconds whatever is still running (a client that stalls mid-request holds its connection) is cancelled.
    /// Should anything ignore the cancellation too, the process exits five seconds later all the same, with status
    /// 1 (`ShutdownDeadline`): everything acknowledged is already committed, so ending is always safe, and hanging
    /// never is.
    static func runUntilSignalled(
        _ services: [ServiceGroupConfiguration.ServiceConfiguration], shutdownTimeout: Double, logger: Logger
    ) async throws {
        var configuration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .milliseconds(Int64(shutdownTimeout * 1000))
        ShutdownDeadline.arm(seconds: shutdownTimeout + 5)
        do {
            try await ServiceGroup(configuration: configuration).run()
        } catch is CancellationError {
            logger.warning("Shutdown took longer than RISC_SHUTDOWN_TIMEOUT; unfinished work was cancelled")
        }
    }

    /// The pool of a one-shot command, once one connection has shown the database usable; otherwise, within
    /// 10 s, one line with the server's or the network's reason and where the database is, and exit 1. (A pool
    /// alone retries a refused connection for a minute and then reports its circuit breaker.) The pool logs
    /// warnings and worse only: its routine lines are not a command's output.
    static func commandDatabase(_ url: String, logger: Logger) async throws -> PostgresClient {
        var libraryLogger = logger
        libraryLogger.logLevel = max(logger.logLevel, .warning)
        do {
            try await DatabaseURL.check(url, logger: libraryLogger, describeNetwork: NetworkErrors.describe)
        } catch {
            throw fail(error.description)
        }
        return try DatabaseURL.commandClient(url, logger: logger)
    }

    static func fail(_ message: String, code: Int32 = 1) -> ExitCode {
        StandardErrorWriter.shared.write("risc-receiver: \(message)\n")
        return ExitCode(code)
    }
}
