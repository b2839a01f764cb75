import DevTransmitter
import Foundation
import RISC
import Synchronization
import Testing

/// Real time plus an offset that a test moves on: a cooldown passed without waiting it out.
final class ShiftedClock: Sendable {
    private let offset = Mutex<TimeInterval>(0)
    func now() -> Date { Date().addingTimeInterval(offset.withLock { $0 }) }
    func advance(by seconds: TimeInterval) { offset.withLock { $0 += seconds } }
}

@Suite("Keys, outages and retries")
struct KeyAndOutageTests {
    @Test("After key rotation, an unknown kid triggers a refetch and the SET is accepted")
    func rotation() async throws {
        try await Harness.with { harness in
            #expect(try await harness.postNewSET().status == 202)
            let oldKid = harness.transmitter.currentKid
            let newKid = try await harness.transmitter.rotateKeys(retireOld: true)
            #expect(newKid != oldKid)
            let reply = try await harness.postNewSET()
            #expect(reply.status == 202, "\(reply.body)")
        }
    }

    @Test("SETs arriving together with a newly rotated kid all wait for the one refetch and are accepted")
    func concurrentRotation() async throws {
        var options = Harness.Options()
        options.unknownKidRefetchInterval = 1
        try await Harness.with(options) { harness in
            #expect(try await harness.postNewSET().status == 202)
            _ = try await harness.transmitter.rotateKeys(retireOld: true)
            try await Task.sleep(for: .milliseconds(1_100))
            var tokens: [String] = []
            for _ in 0..<30 { tokens.append(try await harness.makeSET("sessions-revoked")) }
            try await withThrowingTaskGroup(of: Int.self) { group in
                for token in tokens { group.addTask { try await harness.post(token).status } }
                for try await status in group { #expect(status == 202) }
            }
        }
    }

    @Test("The unknown-kid refetch is rate-limited, and a kid seen during the cooldown is asked to retry, not refused")
    func rateLimitedRefetch() async throws {
        var options = Harness.Options()
        // Long enough that the steps below, on a loaded machine, all fall inside one cooldown. The receiver's key
        // clock is moved past a cooldown instead of waiting it out: it runs with real time in between.
        options.unknownKidRefetchInterval = 10
        let clock = ShiftedClock()
        options.keyClock = { clock.now() }
        try await Harness.with(options) { harness in
            #expect(try await harness.postNewSET().status == 202)
            // Past the cooldown of the start-up fetch, an attacker spends the refetch with a junk kid: a real
            // refetch did not find it, so 400.
            clock.advance(by: 10.2)
            let impostor = try await DevTransmitter(settings: .init(port: 0), logger: Harness.logger)
            #expect(try await harness.post(try await impostor.sign(claims: harness.claims())).rejection?.err == "invalid_key")
            // The transmitter rotates inside the cooldown: its SET must not be refused for good (400 is final
            // for a transmitter), but answered 503 with the seconds left.
            _ = try await harness.transmitter.rotateKeys(retireOld: false)
            let token = try await harness.makeSET("sessions-revoked")
            let reply = try await harness.post(token)
            #expect(reply.status == 503, "\(reply.body)")
            let retryAfter = try #require(reply.headers["Retry-After"].first.flatMap(Int.init))
            #expect((1...10).contains(retryAfter))
            #expect(try await harness.stored(jti: jti(of: token)).isEmpty)
            // Junk kids inside the cooldown are 503 too: none of them can turn a real key away.
            #expect(try await harness.post(try await impostor.sign(claims: harness.claims())).status == 503)
            // The transmitter's retry after Retry-After is accepted: nothing is lost.
            clock.advance(by: TimeInterval(retryAfter))
            #expect(try await harness.post(token).status == 202)
        }
    }

    @Test("During a JWKS outage a cached kid still verifies; an uncached one gets 503 with Retry-After")
    func jwksOutage() async throws {
        try await Harness.with { harness in
            #expect(try await harness.postNewSET().status == 202)
            harness.transmitter.setKeysOutage(true)
            #expect(try await harness.postNewSET().status == 202)
            _ = try await harness.transmitter.rotateKeys(retireOld: true)
            let token = try await harness.makeSET("sessions-revoked")
            let reply = try await harness.post(token)
            #expect(reply.status == 503)
            #expect(reply.headers["Retry-After"].first.flatMap(Int.init) != nil)
            #expect(try await harness.stored(jti: jti(of: token)).isEmpty)
            // Once the keys are back, the transmitter's retry succeeds.
            harness.transmitter.setKeysOutage(false)
            #expect(try await harness.post(token).status == 202)
        }
    }

    @Test("No keys at all (transmitter down from the start) is 503, not 400; sign-in is 503 unavailable, the one 503 code")
    func keysNeverLoaded() async throws {
        // Down before the receiver starts, so its start-up key warm-up fails too.
        var options = Harness.Options()
        options.keysOutageAtStart = true
        try await Harness.with(options) { harness in
            let reply = try await harness.postNewSET()
            #expect(reply.status == 503)
            let signIn = try await harness.signIn(sub: "keys-never-loaded")
            #expect(signIn.status == 503 && signIn.error == "unavailable", "\(signIn.status) \(signIn.body)")
            #expect(signIn.headers["Retry-After"].first == "5")
        }
    }

    @Test("With the database stopped: SETs, sign-in and the session check answer 503 at once; after a restart SETs are accepted again")
    func databaseOutage() async throws {
        var options = Harness.Options()
        options.databaseURL = Harness.environment("RISC_TEST_OUTAGE_DATABASE_URL")
        options.commitTimeout = .seconds(2)
        try await Harness.with(options) { harness in
            // Up: accepted. Retried, as the 2 s bound can run out on a first connection while the whole suite runs.
            try await eventually("a SET accepted before the outage") { try await harness.postNewSET().status == 202 }
            let sub = "outage-\(UUID().uuidString.prefix(8))"
            let idToken = try await harness.idToken(sub: sub)
            try await shell(Harness.environment("RISC_TEST_OUTAGE_STOP"))
            let token = try await harness.makeSET("sessions-revoked")
            let down = try await harness.post(token)
            #expect(down.status == 503)
            #expect(down.headers["Retry-After"].first.flatMap(Int.init) != nil)
            // Not a minute's hang and a 500 (the pool retrying its connections): 503 within RISC_DATABASE_TIMEOUT (2 s
            // here; the bound below leaves room for a loaded machine).
            for (name, call) in [
                ("sign-in", { try await harness.call(.POST, "/tokensignin", form: ["idtoken": idToken]) }),
                ("session check", { try await harness.checkSession("no-such-session-\(UUID().uuidString)") }),
            ] as [(String, () async throws -> Harness.Reply)] {
                let started = ContinuousClock.now
                let reply = try await call()
                #expect(ContinuousClock.now - started < .seconds(20), "\(name) took \(ContinuousClock.now - started)")
                #expect(reply.status == 503 && reply.error == "unavailable", "\(name): \(reply.status) \(reply.body)")
                #expect(reply.headers["Retry-After"].first.flatMap(Int.init) != nil, "\(name)")
            }
            try await shell(Harness.environment("RISC_TEST_OUTAGE_START"))
            // The pool reconnects by itself; the transmitter's retry is then accepted and stored once.
            var status = 0
            let deadline = ContinuousClock.now + .seconds(90)
            while status != 202 && ContinuousClock.now < deadline {
                status = try await harness.post(token).status
                if status != 202 { try await Task.sleep(for: .milliseconds(250)) }
            }
            #expect(status == 202)
            #expect(try await harness.stored(jti: jti(of: token)).count == 1)
        }
    }
}
