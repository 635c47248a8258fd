# Alert policies. Every metric an alert reads either is a Google Cloud
# built-in metric (pubsub.googleapis.com/..., run.googleapis.com/...,
# spanner.googleapis.com/...) or is created by this same apply: Cloud
# Monitoring refuses an alert policy whose filter names a metric type that
# does not exist yet, and metrics the code writes (OpenTelemetry, whatever the
# exporter) only exist after their first point, which on a fresh project means
# never before the first apply (reconcile_corrections may never be written on
# a healthy system). So the two application signals are log-based metrics,
# defined here and counted from the one-line summary each run logs:
#   "rollup: done"     lagSeconds: the longest a counter delta waited to be
#                      folded during that run (functions/rollup)
#   "reconcile: done"  corrected: counters repaired by that run
#                      (functions/reconcile)
#   "rollup: stalled counters"  a run found changes uncounted for longer
#                      than COUNTER_STALL_AFTER (functions/rollup)
#   "detect-manipulation: skipped"  a detection step or a cluster of items
#                      was not judged (functions/detectmanipulation)
# terraform/check verifies that no alert, dashboard or SLO names a metric that
# is neither built in nor created here.

locals {
  notification_channels = [for c in google_monitoring_notification_channel.email : c.id]

  # The structured log lines of the functions (shared/httpx's JSON handler:
  # "message" and "severity" keys) as Cloud Run stores them.
  function_log = "resource.type=\"cloud_run_revision\" AND logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Fstdout\""
}

resource "google_logging_metric" "rollup_lag" {
  project     = var.project_id
  name        = "engagement/rollup_lag_seconds"
  description = "Per rollup run: the longest a counter delta waited to be folded into its snapshot (seconds)."
  filter      = "${local.function_log} AND resource.labels.service_name=\"${local.functions["Rollup"].id}\" AND jsonPayload.message=\"rollup: done\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
  }
  value_extractor = "EXTRACT(jsonPayload.lagSeconds)"

  bucket_options {
    exponential_buckets {
      num_finite_buckets = 32
      growth_factor      = 1.5
      scale              = 0.5
    }
  }

  depends_on = [google_project_service.api]
}

# Counts reconciliation runs that repaired more counters than the threshold:
# a log-based counter cannot sum a field, and one run of the "recent" scope
# covers the last hour's writes.
resource "google_logging_metric" "reconcile_corrections" {
  project     = var.project_id
  name        = "engagement/reconcile_runs_over_threshold"
  description = "Reconciliation runs that repaired more than ${var.alert_thresholds.reconcile_corrections_run} counters."
  filter      = "${local.function_log} AND resource.labels.service_name=\"${local.functions["Reconcile"].id}\" AND jsonPayload.message=\"reconcile: done\" AND jsonPayload.corrected>${var.alert_thresholds.reconcile_corrections_run}"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }

  depends_on = [google_project_service.api]
}

# Counts the rollup's lines naming stalled counters: changes accepted (an
# outbox row written with its source, a staged views batch) and still not
# counted after COUNTER_STALL_AFTER, while the rollup runs.
resource "google_logging_metric" "stalled_counters" {
  project     = var.project_id
  name        = "engagement/stalled_counters"
  description = "Rollup runs that found counters whose accepted changes stayed uncounted for longer than COUNTER_STALL_AFTER."
  filter      = "${local.function_log} AND resource.labels.service_name=\"${local.functions["Rollup"].id}\" AND jsonPayload.message=\"rollup: stalled counters\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }

  depends_on = [google_project_service.api]
}

# Cloud Monitoring refuses an alert policy on a log-based metric for a while
# after the metric is created: "Cannot find metric(s) ... If a metric was
# created recently, it could take up to 10 minutes to become available"
# (terraform-provider-google issue 11102, open). In the pipeline a failed
# apply costs a new plan, test run and approval, so the alerts wait the whole
# 10 minutes the API names, once: the sleep is made again only when a
# metric's name changes. The alerts read the metric names from here, which
# orders them after the sleep (terraform/check's propagation rule).
resource "time_sleep" "log_metrics" {
  create_duration = "600s"

  triggers = {
    rollup_lag            = google_logging_metric.rollup_lag.name
    reconcile_corrections = google_logging_metric.reconcile_corrections.name
    rate_limit_degraded   = google_logging_metric.rate_limit_degraded.name
    stalled_counters      = google_logging_metric.stalled_counters.name
    detection_skipped     = google_logging_metric.detection_skipped.name
  }
}

# Counts the detection's lines naming a part it did not judge: a step whose
# candidates exceeded the merge's budget, or a cluster of items with more
# accounts than the pairwise comparison takes (functions/detectmanipulation;
# the same skips are the OpenTelemetry counter engagement/detection_skipped).
resource "google_logging_metric" "detection_skipped" {
  project     = var.project_id
  name        = "engagement/detection_skipped"
  description = "Manipulation detection steps or clusters of items left unjudged."
  filter      = "${local.function_log} AND resource.labels.service_name=\"${local.functions["DetectManipulation"].id}\" AND jsonPayload.message=\"detect-manipulation: skipped\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }

  depends_on = [google_project_service.api]
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
    content   = "Events failed ${local.delivery.maxDeliveryAttempts} deliveries and were dead-lettered. Find the cause in the consumer's logs, fix it, then replay them with cmd/replay (dry run first): docs/operations.md, \"Replaying dead-lettered events\"."
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
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["rollup_lag"]}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.rollup_lag_seconds
      duration        = "120s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_PERCENTILE_99"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  conditions {
    display_name = "rollup lag not reported (rollup not running)"
    condition_absent {
      filter   = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["rollup_lag"]}\""
      duration = "600s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_PERCENTILE_99"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  documentation {
    content   = "Counter deltas wait longer than they should to reach the snapshots that anonymous reads see. Check the Rollup function's logs and the rollup scheduler job."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "stalled_counters" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: stalled counters"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "changes uncounted for longer than COUNTER_STALL_AFTER"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["stalled_counters"]}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "Counters whose accepted changes (outbox rows, staged views) stay uncounted while the rollup runs. The Rollup's \"rollup: stalled counters\" lines name them: docs/operations.md, \"Stalled counters\"."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "reconcile_corrections" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: reconciliation corrections"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "a run repaired more than ${var.alert_thresholds.reconcile_corrections_run} counters"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["reconcile_corrections"]}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
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

# Spanner capacity: with the autoscaler these fire when it is at its maximum
# and still short; without it, they are the capacity plan's trigger to add
# processing units (docs/deploy.md).
resource "google_monitoring_alert_policy" "spanner_capacity" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: Spanner capacity"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "high-priority CPU above ${var.alert_thresholds.spanner_cpu_ratio * 100}%"
    condition_threshold {
      filter          = "resource.type = \"spanner_instance\" AND resource.labels.instance_id = \"${google_spanner_instance.main.name}\" AND metric.type = \"spanner.googleapis.com/instance/cpu/utilization_by_priority\" AND metric.labels.priority = \"high\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.spanner_cpu_ratio
      duration        = "600s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MEAN"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.instance_id"]
      }
    }
  }

  conditions {
    display_name = "storage above ${var.alert_thresholds.spanner_storage_ratio * 100}% of the limit"
    condition_threshold {
      filter          = "resource.type = \"spanner_instance\" AND resource.labels.instance_id = \"${google_spanner_instance.main.name}\" AND metric.type = \"spanner.googleapis.com/instance/storage/utilization\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.spanner_storage_ratio
      duration        = "600s"

      aggregations {
        alignment_period   = "300s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  documentation {
    content   = "The Spanner instance is short of compute or storage. With the managed autoscaler, raise spanner_autoscaling.max_processing_units; without it, raise spanner_processing_units (docs/deploy.md)."
    mime_type = "text/markdown"
  }
}

# The per-user rate limits fell back to per-instance limits: the transactional
# Bigtable cluster does not answer (shared/ratelimit logs this line when it
# degrades and once a minute while it stays so).
resource "google_logging_metric" "rate_limit_degraded" {
  project     = var.project_id
  name        = "engagement/rate_limit_degraded"
  description = "Log lines of instances whose per-user rate limit fell back to a per-instance limit because Bigtable's transactional cluster did not answer."
  filter      = "${local.function_log} AND jsonPayload.message=\"ratelimit: shared limit unavailable, per-instance limit in force\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }

  depends_on = [google_project_service.api]
}

resource "google_monitoring_alert_policy" "rate_limit_degraded" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: rate limits degraded to per-instance"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "an instance decides the per-user limits alone"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["rate_limit_degraded"]}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "Bigtable's transactional cluster does not answer: writes are accepted under per-instance rate limits, each instance's share of twice a user's limit (docs/design/ratelimits.md), and the views wait in Pub/Sub. The alert lasts as long as an instance logs the line (when it degrades, then once a minute). If it lasts, fail the transactional profile over (docs/failover.md)."
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "detection_skipped" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: manipulation detection skipped a step"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "a detection step or cluster was not judged"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["detection_skipped"]}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "Manipulation detection left reactions unjudged: groups acting in them are not flagged. The log line says which step or cluster and why; raise the partitions or the merge's memory (docs/operations.md#detection-skipped)."
    mime_type = "text/markdown"
  }
}

# Cloud Scheduler logs every attempt whose call failed (an HTTP error, a
# deadline, a 429 from a function with no free instance) at severity ERROR
# on the job's resource; the built-in count of log entries sees them.
resource "google_monitoring_alert_policy" "scheduler_failures" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: scheduler job failures"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "failed scheduler attempts"
    condition_threshold {
      filter          = "resource.type = \"cloud_scheduler_job\" AND metric.type = \"logging.googleapis.com/log_entry_count\" AND metric.labels.severity = \"ERROR\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.job_id"]
      }
    }
  }

  documentation {
    content   = "A scheduled job's call failed; its run is not retried and waits for the next tick. Read the job's log entries (docs/operations.md, alerts)."
    mime_type = "text/markdown"
  }
}

# A 429 from Cloud Run means a function had no instance free for a request
# (its max instances times concurrency was reached): work was refused, not
# queued. Cloud Armor's per-IP 429s are answered at the load balancer and
# never reach this metric.
resource "google_monitoring_alert_policy" "instance_limit" {
  project               = var.project_id
  display_name          = "engagement ${var.environment}: requests refused at the instance limit (429)"
  combiner              = "OR"
  notification_channels = local.notification_channels

  conditions {
    display_name = "Cloud Run answered 429"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.labels.response_code = \"429\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.service_name"]
      }
    }
  }

  documentation {
    content   = "A function refused requests because every instance it may run was busy. Raise its max instances or concurrency in the capacity plan (docs/operations.md, alerts)."
    mime_type = "text/markdown"
  }
}

# One dashboard: the golden signals of every function (traffic, errors,
# latency, saturation as instances), the event pipeline's lag, the counters'
# fold lag and the dead-letter depth.
locals {
  dashboard_chart = {
    for k, v in {
      traffic   = { title = "Requests/s by function", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"run.googleapis.com/request_count\"", aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group = ["resource.labels.service_name"] }
      errors    = { title = "5xx/s by function", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"run.googleapis.com/request_count\" AND metric.labels.response_code_class=\"5xx\"", aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group = ["resource.labels.service_name"] }
      latency   = { title = "Latency p99 by function", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"run.googleapis.com/request_latencies\"", aligner = "ALIGN_PERCENTILE_99", reducer = "REDUCE_MAX", group = ["resource.labels.service_name"] }
      instances = { title = "Instances by function", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"run.googleapis.com/container/instance_count\"", aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = ["resource.labels.service_name"] }
      refused   = { title = "429s at the instance limit by function", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"run.googleapis.com/request_count\" AND metric.labels.response_code=\"429\"", aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group = ["resource.labels.service_name"] }
      pipeline  = { title = "Event pipeline lag: oldest unacked event (s)", filter = "resource.type=\"pubsub_subscription\" AND metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\"", aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group = ["resource.labels.subscription_id"] }
      fold      = { title = "Counter fold lag p99 (s)", filter = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["rollup_lag"]}\"", aligner = "ALIGN_PERCENTILE_99", reducer = "REDUCE_MAX", group = [] }
      dlq       = { title = "Dead-lettered events waiting", filter = "resource.type=\"pubsub_subscription\" AND metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.labels.subscription_id=ends_with(\"${local.topology.pubsub.deadLetterSubscriptionSuffix}\")", aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = ["resource.labels.subscription_id"] }
      } : k => {
      title = v.title
      xyChart = {
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = v.filter
              aggregation = {
                alignmentPeriod    = "60s"
                perSeriesAligner   = v.aligner
                crossSeriesReducer = v.reducer
                groupByFields      = v.group
              }
            }
          }
        }]
      }
    }
  }
  dashboard_order = ["traffic", "errors", "latency", "instances", "refused", "pipeline", "fold", "dlq"]
}

resource "google_monitoring_dashboard" "main" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "engagement ${var.environment}"
    gridLayout = {
      columns = 2
      widgets = [for k in local.dashboard_order : local.dashboard_chart[k]]
    }
  })

  depends_on = [google_project_service.api]
}
