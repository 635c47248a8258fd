# Topics, push subscriptions to the event functions (OIDC, retry policy,
# dead-lettering) and a pull subscription on every dead-letter topic, so that
# nothing dead-lettered is lost silently.

locals {
  delivery = local.topology.pubsub.delivery

  topics = { for t in local.topology.pubsub.topics : t.name => t.deadLetterTopic }

  # Dead-letter topic name => its pull subscription name.
  dead_letter_topics = {
    for t in local.topology.pubsub.topics :
    t.deadLetterTopic => "${t.deadLetterTopic}${local.topology.pubsub.deadLetterSubscriptionSuffix}"
  }

  # The topics shared/config names: HISTORY_TOPIC, COUNTER_TOPIC,
  # ERASURE_TOPIC and EXPORT_TOPIC. The lookups fail on a name that topology.json does not have.
  history_topic = google_pubsub_topic.topic["history-events"].name
  counter_topic = google_pubsub_topic.topic["counter-events"].name
  erasure_topic = google_pubsub_topic.topic["account-erasures"].name
  export_topic  = google_pubsub_topic.topic["account-exports"].name

  push_subscriptions = merge([
    for t in local.topology.pubsub.topics : {
      for s in t.subscriptions : s.name => {
        topic       = t.name
        dead_letter = t.deadLetterTopic
        function    = s.function
        # A subscription's own ack deadline, for a function whose delivery
        # may take longer than the others'.
        ack_deadline_seconds = try(s.ackDeadlineSeconds, local.delivery.ackDeadlineSeconds)
      }
    }
  ]...)

  # One push subscription per subscription of topology.json and region: in
  # var.region under its own name, in each extra region as
  # "<name>-<region>" (key "<name>@<region>"), each pushing to its own
  # region's function. Every region's subscription gets every message, so
  # a region lost stops no consumer: the other region's subscription goes
  # on, and the lost region's keeps its messages (7 days) for when it
  # returns. A message is thus applied in each region; the consumers are
  # idempotent (docs/operations.md, "A region lost": AppliedEvents, claims
  # named by their batch, history rows by key, erasure phases, the export
  # lease), so the second application changes nothing.
  push_deployments = merge([
    for name, s in local.push_subscriptions : {
      for r in local.regions : (r == var.region ? name : "${name}@${r}") => merge(s, {
        name       = r == var.region ? name : "${name}-${r}"
        region     = r
        deployment = local.deployment_key["${s.function}/${r}"]
      })
    }
  ]...)
}

# No topic keeps messages of its own (message_retention_duration unset): the
# messages hold user ids, and topic retention would keep even the delivered
# ones for a week after an erasure. Nothing needs it: redelivery is the
# subscriptions' retention of unacknowledged messages, and dead-lettered
# messages wait on their dead-letter subscription; no subscription is ever
# created late or seeked back to a time (terraform/check's retention rule).
resource "google_pubsub_topic" "topic" {
  for_each = local.topics

  project = var.project_id
  name    = each.key
  labels  = local.labels

  depends_on = [google_project_service.api]
}

resource "google_pubsub_topic" "dead_letter" {
  for_each = local.dead_letter_topics

  project = var.project_id
  name    = each.key
  labels  = local.labels

  depends_on = [google_project_service.api]
}

resource "google_pubsub_subscription" "push" {
  for_each = local.push_deployments

  project                    = var.project_id
  name                       = each.value.name
  topic                      = google_pubsub_topic.topic[each.value.topic].id
  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = "${local.delivery.messageRetentionSeconds}s"
  labels                     = merge(local.labels, { function = local.functions[each.value.function].id, region = each.value.region })

  push_config {
    # The event function is an HTTP function that reads the push body (the
    # wrapped format: no no_wrapper block) itself.
    push_endpoint = google_cloudfunctions2_function.fn[each.value.deployment].service_config[0].uri

    oidc_token {
      service_account_email = google_service_account.push[each.value.function].email
      audience              = google_cloudfunctions2_function.fn[each.value.deployment].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = "${local.delivery.minimumBackoffSeconds}s"
    maximum_backoff = "${local.delivery.maximumBackoffSeconds}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.value.dead_letter].id
    max_delivery_attempts = local.delivery.maxDeliveryAttempts
  }

  expiration_policy {
    ttl = "" # never expires
  }

  # Deliveries start as soon as the subscription exists: the push identity
  # must already be an invoker and the Pub/Sub service agent able to mint
  # its tokens, or the first messages fail with 401/403 and back off.
  depends_on = [
    google_pubsub_topic_iam_member.dead_letter_publisher,
    google_cloud_run_v2_service_iam_member.push_invoker,
    google_service_account_iam_member.push_token_creator,
  ]
}

resource "google_pubsub_subscription" "dead_letter" {
  for_each = local.dead_letter_topics

  project                    = var.project_id
  name                       = each.value
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  ack_deadline_seconds       = local.delivery.ackDeadlineSeconds
  message_retention_duration = "${local.delivery.messageRetentionSeconds}s"
  retain_acked_messages      = true
  labels                     = local.labels

  expiration_policy {
    ttl = ""
  }
}

# Dead-lettering is done by the Pub/Sub service agent: it publishes to the
# dead-letter topic and acknowledges on the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.dead_letter_topics

  project = var.project_id
  topic   = google_pubsub_topic.dead_letter[each.key].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each = local.push_deployments

  project      = var.project_id
  subscription = google_pubsub_subscription.push[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}
