-- The raw PostgreSQL ceiling: one durable single-row insert per transaction, payload about a SET's size.
INSERT INTO bench_raw (jti, claims) VALUES (md5(random()::text), repeat('x', 600));
