/// The rule of RISC_EVENT_RETENTION_DAYS.
public enum EventRetention {
    /// A redelivery is recognised by its stored (`iss`, `jti`), so the retention must outlast Google's retries,
    /// and the configuration refuses less. Google publishes no retry schedule; its retries end long before this.
    public static let minimumDays = 30
}
