-- Spanner schema, applied in file name order by the local stack and by
-- Terraform (google_spanner_database.ddl). Each feature adds its own file.

-- Applied events, for idempotent consumers: an event id seen here has been
-- applied. Rows expire after a week, longer than Pub/Sub keeps a message.
CREATE TABLE AppliedEvents (
  EventId STRING(128) NOT NULL,
  AppliedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (EventId),
  ROW DELETION POLICY (OLDER_THAN(AppliedAt, INTERVAL 7 DAY));
