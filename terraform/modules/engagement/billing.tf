# A monthly budget on this project's spend, when billing_account is given:
# Cloud Billing e-mails the billing account's admins and the alert channels
# at 50%, 90% and 100% of monthly_budget spent, and when the month's forecast
# passes 100%. A budget alerts; it does not stop spending. Creating it needs
# roles/billing.costsManager on the billing account for the identity that
# applies (docs/deploy.md).

data "google_project" "this" {
  count = var.billing_account == "" ? 0 : 1

  project_id = var.project_id
}

locals {
  budget_thresholds = {
    current    = [0.5, 0.9, 1.0]
    forecasted = [1.0]
  }
}

resource "google_billing_budget" "monthly" {
  count = var.billing_account == "" ? 0 : 1

  billing_account = var.billing_account
  display_name    = "engagement ${var.environment} monthly"

  budget_filter {
    projects        = ["projects/${data.google_project.this[0].number}"]
    calendar_period = "MONTH"
  }

  # In the billing account's currency.
  amount {
    specified_amount {
      units = tostring(var.monthly_budget)
    }
  }

  dynamic "threshold_rules" {
    for_each = local.budget_thresholds.current
    content {
      threshold_percent = threshold_rules.value
      spend_basis       = "CURRENT_SPEND"
    }
  }

  dynamic "threshold_rules" {
    for_each = local.budget_thresholds.forecasted
    content {
      threshold_percent = threshold_rules.value
      spend_basis       = "FORECASTED_SPEND"
    }
  }

  all_updates_rule {
    monitoring_notification_channels = local.notification_channels
    disable_default_iam_recipients   = false
  }

  depends_on = [google_project_service.api]
}
