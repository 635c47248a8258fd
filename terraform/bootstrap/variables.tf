variable "project_id" {
  description = "Project of this environment (one project per environment)."
  type        = string
}

variable "environment" {
  description = "dev or prod: the terraform/envs root the triggers plan and apply."
  type        = string

  validation {
    condition     = contains(["dev", "prod"], var.environment)
    error_message = "environment must be dev or prod."
  }
}

variable "region" {
  description = "Region of the Cloud Build repository connection and of the triggers' builds."
  type        = string
  default     = "us-central1"
}

variable "state_bucket" {
  description = "The Terraform state bucket, created by hand before this root (docs/deploy.md); empty means <project_id>-tfstate."
  type        = string
  default     = ""
}

variable "repository" {
  description = "Cloud Build repository (2nd gen) of the code: projects/<p>/locations/<region>/connections/<c>/repositories/<r>."
  type        = string

  validation {
    condition     = can(regex("^projects/[^/]+/locations/[^/]+/connections/[^/]+/repositories/[^/]+$", var.repository))
    error_message = "repository must be a Cloud Build repository resource name."
  }
}

variable "extra_regions" {
  description = "Regions beside region that hold the pipeline's triggers too, each with its own repository connection (a connection is regional): region => projects/<p>/locations/<region>/connections/<c>/repositories/<r>. Prod: one, so that the pipeline plans and applies from either region (docs/operations.md, a region lost)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for r, repo in var.extra_regions : can(regex("^projects/[^/]+/locations/${r}/connections/[^/]+/repositories/[^/]+$", repo))])
    error_message = "each of extra_regions maps a region to a Cloud Build repository of that region."
  }
}

variable "branch" {
  description = "The branch whose commits are planned and applied."
  type        = string
  default     = "main"
}

variable "api_domain" {
  description = "Host name of the public API (the plan trigger's _API_DOMAIN)."
  type        = string
}

variable "alert_emails" {
  description = "E-mail addresses of the alert policies (the plan trigger's _ALERT_EMAILS)."
  type        = list(string)
  default     = []
}

variable "approvers" {
  description = "Principals (user:…, group:…) who approve apply builds: roles/cloudbuild.builds.approver."
  type        = list(string)
  default     = []
}

variable "operators" {
  description = "Principals who run the triggers (start a plan, start an apply for a plan): roles/cloudbuild.builds.editor."
  type        = list(string)
  default     = []
}
