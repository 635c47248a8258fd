# Data Access audit logs of the stores that hold users' data: every write
# (and, for Spanner, every read) through the data APIs is recorded in Cloud
# Audit Logs with the authenticated principal, whoever makes it. An
# operator's or a build's direct edit of a table — the moderation audit
# trail (ModerationLog) included — leaves a record the editor cannot remove
# (the _Required and _Default buckets are not the project's data; no
# identity of this deployment holds roles/logging.admin). Admin Activity
# logs (schema changes, IAM grants such as one an identity makes to itself)
# are always on and need nothing here.
#
# The functions' own identities are exempted: they write the tables
# millions of times a day through their fine-grained database roles, which
# already keep each to the statements its code makes (terraform/check's
# Spanner role rule), and their writes are the service's own records. Any
# other principal's access is logged.
locals {
  audited_services = {
    "spanner.googleapis.com"   = ["DATA_READ", "DATA_WRITE"]
    "bigtable.googleapis.com"  = ["DATA_WRITE"]
    "firestore.googleapis.com" = ["DATA_WRITE"]
    "datastore.googleapis.com" = ["DATA_WRITE"]
    "storage.googleapis.com"   = ["DATA_WRITE"]
  }
}

resource "google_project_iam_audit_config" "data_access" {
  for_each = local.audited_services

  project = var.project_id
  service = each.key

  dynamic "audit_log_config" {
    for_each = each.value
    content {
      log_type         = audit_log_config.value
      exempted_members = [for sa in google_service_account.fn : "serviceAccount:${sa.email}"]
    }
  }
}
