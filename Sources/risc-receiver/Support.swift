import ArgumentParser
import Configuration
import Foundation
import Logging
import RISCServer

enum Bootstrap {
    /// Logs go to standard error; `LOG_LEVEL` picks the level (default `info`).
    static func logger(_ label: String) -> Logger {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
            return handler
        }
        return Logger(label: label)
    }

    static var configReader: ConfigReader {
        ConfigReader(providers: [EnvironmentVariablesProvider()])
    }

    /// Reads configuration; a problem ends the process with one line naming the variable, and exit code 2.
    static func configuration<T>(_ read: (ConfigReader) throws(ServiceConfiguration.Invalid) -> T) throws -> T {
        do {
            return try read(configReader)
        } catch {
            FileHandle.standardError.write(Data("risc-receiver: configuration error: \(error)\n".utf8))
            throw ExitCode(2)
        }
    }

    /// Where `migrate` finds its SQL: `--migrations`, then `RISC_MIGRATIONS_DIR`, then `./migrations`,
    /// then `../share/risc-receiver/migrations` next to the executable.
    static func migrationsDirectory(_ option: String?) -> String {
        if let option { return option }
        if let env = ProcessInfo.processInfo.environment["RISC_MIGRATIONS_DIR"], !env.isEmpty { return env }
        if FileManager.default.fileExists(atPath: "migrations") { return "migrations" }
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return executable.deletingLastPathComponent().appendingPathComponent("../share/risc-receiver/migrations").path
    }

    static func fail(_ message: String, code: Int32 = 1) -> ExitCode {
        FileHandle.standardError.write(Data("risc-receiver: \(message)\n".utf8))
        return ExitCode(code)
    }
}
