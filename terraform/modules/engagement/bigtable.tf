# Bigtable: watch history and the per-user rate-limit windows. Tables, column
# families and their GC max age come from topology.json; a family either names
# the variable that holds its maximum age in days or fixes it (maxAge). In
# prod the instance has two clusters, and three app profiles route to them:
# - "history" (BIGTABLE_APP_PROFILE of History and ApplyHistory): multi-cluster
#   routing with row affinity. A row key always goes to the same cluster while
#   it is up, so a user reads the history rows written through this profile
#   (read-your-writes); when that cluster is down, reads and writes fail over
#   to the other one (eventually consistent until it is back).
# - "transactional" (BIGTABLE_TRANSACTIONAL_APP_PROFILE of every function):
#   single-cluster routing with transactional writes allowed, for the rate
#   limiter's increments (ReadModifyWrite, a single-row transaction), which a
#   multi-cluster profile refuses, and the views' claims and staging, which
#   need one cluster's consistency. It does not fail over by itself: while
#   its cluster is lost the rate limits fall back to per-instance limits
#   (shared/ratelimit) and the views wait in Pub/Sub; the failover is one
#   gcloud command that Terraform then leaves alone (docs/failover.md).
# - "failover" (BIGTABLE_APP_PROFILE of the others): multi-cluster, any.

locals {
  # Values of the GC variables named by topology.json (maxAgeDaysVar); a
  # family with a fixed maxAge names none.
  bigtable_gc_days = {
    history_max_age_days = coalesce(var.history_max_age_days, local.topology.bigtable.defaults.history_max_age_days)
  }

  bigtable_tables = { for t in local.topology.bigtable.tables : t.name => [for f in t.families : f.name] }

  bigtable_families = merge([
    for t in local.topology.bigtable.tables : {
      for f in t.families : "${t.name}/${f.name}" => {
        table   = t.name
        family  = f.name
        max_age = try(f.maxAge, "${local.bigtable_gc_days[f.maxAgeDaysVar] * 24}h")
      }
    }
  ]...)

  # Functions that write or read a user's own history use the row-affinity
  # profile; everything else the plain multi-cluster one. The account's
  # export (Account, PrepareExport) and erasure read what History and
  # ApplyHistory wrote: an erasure
  # that scanned another cluster could miss a row not yet replicated and
  # move past it.
  history_functions = ["History", "ApplyHistory", "Account", "PrepareExport", "EraseAccount"]
}

resource "google_bigtable_instance" "main" {
  project             = var.project_id
  name                = local.topology.bigtable.instance
  display_name        = "engagement ${var.environment}"
  deletion_protection = var.deletion_protection
  labels              = local.labels

  dynamic "cluster" {
    for_each = var.bigtable_clusters
    content {
      cluster_id   = cluster.value.id
      zone         = cluster.value.zone
      storage_type = cluster.value.storage_type

      autoscaling_config {
        min_nodes  = cluster.value.min_nodes
        max_nodes  = cluster.value.max_nodes
        cpu_target = var.bigtable_cpu_target
      }
    }
  }

  depends_on = [google_project_service.api]
}

resource "google_bigtable_table" "table" {
  for_each = local.bigtable_tables

  project             = var.project_id
  instance_name       = google_bigtable_instance.main.name
  name                = each.key
  deletion_protection = var.deletion_protection ? "PROTECTED" : "UNPROTECTED"

  # Bigtable's automated backups: one a day, kept bigtable_backup_retention.
  automated_backup_policy {
    frequency        = "86400s"
    retention_period = var.bigtable_backup_retention
  }

  dynamic "column_family" {
    for_each = toset(each.value)
    content {
      family = column_family.value
    }
  }
}

resource "google_bigtable_gc_policy" "family" {
  for_each = local.bigtable_families

  project         = var.project_id
  instance_name   = google_bigtable_instance.main.name
  table           = google_bigtable_table.table[each.value.table].name
  column_family   = each.value.family
  deletion_policy = "ABANDON"

  max_age {
    duration = each.value.max_age
  }
}

resource "google_bigtable_app_profile" "history" {
  project                       = var.project_id
  instance                      = google_bigtable_instance.main.name
  app_profile_id                = "history"
  description                   = "Multi-cluster routing with row affinity: a user reads their own history writes, with failover."
  multi_cluster_routing_use_any = true
  row_affinity                  = true
  ignore_warnings               = true
}

resource "google_bigtable_app_profile" "transactional" {
  project         = var.project_id
  instance        = google_bigtable_instance.main.name
  app_profile_id  = "transactional"
  description     = "Single-cluster routing with transactional writes: the rate limiter's increments."
  ignore_warnings = true

  single_cluster_routing {
    cluster_id                 = coalesce(var.bigtable_transactional_cluster, var.bigtable_clusters[0].id)
    allow_transactional_writes = true
  }

  # The failover moves this profile to the other cluster with one gcloud
  # command, no build (docs/failover.md); the next apply must not move it
  # back. bigtable_transactional_cluster sets the cluster the profile is
  # created with, nothing after.
  lifecycle {
    ignore_changes = [single_cluster_routing]
  }
}

resource "google_bigtable_app_profile" "failover" {
  project                       = var.project_id
  instance                      = google_bigtable_instance.main.name
  app_profile_id                = "failover"
  description                   = "Multi-cluster routing: reads fail over to any cluster."
  multi_cluster_routing_use_any = true
  ignore_warnings               = true
}

# A function's role holds on the instance itself (the client's channel
# priming pings it) and its app profiles, and on the tables its code
# touches only (local.function_access tables), through an IAM condition.
resource "google_bigtable_instance_iam_member" "fn" {
  for_each = { for k, a in local.function_access : k => a if a.bigtable != "" }

  project  = var.project_id
  instance = google_bigtable_instance.main.name
  role     = each.value.bigtable == "reader" ? "roles/bigtable.reader" : "roles/bigtable.user"
  member   = google_service_account.fn[each.key].member

  condition {
    title       = "tables-of-${local.functions[each.key].id}"
    description = "The instance and its app profiles; of the tables, only those the function's code touches."
    expression = join(" || ", concat(
      ["resource.type != \"bigtableadmin.googleapis.com/Table\""],
      [for t in each.value.tables : "resource.name == \"projects/${var.project_id}/instances/${google_bigtable_instance.main.name}/tables/${t}\""],
    ))
  }
}
