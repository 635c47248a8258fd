# Cloud Functions (2nd gen): one per entry point in topology.json, all built
# from the same source archive (the module root; the root package blank-imports
# every function package) with their own entry point and service account.

resource "google_storage_bucket" "source" {
  project                     = var.project_id
  name                        = "${var.project_id}-engagement-source"
  location                    = local.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels

  depends_on = [google_project_service.api]
}

# Named by the archive's SHA-256: the same content keeps its name (no
# redeploy), other content gets another name, whatever the commit says.
resource "google_storage_bucket_object" "source" {
  bucket   = google_storage_bucket.source.name
  name     = "engagement-${filesha256(var.source_archive)}.zip"
  source   = var.source_archive
  metadata = { commit = var.source_version }
}

locals {
  function_settings = {
    for k, f in local.functions : k => merge(
      var.function_defaults[f.kind],
      { for s, v in try(var.function_overrides[k], {}) : s => v if v != null },
    )
  }

  # Memory of each function in MiB, from its setting ("512Mi", "1Gi").
  function_memory_mib = {
    for k, f in local.function_settings : k => (
      endswith(f.memory, "Gi") ? tonumber(trimsuffix(f.memory, "Gi")) * 1024 : tonumber(trimsuffix(f.memory, "Mi"))
    )
  }

  # Environment of every function: the variable names shared/config reads.
  # PORT is set by the platform, FUNCTION_TARGET by the runtime, and the
  # *_EMULATOR_HOST variables only exist in the local stack.
  function_env = {
    GOOGLE_CLOUD_PROJECT            = var.project_id
    SPANNER_INSTANCE                = local.topology.spanner.instance
    SPANNER_DATABASE                = local.topology.spanner.database
    BIGTABLE_INSTANCE               = local.topology.bigtable.instance
    FIRESTORE_DATABASE              = var.firestore_database
    HISTORY_TOPIC                   = local.history_topic
    COUNTER_TOPIC                   = local.counter_topic
    ERASURE_TOPIC                   = local.erasure_topic
    EXPORT_TOPIC                    = local.export_topic
    ERASURE_LOG_BUCKET              = google_storage_bucket.erasure_log.name
    AUTH_AUDIENCE                   = local.auth_audience
    AUTH_ISSUER                     = "https://securetoken.google.com/${local.auth_audience}"
    AUTH_JWKS_URL                   = "https://www.googleapis.com/service_accounts/v1/jwk/securetoken@system.gserviceaccount.com"
    AUTH_TOKEN_CACHE                = "10000"
    AUTH_SIGN_IN_PROVIDERS          = join(",", local.auth_sign_in_providers)
    AUTH_TENANT                     = var.auth_tenant
    CORS_ALLOWED_ORIGINS            = join(",", var.cors_allowed_origins)
    COUNTS_MAX_AGE                  = var.counts_max_age
    COUNTS_CACHE_TTL                = var.counts_cache_ttl
    COUNTS_CACHE_ENTRIES            = tostring(var.counts_cache_entries)
    COUNTS_OWN_IN_FLIGHT            = tostring(var.counts_own_in_flight)
    REQUEST_TIMEOUT                 = var.request_timeout
    RATE_LIMITS                     = var.rate_limits
    RATE_LIMIT_REACTIONS            = tostring(var.rate_limit_per_minute.reactions)
    RATE_LIMIT_COMMENTS             = tostring(var.rate_limit_per_minute.comments)
    RATE_LIMIT_HISTORY              = tostring(var.rate_limit_per_minute.history)
    RATE_LIMIT_MODERATION           = "30"
    EXPORTS_PER_DAY                 = "3"
    EXPORTS_BUCKET                  = google_storage_bucket.exports.name
    EXPORT_ASYNC_ABOVE              = "1000"
    UNFLAG_PROTECTION               = "720h"
    DETECTION_PARTITIONS            = tostring(var.detection.partitions)
    DETECTION_MERGE_BUCKETS         = tostring(var.detection.merge_buckets)
    DETECTION_MAX_SHARE_CANDIDATES  = tostring(var.detection.max_share_candidates)
    ACCOUNT_RECORDS_URL             = "https://identitytoolkit.googleapis.com"
    ACCOUNT_RECORDS_CACHE           = "100000"
    COMMENT_DUPLICATE_WINDOW        = "10m"
    COMMENT_YOUNG_ACCOUNT_AGE       = "24h"
    RATE_LIMIT_COMMENTS_YOUNG       = "3"
    RATE_LIMIT_REACTIONS_YOUNG      = "10"
    RATE_LIMIT_OTHER_WRITES         = tostring(var.rate_limit_per_minute.other)
    RATE_LIMIT_STORE_BUDGET         = "250ms"
    ROLLUP_INTERVAL                 = var.rollup_interval
    COUNTER_SHARD_WRITES_PER_SECOND = tostring(var.counter_shard_writes_per_second)
    COUNTS_MAX_STALENESS            = var.counts_max_staleness
    COUNTER_RELAY_AFTER             = var.counter_relay_after
    VIEWS_FOLD_INTERVAL             = "1s"
    COUNTER_STALL_AFTER             = "10m"
    HISTORY_MAX_AGE_DAYS            = tostring(local.bigtable_gc_days.history_max_age_days)
    HISTORY_BATCH_LINGER            = var.history_batch_linger
    VIEW_WINDOW                     = "24h"
    MAX_VIEWS_PER_HOUR              = "600"
    TELEMETRY_EXPORTER              = "gcp"
    TELEMETRY_SAMPLE_RATIO          = "0.1"
    # An account erasure keeps the views' claims as long as Pub/Sub may
    # redeliver a history message: every attempt's ack deadline and backoff.
    ERASURE_SETTLE        = "${local.delivery.maxDeliveryAttempts * (local.delivery.ackDeadlineSeconds + local.delivery.maximumBackoffSeconds)}s"
    ERASURE_BUDGET        = "20s"
    ERASURE_STALLED_AFTER = "2m"
  }
  auth_audience = var.auth_audience != "" ? var.auth_audience : var.project_id
}

# IAM grants take effect some time after the call that makes them returns:
# Google documents that changes to allow policies "typically propagate in 2
# minutes, but could potentially take 7 minutes or longer"
# (https://cloud.google.com/iam/docs/access-change-propagation). A
# function's build runs as the build identity as soon as the function is
# created, and its revision starts with the runtime identity's secret access
# checked, so the functions wait the documented 7 minutes after the grants
# (terraform/check's propagation rule): once, on the apply that creates
# them; a failed build would otherwise stop the apply, and its rerun is a
# new plan, test build and approval.
resource "time_sleep" "function_grants" {
  create_duration = "420s"

  depends_on = [
    google_project_iam_member.builder,
    google_project_iam_member.builder_staging,
    google_storage_bucket_iam_member.builder_source,
    google_project_iam_member.account_records,
    google_project_iam_member.comments_account_records,
    google_project_iam_member.young_account_records,
    google_project_iam_member.erasure_account_delete,
    google_storage_bucket_iam_member.erasure_log_writer,
    google_storage_bucket_iam_member.fn_objects,
    google_service_account_iam_member.fn_sign_blob,
    google_secret_manager_secret_iam_member.viewer_hash_key,
    google_secret_manager_secret_iam_member.page_token,
  ]
}

# Where each function runs: every function (public, event and scheduled) in
# var.region under its entry point's name, and in each of var.extra_regions
# under "<entry point>@<region>", so that losing a region stops nothing: the
# load balancer has a backend of each public function in the other region,
# each region's push subscriptions and scheduler jobs call that region's
# functions (pubsub.tf, scheduler.tf), and the leases and idempotent
# consumers make the work happen once (docs/operations.md, region loss).
locals {
  regions         = concat([var.region], var.extra_regions)
  bucket_location = var.bucket_location != "" ? var.bucket_location : var.region

  # The key of a function's deployment in a region.
  deployment_key = { for pair in setproduct(keys(local.functions), local.regions) :
    "${pair[0]}/${pair[1]}" => pair[1] == var.region ? pair[0] : "${pair[0]}@${pair[1]}"
  }
  function_deployments = { for pair in setproduct(keys(local.functions), local.regions) :
    local.deployment_key["${pair[0]}/${pair[1]}"] => merge(local.functions[pair[0]], { region = pair[1] })
  }
  public_deployments    = { for k, d in local.function_deployments : k => d if d.public && d.kind == "http" }
  event_deployments     = { for k, d in local.function_deployments : k => d if d.kind == "event" }
  scheduled_deployments = { for k, d in local.function_deployments : k => d if d.kind == "scheduled" }
}

resource "google_cloudfunctions2_function" "fn" {
  for_each = local.function_deployments

  project     = var.project_id
  location    = each.value.region
  name        = each.value.id
  description = "engagement ${each.value.kind} function ${each.value.name}"
  labels      = local.labels

  build_config {
    runtime         = var.go_runtime
    entry_point     = each.value.name
    service_account = google_service_account.builder.id

    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    available_memory                 = local.function_settings[each.value.name].memory
    available_cpu                    = local.function_settings[each.value.name].cpu
    timeout_seconds                  = local.function_settings[each.value.name].timeout_seconds
    max_instance_request_concurrency = local.function_settings[each.value.name].concurrency
    min_instance_count               = local.function_settings[each.value.name].min_instances
    max_instance_count               = local.function_settings[each.value.name].max_instances
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.fn[each.value.name].email
    # Public functions are reached only through the load balancer; event and
    # scheduled ones only from Pub/Sub push and Cloud Scheduler in the project.
    ingress_settings = each.value.public ? "ALLOW_INTERNAL_AND_GCLB" : "ALLOW_INTERNAL_ONLY"

    environment_variables = merge(local.function_env, {
      BIGTABLE_APP_PROFILE               = contains(local.history_functions, each.value.name) ? google_bigtable_app_profile.history.app_profile_id : google_bigtable_app_profile.failover.app_profile_id
      BIGTABLE_TRANSACTIONAL_APP_PROFILE = google_bigtable_app_profile.transactional.app_profile_id
      # The function's Spanner database role; "" for one without Spanner.
      SPANNER_DATABASE_ROLE = lookup(local.spanner_roles, each.value.name, "")
      # How many instances may decide a degraded per-user limit alone: each
      # keeps its share of twice the limit (docs/design/ratelimits.md).
      FUNCTION_MAX_INSTANCES = tostring(local.function_settings[each.value.name].max_instances)
      # The Go runtime's collector: a cycle per 5× the live heap instead of
      # 2× (fewer collections per reaction: docs/decisions/0008-reaction-cpu.md),
      # bounded by a soft limit at three quarters of the instance's memory,
      # where it collects as often as it must.
      GOGC       = "400"
      GOMEMLIMIT = "${floor(local.function_memory_mib[each.value.name] * 3 / 4)}MiB"
    })

    # Page tokens are signed with a generated secret, never the local
    # default, read by version number (iam.tf): the signing one and the one
    # accepted during a rotation (the same one outside a rotation).
    dynamic "secret_environment_variables" {
      for_each = each.value.public ? local.page_token_generations : {}
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = google_secret_manager_secret.page_token.secret_id
        version    = google_secret_manager_secret_version.page_token[secret_environment_variables.value].version
      }
    }

    # The unique viewers' hash key, for the one function that hashes them.
    dynamic "secret_environment_variables" {
      for_each = each.value.name == "ApplyViews" ? { VIEWER_HASH_KEY = google_secret_manager_secret_version.viewer_hash_key.version } : {}
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = google_secret_manager_secret.viewer_hash_key.secret_id
        version    = secret_environment_variables.value
      }
    }
  }

  # The schema first: new code may read a column this apply adds.
  depends_on = [
    google_project_service.api,
    google_spanner_database.main,
    google_secret_manager_secret_version.page_token,
    google_secret_manager_secret_version.viewer_hash_key,
    time_sleep.function_grants,
  ]
}
