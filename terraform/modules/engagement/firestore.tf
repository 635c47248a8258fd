# Firestore: small per-user documents (history settings, read-your-own-writes
# adjustments). Every ttlFields entry of topology.json gets
# a TTL policy, and no single-field index (the expiry timestamp is never
# queried, and an index on a monotonically growing field would hotspot).

resource "google_firestore_database" "main" {
  project                 = var.project_id
  name                    = var.firestore_database
  location_id             = var.firestore_location
  type                    = "FIRESTORE_NATIVE"
  concurrency_mode        = "OPTIMISTIC"
  delete_protection_state = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy         = var.deletion_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.api]
}

resource "google_firestore_field" "ttl" {
  for_each = { for f in local.topology.firestore.ttlFields : "${f.collection}/${f.field}" => f }

  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = each.value.collection
  field      = each.value.field

  ttl_config {}

  index_config {}
}
