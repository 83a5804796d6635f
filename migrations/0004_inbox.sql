-- toolsched store, version 4: requests for a session owned by another
-- replica (Confirm, Cancel reaching a replica that does not run the
-- session). The receiving replica records one here and wakes the owner
-- (NOTIFY toolsched_inbox, payload the owner); the owner claims it, applies
-- it, records its answer and wakes the sender (NOTIFY toolsched_answer,
-- payload the id). Rows are kept a short while for the record.
CREATE TABLE toolsched_inbox (
    id          bigserial   PRIMARY KEY,
    owner       text        NOT NULL,
    session_id  text        NOT NULL,
    kind        text        NOT NULL,
    -- The request in the API's wire form (opaque to the store).
    body        bytea       NOT NULL,
    posted_at   timestamptz NOT NULL DEFAULT now(),
    claimed_at  timestamptz,
    -- The owner's answer in the API's wire form.
    answer      bytea,
    answered_at timestamptz
);
CREATE INDEX toolsched_inbox_unclaimed ON toolsched_inbox (owner) WHERE claimed_at IS NULL;
CREATE INDEX toolsched_inbox_posted ON toolsched_inbox (posted_at);
