# The quotas the capacity model needs (make capacity, docs/capacity.md),
# asked of Google Cloud as Cloud Quotas preferences
# (https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.quotaPreferences):
# Cloud Run CPU in each region the functions run in (either region carries
# the whole load alone), Spanner nodes of the instance's configuration (the
# autoscaler's maximum) and Bigtable SSD nodes in each cluster's zone (its
# autoscaler's maximum). The autoscalers stop at the quota, not at their
# maximum, so a quota below the plan caps the system below its design load;
# internal/capacity fails make test when quota_requests asks for less than
# the plan needs.
#
# A preference is a request: Google grants it at once, partly, or after a
# review (large Spanner and Bigtable increases), and the apply does not wait
# for the grant. docs/deploy.md says how to see what was granted before
# sending the design load.
locals {
  quota_preferences = var.quota_requests == null ? {} : merge(
    { for r in local.regions : "run-cpu-${r}" => {
      service    = "run.googleapis.com"
      quota_id   = "CpuAllocPerProjectRegion"
      dimensions = { region = r }
      # Cloud Run's CPU quota is in milli-vCPU.
      value = var.quota_requests.run_vcpu_per_region * 1000
    } },
    { "spanner-nodes" = {
      service    = "spanner.googleapis.com"
      quota_id   = var.quota_requests.spanner_quota_id
      dimensions = { instance_config = var.spanner_config }
      value      = var.quota_requests.spanner_nodes
    } },
    { for c in var.bigtable_clusters : "bigtable-nodes-${c.zone}" => {
      service    = "bigtableadmin.googleapis.com"
      quota_id   = var.quota_requests.bigtable_quota_id
      dimensions = { zone = c.zone }
      value      = var.quota_requests.bigtable_nodes_per_zone
    } },
  )
}

resource "google_cloud_quotas_quota_preference" "quota" {
  for_each = local.quota_preferences

  parent        = "projects/${var.project_id}"
  name          = "engagement-${each.key}"
  service       = each.value.service
  quota_id      = each.value.quota_id
  dimensions    = each.value.dimensions
  contact_email = coalesce(var.quota_requests.contact_email, try(var.alert_emails[0], ""))
  justification = "engagement ${var.environment}: the capacity model's need at the design load with 2x headroom (docs/capacity.md)."

  quota_config {
    preferred_value = tostring(each.value.value)
  }

  depends_on = [google_project_service.api]
}
