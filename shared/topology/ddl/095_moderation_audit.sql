-- The moderation audit trail (shared/moderation): every flag, unflag and
-- spam mark, by a moderator or a detector, and every revocation of a
-- moderator's role, written in the transaction of the action and never
-- updated or deleted by the service. UserId is the account acted on (the
-- flagged account, the spam's author, the moderator revoked), so an
-- account's entries are one key range (its export); Time is the action's
-- commit timestamp; EntryId tells apart the entries of one transaction.
-- Actor is the moderator's user id or the detector's name, ActorKind
-- "moderator" or "automatic"; Reason the moderator's words or the
-- detector's summary; Changed false where the action found the state it
-- asked for; Evidence a detector's JSON evidence.
CREATE TABLE ModerationLog (
  UserId STRING(128) NOT NULL,
  Time TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  EntryId STRING(32) NOT NULL,
  Action STRING(16) NOT NULL,
  Actor STRING(128) NOT NULL,
  ActorKind STRING(16) NOT NULL,
  CommentId STRING(64),
  VideoId STRING(64),
  Reason STRING(MAX) NOT NULL,
  Changed BOOL NOT NULL,
  Evidence STRING(MAX),
) PRIMARY KEY (UserId, Time DESC, EntryId DESC);

-- The moderators' listing of the whole trail, newest first.
CREATE INDEX ModerationLogByTime ON ModerationLog (Time DESC, EntryId DESC) STORING (Action, Actor, ActorKind, CommentId, VideoId, Reason, Changed, Evidence);

-- The listing of one video's entries (spam marks), newest first.
CREATE NULL_FILTERED INDEX ModerationLogByVideo ON ModerationLog (VideoId, Time DESC, EntryId DESC) STORING (Action, Actor, ActorKind, CommentId, Reason, Changed, Evidence);

-- Moderators whose role an operator revoked (cmd/moderators): every
-- moderation call reads this row in its own transaction and is refused
-- while it exists, whatever the caller's token says. Restoring the role
-- deletes the row.
CREATE TABLE ModeratorRevocations (
  UserId STRING(128) NOT NULL,
  RevokedBy STRING(128) NOT NULL,
  Reason STRING(MAX) NOT NULL,
  RevokeTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (UserId);

-- Per-moderator rate limit of moderation calls (GCRA), shared by every
-- instance.
CREATE TABLE ModeratorRateLimits (
  UserId STRING(128) NOT NULL,
  Tat TIMESTAMP NOT NULL,
) PRIMARY KEY (UserId),
  ROW DELETION POLICY (OLDER_THAN(Tat, INTERVAL 1 DAY));
