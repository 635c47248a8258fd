-- Summed outbox rows (shared/counter/counterstore/outbox.go). A reaction
-- transaction writes one PendingDeltas row per item it changed, the deltas of
-- every user in it summed (UserId NULL), and each user's part of it here, on
-- their own reaction row: "<event id>/<likes>/<dislikes>/<comments>/<replies>/<views>",
-- one entry per summed row not yet counted when the row was written. A share
-- is pending while the PendingDeltas row (event id, ContentId) exists; entries
-- whose row is gone are dropped on the reaction row's next write. NULL: none.
ALTER TABLE Reactions ADD COLUMN PendingShares ARRAY<STRING(MAX)>;
