-- A keyed post's comment id is derived from its poster and Idempotency-Key
-- (comment.KeyedID), so the comment row is the key's record: Comments and
-- Moderation no longer write CommentRequests. They still read it, for the
-- keys recorded there before, until those rows expire; EraseAccount still
-- deletes a user's. Their roles read it and no more (terraform/check
-- derives it from the code, privilege by privilege).
REVOKE INSERT, UPDATE, DELETE ON TABLE CommentRequests FROM ROLE fn_comments, fn_moderation;
