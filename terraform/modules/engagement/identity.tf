# Identity Platform: who may make an account, and which accounts the
# functions accept (AUTH_SIGN_IN_PROVIDERS, AUTH_TENANT; shared/auth). An
# account must cost its owner something, or every per-user limit is bypassed
# by making accounts: e-mail addresses are verified (the verifier refuses a
# token whose address is not), anonymous sign-in is off unless
# allow_anonymous_sign_in says otherwise, and sign-ups per IP address are
# limited (Identity Platform's standing 100 an hour, or sign_up_quota).
#
# The configuration lives in the project that issues the tokens; when
# auth_audience names another project, that project's owner manages it and
# nothing is created here (docs/identity.md).

locals {
  manage_identity = local.auth_audience == var.project_id

  # The firebase.sign_in_provider values the functions accept.
  auth_sign_in_providers = concat(var.auth_sign_in_providers, var.allow_anonymous_sign_in ? ["anonymous"] : [])
}

resource "google_identity_platform_config" "main" {
  count = local.manage_identity ? 1 : 0

  project = var.project_id
  # The domains a browser sign-in (OAuth redirect, e-mail link) may return
  # to: the frontends' domains, nothing else.
  authorized_domains         = var.auth_authorized_domains
  autodelete_anonymous_users = true

  sign_in {
    allow_duplicate_emails = false

    email {
      enabled           = contains(var.auth_sign_in_providers, "password")
      password_required = true
    }

    anonymous {
      enabled = var.allow_anonymous_sign_in
    }
  }

  # A temporary override of the sign-ups allowed per IP address an hour.
  dynamic "quota" {
    for_each = var.sign_up_quota == null ? [] : [var.sign_up_quota]
    content {
      sign_up_quota_config {
        quota          = quota.value.per_ip_per_hour
        start_time     = quota.value.start_time
        quota_duration = quota.value.duration
      }
    }
  }

  depends_on = [google_project_service.api]
}

# The detection ages accounts by their Identity Platform records
# (ACCOUNT_RECORDS_URL, accounts:lookup): its identity reads them. When
# auth_audience names another project, that project's owners grant this role
# to the detection's identity; until then the detection ages accounts by
# their first reactions and logs that the records are unavailable.
resource "google_project_iam_member" "account_records" {
  count = local.manage_identity ? 1 : 0

  project = var.project_id
  role    = "roles/firebaseauth.viewer"
  member  = google_service_account.fn["DetectManipulation"].member
}

# The comments' young-account rule reads the same records (one lookup per
# account an instance sees); until it may, posts are refused with 503
# (the rule fails closed; signup.tf).
resource "google_project_iam_member" "comments_account_records" {
  count = local.manage_identity ? 1 : 0

  project = var.project_id
  role    = "roles/firebaseauth.viewer"
  member  = google_service_account.fn["Comments"].member
}

# The erasure (DELETE /v1/me) ends by deleting the user's Identity Platform
# account (accounts:delete), which needs firebaseauth.users.delete. No
# viewer or user role holds it; the narrowest predefined role that does is
# Firebase Authentication Admin (firebaseauth.* and project reads, none of
# Identity Platform's tenant or configuration administration that
# roles/identityplatform.admin adds). A custom role with that one
# permission would be narrower, but the apply's identity may not create
# roles (terraform/bootstrap). When auth_audience names another project,
# its owners grant the role to this identity; until then an erasure
# retries the delete for a day, then leaves the account in place and logs
# it (docs/design/account.md).
resource "google_project_iam_member" "erasure_account_delete" {
  count = local.manage_identity ? 1 : 0

  project = var.project_id
  role    = "roles/firebaseauth.admin"
  member  = google_service_account.fn["EraseAccount"].member
}
