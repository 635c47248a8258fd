-- Reaction tallies: the reactions' truth per item (likes and dislikes of
-- accounts not flagged), kept exactly by the transactions that write the
-- reaction rows, so that the hourly reconciliation reads a few rows per item
-- instead of counting ReactionsByContent.

-- Tallied says whether the row's reaction is in its item's tally: true when
-- it was written by an account not flagged, false by a flagged one (the job
-- that applies flag changes moves it in or out). NULL on rows written before
-- the tallies: not in the tally until the daily reconciliation moves them in.
ALTER TABLE Reactions ADD COLUMN Tallied BOOL;

ALTER INDEX ReactionsByContent ADD STORED COLUMN Tallied;

-- Shards 0..63 take the writes (a random one per transaction and item, as the
-- counters' shards). Shard -1, the base, says that the item's tally is
-- complete (none of its rows is NULL); it holds the daily reconciliation's
-- repairs of the tally, RepairTime being the read timestamp of the last one
-- (a repair computed at an older read is not written).
CREATE TABLE ReactionTallies (
  ContentId STRING(64) NOT NULL,
  Shard INT64 NOT NULL,
  Likes INT64 NOT NULL DEFAULT (0),
  Dislikes INT64 NOT NULL DEFAULT (0),
  RepairTime TIMESTAMP,
) PRIMARY KEY (ContentId, Shard);

-- TruthHour is the hour in which the counter last folded a change of a
-- reconciled field (likes, dislikes, comments, replies, threads; views do
-- not set it), or in which a flag change moved its reactions' tally: the
-- hourly reconciliation checks the counters of the last hours, in key
-- order within each hour.
ALTER TABLE Counters ADD COLUMN TruthHour TIMESTAMP;

CREATE NULL_FILTERED INDEX CountersByTruthHour ON Counters (TruthHour);

-- A run of the hourly reconciliation covers the counters whose TruthHour lies
-- in [FromHour, ToHour]; NULL for a run of every counter.
ALTER TABLE ReconcileRuns ADD COLUMN FromHour TIMESTAMP;

ALTER TABLE ReconcileRuns ADD COLUMN ToHour TIMESTAMP;

-- Cursor is the last key an incremental job finished at Watermark: the job
-- that applies flag changes to the tallies walks the accounts in
-- (UpdateTime, UserId) order and resumes after (Watermark, Cursor).
ALTER TABLE JobWatermarks ADD COLUMN Cursor STRING(128);
