-- toolsched store, version 5: a side-effecting call's end, recorded when it
-- ends (behind the session, in order), not only with its completed batch:
-- a replica taking over an uncompleted batch keeps the call's real result
-- instead of ending it outcome_unknown. NULL while it runs (or when its
-- replica stopped before the end was written: then outcome_unknown).
ALTER TABLE toolsched_executing ADD COLUMN ended bytea;
