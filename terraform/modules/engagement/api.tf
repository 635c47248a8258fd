# The public API (/v1, docs/openapi.yaml) behind a global external HTTPS load
# balancer: one serverless backend per public function, path rules from the
# routes in topology.json ("/v1/history" matches exactly, "/v1/history/"
# matches everything below it). The functions see the request unchanged,
# Authorization header included, and answer CORS preflights themselves.

locals {
  api_paths = {
    for k, f in local.public_functions : k => flatten([
      for r in f.routes : endswith(r, "/") ? ["${r}*"] : [r]
    ])
  }
  # Requests that match no route go to this function, which answers 404.
  api_fallback = "Counts"
}

resource "google_compute_global_address" "api" {
  project = var.project_id
  name    = "engagement-api"

  depends_on = [google_project_service.api]
}

resource "google_compute_managed_ssl_certificate" "api" {
  project = var.project_id
  name    = "engagement-api"

  managed {
    domains = [var.api_domain]
  }

  depends_on = [google_project_service.api]
}

resource "google_compute_region_network_endpoint_group" "fn" {
  for_each = local.public_functions

  project               = var.project_id
  region                = var.region
  name                  = "engagement-${each.value.id}"
  network_endpoint_type = "SERVERLESS"

  cloud_run {
    service = google_cloudfunctions2_function.fn[each.key].name
  }
}

resource "google_compute_backend_service" "fn" {
  for_each = local.public_functions

  project               = var.project_id
  name                  = "engagement-${each.value.id}"
  protocol              = "HTTPS"
  load_balancing_scheme = "EXTERNAL_MANAGED"

  backend {
    group = google_compute_region_network_endpoint_group.fn[each.key].id
  }

  log_config {
    enable      = true
    sample_rate = 1
  }
}

resource "google_compute_url_map" "api" {
  project         = var.project_id
  name            = "engagement-api"
  default_service = google_compute_backend_service.fn[local.api_fallback].id

  host_rule {
    hosts        = [var.api_domain]
    path_matcher = "api"
  }

  path_matcher {
    name            = "api"
    default_service = google_compute_backend_service.fn[local.api_fallback].id

    dynamic "path_rule" {
      for_each = local.api_paths
      content {
        paths   = path_rule.value
        service = google_compute_backend_service.fn[path_rule.key].id
      }
    }
  }
}

resource "google_compute_target_https_proxy" "api" {
  project          = var.project_id
  name             = "engagement-api"
  url_map          = google_compute_url_map.api.id
  ssl_certificates = [google_compute_managed_ssl_certificate.api.id]
}

resource "google_compute_global_forwarding_rule" "https" {
  project               = var.project_id
  name                  = "engagement-api-https"
  target                = google_compute_target_https_proxy.api.id
  ip_address            = google_compute_global_address.api.id
  ip_protocol           = "TCP"
  port_range            = "443"
  load_balancing_scheme = "EXTERNAL_MANAGED"
}

# Plain HTTP only redirects to HTTPS.
resource "google_compute_url_map" "http_redirect" {
  project = var.project_id
  name    = "engagement-api-http-redirect"

  default_url_redirect {
    https_redirect         = true
    strip_query            = false
    redirect_response_code = "MOVED_PERMANENTLY_DEFAULT"
  }

  # Nothing else it references enables Compute first.
  depends_on = [google_project_service.api]
}

resource "google_compute_target_http_proxy" "http_redirect" {
  project = var.project_id
  name    = "engagement-api-http-redirect"
  url_map = google_compute_url_map.http_redirect.id
}

resource "google_compute_global_forwarding_rule" "http" {
  project               = var.project_id
  name                  = "engagement-api-http"
  target                = google_compute_target_http_proxy.http_redirect.id
  ip_address            = google_compute_global_address.api.id
  ip_protocol           = "TCP"
  port_range            = "80"
  load_balancing_scheme = "EXTERNAL_MANAGED"
}
