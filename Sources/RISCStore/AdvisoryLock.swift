/// The service's PostgreSQL advisory locks. Each use has its own key space: the two-key form `(class, key)`,
/// whose locks never meet the one-key form's (the migrator's) nor those of another class. With one space for
/// all, a user whose `sub` hashed to the delivery prober's key would wait for as long as the prober leads.
public enum AdvisoryLock: Int32, Sendable, CaseIterable {
    /// Held by one process at a time, whatever the data.
    case eventRetention = 1
    case configuredSubscribers = 2
    case deliveryProbe = 3

    /// The class of one user's lock, keyed by `hashtext(sub)`: `risc_lock_user` takes it (the number is written
    /// there too). Two users whose subs hash alike only wait for each other.
    public static let userClass: Int32 = 1
    /// The class of the locks above, each keyed by its raw value.
    public static let singletonClass: Int32 = 2
    /// The class of a poll stream's poller lock, keyed by `hashtext(name)`: one instance polls each stream.
    public static let pollStreamClass: Int32 = 3
}
