# Firestore: small per-user documents (history settings).

resource "google_firestore_database" "main" {
  project                 = var.project_id
  name                    = var.firestore_database
  location_id             = var.firestore_location
  type                    = "FIRESTORE_NATIVE"
  concurrency_mode        = "OPTIMISTIC"
  delete_protection_state = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy         = var.deletion_protection ? "ABANDON" : "DELETE"
  # Reads at any minute of the last 7 days (a bad release's writes can be
  # read back and repaired).
  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"

  depends_on = [google_project_service.api]
}

# Daily backups, kept 7 days (the longest a daily schedule allows).
resource "google_firestore_backup_schedule" "daily" {
  project   = var.project_id
  database  = google_firestore_database.main.name
  retention = "604800s"

  daily_recurrence {}
}
