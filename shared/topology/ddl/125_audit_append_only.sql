-- The moderation audit trail (ModerationLog, 095) is append-only: the
-- service inserts entries and reads them, and never updates or deletes one,
-- not even when an account is erased (docs/moderation.md). Each role keeps
-- on it only the privileges its code uses, each on its own (terraform/check
-- derives them from the code and fails on any other): Moderation lists the
-- trail and appends to it; ApplyViews and DetectManipulation append their
-- automatic flags, Comments and EraseAccount the spam marks of the comment
-- removal they share; Account and PrepareExport only read it, for the
-- export.
REVOKE UPDATE, DELETE ON TABLE ModerationLog FROM ROLE fn_moderation;
REVOKE SELECT, UPDATE, DELETE ON TABLE ModerationLog FROM ROLE fn_apply_views, fn_comments, fn_detect_manipulation, fn_erase_account;
REVOKE INSERT, UPDATE, DELETE ON TABLE ModerationLog FROM ROLE fn_account, fn_prepare_export;
