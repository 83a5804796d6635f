-- toolsched store, version 6: a completed batch's log is written into its
-- own row (three arrays, one entry per event, in sequence order) by the
-- statement that completes it, instead of one toolsched_events row per
-- event. Per batch that is one row update instead of a row, a primary-key
-- entry and a foreign-key check per event: the foreign-key checks alone
-- were about 40% of PostgreSQL's CPU in S1 (BENCHMARKS.md, session 8).
-- toolsched_events keeps the events of running batches that another
-- replica follows, and the logs of batches completed before this version.
ALTER TABLE toolsched_batches
    ADD COLUMN log_sequences bigint[],
    ADD COLUMN log_at timestamptz[],
    ADD COLUMN log_bodies bytea[];
