import Foundation
import RISC
import RISCStore

// What each controller needs of the database, as small protocols: the service passes the PostgreSQL stores, and
// route tests (`app.test(.router)`) pass fakes, so a route's parsing, status codes and error bodies are tested
// without PostgreSQL. What the SQL does is tested against a real database.

/// Where a verified SET is stored (and applied): `EventInbox`.
public protocol SETStore: Sendable {
    func store(_ event: InboundEvent) async throws -> EventInbox.Outcome
}

extension EventInbox: SETStore {}

/// Sign-in and the session checks: `SessionStore`.
public protocol SessionStoring: Sendable {
    func signIn(_ profile: GoogleIDToken.Profile, issuedAt: Date) async throws -> SessionStore.SignInOutcome
    func lookup(token: String) async throws -> SessionStore.Lookup
    func end(token: String) async throws -> Bool
}

extension SessionStore: SessionStoring {}

/// The refresh-token vault: `GrantStore`.
public protocol GrantStoring: Sendable {
    func store(sub: String, clientID: String, scopes: [String], refreshToken: String) async throws -> UUID
    func lookup(id: UUID) async throws -> GrantStore.Lookup
    func delete(id: UUID) async throws -> Bool
}

extension GrantStore: GrantStoring {}

// The admin API's stores, one per resource, as its routes are grouped.

/// `/admin/v1/events`: listing, detail, explain and replay: `EventAdmin`.
public protocol EventAdministering: Sendable {
    func events(_ filter: EventAdmin.Filter) async throws -> EventPage
    func event(id: Int64) async throws -> EventDetail?
    func replay(id: Int64) async throws -> EventAdmin.ReplayOutcome
    /// What replaying the event would do now; nil for no such event.
    func explain(id: Int64) async throws -> EventExplanation?
}

extension EventAdmin: EventAdministering {}

/// `/admin/v1/users/:sub` and `/admin/v1/stats`: `AdminReports`.
public protocol AdminReporting: Sendable {
    func user(sub: String) async throws -> UserReport?
    func stats() async throws -> QueueStats
}

extension AdminReports: AdminReporting {}

/// `/admin/v1/subscribers`: `SubscriberStore`.
public protocol SubscriberStoring: Sendable {
    func subscribers() async throws -> [SubscriberRecord]
    func add(_ subscriber: NewSubscriber) async throws -> Int64
    func remove(subscriber id: Int64) async throws -> Bool
    /// The new secret; nil for no such subscriber.
    func rotateSecret(subscriber id: Int64) async throws -> SubscriberStore.SecretRotation?
}

extension SubscriberStore: SubscriberStoring {}

/// `/admin/v1/notifications`: `NotificationOutbox`.
public protocol NotificationAdministering: Sendable {
    func notifications(_ filter: NotificationOutbox.Filter) async throws -> NotificationPage
    func notification(id: Int64) async throws -> NotificationRecord?
    func replay(id: Int64) async throws -> NotificationOutbox.ReplayOutcome
}

extension NotificationOutbox: NotificationAdministering {}

/// `/admin/v1/transmitters`: `TransmitterRegistry` (the metadata read, the credential sealed in `TransmitterStore`).
public protocol TransmitterStoring: Sendable {
    /// The built-in google first.
    func transmitters() async throws -> [TransmitterRecord]
    func transmitter(named name: TransmitterName) async throws -> TransmitterRecord?
    func add(_ transmitter: NewTransmitter) async throws -> TransmitterRecord
    func remove(named name: TransmitterName) async throws -> Bool
    /// The stream at a Shared Signals transmitter (`ManagedStream.Failure` for google or an unknown name).
    func stream(of name: TransmitterName) async throws -> ManagedStream
}
