-- Vote manipulation found automatically (functions/detectmanipulation) beside
-- moderators' flags. Statements are appended (never edited) so that a
-- deployed database is updated in place.

-- Who decided an account's flag last: "moderator" (the moderation API; also
-- every row written before this column, NULL) or "automatic" (the detection
-- job). A moderator's decision, flag or unflag, is never overridden by the
-- job. FlaggedAt is when the account was flagged (NULL while unflagged; the
-- writer's clock, not the commit timestamp, which a generated column may not
-- read); Evidence the job's JSON evidence (the items, the window, the group
-- size).
ALTER TABLE FlaggedUsers ADD COLUMN Reason STRING(16);

ALTER TABLE FlaggedUsers ADD COLUMN FlaggedAt TIMESTAMP;

ALTER TABLE FlaggedUsers ADD COLUMN Evidence STRING(MAX);

-- ListedAt orders the moderators' listing, newest first: the flag time of a
-- flagged account, NULL otherwise (so the index holds flagged accounts only).
-- Rows flagged before FlaggedAt existed list at the epoch, last.
ALTER TABLE FlaggedUsers ADD COLUMN ListedAt TIMESTAMP AS (IF(Flagged, COALESCE(FlaggedAt, TIMESTAMP '1970-01-01T00:00:00Z'), NULL)) STORED;

CREATE NULL_FILTERED INDEX FlaggedUsersByTime ON FlaggedUsers (ListedAt DESC, UserId DESC) STORING (Reason, FlaggedAt, Evidence, UpdateTime);

-- CreateTime is when the reaction row was created (the user's first reaction
-- on the item since any undo), written in the same mutation as the row, only
-- when the row is new. An account's first-seen time is its earliest one
-- (NULL on rows older than the column: an account with such a row counts as
-- established).
ALTER TABLE Reactions ADD COLUMN CreateTime TIMESTAMP OPTIONS (allow_commit_timestamp = true);

-- The detection job reads the reactions that changed in a time range from
-- this index, not the table. TimeShard spreads the index's inserts (always at
-- "now") over 16 ranges instead of one hot tail.
ALTER TABLE Reactions ADD COLUMN TimeShard INT64 AS (MOD(MOD(FARM_FINGERPRINT(UserId), 16) + 16, 16)) STORED;

CREATE INDEX ReactionsByTime ON Reactions (TimeShard, UpdateTime) STORING (Reaction, CreateTime);

-- JobWatermarks: how far an incremental job has read (the detection job: the
-- reactions' UpdateTime up to which it has looked), moved in the transaction
-- that writes what it found, so a run killed midway repeats its step.
CREATE TABLE JobWatermarks (
  Name STRING(128) NOT NULL,
  Watermark TIMESTAMP NOT NULL,
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Name);
