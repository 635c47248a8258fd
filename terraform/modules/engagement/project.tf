# Every API the resources below call is enabled here, and every resource
# depends on this (directly or through a reference), so a fresh project
# works in one apply: a new project has only a few APIs on (not IAM, not
# Compute). terraform/check verifies the dependency for every resource type.
# Enabling APIs itself needs serviceusage and cloudresourcemanager, which are
# enabled once by hand before the first apply (docs/deploy.md).
locals {
  apis = [
    "artifactregistry.googleapis.com",
    "bigtableadmin.googleapis.com",
    "billingbudgets.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    # Quota preferences (quotas.tf).
    "cloudquotas.googleapis.com",
    "cloudscheduler.googleapis.com",
    "compute.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    # signBlob: the signed URLs of the exports (storage.tf).
    "iamcredentials.googleapis.com",
    "identitytoolkit.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "spanner.googleapis.com",
    "cloudtrace.googleapis.com",
    "storage.googleapis.com",
    # OTLP endpoint of Cloud Trace and Cloud Monitoring (telemetry.googleapis.com).
    "telemetry.googleapis.com",
  ]

  # The Pub/Sub service agent: it mints the push identities' tokens and
  # dead-letters messages. It is created asynchronously after the API is
  # enabled, so a binding made right after the enablement can fail with
  # "service account does not exist"; google_project_service_identity
  # creates it (and waits) first. Its member is taken from that resource,
  # so every binding depends on it.
  pubsub_agent = google_project_service_identity.pubsub.member
}

resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.api]
}

# An API answers some time after its enablement returns: Google's own error
# for a call to a new API says "If you enabled this API recently, wait a few
# minutes for the action to propagate to our systems and retry"
# (the SERVICE_DISABLED error every Google API answers). So the APIs are enabled (enable), then nothing
# happens for five minutes (apis_enabled), then each is asked for again
# (api): a no-op on an enabled API, which returns at once. Every resource
# depends on api, so none calls an API in the minutes after its
# enablement (terraform/check's API rule); the wait happens once, on the
# apply that enables an API.
resource "google_project_service" "enable" {
  for_each = toset(local.apis)

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

resource "time_sleep" "apis_enabled" {
  create_duration = "300s"

  # A newly listed API waits too.
  triggers = {
    apis = join(",", sort(local.apis))
  }

  depends_on = [google_project_service.enable]
}

resource "google_project_service" "api" {
  for_each = toset(local.apis)

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false

  depends_on = [time_sleep.apis_enabled]
}
