# One service account per function with only the roles its code needs, one
# push identity per event function, one scheduler identity, one build identity.
# Public functions are invocable by anyone but only through the load balancer
# (ingress ALLOW_INTERNAL_AND_GCLB; the user is authenticated by the function
# from the Firebase ID token). Event and scheduled functions are invocable only
# by their trigger's identity.

locals {
  # What each function's code touches, as its registration declares it
  # (host.Need* in functions/<name>; terraform/check compares the two).
  # spanner: "user" (writes) or "reader" (only reads) to connect as its
  # database role (spanner.tf; the role's table privileges are GRANTs in
  # shared/topology/ddl), "" for none; bigtable: "user", "reader" or ""; firestore:
  # "user", "viewer" or ""; publish: the topics it publishes to; tables: the
  # Bigtable tables its code can touch (the tables its packages' imports
  # name; terraform/check's privilege rule derives them from the code).
  function_access = {
    Account            = { spanner = "user", bigtable = "reader", firestore = "user", publish = [local.erasure_topic, local.export_topic], tables = [local.bt["rate_limits"], local.bt["watch_history"], local.bt["watch_latest"]] }
    PrepareExport      = { spanner = "reader", bigtable = "reader", firestore = "user", publish = [], tables = [local.bt["rate_limits"], local.bt["watch_history"], local.bt["watch_latest"]] }
    EraseAccount       = { spanner = "user", bigtable = "user", firestore = "user", publish = [local.counter_topic, local.erasure_topic], tables = [local.bt["rate_limits"], local.bt["watch_history"], local.bt["watch_latest"]] }
    ResumeErasures     = { spanner = "reader", bigtable = "", firestore = "", publish = [local.erasure_topic], tables = [] }
    History            = { spanner = "", bigtable = "user", firestore = "user", publish = [local.history_topic], tables = [local.bt["rate_limits"], local.bt["watch_history"], local.bt["watch_latest"]] }
    Reactions          = { spanner = "user", bigtable = "user", firestore = "", publish = [local.counter_topic], tables = [local.bt["rate_limits"]] }
    Counts             = { spanner = "reader", bigtable = "", firestore = "", publish = [], tables = [] }
    Comments           = { spanner = "user", bigtable = "user", firestore = "", publish = [local.counter_topic], tables = [local.bt["rate_limits"]] }
    Moderation         = { spanner = "user", bigtable = "", firestore = "", publish = [local.counter_topic], tables = [] }
    Rollup             = { spanner = "user", bigtable = "user", firestore = "", publish = [local.counter_topic], tables = [local.bt["view_batches"]] }
    Reconcile          = { spanner = "user", bigtable = "", firestore = "", publish = [], tables = [] }
    DetectManipulation = { spanner = "user", bigtable = "", firestore = "", publish = [], tables = [] }
    ExpireHistory      = { spanner = "user", bigtable = "user", firestore = "user", publish = [], tables = [local.bt["watch_history"], local.bt["watch_latest"]] }
    ApplyHistory       = { spanner = "", bigtable = "user", firestore = "", publish = [], tables = [local.bt["watch_history"], local.bt["watch_latest"]] }
    ApplyCounters      = { spanner = "user", bigtable = "", firestore = "", publish = [], tables = [] }
    ApplyViews         = { spanner = "user", bigtable = "user", firestore = "", publish = [], tables = [local.bt["rate_limits"], local.bt["view_batches"], local.bt["watch_history"], local.bt["watch_latest"]] }
  }

  # The Spanner database role of each function that uses Spanner
  # (CREATE ROLE in shared/topology/ddl): fn_ and its id in snake case.
  spanner_roles = { for k, a in local.function_access : k => "fn_${replace(local.functions[k].id, "-", "_")}" if a.spanner != "" }

  # Bigtable table names by name: a lookup fails on a table that
  # topology.json does not have.
  bt = { for t in local.topology.bigtable.tables : t.name => t.name }

  publishers = merge([
    for k, a in local.function_access : { for t in a.publish : "${k}/${t}" => { function = k, topic = t } }
  ]...)

  # Every function writes logs, metrics and traces: traces and metrics over
  # OTLP to telemetry.googleapis.com (roles/telemetry.tracesWriter,
  # roles/telemetry.metricsWriter), the Spanner and Bigtable clients' own
  # metrics to the Cloud Monitoring API (roles/monitoring.metricWriter), and
  # spans through the Cloud Trace API (roles/cloudtrace.agent).
  telemetry_roles = [
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/cloudtrace.agent",
    "roles/telemetry.tracesWriter",
    "roles/telemetry.metricsWriter",
  ]
  telemetry = merge([
    for k in keys(local.functions) : { for r in local.telemetry_roles : "${k}/${r}" => { function = k, role = r } }
  ]...)
}

resource "google_service_account" "fn" {
  for_each = local.functions

  project      = var.project_id
  account_id   = "fn-${each.value.id}"
  display_name = "engagement function ${each.key}"

  depends_on = [google_project_service.api]

  lifecycle {
    precondition {
      condition     = contains(keys(local.function_access), each.key)
      error_message = "Function ${each.key} has no entry in local.function_access (iam.tf)."
    }
  }
}

resource "google_project_iam_member" "fn_telemetry" {
  for_each = local.telemetry

  project = var.project_id
  role    = each.value.role
  member  = google_service_account.fn[each.value.function].member
}

# Firestore roles are granted on the project; the condition narrows them to
# the deployment's database.
resource "google_project_iam_member" "fn_firestore" {
  for_each = { for k, a in local.function_access : k => a if a.firestore != "" }

  project = var.project_id
  role    = "roles/datastore.${each.value.firestore}"
  member  = google_service_account.fn[each.key].member

  condition {
    title       = "engagement-database"
    description = "Only the engagement Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.main.name}\""
  }
}

resource "google_pubsub_topic_iam_member" "fn_publisher" {
  for_each = local.publishers

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.fn[each.value.function].member
}

# --- invokers ---------------------------------------------------------------

resource "google_cloud_run_v2_service_iam_member" "public_invoker" {
  for_each = local.public_deployments

  project  = var.project_id
  location = each.value.region
  name     = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = "allUsers"
}

resource "google_service_account" "push" {
  for_each = local.event_functions

  project      = var.project_id
  account_id   = "push-${each.value.id}"
  display_name = "Pub/Sub push identity for ${each.key}"

  depends_on = [google_project_service.api]
}

# In every region the function runs in: each region's subscription pushes
# to its own region's function.
resource "google_cloud_run_v2_service_iam_member" "push_invoker" {
  for_each = local.event_deployments

  project  = var.project_id
  location = each.value.region
  name     = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.push[each.value.name].member
}

# Pub/Sub mints the push OIDC tokens as the push identity.
resource "google_service_account_iam_member" "push_token_creator" {
  for_each = local.event_functions

  service_account_id = google_service_account.push[each.key].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

resource "google_service_account" "scheduler" {
  project      = var.project_id
  account_id   = "scheduler-invoker"
  display_name = "Cloud Scheduler identity calling the scheduled functions"

  depends_on = [google_project_service.api]
}

# In every region the function runs in: each region's jobs call their own
# region's function.
resource "google_cloud_run_v2_service_iam_member" "scheduler_invoker" {
  for_each = local.scheduled_deployments

  project  = var.project_id
  location = each.value.region
  name     = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.scheduler.member
}

# --- build identity -----------------------------------------------------------

resource "google_service_account" "builder" {
  project      = var.project_id
  account_id   = "fn-builder"
  display_name = "Builds the function images from the source archive"

  depends_on = [google_project_service.api]
}

resource "google_project_iam_member" "builder" {
  for_each = toset(["roles/logging.logWriter", "roles/artifactregistry.writer"])

  project = var.project_id
  role    = each.value
  member  = google_service_account.builder.member
}

# Cloud Functions copies the source into its own staging buckets
# (gcf-v2-sources-<project number>-<region>, gcf-v2-uploads-...) and the build
# reads it from there as the build identity; the provider's example for a
# custom build service account grants roles/storage.objectAdmin on the
# project. Those buckets do not exist before the first function, so the grant
# is on the project, limited by a condition to the gcf-v2- buckets.
resource "google_project_iam_member" "builder_staging" {
  project = var.project_id
  role    = "roles/storage.objectAdmin"
  member  = google_service_account.builder.member

  condition {
    title       = "gcf-v2-staging-buckets"
    description = "Only the Cloud Functions staging buckets."
    expression  = "resource.name.startsWith(\"projects/_/buckets/gcf-v2-\")"
  }
}

resource "google_storage_bucket_iam_member" "builder_source" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.builder.member
}

# --- page token secret ----------------------------------------------------------

# The signing secret never enters Terraform state or plans: it is generated
# by an ephemeral resource (a new value on every run, never stored) and
# written through the write-only secret_data_wo (Terraform 1.11+), which the
# provider sends only when the version is created. One Secret Manager version
# per generation in use: the signing one (page_token_secret_version) and,
# during a rotation, the accepted one (page_token_secret_accepted). The
# functions read those versions by number, never "latest", so every instance
# of a revision holds the same secrets (docs/operations.md, rotation).
ephemeral "random_password" "page_token" {
  length  = 64
  special = false
}

locals {
  page_token_generations = {
    PAGE_TOKEN_SECRET          = tostring(var.page_token_secret_version)
    PAGE_TOKEN_SECRET_ACCEPTED = tostring(coalesce(var.page_token_secret_accepted, var.page_token_secret_version))
  }
}

resource "google_secret_manager_secret" "page_token" {
  project   = var.project_id
  secret_id = "engagement-page-token-secret"
  labels    = local.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.api]
}

resource "google_secret_manager_secret_version" "page_token" {
  for_each = toset(values(local.page_token_generations))

  secret                 = google_secret_manager_secret.page_token.id
  secret_data_wo         = ephemeral.random_password.page_token.result
  secret_data_wo_version = tonumber(each.key)
}

# The single version of before is generation 1.
moved {
  from = google_secret_manager_secret_version.page_token
  to   = google_secret_manager_secret_version.page_token["1"]
}

resource "google_secret_manager_secret_iam_member" "page_token" {
  for_each = local.public_functions

  project   = var.project_id
  secret_id = google_secret_manager_secret.page_token.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.fn[each.key].member
}

# The key of the unique viewers' hash (VIEWER_HASH_KEY, history.ViewerHasher)
# is generated as the page-token secret is, never in state or plans. It has
# one version, never rotated: a new key makes every viewer a new one to the
# sketches. Only ApplyViews, which hashes the viewers, reads it.
ephemeral "random_password" "viewer_hash_key" {
  length  = 64
  special = false
}

resource "google_secret_manager_secret" "viewer_hash_key" {
  project   = var.project_id
  secret_id = "engagement-viewer-hash-key"
  labels    = local.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.api]
}

resource "google_secret_manager_secret_version" "viewer_hash_key" {
  secret                 = google_secret_manager_secret.viewer_hash_key.id
  secret_data_wo         = ephemeral.random_password.viewer_hash_key.result
  secret_data_wo_version = 1
}

resource "google_secret_manager_secret_iam_member" "viewer_hash_key" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.viewer_hash_key.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.fn["ApplyViews"].member
}
