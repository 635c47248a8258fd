-- The user's own data (GET /v1/me/export, DELETE /v1/me): a user's comments
-- are found by author, in comment id order, a page at a time, without
-- scanning the table. Appended statements only.
CREATE INDEX CommentsByAuthor ON Comments (AuthorId);
