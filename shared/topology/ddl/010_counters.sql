-- Sharded counters (shared/counter). A counter is one snapshot row plus up to
-- Shards shard rows interleaved under it, so that one key-range read returns
-- both. The consumer adds deltas to a random shard; the rollup folds the
-- shards into the snapshot and deletes them. The counter key is the content id
-- (video or comment); every counted field is a column.
CREATE TABLE Counters (
  CounterKey STRING(64) NOT NULL,
  Likes INT64 NOT NULL DEFAULT (0),
  Dislikes INT64 NOT NULL DEFAULT (0),
  Comments INT64 NOT NULL DEFAULT (0),
  Replies INT64 NOT NULL DEFAULT (0),
  Views INT64 NOT NULL DEFAULT (0),
  -- Shards is how many shard rows the consumer spreads its writes over (4..64),
  -- set by the rollup from the measured write rate.
  Shards INT64 NOT NULL DEFAULT (4),
  -- FoldTime is the time of the last fold; reconciliation of recent counters
  -- selects on it.
  FoldTime TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  -- ReconcileTime is the read timestamp of the last correction written: a
  -- correction computed at an older view is not written (compare and set).
  ReconcileTime TIMESTAMP,
) PRIMARY KEY (CounterKey);

CREATE INDEX CountersByFoldTime ON Counters (FoldTime);

CREATE TABLE CounterShards (
  CounterKey STRING(64) NOT NULL,
  Shard INT64 NOT NULL,
  Likes INT64 NOT NULL DEFAULT (0),
  Dislikes INT64 NOT NULL DEFAULT (0),
  Comments INT64 NOT NULL DEFAULT (0),
  Replies INT64 NOT NULL DEFAULT (0),
  Views INT64 NOT NULL DEFAULT (0),
  -- Writes counts the commits into this shard since the last fold: the rollup
  -- derives the write rate, and so the shard count, from it.
  Writes INT64 NOT NULL DEFAULT (0),
) PRIMARY KEY (CounterKey, Shard),
  INTERLEAVE IN PARENT Counters ON DELETE CASCADE;

-- MovedCounters lists the counters the rollup has to visit: one row per shard
-- written since the last fold (per shard, so that it adds no contention beyond
-- the shard row's own), plus Shard = -1 for a counter whose shard count is
-- still above the minimum and must be revisited to lower it.
CREATE TABLE MovedCounters (
  CounterKey STRING(64) NOT NULL,
  Shard INT64 NOT NULL,
) PRIMARY KEY (CounterKey, Shard);

-- PendingDeltas is the outbox: every counted change writes its deltas here in
-- the same transaction as its source of truth (a reaction row, a comment), and
-- the consumer deletes them in the transaction that adds them to a shard. So
-- at any read timestamp each change is in exactly one of "pending" and
-- "counted": the author's reads add their own pending rows (read-your-own-
-- writes, never twice), reconciliation subtracts everything pending (never
-- double counting events in flight), and the rollup republishes rows whose
-- message was lost.
CREATE TABLE PendingDeltas (
  EventId STRING(64) NOT NULL,
  CounterKey STRING(64) NOT NULL,
  -- UserId is the author of the change (read-your-own-writes).
  UserId STRING(128),
  Likes INT64 NOT NULL DEFAULT (0),
  Dislikes INT64 NOT NULL DEFAULT (0),
  Comments INT64 NOT NULL DEFAULT (0),
  Replies INT64 NOT NULL DEFAULT (0),
  Views INT64 NOT NULL DEFAULT (0),
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (EventId, CounterKey);

CREATE INDEX PendingDeltasByCounter ON PendingDeltas (CounterKey)
  STORING (Likes, Dislikes, Comments, Replies, Views);

CREATE INDEX PendingDeltasByUser ON PendingDeltas (UserId, CounterKey)
  STORING (Likes, Dislikes, Comments, Replies, Views);
