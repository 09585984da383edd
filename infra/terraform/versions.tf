terraform {
  # 1.10+: the S3 backend's lock file (use_lockfile); `check` and `import` blocks.
  required_version = ">= 1.10.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0, < 7.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6, < 4.0"
    }
  }

  # State holds the generated database password: it lives in an encrypted S3 backend, locked
  # by a lock file beside it while a plan or apply runs (Terraform 1.10+). Name the bucket and
  # region at init: terraform init -backend-config="bucket=<state bucket>" \
  #   -backend-config="region=<region>" (docs/infrastructure.md).
  backend "s3" {
    key          = "advrag/terraform.tfstate"
    encrypt      = true
    use_lockfile = true
  }
}
