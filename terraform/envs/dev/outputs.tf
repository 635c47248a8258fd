output "api_ip" {
  description = "Point the api_domain A record here."
  value       = module.engagement.api_ip
}

output "api_url" {
  value = module.engagement.api_url
}

output "function_uris" {
  value = module.engagement.function_uris
}
