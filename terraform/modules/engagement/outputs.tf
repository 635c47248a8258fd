output "api_ip" {
  description = "Address of the load balancer; point the api_domain A record here."
  value       = google_compute_global_address.api.address
}

output "api_url" {
  description = "Base URL of the public API."
  value       = "https://${var.api_domain}/v1"
}

output "function_uris" {
  description = "Run URIs of every function, by entry point."
  value       = { for k, f in google_cloudfunctions2_function.fn : k => f.service_config[0].uri }
}

output "source_bucket" {
  description = "Bucket holding the source archives."
  value       = google_storage_bucket.source.name
}

output "spanner_database" {
  description = "Spanner database id."
  value       = google_spanner_database.main.id
}
