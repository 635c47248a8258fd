# Three build identities, one per kind of build, each with only what its build
# does, and one trigger per build that runs as it:
#
#   test  (cloudbuild-test.yaml)  runs make test: repository code, a browser;
#                                 may write its build log and nothing else.
#   plan  (cloudbuild.yaml)       reads the project, takes the state lock and
#                                 writes the plan objects under plans/<env>/.
#   apply (cloudbuild-apply.yaml) deploys; runs only from the apply trigger,
#                                 which waits for an approval.
#
# Nobody is granted roles/iam.serviceAccountUser on these accounts: a build
# submitted by hand (gcloud builds submit) that names one needs actAs on it,
# which only the project's owners hold, so the approved trigger is the one
# way to run as the apply identity. People run the triggers with the custom
# role below (start builds, not change triggers) and approve with
# roles/cloudbuild.builds.approver.

locals {
  state_bucket = var.state_bucket != "" ? var.state_bucket : "${var.project_id}-tfstate"

  # Known at plan time (terraform/check reads the grants and triggers from
  # the plan), so the grants name the accounts and depend on them explicitly.
  emails = { for id in keys(local.identities) : id => "engagement-${id}@${var.project_id}.iam.gserviceaccount.com" }

  identities = {
    test  = "Runs the tests; no deployment rights"
    plan  = "Plans the engagement environment; reads the project"
    apply = "Applies an approved plan of the engagement environment"
  }

  # Every build writes its log to Cloud Logging (options.logging:
  # CLOUD_LOGGING_ONLY, which builds run as a user-managed account need),
  # as its own identity.
  project_roles = {
    test = ["roles/logging.logWriter"]
    # Read every resource and its IAM policy, nothing else.
    plan = ["roles/logging.logWriter", "roles/viewer", "roles/iam.securityReviewer"]
    # What one apply of terraform/envs/<env> creates (docs/deploy.md), and
    # reading the plan and test builds it checks before applying.
    apply = [
      "roles/logging.logWriter",
      "roles/cloudbuild.builds.viewer",
      "roles/serviceusage.serviceUsageAdmin",
      "roles/resourcemanager.projectIamAdmin",
      "roles/iam.serviceAccountAdmin",
      "roles/iam.serviceAccountUser",
      "roles/cloudfunctions.admin",
      "roles/run.admin",
      "roles/pubsub.admin",
      # Not roles/spanner.admin: its data permissions would let a build
      # rewrite the moderation audit trail (the custom role below).
      "projects/${var.project_id}/roles/${local.spanner_deployer_role}",
      "roles/bigtable.admin",
      "roles/datastore.owner",
      "roles/storage.admin",
      "roles/secretmanager.admin",
      "roles/compute.loadBalancerAdmin",
      "roles/compute.securityAdmin",
      "roles/cloudscheduler.admin",
      "roles/monitoring.editor",
      "roles/logging.configWriter",
      "roles/identityplatform.admin",
      # The quota preferences of quotas.tf.
      "roles/cloudquotas.admin",
    ]
  }
  # The Spanner resources the apply creates (instance, database and its
  # DDL, backup schedule, the functions' grants), and no data permission:
  # no read, write or transaction, so no build can rewrite a table (the
  # moderation audit trail, ModerationLog, included).
  spanner_deployer_role = "engagementSpannerDeployer"
  spanner_deployer_permissions = [
    "spanner.instanceConfigs.get",
    "spanner.instanceConfigs.list",
    "spanner.instanceOperations.get",
    "spanner.instanceOperations.list",
    "spanner.instances.create",
    "spanner.instances.delete",
    "spanner.instances.get",
    "spanner.instances.getIamPolicy",
    "spanner.instances.list",
    "spanner.instances.setIamPolicy",
    "spanner.instances.update",
    "spanner.databaseOperations.get",
    "spanner.databaseOperations.list",
    "spanner.databases.create",
    "spanner.databases.drop",
    "spanner.databases.get",
    "spanner.databases.getDdl",
    "spanner.databases.getIamPolicy",
    "spanner.databases.list",
    "spanner.databases.setIamPolicy",
    "spanner.databases.update",
    "spanner.databases.updateDdl",
    "spanner.databaseRoles.list",
    "spanner.backupSchedules.create",
    "spanner.backupSchedules.delete",
    "spanner.backupSchedules.get",
    "spanner.backupSchedules.list",
    "spanner.backupSchedules.update",
  ]

  project_grants = merge([
    for id, roles in local.project_roles : { for r in roles : "${id}/${r}" => { id = id, role = r } }
  ]...)

  # The repository connection of each region holding the triggers: every
  # trigger exists in each (the same name; a trigger is regional and runs
  # its builds in its region), so that losing a region leaves the pipeline
  # whole in the other. Keys: the trigger's id in var.region,
  # "<id>@<region>" elsewhere, so that the first region's keep their
  # addresses.
  trigger_regions = merge({ (var.region) = var.repository }, var.extra_regions)
  regional_triggers = merge([for r, repo in local.trigger_regions : {
    for id, t in local.triggers : (r == var.region ? id : "${id}@${r}") => merge(t, { id = id, region = r, repository = repo })
  }]...)

  triggers = {
    test = {
      filename    = "cloudbuild-test.yaml"
      description = "make test on every push; no deployment rights"
      branch      = ".*"
    }
    plan = {
      filename    = "cloudbuild.yaml"
      description = "Plan ${var.environment} on every push to ${var.branch}"
      branch      = "^${var.branch}$"
    }
  }
}

resource "google_project_service" "pipeline" {
  for_each = toset(["cloudbuild.googleapis.com", "iam.googleapis.com", "storage.googleapis.com"])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

resource "google_service_account" "pipeline" {
  for_each = local.identities

  project      = var.project_id
  account_id   = "engagement-${each.key}"
  display_name = each.value

  depends_on = [google_project_service.pipeline]
}

resource "google_project_iam_member" "pipeline" {
  for_each = local.project_grants

  project = var.project_id
  role    = each.value.role
  member  = "serviceAccount:${local.emails[each.value.id]}"

  depends_on = [google_service_account.pipeline, google_project_iam_custom_role.spanner_deployer]
}

resource "google_project_iam_custom_role" "spanner_deployer" {
  project     = var.project_id
  role_id     = local.spanner_deployer_role
  title       = "Engagement Spanner deployer"
  description = "Creates and changes the engagement Spanner resources; reads and writes no data."
  permissions = local.spanner_deployer_permissions
}

# --- the state bucket ---------------------------------------------------------

# Plan and apply read the state and the stored plans.
resource "google_storage_bucket_iam_member" "state_read" {
  for_each = toset(["plan", "apply"])

  bucket = local.state_bucket
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${local.emails[each.key]}"

  depends_on = [google_service_account.pipeline]
}

# The plan identity writes two things: the state lock of its environment
# (terraform plan holds it while it reads) and the objects of its plans.
resource "google_storage_bucket_iam_member" "plan_write" {
  bucket = local.state_bucket
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${local.emails.plan}"

  condition {
    title       = "plan-lock-and-plans"
    description = "The ${var.environment} state lock and plans/${var.environment}/ only."
    expression  = "resource.name == \"projects/_/buckets/${local.state_bucket}/objects/engagement/${var.environment}/default.tflock\" || resource.name.startsWith(\"projects/_/buckets/${local.state_bucket}/objects/plans/${var.environment}/\")"
  }

  depends_on = [google_service_account.pipeline]
}

# --- who may start builds and approve them ---------------------------------------

# Start builds and run triggers; no cloudbuild.builds.update, so no changing
# a trigger's approval, configuration file or service account.
resource "google_project_iam_custom_role" "runner" {
  project     = var.project_id
  role_id     = "engagementPipelineRunner"
  title       = "Engagement pipeline runner"
  description = "Runs the engagement triggers and reads builds; cannot change triggers."
  permissions = [
    "cloudbuild.builds.create",
    "cloudbuild.builds.get",
    "cloudbuild.builds.list",
    "resourcemanager.projects.get",
  ]
}

resource "google_project_iam_member" "runner" {
  for_each = toset(var.operators)

  project = var.project_id
  role    = google_project_iam_custom_role.runner.id
  member  = each.value
}

resource "google_project_iam_member" "approver" {
  for_each = toset(var.approvers)

  project = var.project_id
  role    = "roles/cloudbuild.builds.approver"
  member  = each.value
}

# --- triggers -----------------------------------------------------------------

# Tests on every push, plan on every push to the deployed branch.
resource "google_cloudbuild_trigger" "pipeline" {
  for_each = local.regional_triggers

  project         = var.project_id
  location        = each.value.region
  name            = "engagement-${each.value.id}"
  description     = each.value.description
  filename        = each.value.filename
  service_account = "projects/${var.project_id}/serviceAccounts/${local.emails[each.value.id]}"

  repository_event_config {
    repository = each.value.repository
    push {
      branch = each.value.branch
    }
  }

  substitutions = each.value.id == "plan" ? {
    _ENV          = var.environment
    _API_DOMAIN   = var.api_domain
    _ALERT_EMAILS = jsonencode(var.alert_emails)
  } : {}

  depends_on = [google_service_account.pipeline, google_project_iam_member.pipeline]
}

# Apply: started by hand with the plan build's id, pending until an approver
# approves it; its configuration is cloudbuild-apply.yaml of the deployed
# branch, its identity the apply account.
resource "google_cloudbuild_trigger" "apply" {
  project         = var.project_id
  location        = var.region
  name            = "engagement-apply"
  description     = "Apply one approved plan of ${var.environment}"
  service_account = "projects/${var.project_id}/serviceAccounts/${local.emails.apply}"

  approval_config {
    approval_required = true
  }

  source_to_build {
    repository = var.repository
    ref        = "refs/heads/${var.branch}"
    repo_type  = "GITHUB"
  }

  git_file_source {
    path       = "cloudbuild-apply.yaml"
    repository = var.repository
    revision   = "refs/heads/${var.branch}"
    repo_type  = "GITHUB"
  }

  substitutions = {
    _ENV           = var.environment
    _PLAN_BUILD_ID = ""
  }

  depends_on = [google_service_account.pipeline, google_project_iam_member.pipeline]
}

# The apply trigger in each other region, on that region's connection: the
# same name, approval and identity.
resource "google_cloudbuild_trigger" "apply_extra" {
  for_each = var.extra_regions

  project         = var.project_id
  location        = each.key
  name            = "engagement-apply"
  description     = "Apply one approved plan of ${var.environment}"
  service_account = "projects/${var.project_id}/serviceAccounts/${local.emails.apply}"

  approval_config {
    approval_required = true
  }

  source_to_build {
    repository = each.value
    ref        = "refs/heads/${var.branch}"
    repo_type  = "GITHUB"
  }

  git_file_source {
    path       = "cloudbuild-apply.yaml"
    repository = each.value
    revision   = "refs/heads/${var.branch}"
    repo_type  = "GITHUB"
  }

  substitutions = {
    _ENV           = var.environment
    _PLAN_BUILD_ID = ""
  }

  depends_on = [google_service_account.pipeline, google_project_iam_member.pipeline]
}
