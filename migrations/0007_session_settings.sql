-- toolsched store, version 7: a session's settings (approval mode, the
-- "always" rules its proceed_always answers added, its topic), written by
-- its owner, fenced by its lease, whenever they change, and read by the
-- replica that owns the session next. The body is the scheduler's encoding
-- (opaque to the store).
CREATE TABLE toolsched_sessions (
    session_id text        PRIMARY KEY,
    settings   bytea       NOT NULL,
    epoch      bigint      NOT NULL,
    -- The owner's count of changes at that epoch: a write only replaces an
    -- older one ((epoch, version) ordered), so writes arriving out of order
    -- keep the newest.
    version    bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
