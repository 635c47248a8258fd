# The erasure log (docs/design/account.md, "The erasure log and restores"):
# one small object per account erasure asked for (DELETE /v1/me), kept where
# no restore of Spanner, Bigtable or Firestore reaches, and replayed after
# every restore (cmd/replayerasures, docs/operations.md).

locals {
  # An entry is kept as long as a backup taken before it may still be
  # restored, plus two days for a restore started on a backup's last day and
  # the replay after it. The point-in-time recovery windows (7 days at most)
  # are shorter than the backups.
  erasure_log_retention_days = ceil(max(
    tonumber(trimsuffix(var.spanner_backup_retention, "s")),
    tonumber(trimsuffix(var.bigtable_backup_retention, "s")),
    tonumber(trimsuffix(google_firestore_backup_schedule.daily.retention, "s")),
  ) / 86400) + 2
}

resource "google_storage_bucket" "erasure_log" {
  project                     = var.project_id
  name                        = "${var.project_id}-engagement-erasure-log"
  location                    = coalesce(var.erasure_log_location, var.region)
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels

  # Nobody, whatever their role, deletes or replaces an entry before it is
  # as old as the retention. (Object versioning cannot be combined with a
  # retention policy, and is not needed: an entry is never replaced.) Not
  # locked: a locked policy can never be shortened nor the bucket deleted
  # before its last object expires.
  retention_policy {
    retention_period = local.erasure_log_retention_days * 86400
  }

  # Then the entry has no purpose left, and holds a user id: deleted.
  lifecycle_rule {
    condition {
      age = local.erasure_log_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.api]
}

# Account writes the entries and can do nothing else with the log: create
# objects, not read, list, replace or delete them.
resource "google_storage_bucket_iam_member" "erasure_log_writer" {
  bucket = google_storage_bucket.erasure_log.name
  role   = "roles/storage.objectCreator"
  member = google_service_account.fn["Account"].member
}

# The operators who replay the log after a restore (cmd/replayerasures,
# docs/operations.md) read it and, asking each erasure again, append to it;
# on this bucket only, and still unable to replace or delete an entry.
locals {
  erasure_log_operator_roles = ["roles/storage.objectViewer", "roles/storage.objectCreator"]
  erasure_log_operator_grants = {
    for pair in setproduct(var.erasure_log_operators, local.erasure_log_operator_roles) :
    "${pair[0]} ${pair[1]}" => { member = pair[0], role = pair[1] }
  }
}

resource "google_storage_bucket_iam_member" "erasure_log_operator" {
  for_each = local.erasure_log_operator_grants

  bucket = google_storage_bucket.erasure_log.name
  role   = each.value.role
  member = each.value.member
}
