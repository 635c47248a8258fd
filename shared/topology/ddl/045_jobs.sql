-- Background jobs at scale: partitioned rollup, reconciliation in slices with
-- a stored cursor, the comments' truth kept with the comment writes, and the
-- video listing spread over buckets. Statements are appended (never edited)
-- so that a deployed database is updated in place.

-- MovedTime is the commit time of the first delta a shard got since its last
-- fold (the marker is written only when the shard row is new): the rollup's
-- lag is the age of the oldest one. NULL on revisit markers.
ALTER TABLE MovedCounters ADD COLUMN MovedTime TIMESTAMP OPTIONS (allow_commit_timestamp = true);

-- Part spreads the counters over 4096 hash partitions: a rollup instance folds
-- one range of them, so two instances never fold the same counter.
ALTER TABLE MovedCounters ADD COLUMN Part INT64 AS (MOD(MOD(FARM_FINGERPRINT(CounterKey), 4096) + 4096, 4096)) STORED;

CREATE INDEX MovedCountersByPart ON MovedCounters (Part, CounterKey) STORING (MovedTime);

-- JobLeases: a background job holding Name (a rollup partition, a
-- reconciliation slice) until Expires; another holder waits for it to expire.
CREATE TABLE JobLeases (
  Name STRING(128) NOT NULL,
  Holder STRING(64) NOT NULL,
  Expires TIMESTAMP NOT NULL,
) PRIMARY KEY (Name);

-- A reconciliation of every counter is a run of slices, disjoint key ranges
-- (After, Upto] worked by any invocation under the slice's lease. Cursor is
-- the last key checked; each batch of keys moves it in the transaction that
-- writes the batch's corrections and adds to the figures, so that a run
-- stopped at any point resumes there, correcting and counting nothing twice.
CREATE TABLE ReconcileRuns (
  RunId STRING(64) NOT NULL,
  Slices INT64 NOT NULL,
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  -- CloseTime is set by the one invocation that reports the finished run.
  CloseTime TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (RunId),
  ROW DELETION POLICY (OLDER_THAN(CreateTime, INTERVAL 7 DAY));

CREATE TABLE ReconcileSlices (
  RunId STRING(64) NOT NULL,
  Slice INT64 NOT NULL,
  After STRING(64) NOT NULL,
  -- Upto is NULL for the last slice: every key after After.
  Upto STRING(64),
  Cursor STRING(64) NOT NULL,
  Done BOOL NOT NULL,
  Checked INT64 NOT NULL,
  Corrected INT64 NOT NULL,
  Skipped INT64 NOT NULL,
  Batches INT64 NOT NULL,
  Invocations INT64 NOT NULL,
) PRIMARY KEY (RunId, Slice),
  INTERLEAVE IN PARENT ReconcileRuns ON DELETE CASCADE;

-- CommentTallies: the comments' truth per counter (a video's comments and
-- replies, a comment's replies), kept exactly by the transactions that post
-- and remove comments (the same deltas as their outbox rows), so that
-- reconciliation reads a few rows per counter instead of counting the
-- listing indexes. Spread over shards, like the counters, so that a viral
-- video's posts do not all write one row.
CREATE TABLE CommentTallies (
  CounterKey STRING(64) NOT NULL,
  Shard INT64 NOT NULL,
  Comments INT64 NOT NULL DEFAULT (0),
  Replies INT64 NOT NULL DEFAULT (0),
) PRIMARY KEY (CounterKey, Shard);

-- ListBucket spreads a video's newest comments over 8 index ranges: without
-- it, every post of a viral video inserts at one point of the index (the
-- video, now). The listing merges the buckets back into one order.
ALTER TABLE Comments ADD COLUMN ListBucket INT64 AS (MOD(MOD(FARM_FINGERPRINT(CommentId), 8) + 8, 8)) STORED;

CREATE NULL_FILTERED INDEX CommentsByVideoBucket ON Comments (ListedVideoId, ListBucket, CreateTime DESC, CommentId DESC);

DROP INDEX CommentsByVideo;
