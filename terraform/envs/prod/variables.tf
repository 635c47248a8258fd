variable "project_id" {
  description = "Project of the prod environment."
  type        = string
}

variable "region" {
  type    = string
  default = "us-central1"
}

# Every function, scheduler job and push subscription also runs here: the
# system outlives the loss of either region (docs/operations.md).
variable "extra_regions" {
  type    = list(string)
  default = ["us-east1"]
}

# The source and exports buckets: multi-region, as the functions are.
variable "bucket_location" {
  type    = string
  default = "US"
}

variable "deletion_protection" {
  type    = bool
  default = true
}

variable "source_archive" {
  description = "Path of the source zip built by Cloud Build."
  type        = string
}

variable "source_version" {
  description = "Commit the source zip was built from."
  type        = string
}

variable "api_domain" {
  description = "Host name of the public API in prod."
  type        = string
}

# At the design load a full request log is millions of entries a minute;
# a tenth keeps every kind of request visible.
variable "api_log_sample_rate" {
  type    = number
  default = 0.1
}

variable "auth_audience" {
  description = "Firebase project id of the ID tokens; empty means project_id."
  type        = string
  default     = ""
}

variable "cors_allowed_origins" {
  type    = list(string)
  default = []
}

# Rotation of the page-token secret (docs/operations.md).
variable "page_token_secret_version" {
  type    = number
  default = 1
}

variable "page_token_secret_accepted" {
  type    = number
  default = null
}

# Manipulation detection at the design rate of reaction changes (100,000 a
# second): 72 buckets keep the largest merge share within its budget of
# candidates (about 1.4 GiB of the function's 2 GiB), and 31 per-minute jobs,
# each run taking up work for 8m30s, keep about 263 invocations working the
# 2,628 shares of each 5-minute step, twice the work measured (make
# capacity, docs/design/manipulation.md).
variable "detection" {
  type = object({
    partitions           = number
    merge_buckets        = number
    max_share_candidates = number
    jobs                 = number
  })
  default = {
    partitions           = 144
    merge_buckets        = 72
    max_share_candidates = 4000000
    jobs                 = 31
  }
}

variable "rate_limits" {
  type    = string
  default = "on"
}

# No default: prod does not plan without someone to notify.
variable "alert_emails" {
  description = "E-mail addresses notified by the alert policies (at least one)."
  type        = list(string)

  validation {
    condition     = length(var.alert_emails) > 0
    error_message = "prod needs at least one alert e-mail."
  }
}

# Sized by the capacity model (make capacity, docs/capacity.md), which
# make test runs: each scheduled run takes an instance of its own (rollup
# partitions, reconciliation slices and the hourly and daily runs overlap,
# and Scheduler does not retry a 429).
variable "function_defaults" {
  type = map(object({
    memory          = string
    cpu             = string
    timeout_seconds = number
    concurrency     = number
    min_instances   = number
    max_instances   = number
  }))
  default = {
    http      = { memory = "512Mi", cpu = "1", timeout_seconds = 30, concurrency = 80, min_instances = 2, max_instances = 1300 }
    scheduled = { memory = "512Mi", cpu = "1", timeout_seconds = 120, concurrency = 1, min_instances = 0, max_instances = 10 }
    event     = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 16, min_instances = 0, max_instances = 200 }
  }
}

variable "function_overrides" {
  type = map(object({
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    concurrency     = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
  }))
  default = {
    # Its per-minute slices, hourly and daily runs hold a request up to 9
    # minutes each, so about ten overlap (docs/capacity.md).
    Reconcile = { timeout_seconds = 1800, memory = "1Gi", max_instances = 24 }
    # An export streams for up to its own 10-minute deadline.
    Account = { timeout_seconds = 660 }
    # An export is prepared within its 10-minute deadline, under its
    # subscription's 600 s ack deadline (topology.json).
    PrepareExport = { timeout_seconds = 600 }
    # Its detection.jobs per-minute jobs hold a request up to 9 minutes each,
    # so ten times as many overlap; one request an instance, since a merge
    # share holds up to 1.4 GiB of candidates (docs/design/manipulation.md).
    DetectManipulation = { timeout_seconds = 600, memory = "2Gi", concurrency = 1, max_instances = 620 }
    # Its per-minute runs hold a request up to 9m20s each, so about ten
    # overlap, each working its partitions (docs/design/history.md).
    ExpireHistory = { timeout_seconds = 600, max_instances = 24 }
    # A history message costs the most CPU of the consumers (a write per watch).
    ApplyHistory = { max_instances = 400 }
  }
}

# A code rollback sets this to the newest applied DDL (docs/operations.md).
variable "spanner_ddl" {
  description = "Spanner DDL to apply; null takes shared/topology/ddl of this checkout."
  type        = list(string)
  default     = null
}

variable "spanner_config" {
  type    = string
  default = "nam6"
}

variable "spanner_edition" {
  type    = string
  default = "ENTERPRISE_PLUS"
}

variable "spanner_processing_units" {
  type    = number
  default = 1000
}

# nam6 is multi-region: Google recommends at most 45% high-priority CPU.
# The maximum is twice what the design load needs at that target (make
# capacity), so that a misjudged figure or a burst still fits.
variable "spanner_autoscaling" {
  type = object({
    min_processing_units      = number
    max_processing_units      = number
    high_priority_cpu_percent = number
    storage_percent           = number
  })
  default = {
    min_processing_units      = 1000
    max_processing_units      = 470000
    high_priority_cpu_percent = 45
    storage_percent           = 80
  }
}

variable "spanner_version_retention" {
  type    = string
  default = "7d"
}

variable "bigtable_clusters" {
  type = list(object({
    id           = string
    zone         = string
    min_nodes    = number
    max_nodes    = number
    storage_type = optional(string, "SSD")
  }))
  # Each cluster takes every write and, after a failover, every read: its
  # maximum is twice the design load's need at the 60% CPU target (make
  # capacity), and Bigtable refuses a maximum above 10 times the minimum
  # (https://cloud.google.com/bigtable/docs/autoscaling; terraform/check's
  # Bigtable scaling rule).
  default = [
    { id = "engagement-c1", zone = "us-central1-b", min_nodes = 34, max_nodes = 340 },
    { id = "engagement-c2", zone = "us-east1-c", min_nodes = 34, max_nodes = 340 },
  ]
}

# The cluster the transactional app profile routes to: flip it to the other
# cluster's id to fail the transactional paths over (docs/failover.md).
variable "bigtable_transactional_cluster" {
  type    = string
  default = "engagement-c1"
}

variable "history_max_age_days" {
  type    = number
  default = null
}

variable "firestore_location" {
  type    = string
  default = "nam5"
}

# The erasure log's bucket: multi-region, as Firestore is.
variable "erasure_log_location" {
  type    = string
  default = "US"
}

# Who replays the erasure log after a restore (docs/operations.md).
variable "erasure_log_operators" {
  type    = list(string)
  default = []
}

# Identity Platform and the accounts the functions accept (docs/identity.md).
variable "allow_anonymous_sign_in" {
  type    = bool
  default = false
}

variable "auth_sign_in_providers" {
  type    = list(string)
  default = ["password", "google.com"]
}

variable "auth_tenant" {
  type    = string
  default = ""
}

variable "auth_authorized_domains" {
  type    = list(string)
  default = []
}

variable "sign_up_quota" {
  type = object({
    per_ip_per_hour = number
    start_time      = string
    duration        = string
  })
  default = null
}

# Cloud Armor's SQLi/XSS rules log only while true (docs/identity.md).
variable "waf_preview" {
  type    = bool
  default = true
}

# A monthly budget alerts on the project's spend when the billing account is
# given (docs/deploy.md).
variable "billing_account" {
  type    = string
  default = ""
}

# Above the idle cost of the minimum sizes (the Bigtable and Spanner
# minimums and the functions' minimum instances in both regions, about
# $25,000 a month at list prices: terraform/check's budget rule), or the
# budget would alert every month on a project doing nothing.
variable "monthly_budget" {
  type    = number
  default = 50000
}

# What prod asks of Google Cloud's quotas: at least what make capacity says
# the plan needs (internal/capacity fails make test otherwise). contact_email
# empty takes the first alert e-mail. Confirm the Spanner and Bigtable quota
# ids before the first apply (docs/deploy.md, quotas).
variable "quota_requests" {
  type = object({
    contact_email           = string
    run_vcpu_per_region     = number
    spanner_nodes           = number
    bigtable_nodes_per_zone = number
    spanner_quota_id        = string
    bigtable_quota_id       = string
  })
  default = {
    contact_email           = ""
    run_vcpu_per_region     = 1700
    spanner_nodes           = 470
    bigtable_nodes_per_zone = 340
    spanner_quota_id        = "SpannerNodesPerInstanceConfig"
    bigtable_quota_id       = "SsdNodesPerZone"
  }
}
