-- Comments (shared/comment): the source of truth of the comments (videos) and
-- replies (comments) counts. CommentId is random, so inserts spread over the
-- key space (no write hotspot). ParentId is NULL for a top-level comment;
-- threads are one level deep. Status is visible, deleted or spam; a comment
-- never returns to visible. A reply counts while it and its parent are both
-- visible: removing a top-level comment takes its replies out of the counts
-- and out of the listings without rewriting their rows.
CREATE TABLE Comments (
  CommentId STRING(64) NOT NULL,
  VideoId STRING(64) NOT NULL,
  ParentId STRING(64),
  AuthorId STRING(128) NOT NULL,
  Text STRING(10000) NOT NULL,
  Status STRING(16) NOT NULL,
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  -- ListedVideoId is the video of a visible top-level comment, NULL
  -- otherwise, and ListedParentId the parent of a visible reply (written with
  -- Status, see comment.Comment.Listed). The listing indexes hold visible
  -- comments only, so a page never scans removed ones.
  ListedVideoId STRING(64),
  ListedParentId STRING(64),
) PRIMARY KEY (CommentId);

-- Newest-first top-level comments of a video; also the video's count of
-- visible top-level comments for reconciliation.
CREATE NULL_FILTERED INDEX CommentsByVideo ON Comments (ListedVideoId, CreateTime DESC, CommentId DESC);

-- Oldest-first visible replies of a comment; also the comment's count of
-- visible replies for removals and reconciliation.
CREATE NULL_FILTERED INDEX RepliesByParent ON Comments (ListedParentId, CreateTime, CommentId);

-- Idempotency-Key of a comment post: a retry of the same key by the same user
-- finds the comment it created. Keys are kept for a day.
CREATE TABLE CommentRequests (
  UserId STRING(128) NOT NULL,
  IdempotencyKey STRING(255) NOT NULL,
  CommentId STRING(64) NOT NULL,
  -- RequestHash fingerprints the request (video, parent, text): the same key
  -- sent with another comment is refused rather than answered with the first.
  RequestHash BYTES(32) NOT NULL,
  CreateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (UserId, IdempotencyKey),
  ROW DELETION POLICY (OLDER_THAN(CreateTime, INTERVAL 1 DAY));

-- Per-user comment rate limit (GCRA, as for reactions): the theoretical
-- arrival time of the next post, shared by every instance.
CREATE TABLE CommentRateLimits (
  UserId STRING(128) NOT NULL,
  Tat TIMESTAMP NOT NULL,
) PRIMARY KEY (UserId),
  ROW DELETION POLICY (OLDER_THAN(Tat, INTERVAL 1 DAY));
