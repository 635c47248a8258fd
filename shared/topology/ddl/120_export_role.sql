-- PrepareExport (the exports of large accounts, prepared in the exports
-- bucket) reads what the export holds. The moderation store it reads the
-- trail through also records moderation actions, as for fn_account.
CREATE ROLE fn_prepare_export;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE ModerationLog TO ROLE fn_prepare_export;
GRANT SELECT ON TABLE Comments, Reactions TO ROLE fn_prepare_export;
