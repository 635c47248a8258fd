-- Account erasure (DELETE /v1/me): one record per user whose erasure was
-- asked for. Phase is the step the erasure is at; every step is idempotent,
-- so a worker that dies mid-step leaves the step to the next one, and the
-- phase moves on (compare and set) only once the step finds nothing left.
-- While DoneTime is NULL the user's reaction and comment writes are refused
-- in their own transactions. A finished record is kept 30 days (a repeated
-- DELETE /v1/me starts it again), then dropped.
CREATE TABLE AccountErasures (
  UserId STRING(128) NOT NULL,
  RequestTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  Phase STRING(16) NOT NULL,
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  DoneTime TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  -- What the erasure removed so far (reported, not relied on).
  Reactions INT64 NOT NULL DEFAULT (0),
  Comments INT64 NOT NULL DEFAULT (0),
  HistoryRows INT64 NOT NULL DEFAULT (0),
  Steps INT64 NOT NULL DEFAULT (0),
) PRIMARY KEY (UserId),
  ROW DELETION POLICY (OLDER_THAN(DoneTime, INTERVAL 30 DAY));

-- The sweep finds the open erasures that have not moved for a while.
CREATE INDEX AccountErasuresOpen ON AccountErasures (DoneTime, UpdateTime);
