variable "project_id" {
  description = "Google Cloud project that holds the environment."
  type        = string
}

variable "environment" {
  description = "Environment name (dev, prod); used in labels and display names."
  type        = string
}

variable "region" {
  description = "First region of the functions, the scheduler jobs, the push subscriptions and the load balancer's serverless backends."
  type        = string
}

variable "extra_regions" {
  description = "Regions beside region that run every function, scheduler job and push subscription too (prod: one, so that nothing stops with a region); dev runs in region only."
  type        = list(string)
  default     = []

  validation {
    condition     = length(distinct(var.extra_regions)) == length(var.extra_regions)
    error_message = "extra_regions lists each region once."
  }
}

variable "bucket_location" {
  description = "Location of the source and exports buckets: a multi-region (US) where the functions run in several regions, so that no bucket is lost with one region; empty means region."
  type        = string
  default     = ""
}

variable "labels" {
  description = "Extra labels on every labelled resource."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the Spanner database, Bigtable instance/tables and Firestore database from deletion."
  type        = bool
  default     = true
}

# --- source and functions ---------------------------------------------------

variable "source_archive" {
  description = "Local path of the zip of the module root that Cloud Build made (the functions' source)."
  type        = string
}

variable "source_version" {
  description = "Version of the source archive (the commit); names the uploaded object, so a new version redeploys every function."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+$", var.source_version))
    error_message = "source_version must be a non-empty commit or tag name."
  }
}

variable "go_runtime" {
  description = "Cloud Functions Go runtime; must support the go directive of go.mod."
  type        = string
  default     = "go126"
}

variable "function_defaults" {
  description = "Resources per function kind (http, scheduled, event); a concurrency above 1 needs cpu of 1 or more; make capacity checks them against the design load."
  type = map(object({
    memory          = string
    cpu             = string
    timeout_seconds = number
    concurrency     = number
    min_instances   = number
    max_instances   = number
  }))

  validation {
    condition     = alltrue([for k in ["http", "scheduled", "event"] : contains(keys(var.function_defaults), k)])
    error_message = "function_defaults needs the kinds http, scheduled and event."
  }
}

variable "function_overrides" {
  description = "Per-function changes to function_defaults, by entry point name (e.g. Reconcile)."
  type = map(object({
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    concurrency     = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
  }))
  default = {}
}

# --- application settings (shared/config) -----------------------------------

variable "auth_audience" {
  description = "Firebase / Identity Platform project id the ID tokens are issued for (AUTH_AUDIENCE); empty means project_id."
  type        = string
  default     = ""
}

variable "cors_allowed_origins" {
  description = "Browser origins answered by CORS (CORS_ALLOWED_ORIGINS); none by default."
  type        = list(string)
  default     = []
}

variable "counts_max_age" {
  description = "Cache-Control max-age of anonymous count answers (COUNTS_MAX_AGE, Go duration)."
  type        = string
  default     = "2s"
}

variable "counts_cache_ttl" {
  description = "How long an instance holds public counts (COUNTS_CACHE_TTL, Go duration; part of counts_max_age; 0s turns the cache off)."
  type        = string
  default     = "1s"
}

variable "counts_cache_entries" {
  description = "Most ids an instance's public count cache holds (COUNTS_CACHE_ENTRIES)."
  type        = number
  default     = 100000
}

variable "counts_own_in_flight" {
  description = "Reads of signed-in callers' own rows an instance runs at once; the requests arriving meanwhile are read together in the next (COUNTS_OWN_IN_FLIGHT; 0: each request reads alone)."
  type        = number
  default     = 2
}

variable "request_timeout" {
  description = "Per-request deadline inside the functions (REQUEST_TIMEOUT, Go duration)."
  type        = string
  default     = "10s"
}

variable "rate_limits" {
  description = "Per-user rate limits: on or off (RATE_LIMITS)."
  type        = string
  default     = "on"

  validation {
    condition     = contains(["on", "off"], var.rate_limits)
    error_message = "rate_limits is on or off."
  }
}

variable "rate_limit_per_minute" {
  description = "Per-user writes per minute (RATE_LIMIT_REACTIONS, RATE_LIMIT_COMMENTS, RATE_LIMIT_HISTORY; other: RATE_LIMIT_OTHER_WRITES, each of history deletions, history settings and comment deletions)."
  type = object({
    reactions = number
    comments  = number
    history   = number
    other     = number
  })
  default = {
    reactions = 60
    comments  = 10
    history   = 120
    other     = 30
  }
}

variable "rollup_interval" {
  description = "Rollup tick inside each scheduled run (ROLLUP_INTERVAL, Go duration)."
  type        = string
  default     = "5s"
}

variable "counter_shard_writes_per_second" {
  description = "Commit rate one counter shard row is meant to take; the rollup adds shards above it (COUNTER_SHARD_WRITES_PER_SECOND)."
  type        = number
  default     = 10
}

variable "counts_max_staleness" {
  description = "Bound on the staleness of anonymous count reads (COUNTS_MAX_STALENESS, Go duration)."
  type        = string
  default     = "500ms"
}

variable "counter_relay_after" {
  description = "Age at which the rollup republishes an outbox event whose message was lost (COUNTER_RELAY_AFTER, Go duration)."
  type        = string
  default     = "2m"
}

variable "history_batch_linger" {
  description = "How long History lets a batch of watches wait for company before publishing it as one message (HISTORY_BATCH_LINGER, Go duration)."
  type        = string
  default     = "50ms"
}

variable "history_max_age_days" {
  description = "Watch history retention: Bigtable GC max age of the history families (HISTORY_MAX_AGE_DAYS). Null takes topology.json's default."
  type        = number
  default     = null
}

variable "detection" {
  description = "Manipulation detection: partitions a step is cut into (DETECTION_PARTITIONS), buckets its merge is cut by (DETECTION_MERGE_BUCKETS, at most partitions), candidates one merge share may hold (DETECTION_MAX_SHARE_CANDIDATES), and the Cloud Scheduler jobs detect-manipulation-<k> that call DetectManipulation every minute (jobs). make capacity checks them against the design rate."
  type = object({
    partitions           = number
    merge_buckets        = number
    max_share_candidates = number
    jobs                 = number
  })
  # A thousandth of the design rate, as in dev: one per-minute job's
  # overlapping runs keep up (make capacity).
  default = {
    partitions           = 16
    merge_buckets        = 4
    max_share_candidates = 4000000
    jobs                 = 1
  }

  validation {
    condition     = var.detection.jobs >= 1 && var.detection.merge_buckets >= 1 && var.detection.merge_buckets <= var.detection.partitions && var.detection.partitions <= 4096
    error_message = "detection needs at least one job, and 1 <= merge_buckets <= partitions <= 4096."
  }
}

variable "page_token_secret_version" {
  description = "Generation of the page-token secret that signs; the functions read exactly this version. A generation not yet written is generated and written (never into state)."
  type        = number
  default     = 1
}

variable "page_token_secret_accepted" {
  description = "During a rotation, the other generation whose tokens still open (PAGE_TOKEN_SECRET_ACCEPTED); null when no rotation is under way. The three steps are in docs/operations.md."
  type        = number
  default     = null

  validation {
    condition     = var.page_token_secret_accepted == null || var.page_token_secret_accepted != var.page_token_secret_version
    error_message = "page_token_secret_accepted must differ from page_token_secret_version (or be null)."
  }
}

# --- Spanner ----------------------------------------------------------------

variable "spanner_config" {
  description = "Spanner instance configuration: regional-<region> in dev, a multi-region configuration (e.g. nam6) in prod."
  type        = string
}

variable "spanner_ddl" {
  description = "Spanner DDL to apply, in order; null takes shared/topology/ddl of this checkout. A code rollback passes the newest applied DDL (go run ./tools/ddllock -tfvars on the newest commit; docs/operations.md): the provider recreates the database when the list loses or changes an applied statement."
  type        = list(string)
  default     = null
}

variable "spanner_edition" {
  description = "Spanner edition; multi-region configurations need ENTERPRISE_PLUS."
  type        = string
  default     = "STANDARD"
}

variable "spanner_processing_units" {
  description = "Spanner compute capacity in processing units (1000 = 1 node)."
  type        = number
}

variable "spanner_autoscaling" {
  description = "Managed autoscaler of the Spanner instance (Enterprise and Enterprise Plus editions); null keeps spanner_processing_units fixed."
  type = object({
    min_processing_units      = number
    max_processing_units      = number
    high_priority_cpu_percent = number # Google's recommended maximum: 65 regional, 45 multi-region
    storage_percent           = number
  })
  default = null
}

variable "spanner_backup_retention" {
  description = "How long the daily Spanner backups are kept (seconds, e.g. 1209600s = 14 days)."
  type        = string
  default     = "1209600s"
}

variable "spanner_version_retention" {
  description = "Point-in-time recovery window of the database (version_retention_period)."
  type        = string
  default     = "1h"
}

# --- Bigtable ---------------------------------------------------------------

variable "bigtable_clusters" {
  description = "Bigtable clusters; the single-cluster (transactional) app profile routes to bigtable_transactional_cluster, the first one by default. Two or more in prod."
  type = list(object({
    id           = string
    zone         = string
    min_nodes    = number
    max_nodes    = number
    storage_type = optional(string, "SSD")
  }))

  validation {
    condition     = length(var.bigtable_clusters) >= 1
    error_message = "At least one Bigtable cluster is needed."
  }
}

variable "bigtable_transactional_cluster" {
  description = "Id of the cluster (one of bigtable_clusters) that the single-cluster transactional app profile routes to; null: the first. Changing it is the failover of the transactional paths (docs/failover.md)."
  type        = string
  default     = null

  validation {
    condition     = var.bigtable_transactional_cluster == null || contains([for c in var.bigtable_clusters : c.id], coalesce(var.bigtable_transactional_cluster, "-"))
    error_message = "bigtable_transactional_cluster must be the id of one of bigtable_clusters."
  }
}

variable "bigtable_backup_retention" {
  description = "How long Bigtable's daily automated table backups are kept (seconds; at most 90 days)."
  type        = string
  default     = "604800s"
}

variable "bigtable_cpu_target" {
  description = "Bigtable autoscaling CPU target (percent)."
  type        = number
  default     = 60
}

# --- Firestore --------------------------------------------------------------

variable "firestore_database" {
  description = "Firestore database id (FIRESTORE_DATABASE)."
  type        = string
  default     = "(default)"
}

variable "firestore_location" {
  description = "Firestore location (a region or a multi-region such as nam5)."
  type        = string
}

# --- API front door ---------------------------------------------------------

variable "api_domain" {
  description = "Host name of the public API; its DNS A record must point at the api_ip output for the managed certificate to be issued."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$", var.api_domain))
    error_message = "api_domain must be a DNS host name such as api.example.com."
  }
}

variable "api_rate_limit_per_ip" {
  description = "Cloud Armor per-client-IP limit on the public backends: requests per interval_sec; above it, 429."
  type = object({
    count        = number
    interval_sec = number
  })
  default = {
    count        = 1200
    interval_sec = 60
  }

  validation {
    condition     = contains([10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600], var.api_rate_limit_per_ip.interval_sec)
    error_message = "interval_sec must be one Cloud Armor accepts (10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700 or 3600)."
  }
}

variable "api_log_sample_rate" {
  description = "Share of requests logged on the uncached public backends (every 5xx is still counted by the built-in metrics)."
  type        = number
  default     = 1

  validation {
    condition     = var.api_log_sample_rate >= 0 && var.api_log_sample_rate <= 1
    error_message = "api_log_sample_rate is a share between 0 and 1."
  }
}

variable "cdn_log_sample_rate" {
  description = "Share of requests logged on the Cloud CDN backends (cache hits included)."
  type        = number
  default     = 0.1
}

# --- monitoring -------------------------------------------------------------

variable "alert_emails" {
  description = "E-mail addresses notified by the alert policies; at least one in prod, where an alert nobody receives is no alert."
  type        = list(string)
  default     = []

  validation {
    condition     = var.environment != "prod" || length(var.alert_emails) > 0
    error_message = "prod needs at least one alert e-mail (alert_emails): its alert policies would notify nobody."
  }
}

variable "alert_thresholds" {
  description = "Alert thresholds."
  type = object({
    dead_letter_messages      = number # undelivered messages on a dead-letter subscription
    rollup_lag_seconds        = number # age of the oldest delta not yet folded into a snapshot
    reconcile_corrections_run = number # counters repaired by one reconciliation run (the hourly one covers the last hour)
    server_error_ratio        = number # share of 5xx answers per function
    oldest_unacked_seconds    = number # age of the oldest undelivered event
    spanner_cpu_ratio         = number # high-priority CPU utilization of the Spanner instance (0-1)
    spanner_storage_ratio     = number # storage utilization of the Spanner instance (0-1)
  })
  default = {
    dead_letter_messages      = 0
    rollup_lag_seconds        = 30
    reconcile_corrections_run = 100
    server_error_ratio        = 0.01
    oldest_unacked_seconds    = 300
    spanner_cpu_ratio         = 0.65
    spanner_storage_ratio     = 0.8
  }
}

# --- identity (identity.tf, shared/auth) ------------------------------------

variable "auth_sign_in_providers" {
  description = "Sign-in providers whose ID tokens the functions accept (AUTH_SIGN_IN_PROVIDERS, firebase.sign_in_provider ids); password also enables e-mail and password sign-in. Anonymous accounts are allow_anonymous_sign_in's."
  type        = list(string)
  default     = ["password", "google.com"]

  validation {
    condition     = length(var.auth_sign_in_providers) > 0 && !contains(var.auth_sign_in_providers, "anonymous")
    error_message = "auth_sign_in_providers names at least one provider, and not anonymous: set allow_anonymous_sign_in instead."
  }
}

variable "allow_anonymous_sign_in" {
  description = "Let anyone make an anonymous account, which the functions then accept: every per-user limit can be bypassed by making accounts (docs/identity.md)."
  type        = bool
  default     = false
}

variable "auth_tenant" {
  description = "Identity Platform tenant whose tokens are accepted (AUTH_TENANT); empty accepts only tokens of no tenant."
  type        = string
  default     = ""
}

variable "auth_authorized_domains" {
  description = "Domains a browser sign-in may redirect back to (the frontends' domains)."
  type        = list(string)
  default     = []
}

variable "sign_up_quota" {
  description = "Temporary override of the sign-ups Identity Platform allows per IP address an hour (1 to 1000) from start_time (RFC 3339) for duration (seconds, \"86400s\"); null keeps Identity Platform's standing limit."
  type = object({
    per_ip_per_hour = number
    start_time      = string
    duration        = string
  })
  default = null

  validation {
    condition     = var.sign_up_quota == null || try(var.sign_up_quota.per_ip_per_hour >= 1 && var.sign_up_quota.per_ip_per_hour <= 1000, false)
    error_message = "sign_up_quota.per_ip_per_hour is between 1 and 1000."
  }
}

variable "waf_preview" {
  description = "Run Cloud Armor's SQLi/XSS rules in preview (log matches, refuse nothing); false refuses matching requests with 403."
  type        = bool
  default     = true
}

variable "waf_sensitivity" {
  description = "Sensitivity of the preconfigured WAF rules (1: fewest false positives, 4: most matches)."
  type        = number
  default     = 1

  validation {
    condition     = contains([1, 2, 3, 4], var.waf_sensitivity)
    error_message = "waf_sensitivity is 1, 2, 3 or 4."
  }
}

# --- billing (billing.tf) ------------------------------------------------------

variable "billing_account" {
  description = "Billing account id (\"012345-6789AB-CDEF01\") that pays for the project; given, a monthly budget alerts on the spend. Empty: no budget."
  type        = string
  default     = ""
}

variable "monthly_budget" {
  description = "Monthly budget of the project, in whole units of the billing account's currency."
  type        = number
  default     = 1000

  validation {
    condition     = var.monthly_budget > 0
    error_message = "monthly_budget is positive."
  }
}

# --- Erasure log ------------------------------------------------------------

variable "erasure_log_operators" {
  description = "Principals (user:, group:, serviceAccount:) who replay the erasure log after a restore (cmd/replayerasures, docs/operations.md): granted roles/storage.objectViewer and roles/storage.objectCreator on the erasure log's bucket only."
  type        = list(string)
  default     = []
}

variable "erasure_log_location" {
  description = "Location of the erasure log's bucket (erasurelog.tf): a multi-region (e.g. US) in prod, so that DELETE /v1/me writes it while a region is lost; null: region."
  type        = string
  default     = null
}

variable "quota_requests" {
  description = "Quotas asked of Google Cloud through Cloud Quotas preferences (quotas.tf), each at least what the capacity model needs (make capacity checks it): Cloud Run vCPU in each region, Spanner nodes of spanner_config, Bigtable SSD nodes in each cluster's zone. null asks for none (dev stays within the defaults)."
  type = object({
    contact_email           = string
    run_vcpu_per_region     = number
    spanner_nodes           = number
    bigtable_nodes_per_zone = number
    # The Cloud Quotas ids of the Spanner and Bigtable quotas (docs/deploy.md
    # says how to list them); Cloud Run's is CpuAllocPerProjectRegion.
    spanner_quota_id  = string
    bigtable_quota_id = string
  })
  default = null
}
