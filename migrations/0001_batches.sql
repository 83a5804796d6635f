-- toolsched store, version 1: batches, their event logs, request ids,
-- prompt answers and the side-effecting calls recorded before they ran.
-- Applied once by the server at start-up (src/store/postgres.rs).
CREATE TABLE toolsched_batches (
    session_id   text        NOT NULL,
    batch_id     text        NOT NULL,
    request_id   text,
    digest       bytea       NOT NULL,
    began_at     timestamptz NOT NULL DEFAULT now(),
    -- NULL while the batch runs; its retention counts from here.
    completed_at timestamptz,
    ended_calls  text[]      NOT NULL DEFAULT '{}',
    ended_states text[]      NOT NULL DEFAULT '{}',
    PRIMARY KEY (session_id, batch_id),
    -- A request id names one batch of its session (NULLs are distinct).
    UNIQUE (session_id, request_id)
);
CREATE INDEX toolsched_batches_completed ON toolsched_batches (completed_at);

CREATE TABLE toolsched_events (
    session_id text        NOT NULL,
    batch_id   text        NOT NULL,
    sequence   bigint      NOT NULL,
    at         timestamptz NOT NULL,
    -- The event in the API's wire form (opaque to the store).
    body       bytea       NOT NULL,
    PRIMARY KEY (session_id, batch_id, sequence),
    FOREIGN KEY (session_id, batch_id) REFERENCES toolsched_batches ON DELETE CASCADE
);

CREATE TABLE toolsched_answers (
    session_id     text NOT NULL,
    batch_id       text NOT NULL,
    call_id        text NOT NULL,
    correlation_id text NOT NULL,
    outcome        text NOT NULL,
    new_content    text,
    PRIMARY KEY (session_id, batch_id, call_id, correlation_id),
    FOREIGN KEY (session_id, batch_id) REFERENCES toolsched_batches ON DELETE CASCADE
);

CREATE TABLE toolsched_executing (
    session_id text        NOT NULL,
    batch_id   text        NOT NULL,
    call_id    text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, batch_id, call_id),
    FOREIGN KEY (session_id, batch_id) REFERENCES toolsched_batches ON DELETE CASCADE
);
