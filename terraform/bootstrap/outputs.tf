output "test_service_account" {
  value = google_service_account.pipeline["test"].email
}

output "plan_service_account" {
  value = google_service_account.pipeline["plan"].email
}

output "apply_service_account" {
  value = google_service_account.pipeline["apply"].email
}

output "triggers" {
  description = "Trigger names by role; run the apply one with: gcloud builds triggers run <name> --region=<region> --substitutions=_PLAN_BUILD_ID=<plan build id>."
  value       = merge({ for k, t in google_cloudbuild_trigger.pipeline : k => t.name }, { apply = google_cloudbuild_trigger.apply.name })
}
