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

/// What the admin API reads and changes: `PostgresAdminStore`.
public protocol AdminStore: Sendable {
    func events(_ filter: AdminQueries.EventFilter) async throws -> EventPage
    func event(id: Int64) async throws -> EventDetail?
    func replayEvent(id: Int64) async throws -> EventQueue.ReplayOutcome
    /// What replaying the event would do now; nil for no such event.
    func explainEvent(id: Int64) async throws -> EventExplanation?
    func user(sub: String) async throws -> UserReport?
    func stats() async throws -> QueueStats
    func subscribers() async throws -> [SubscriberRecord]
    func addSubscriber(_ subscriber: NotificationStore.NewSubscriber) async throws -> Int64
    func removeSubscriber(id: Int64) async throws -> Bool
    /// The new secret; nil for no such subscriber.
    func rotateSubscriberSecret(id: Int64) async throws -> NotificationStore.SecretRotation?
    func notifications(_ filter: NotificationStore.Filter) async throws -> NotificationPage
    func notification(id: Int64) async throws -> NotificationRecord?
    func replayNotification(id: Int64) async throws -> NotificationStore.ReplayOutcome
}

/// The admin API's store on PostgreSQL: the admin queries, the event queue's replay, and the notification outbox.
public struct PostgresAdminStore: AdminStore {
    let queries: AdminQueries
    let queue: EventQueue
    let outbox: NotificationStore

    public init(queries: AdminQueries, queue: EventQueue, notifications: NotificationStore) {
        self.queries = queries
        self.queue = queue
        self.outbox = notifications
    }

    public func events(_ filter: AdminQueries.EventFilter) async throws -> EventPage { try await queries.events(filter) }
    public func event(id: Int64) async throws -> EventDetail? { try await queries.event(id: id) }
    public func replayEvent(id: Int64) async throws -> EventQueue.ReplayOutcome { try await queue.replay(id: id) }
    public func explainEvent(id: Int64) async throws -> EventExplanation? { try await queue.explain(id: id) }
    public func user(sub: String) async throws -> UserReport? { try await queries.user(sub: sub) }
    public func stats() async throws -> QueueStats { try await queries.stats() }
    public func subscribers() async throws -> [SubscriberRecord] { try await outbox.subscribers() }
    public func addSubscriber(_ subscriber: NotificationStore.NewSubscriber) async throws -> Int64 { try await outbox.add(subscriber) }
    public func removeSubscriber(id: Int64) async throws -> Bool { try await outbox.remove(subscriber: id) }
    public func rotateSubscriberSecret(id: Int64) async throws -> NotificationStore.SecretRotation? {
        try await outbox.rotateSecret(subscriber: id)
    }
    public func notifications(_ filter: NotificationStore.Filter) async throws -> NotificationPage { try await outbox.notifications(filter) }
    public func notification(id: Int64) async throws -> NotificationRecord? { try await outbox.notification(id: id) }
    public func replayNotification(id: Int64) async throws -> NotificationStore.ReplayOutcome { try await outbox.replay(id: id) }
}
