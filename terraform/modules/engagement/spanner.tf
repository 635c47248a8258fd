# Spanner: regional in dev, multi-region in prod (var.spanner_config). The
# database schema is the DDL of shared/topology/ddl, the same statements the
# local stack applies. Statements are only ever appended: the provider applies
# new trailing statements in place and recreates the database for any other
# change (deletion protection refuses that in prod); ddl/ddl.lock and its
# tests keep the files append-only. A code rollback plans the older commit
# with the newest DDL in var.spanner_ddl, which must begin with the older
# commit's own statements (the schema its code reads).
locals {
  spanner_ddl = var.spanner_ddl == null ? local.ddl : var.spanner_ddl
}

resource "google_spanner_instance" "main" {
  project          = var.project_id
  name             = local.topology.spanner.instance
  config           = var.spanner_config
  edition          = var.spanner_edition
  display_name     = "engagement ${var.environment}"
  processing_units = var.spanner_autoscaling == null ? var.spanner_processing_units : null
  labels           = local.labels
  # One backup schedule: google_spanner_backup_schedule.daily below. Without
  # this, Spanner adds an automatic daily one to every new database.
  default_backup_schedule_type = "NONE"

  # The managed autoscaler (Enterprise editions) keeps high-priority CPU and
  # storage per node under their targets between the two limits; without it
  # capacity is fixed and the CPU/storage alerts (monitoring.tf) say when to
  # raise spanner_processing_units.
  dynamic "autoscaling_config" {
    for_each = var.spanner_autoscaling == null ? [] : [var.spanner_autoscaling]
    content {
      autoscaling_limits {
        min_processing_units = autoscaling_config.value.min_processing_units
        max_processing_units = autoscaling_config.value.max_processing_units
      }
      autoscaling_targets {
        high_priority_cpu_utilization_percent = autoscaling_config.value.high_priority_cpu_percent
        storage_utilization_percent           = autoscaling_config.value.storage_percent
      }
    }
  }

  depends_on = [google_project_service.api]
}

resource "google_spanner_database" "main" {
  project                  = var.project_id
  instance                 = google_spanner_instance.main.name
  name                     = local.topology.spanner.database
  database_dialect         = "GOOGLE_STANDARD_SQL"
  ddl                      = local.spanner_ddl
  version_retention_period = var.spanner_version_retention
  deletion_protection      = var.deletion_protection
  enable_drop_protection   = var.deletion_protection

  lifecycle {
    precondition {
      condition     = jsonencode(slice(local.spanner_ddl, 0, min(length(local.ddl), length(local.spanner_ddl)))) == jsonencode(local.ddl)
      error_message = "spanner_ddl must begin with every statement of this checkout's shared/topology/ddl, in order: the code reads that schema."
    }
  }
}

# Daily full backups, kept spanner_backup_retention; point-in-time recovery
# (version_retention_period) covers the last spanner_version_retention.
resource "google_spanner_backup_schedule" "daily" {
  project            = var.project_id
  instance           = google_spanner_instance.main.name
  database           = google_spanner_database.main.name
  name               = "daily"
  retention_duration = var.spanner_backup_retention

  spec {
    cron_spec {
      text = "0 3 * * *"
    }
  }

  full_backup_spec {}
}

# Fine-grained access control: a function's identity holds no database-level
# data role (roles/spanner.databaseUser would include schema changes) but
# roles/spanner.fineGrainedAccessUser, which lets it connect, and
# roles/spanner.databaseRoleUser on its own database role alone, whose
# GRANTs in shared/topology/ddl (100_roles.sql) say which tables it may read
# or write. Only the deploy identity (terraform/bootstrap, a custom role with no
# data permission)
# changes the schema. terraform/check's Spanner role rule holds both halves
# against the code.
resource "google_spanner_database_iam_member" "fn" {
  for_each = local.spanner_roles

  project  = var.project_id
  instance = google_spanner_instance.main.name
  database = google_spanner_database.main.name
  role     = "roles/spanner.fineGrainedAccessUser"
  member   = google_service_account.fn[each.key].member
}

resource "google_spanner_database_iam_member" "fn_role" {
  for_each = local.spanner_roles

  project  = var.project_id
  instance = google_spanner_instance.main.name
  database = google_spanner_database.main.name
  role     = "roles/spanner.databaseRoleUser"
  member   = google_service_account.fn[each.key].member

  condition {
    title       = "own-database-role"
    description = "Only the function's own database role."
    expression  = "resource.type == \"spanner.googleapis.com/DatabaseRole\" && resource.name.endsWith(\"/databaseRoles/${each.value}\")"
  }
}
