# Cloud Scheduler jobs of topology.json, each calling its scheduled function's
# route with an OIDC token of the dedicated scheduler service account.

# A job marked fanOut in topology.json is deployed as scheduler_fan_out[name]
# jobs, <name>-<k>, each with its schedule and body: the invocations overlap
# and share the job's work under its leases, so the copies set how many work
# at once (docs/design/manipulation.md, the arithmetic).
locals {
  scheduler_fan_out = { for j in local.topology.scheduler : j.name => var.detection.jobs if j.function == "DetectManipulation" && try(j.fanOut, false) }
  scheduler_jobs = merge([for j in local.topology.scheduler :
    try(j.fanOut, false) ? { for k in range(local.scheduler_fan_out[j.name]) : "${j.name}-${k}" => j } : { (j.name) = j }
  ]...)

  # Every job in every region, under the same name (a job's name is
  # regional), calling its own region's function: key "<job>" in
  # var.region, "<job>@<region>" elsewhere. Both regions' runs fire; every
  # scheduled function takes a lease per unit of work in Spanner
  # (JobLeases) or Firestore (the expiry's partition cursors) before doing
  # it, so each unit is worked once, by whichever run takes its lease first
  # (docs/operations.md, "A region lost"), and a lost region's share is
  # taken by the other's runs.
  scheduler_deployments = merge([
    for name, j in local.scheduler_jobs : {
      for r in local.regions : (r == var.region ? name : "${name}@${r}") => merge(j, {
        job        = name
        region     = r
        deployment = local.deployment_key["${j.function}/${r}"]
      })
    }
  ]...)
}

resource "google_cloud_scheduler_job" "job" {
  for_each = local.scheduler_deployments

  project          = var.project_id
  region           = each.value.region
  name             = each.value.job
  description      = "Calls ${each.value.function} at ${local.scheduled_functions[each.value.function].routes[0]}"
  schedule         = each.value.schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "${min(1800, local.function_settings[each.value.function].timeout_seconds)}s"

  # A missed run is not retried: the next one comes on schedule.
  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = "${google_cloudfunctions2_function.fn[each.value.deployment].service_config[0].uri}${local.scheduled_functions[each.value.function].routes[0]}"
    body        = base64encode(jsonencode(each.value.body))
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = google_cloudfunctions2_function.fn[each.value.deployment].service_config[0].uri
    }
  }

  depends_on = [google_cloud_run_v2_service_iam_member.scheduler_invoker]
}
