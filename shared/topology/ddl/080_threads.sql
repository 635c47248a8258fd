-- Threads: a video's visible top-level comments (shared/comment), a counted
-- field like the others, in every table that holds counted values, and in
-- the comments' tallies. Rows written before the column read it as 0: the
-- tallies start their threads from a recount (shared/comment/commentstore,
-- threadsBaseShard), and reconciliation corrects the counters.
ALTER TABLE Counters ADD COLUMN Threads INT64 NOT NULL DEFAULT (0);

ALTER TABLE CounterShards ADD COLUMN Threads INT64 NOT NULL DEFAULT (0);

ALTER TABLE PendingDeltas ADD COLUMN Threads INT64 NOT NULL DEFAULT (0);

ALTER INDEX PendingDeltasByCounter ADD STORED COLUMN Threads;

ALTER INDEX PendingDeltasByUser ADD STORED COLUMN Threads;

ALTER TABLE CommentTallies ADD COLUMN Threads INT64 NOT NULL DEFAULT (0);
