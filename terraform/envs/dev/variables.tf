variable "project_id" {
  description = "Project of the dev environment."
  type        = string
}

variable "region" {
  type    = string
  default = "us-central1"
}

variable "deletion_protection" {
  type    = bool
  default = false
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
  description = "Host name of the public API in dev."
  type        = string
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

variable "rate_limits" {
  type    = string
  default = "on"
}

variable "alert_emails" {
  type    = list(string)
  default = []
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
    http      = { memory = "512Mi", cpu = "1", timeout_seconds = 30, concurrency = 80, min_instances = 0, max_instances = 20 }
    scheduled = { memory = "512Mi", cpu = "1", timeout_seconds = 120, concurrency = 1, min_instances = 0, max_instances = 10 }
    event     = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 16, min_instances = 0, max_instances = 10 }
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
    # Its per-minute partition and merge runs hold a request up to 9 minutes,
    # so about ten overlap; a merge of a busy step holds its candidates
    # in memory (docs/design/manipulation.md).
    DetectManipulation = { timeout_seconds = 600, memory = "2Gi", concurrency = 1, max_instances = 24 }
    # Its per-minute runs hold a request up to 9m20s each, so about ten
    # overlap, each working its partitions (docs/design/history.md).
    ExpireHistory = { timeout_seconds = 600, max_instances = 24 }
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
  default = "regional-us-central1"
}

variable "spanner_edition" {
  type    = string
  default = "STANDARD"
}

variable "spanner_processing_units" {
  type    = number
  default = 200
}

variable "spanner_version_retention" {
  type    = string
  default = "1h"
}

variable "bigtable_clusters" {
  type = list(object({
    id           = string
    zone         = string
    min_nodes    = number
    max_nodes    = number
    storage_type = optional(string, "SSD")
  }))
  default = [
    { id = "engagement-c1", zone = "us-central1-b", min_nodes = 1, max_nodes = 3 },
  ]
}

variable "history_max_age_days" {
  type    = number
  default = null
}

variable "firestore_location" {
  type    = string
  default = "us-central1"
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

variable "monthly_budget" {
  type    = number
  default = 1000
}
