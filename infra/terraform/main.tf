# advrag on AWS: an artefact bucket (DVC remote + MLflow artefacts + checkpoints), an
# MLflow tracking server with a PostgreSQL backend, and an autoscaling group of GPU
# workers that join a Prefect work pool. Networking (VPC, private subnets, NAT) is an
# input. Apply steps and costs: docs/infrastructure.md.

provider "aws" {
  region = var.aws_region

  default_tags {
    tags = merge(
      {
        Project     = var.project
        Environment = var.environment
        ManagedBy   = "terraform"
      },
      var.tags,
    )
  }
}

locals {
  name = "${var.project}-${var.environment}"

  # Bucket layout: one prefix per writer, so each role reaches only its own keys.
  dvc_prefix        = "dvc"
  checkpoint_prefix = "checkpoints"
  mlflow_prefix     = "mlflow"
}

module "artifact_bucket" {
  source = "./modules/artifact_bucket"

  name_prefix                        = local.name
  noncurrent_version_expiration_days = var.artifact_noncurrent_version_days
  access_log_bucket                  = var.access_log_bucket
}

module "tracking_server" {
  source = "./modules/tracking_server"

  name_prefix   = local.name
  vpc_id        = var.vpc_id
  subnet_ids    = var.private_subnet_ids
  instance_type = var.tracking_instance_type

  project_repo_url = var.project_repo_url
  project_git_ref  = var.project_git_ref

  client_security_group_ids = { gpu_workers = module.gpu_workers.security_group_id }
  allowed_cidr_blocks       = var.tracking_allowed_cidr_blocks
  egress_cidr_blocks        = var.egress_cidr_blocks

  artifact_bucket_name = module.artifact_bucket.bucket_name
  artifact_bucket_arn  = module.artifact_bucket.bucket_arn
  artifact_prefix      = local.mlflow_prefix
  kms_key_arn          = module.artifact_bucket.kms_key_arn

  db_instance_class      = var.db_instance_class
  db_multi_az            = var.db_multi_az
  db_deletion_protection = var.db_deletion_protection
  secrets_version        = var.secrets_version
  log_retention_days     = var.log_retention_days
}

module "gpu_workers" {
  source = "./modules/gpu_workers"

  name_prefix                  = local.name
  vpc_id                       = var.vpc_id
  subnet_ids                   = var.private_subnet_ids
  instance_type                = var.worker_instance_type
  spot_fallback_instance_types = var.worker_fallback_instance_types
  worker_count                 = var.worker_count
  ami_id                       = var.worker_ami_id
  root_volume_size_gb          = var.worker_root_volume_size_gb
  use_spot                     = var.worker_use_spot
  spot_max_price               = var.worker_spot_max_price

  project_repo_url                  = var.project_repo_url
  project_git_ref                   = var.project_git_ref
  prefect_api_url                   = var.prefect_api_url
  prefect_api_key_ssm_parameter     = var.prefect_api_key_ssm_parameter
  prefect_auth_string_ssm_parameter = var.prefect_auth_string_ssm_parameter
  prefect_work_pool                 = var.prefect_work_pool
  prefect_api_cidr_blocks           = var.prefect_api_cidr_blocks
  prefect_api_port                  = var.prefect_api_port

  mlflow_tracking_uri               = module.tracking_server.tracking_uri
  mlflow_username                   = module.tracking_server.worker_username
  mlflow_password_ssm_parameter     = module.tracking_server.worker_password_parameter
  mlflow_tls_certificate_parameter  = module.tracking_server.tls_certificate_parameter
  tracking_server_security_group_id = module.tracking_server.security_group_id

  artifact_bucket_name = module.artifact_bucket.bucket_name
  artifact_bucket_arn  = module.artifact_bucket.bucket_arn
  artifact_prefixes    = [local.dvc_prefix, local.checkpoint_prefix]
  kms_key_arn          = module.artifact_bucket.kms_key_arn
  egress_cidr_blocks   = var.egress_cidr_blocks
  log_retention_days   = var.log_retention_days
}
