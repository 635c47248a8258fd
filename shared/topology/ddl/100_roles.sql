-- Fine-grained access control: one database role per function that uses
-- Spanner, holding only the table privileges its code needs (terraform/check
-- derives them from the code and fails when a grant is missing or extra).
-- A function connects as its role (SPANNER_DATABASE_ROLE); its identity may
-- assume that role and nothing else, and holds no IAM role with DDL rights.
-- SELECT alone for a table the code only reads; SELECT, INSERT, UPDATE and
-- DELETE for one it writes. The Spanner emulator refuses these statements;
-- the local stack and the tests skip them (topology.AccessControl).
CREATE ROLE fn_account;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE AccountErasures, ModerationLog TO ROLE fn_account;
GRANT SELECT ON TABLE Comments, Reactions TO ROLE fn_account;

CREATE ROLE fn_apply_counters;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE AppliedEvents, CounterShards, Counters, MovedCounters, PendingDeltas TO ROLE fn_apply_counters;

CREATE ROLE fn_apply_views;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE FlaggedUsers, ModerationLog TO ROLE fn_apply_views;

CREATE ROLE fn_comments;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE CommentRateLimits, CommentRequests, CommentTallies, Comments, ModerationLog, ModeratorRateLimits, PendingDeltas TO ROLE fn_comments;
GRANT SELECT ON TABLE AccountErasures, CounterShards, Counters, ModeratorRevocations, Reactions TO ROLE fn_comments;

CREATE ROLE fn_counts;
GRANT SELECT ON TABLE CounterShards, Counters, PendingDeltas, Reactions TO ROLE fn_counts;

CREATE ROLE fn_detect_manipulation;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE FlaggedUsers, JobWatermarks, ModerationLog TO ROLE fn_detect_manipulation;

CREATE ROLE fn_erase_account;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE AccountErasures, CommentRateLimits, CommentRequests, CommentTallies, Comments, FlaggedUsers, ModerationLog, ModeratorRateLimits, PendingDeltas, ReactionRateLimits, ReactionTallies, Reactions TO ROLE fn_erase_account;
GRANT SELECT ON TABLE ModeratorRevocations TO ROLE fn_erase_account;

CREATE ROLE fn_expire_history;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE JobLeases TO ROLE fn_expire_history;

CREATE ROLE fn_moderation;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE CommentRateLimits, CommentRequests, CommentTallies, Comments, FlaggedUsers, ModerationLog, ModeratorRateLimits, PendingDeltas TO ROLE fn_moderation;
GRANT SELECT ON TABLE AccountErasures, ModeratorRevocations TO ROLE fn_moderation;

CREATE ROLE fn_reactions;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE PendingDeltas, ReactionTallies, Reactions TO ROLE fn_reactions;
GRANT SELECT ON TABLE AccountErasures, FlaggedUsers TO ROLE fn_reactions;

CREATE ROLE fn_reconcile;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE CounterShards, Counters, JobLeases, JobWatermarks, ReactionTallies, Reactions, ReconcileRuns, ReconcileSlices TO ROLE fn_reconcile;
GRANT SELECT ON TABLE CommentTallies, Comments, FlaggedUsers, PendingDeltas TO ROLE fn_reconcile;

CREATE ROLE fn_resume_erasures;
GRANT SELECT ON TABLE AccountErasures TO ROLE fn_resume_erasures;

CREATE ROLE fn_rollup;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE AppliedEvents, CounterShards, Counters, JobLeases, MovedCounters, PendingDeltas TO ROLE fn_rollup;
