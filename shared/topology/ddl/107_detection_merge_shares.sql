-- The merge of a detection step runs in shares (functions/detectmanipulation,
-- moderation.MergeShare): each share counts the item pairs across two
-- buckets of partitions and keeps what it found here for the merge's last
-- stage, which deletes the step's rows with its partitions' shares once the
-- step is merged. A share's row is its done mark: the last stage runs once
-- every share of the step has one. The deletion policy only clears what a
-- stopped job left.
CREATE TABLE DetectionMergeShares (
  StepEnd TIMESTAMP NOT NULL,
  Partitions INT64 NOT NULL,
  Buckets INT64 NOT NULL,
  Share INT64 NOT NULL,
  Data BYTES(MAX) NOT NULL,
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (StepEnd, Partitions, Buckets, Share),
  ROW DELETION POLICY (OLDER_THAN(CreateTime, INTERVAL 2 DAY));

GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE DetectionMergeShares TO ROLE fn_detect_manipulation;
