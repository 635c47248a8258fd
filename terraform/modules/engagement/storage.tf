# Cloud Storage: the bucket of the account exports prepared asynchronously
# (docs/design/account.md#the-export) and the grants of the one function that
# writes, reads and signs them.

resource "google_storage_bucket" "exports" {
  project                     = var.project_id
  name                        = "${var.project_id}-engagement-exports"
  location                    = local.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels

  # An export is downloadable for a day; its object goes after that.
  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "Delete"
    }
  }

  # A deleted export (an account erasure, the lifecycle) is gone, not kept
  # as a soft-deleted object for the default seven days.
  soft_delete_policy {
    retention_duration_seconds = 0
  }

  depends_on = [google_project_service.api]
}

# Account (the markers, the hand-over, the erasure's deletions) and
# PrepareExport (the documents) write, read, list and delete the exports'
# objects, on this bucket only.
resource "google_storage_bucket_iam_member" "fn_objects" {
  for_each = toset(["Account", "PrepareExport"])

  bucket = google_storage_bucket.exports.name
  role   = "roles/storage.objectAdmin"
  member = google_service_account.fn[each.key].member
}

# Account signs the exports' URLs with its own identity through the IAM
# Credentials API's signBlob; it holds no key.
resource "google_service_account_iam_member" "fn_sign_blob" {
  for_each = toset(["Account"])

  service_account_id = google_service_account.fn[each.key].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = google_service_account.fn[each.key].member
}
