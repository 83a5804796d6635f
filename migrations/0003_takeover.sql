-- toolsched store, version 3: what a replica taking over a dead owner's
-- running batch needs: the batch's request (as the scheduler encodes it).
-- Calls recorded in toolsched_executing with no result then end
-- outcome_unknown; the others run.
ALTER TABLE toolsched_batches ADD COLUMN request bytea;
