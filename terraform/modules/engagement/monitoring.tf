# Alert policies. The application metrics are written by the functions through
# OpenTelemetry to Cloud Monitoring under workload.googleapis.com/:
#   engagement/rollup_lag_seconds     gauge, seconds: age of the oldest counter
#                                     delta not yet folded into its snapshot
#   engagement/reconcile_corrections  counter: counters repaired by reconciliation

locals {
  metric_rollup_lag            = "workload.googleapis.com/engagement/rollup_lag_seconds"
  metric_reconcile_corrections = "workload.googleapis.com/engagement/reconcile_corrections"
  notification_channels        = [for c in google_monitoring_notification_channel.email : c.id]
}

resource "google_monitoring_notification_channel" "email" {
  for_each = toset(var.alert_emails)

  project      = var.project_id
  display_name = "engagement ${var.environment}: ${each.value}"
  type         = "email"
  labels = {
    email_address = each.value
  }

  depends_on = [google_project_service.api]
}

resource "google_monitoring_alert_policy" "dead_letter_backlog" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: dead-lettered events"
  combiner              = "OR"
  notification_channels = local.notification_channels

  dynamic "conditions" {
    for_each = google_pubsub_subscription.dead_letter
    content {
      display_name = "undelivered messages on ${conditions.value.name}"
      condition_threshold {
        filter          = "resource.type = \"pubsub_subscription\" AND resource.labels.subscription_id = \"${conditions.value.name}\" AND metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\""
        comparison      = "COMPARISON_GT"
        threshold_value = var.alert_thresholds.dead_letter_messages
        duration        = "60s"

        aggregations {
          alignment_period   = "60s"
          per_series_aligner = "ALIGN_MAX"
        }
      }
    }
  }

  documentation {
    content   = "Events failed ${local.delivery.maxDeliveryAttempts} deliveries and were dead-lettered. Read them from the dead-letter subscription, fix the cause, and republish them to the source topic (docs/deploy.md)."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "event_delivery_lag" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: event delivery lag"
  combiner              = "OR"
  notification_channels = local.notification_channels

  dynamic "conditions" {
    for_each = google_pubsub_subscription.push
    content {
      display_name = "oldest unacknowledged event on ${conditions.value.name}"
      condition_threshold {
        filter          = "resource.type = \"pubsub_subscription\" AND resource.labels.subscription_id = \"${conditions.value.name}\" AND metric.type = \"pubsub.googleapis.com/subscription/oldest_unacked_message_age\""
        comparison      = "COMPARISON_GT"
        threshold_value = var.alert_thresholds.oldest_unacked_seconds
        duration        = "120s"

        aggregations {
          alignment_period   = "60s"
          per_series_aligner = "ALIGN_MAX"
        }
      }
    }
  }
}

resource "google_monitoring_alert_policy" "rollup_lag" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: counter rollup lag"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "rollup lag above ${var.alert_thresholds.rollup_lag_seconds}s"
    condition_threshold {
      filter          = "metric.type = \"${local.metric_rollup_lag}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.rollup_lag_seconds
      duration        = "120s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  conditions {
    display_name = "rollup lag not reported (rollup not running)"
    condition_absent {
      filter   = "metric.type = \"${local.metric_rollup_lag}\""
      duration = "600s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  documentation {
    content   = "Counter deltas wait longer than they should to reach the snapshots that anonymous reads see. Check the Rollup function's logs and the rollup scheduler job."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "reconcile_corrections" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: reconciliation corrections"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "more than ${var.alert_thresholds.reconcile_corrections_hour} corrections in an hour"
    condition_threshold {
      filter          = "metric.type = \"${local.metric_reconcile_corrections}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.reconcile_corrections_hour
      duration        = "0s"

      aggregations {
        alignment_period     = "3600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "Reconciliation repaired many counters: events are being lost or double-applied somewhere. Check the dead-letter subscriptions and the ApplyCounters logs."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "server_errors" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: 5xx rate"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "share of 5xx answers above ${var.alert_thresholds.server_error_ratio}"
    condition_threshold {
      filter             = "resource.type = \"cloud_run_revision\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.labels.response_code_class = \"5xx\""
      denominator_filter = "resource.type = \"cloud_run_revision\" AND metric.type = \"run.googleapis.com/request_count\""
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_thresholds.server_error_ratio
      duration           = "300s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.service_name"]
      }

      denominator_aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.service_name"]
      }
    }
  }
}
