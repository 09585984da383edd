terraform {
  # 1.11+: write-only arguments (the generated passwords never reach state); 1.10+: the S3
  # backend's lock file (use_lockfile) and ephemeral resources.
  required_version = ">= 1.11.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0, < 7.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.7, < 4.0"
    }
  }

  # State holds no password (write-only arguments), but names every resource: it lives in an
  # encrypted S3 backend, locked by a lock file beside it while a plan or apply runs. Name the bucket and
  # region at init: terraform init -backend-config="bucket=<state bucket>" \
  #   -backend-config="region=<region>" (docs/infrastructure.md).
  backend "s3" {
    key          = "advrag/terraform.tfstate"
    encrypt      = true
    use_lockfile = true
  }
}
