# What a crowd of new accounts can do. Identity Platform limits how fast
# anyone makes them (identity.tf: e-mail addresses verified before any call
# is accepted, sign-ups per IP address limited), and the young-account rule
# (auth.YoungAccounts, COMMENT_YOUNG_ACCOUNT_AGE) limits what an account
# does in its first day: its comments hold no links and come at the young
# rate, its reactions come at the young rate, and its watches count no
# views. The rule fails closed: a function that cannot read an account's
# Identity Platform record refuses the comment or reaction (503) or leaves
# the view uncounted until it can, so each function that applies the rule
# reads the records (the comments' grant is in identity.tf). When auth_audience names another project, that project's
# owners grant the role to these identities too (docs/identity.md).
resource "google_project_iam_member" "young_account_records" {
  for_each = local.manage_identity ? toset(["ApplyViews", "Reactions"]) : toset([])

  project = var.project_id
  role    = "roles/firebaseauth.viewer"
  member  = google_service_account.fn[each.key].member
}
