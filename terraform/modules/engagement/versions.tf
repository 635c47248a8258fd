terraform {
  required_version = ">= 1.11.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
    # Only for google_project_service_identity, which google does not have.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "~> 6.50"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
    # time_sleep: waits for what Google propagates after the call returns.
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }
}
