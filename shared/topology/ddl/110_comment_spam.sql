-- The duplicate-text rule (comment.SpamRules): the digests of each user's
-- recent posts (a hash of the normalised text keyed by the user, and the
-- post's time; comment.RecentTexts, at most 80 entries of 16 bytes) beside
-- the rate limit's timestamp, so that a post reads the one row it read
-- already. fn_comments' grant on the table (100_roles.sql) covers the new
-- column, as does fn_erase_account's, which deletes the row.
ALTER TABLE CommentRateLimits ADD COLUMN RecentTexts BYTES(1280);
