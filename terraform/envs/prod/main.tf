# The prod environment. State lives in a GCS bucket given at init time:
#   terraform init -backend-config="bucket=<state bucket>"
terraform {
  required_version = ">= 1.11.0"

  backend "gcs" {
    prefix = "engagement/prod"
  }

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "~> 6.50"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "google-beta" {
  project = var.project_id
  region  = var.region
}

module "engagement" {
  source = "../../modules/engagement"

  project_id          = var.project_id
  environment         = "prod"
  region              = var.region
  extra_regions       = var.extra_regions
  bucket_location     = var.bucket_location
  deletion_protection = var.deletion_protection

  source_archive = var.source_archive
  source_version = var.source_version

  function_defaults  = var.function_defaults
  function_overrides = var.function_overrides

  auth_audience        = var.auth_audience
  cors_allowed_origins = var.cors_allowed_origins

  erasure_log_operators = var.erasure_log_operators

  allow_anonymous_sign_in = var.allow_anonymous_sign_in
  auth_sign_in_providers  = var.auth_sign_in_providers
  auth_tenant             = var.auth_tenant
  auth_authorized_domains = var.auth_authorized_domains
  sign_up_quota           = var.sign_up_quota
  waf_preview             = var.waf_preview
  billing_account         = var.billing_account
  monthly_budget          = var.monthly_budget
  rate_limits             = var.rate_limits
  detection               = var.detection

  page_token_secret_version  = var.page_token_secret_version
  page_token_secret_accepted = var.page_token_secret_accepted

  spanner_ddl               = var.spanner_ddl
  spanner_config            = var.spanner_config
  spanner_edition           = var.spanner_edition
  spanner_processing_units  = var.spanner_processing_units
  spanner_autoscaling       = var.spanner_autoscaling
  spanner_version_retention = var.spanner_version_retention

  bigtable_clusters              = var.bigtable_clusters
  bigtable_transactional_cluster = var.bigtable_transactional_cluster
  history_max_age_days           = var.history_max_age_days

  firestore_location   = var.firestore_location
  erasure_log_location = var.erasure_log_location

  api_domain          = var.api_domain
  api_log_sample_rate = var.api_log_sample_rate
  alert_emails        = var.alert_emails
  quota_requests      = var.quota_requests
}
