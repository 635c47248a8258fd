# The public API (/v1, docs/openapi.yaml) behind a global external HTTPS load
# balancer: one serverless backend per public function, path rules from the
# routes in topology.json ("/v1/history" matches exactly, "/v1/history/"
# matches everything below it). The functions see the request unchanged,
# Authorization header included, and answer CORS preflights themselves.
#
# A function's cdnRoutes (topology.json) go to a backend of their own with
# Cloud CDN on; every other route goes to a backend that never caches. Cloud
# Armor rate-limits each client IP on both.

locals {
  path_patterns = { for k, f in local.public_functions : k => {
    for r in f.routes : r => endswith(r, "/") ? "${r}*" : r
  } }
  # Routes without caching, and the cached ones, by function.
  api_paths = { for k, f in local.public_functions : k => [
    for r, p in local.path_patterns[k] : p if !contains(f.cdn_routes, r)
  ] }
  cdn_paths = { for k, f in local.public_functions : k => [
    for r, p in local.path_patterns[k] : p if contains(f.cdn_routes, r)
  ] if length(f.cdn_routes) > 0 }
  # Requests that match no route go to this function, which answers 404.
  api_fallback = "Counts"

  # Outlier detection of every backend service. The Compute API's
  # BackendService.outlierDetection
  # (https://cloud.google.com/compute/docs/reference/rest/v1/backendServices)
  # applies to serverless NEGs of a global EXTERNAL_MANAGED backend service;
  # a 5xx answer is an error, and enforcing_consecutive_errors defaults to
  # 0 (never eject), hence 100 below. A region's NEG that answers
  # consecutive_errors 5xx in a row is ejected for base_ejection_seconds
  # (times the number of its ejections), analysed every interval_seconds:
  # each proxy of the load balancer decides alone, so a region answering
  # 5xx loses its traffic within an interval of each proxy seeing 5 errors
  # from it, well within a minute at any real load (terraform/check's
  # outlier rule). At most half the NEGs are ejected: of two regions, one
  # keeps serving even when both answer errors.
  outlier_detection = {
    consecutive_errors    = 5
    interval_seconds      = 10
    base_ejection_seconds = 30
    max_ejection_percent  = 50
  }
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

# One serverless NEG per public function and region it runs in.
resource "google_compute_region_network_endpoint_group" "fn" {
  for_each = local.public_deployments

  project               = var.project_id
  region                = each.value.region
  name                  = "engagement-${each.value.id}"
  network_endpoint_type = "SERVERLESS"

  cloud_run {
    service = google_cloudfunctions2_function.fn[each.key].name
  }
}

locals {
  # Each public function's NEGs, one a region it runs in, by deployment:
  # the backends of its backend services.
  function_negs = { for k in keys(local.public_functions) : k => {
    for d, neg in google_compute_region_network_endpoint_group.fn : d => neg.id if local.function_deployments[d].name == k
  } }
}

resource "google_compute_backend_service" "fn" {
  for_each = local.public_functions

  project               = var.project_id
  name                  = "engagement-${each.value.id}"
  protocol              = "HTTPS"
  load_balancing_scheme = "EXTERNAL_MANAGED"

  # Answers here may depend on who asks (the Authorization header): never
  # cached.
  enable_cdn      = false
  security_policy = google_compute_security_policy.api.id

  # Every region the function runs in: the load balancer sends each request
  # to the nearest healthy one.
  dynamic "backend" {
    for_each = local.function_negs[each.key]
    content {
      group = backend.value
    }
  }

  # A serverless NEG has no health check: outlier detection is what takes
  # a sick region's traffic away (local.outlier_detection).
  outlier_detection {
    consecutive_errors           = local.outlier_detection.consecutive_errors
    enforcing_consecutive_errors = 100
    max_ejection_percent         = local.outlier_detection.max_ejection_percent

    interval {
      seconds = local.outlier_detection.interval_seconds
    }
    base_ejection_time {
      seconds = local.outlier_detection.base_ejection_seconds
    }
  }

  log_config {
    enable      = true
    sample_rate = var.api_log_sample_rate
  }
}

# The cdnRoutes of a function: answers that are the same for every caller
# (anonymous counts). Cloud CDN's documented rules
# (https://cloud.google.com/cdn/docs/caching):
# - only a response with Cache-Control "public" and a max-age/s-maxage (or
#   Expires) is stored, and "private", "no-store" or "no-cache" prevents it;
#   the function answers "public, max-age=<COUNTS_MAX_AGE>" (2 s), so
#   USE_ORIGIN_HEADERS caches exactly what the origin allows, for as long as
#   it allows, and a signed-in or error answer that says otherwise is never
#   kept;
# - a response with a Vary header other than Accept, Accept-Encoding or
#   Origin is not cached (so "Vary: Authorization" would disable caching);
#   the cache key holds no request header by default, so the Authorization
#   header is not in it: these routes must answer the same whoever asks, and
#   the personal part of counts has a route of its own (/v1/me/counts) on
#   the uncached backend;
# - the cache key is by default protocol + host + path + query string; here
#   path + the "ids" parameter only (one host, HTTPS only, and other
#   parameters must not split the cache);
# - negative caching (errors cached for default TTLs) is off: a 4xx/5xx is
#   never served from the cache.
resource "google_compute_backend_service" "cdn" {
  for_each = local.cdn_paths

  project               = var.project_id
  name                  = "engagement-${local.public_functions[each.key].id}-cdn"
  protocol              = "HTTPS"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  # Cloud Armor on a CDN backend sees the cache misses; hits are served at
  # the edge without reaching the function.
  security_policy = google_compute_security_policy.api.id

  enable_cdn = true
  cdn_policy {
    cache_mode       = "USE_ORIGIN_HEADERS"
    negative_caching = false

    cache_key_policy {
      include_host           = false
      include_protocol       = false
      include_query_string   = true
      query_string_whitelist = ["ids"]
    }
  }

  # Every region the function runs in: the load balancer sends each request
  # to the nearest healthy one.
  dynamic "backend" {
    for_each = local.function_negs[each.key]
    content {
      group = backend.value
    }
  }

  # A serverless NEG has no health check: outlier detection is what takes
  # a sick region's traffic away (local.outlier_detection).
  outlier_detection {
    consecutive_errors           = local.outlier_detection.consecutive_errors
    enforcing_consecutive_errors = 100
    max_ejection_percent         = local.outlier_detection.max_ejection_percent

    interval {
      seconds = local.outlier_detection.interval_seconds
    }
    base_ejection_time {
      seconds = local.outlier_detection.base_ejection_seconds
    }
  }

  log_config {
    enable      = true
    sample_rate = var.cdn_log_sample_rate
  }
}

# Cloud Armor on every public backend:
# - a per-client-IP rate limit: past the threshold an IP gets 429 until its
#   rate falls back under it;
# - Google's preconfigured WAF rules against SQL injection and cross-site
#   scripting, in preview (matches logged, nothing refused) unless
#   waf_preview is false. The API takes free text (comments) that may quote
#   SQL or HTML, stores it as data (Spanner query parameters, JSON answers,
#   never HTML), so a refused match would mostly be a reader's comment lost;
#   the preview logs say what deny would refuse before anyone turns it on
#   (docs/identity.md);
# - Adaptive Protection: layer-7 DDoS detection that alerts and proposes
#   rules from the traffic it learns.
resource "google_compute_security_policy" "api" {
  project     = var.project_id
  name        = "engagement-api"
  description = "Per-IP rate limit, SQLi/XSS WAF and Adaptive Protection on the public API."
  type        = "CLOUD_ARMOR"

  adaptive_protection_config {
    layer_7_ddos_defense_config {
      enable          = true
      rule_visibility = "STANDARD"
    }
  }

  rule {
    action   = "throttle"
    priority = 1000
    match {
      versioned_expr = "SRC_IPS_V1"
      config {
        src_ip_ranges = ["*"]
      }
    }
    rate_limit_options {
      conform_action = "allow"
      exceed_action  = "deny(429)"
      enforce_on_key = "IP"
      rate_limit_threshold {
        count        = var.api_rate_limit_per_ip.count
        interval_sec = var.api_rate_limit_per_ip.interval_sec
      }
    }
    description = "At most ${var.api_rate_limit_per_ip.count} requests per ${var.api_rate_limit_per_ip.interval_sec}s per client IP."
  }

  dynamic "rule" {
    for_each = local.waf_rules
    content {
      action   = "deny(403)"
      priority = rule.value.priority
      preview  = var.waf_preview
      match {
        expr {
          expression = "evaluatePreconfiguredWaf('${rule.key}', {'sensitivity': ${var.waf_sensitivity}})"
        }
      }
      description = rule.value.description
    }
  }

  rule {
    action   = "allow"
    priority = 2147483647
    match {
      versioned_expr = "SRC_IPS_V1"
      config {
        src_ip_ranges = ["*"]
      }
    }
    description = "Default: allow."
  }

  depends_on = [google_project_service.api]
}

locals {
  # Preconfigured WAF rule sets (Cloud Armor's names) and their priorities:
  # before the rate limit, whose conform action "allow" ends the evaluation
  # of every request under the limit.
  waf_rules = {
    "sqli-v33-stable" = { priority = 900, description = "SQL injection (OWASP CRS 3.3)." }
    "xss-v33-stable"  = { priority = 901, description = "Cross-site scripting (OWASP CRS 3.3)." }
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
      for_each = { for k, p in local.api_paths : k => p if length(p) > 0 }
      content {
        paths   = path_rule.value
        service = google_compute_backend_service.fn[path_rule.key].id
      }
    }

    dynamic "path_rule" {
      for_each = local.cdn_paths
      content {
        paths   = path_rule.value
        service = google_compute_backend_service.cdn[path_rule.key].id
      }
    }
  }
}

# TLS 1.2 at least, MODERN profile; Google's default policy also accepts
# TLS 1.0 and 1.1 (docs/identity.md).
resource "google_compute_ssl_policy" "api" {
  project         = var.project_id
  name            = "engagement-api"
  profile         = "MODERN"
  min_tls_version = "TLS_1_2"

  depends_on = [google_project_service.api]
}

resource "google_compute_target_https_proxy" "api" {
  project          = var.project_id
  name             = "engagement-api"
  url_map          = google_compute_url_map.api.id
  ssl_certificates = [google_compute_managed_ssl_certificate.api.id]
  ssl_policy       = google_compute_ssl_policy.api.id
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
