-- toolsched store, version 2: session ownership. One replica owns a
-- session at a time: the row's owner, while expires_at is ahead (renewed
-- while the owner runs the session's batches). Taking over an expired lease
-- bumps the epoch; every write of an owner names the epoch it holds, so one
-- that lost its lease (paused, partitioned) writes nothing after another
-- took over.
CREATE TABLE toolsched_leases (
    session_id text        PRIMARY KEY,
    owner      text        NOT NULL,
    epoch      bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX toolsched_leases_owner ON toolsched_leases (owner);

ALTER TABLE toolsched_batches ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
