-- The detection job is partitioned by item (functions/detectmanipulation):
-- ItemPart spreads the items over 4,096 parts, a partition reads a range of
-- parts, and the index serves each part's changes of a step as one key
-- range. The index's inserts land at 4,096 points of "now" instead of one
-- hot tail.
ALTER TABLE Reactions ADD COLUMN ItemPart INT64 AS (MOD(MOD(FARM_FINGERPRINT(ContentId), 4096) + 4096, 4096)) STORED;

CREATE INDEX ReactionsByItemPart ON Reactions (ItemPart, UpdateTime) STORING (Reaction);

-- What each partition of a detection step hands to the merge: the reactions
-- of the items a group could act on and a sketch of its accounts
-- (moderation.Partial, encoded in chunks). Written in the transaction that
-- moves the partition's watermark (JobWatermarks), deleted by the merge of
-- the step; the deletion policy only clears what a stopped job left.
CREATE TABLE DetectionPartials (
  StepEnd TIMESTAMP NOT NULL,
  Partitions INT64 NOT NULL,
  Part INT64 NOT NULL,
  Chunk INT64 NOT NULL,
  Data BYTES(MAX) NOT NULL,
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (StepEnd, Partitions, Part, Chunk),
  ROW DELETION POLICY (OLDER_THAN(CreateTime, INTERVAL 2 DAY));

-- The whole-step reads of the changed reactions by time are replaced by the
-- partitions' reads by item part: one index entry per reaction change less.
DROP INDEX ReactionsByTime;
