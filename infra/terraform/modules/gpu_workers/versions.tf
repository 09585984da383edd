terraform {
  # 1.9+: a variable's validation may read another variable (the Prefect credentials).
  required_version = ">= 1.9.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0, < 7.0"
    }
  }
}
