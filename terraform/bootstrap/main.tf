# The deployment pipeline of one environment's project: the state bucket's
# grants, the three build identities and the three Cloud Build triggers.
# Applied once by hand by a project owner, before the first build, and again
# only when the pipeline itself changes (docs/deploy.md). It is a root of its
# own, not part of terraform/modules/engagement: the identities must exist
# before the first plan, and an approved engagement plan must not be able to
# widen the pipeline's own rights or drop its approval gate (the apply
# identity has no right on triggers). State: the same bucket, prefix
# bootstrap/.
terraform {
  required_version = ">= 1.11.0"

  backend "gcs" {
    prefix = "bootstrap"
  }

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
