-- Reactions (shared/reaction): each user's current reaction per item, the
-- source of truth of likes and dislikes. Undo (none) deletes the row.
CREATE TABLE Reactions (
  UserId STRING(128) NOT NULL,
  ContentId STRING(64) NOT NULL,
  Reaction STRING(8) NOT NULL,
  Version INT64 NOT NULL,
  -- Generation is drawn at random when the row is created, so that event ids
  -- (user, content, generation, version) never repeat after an undo.
  Generation INT64 NOT NULL,
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (UserId, ContentId);

-- Reconciliation recounts an item's reactions from this index.
CREATE INDEX ReactionsByContent ON Reactions (ContentId, Reaction);

-- Accounts flagged for vote manipulation: their reactions stay (the record)
-- but do not count. Unflagged accounts keep their row (Flagged = false) so
-- that reconciliation finds the items whose counts the change affects.
CREATE TABLE FlaggedUsers (
  UserId STRING(128) NOT NULL,
  Flagged BOOL NOT NULL,
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (UserId);

-- Per-user reaction rate limit (GCRA): the theoretical arrival time of the
-- next request, shared by every instance.
CREATE TABLE ReactionRateLimits (
  UserId STRING(128) NOT NULL,
  Tat TIMESTAMP NOT NULL,
) PRIMARY KEY (UserId),
  ROW DELETION POLICY (OLDER_THAN(Tat, INTERVAL 1 DAY));
