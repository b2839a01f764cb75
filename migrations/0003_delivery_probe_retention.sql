-- The delivery probes' records are kept for DeliveryProbes.retentionDays, and `stream health` (run by every
-- instance every few seconds for the metrics) reads its figures through these indexes, not a scan of the table.
CREATE INDEX risc_delivery_probes_arrived ON risc_delivery_probes (id) WHERE arrived_at IS NOT NULL;
CREATE INDEX risc_delivery_probes_timed_out ON risc_delivery_probes (prober_started_at) WHERE timed_out;
CREATE INDEX risc_delivery_probes_requested ON risc_delivery_probes (requested_at);
