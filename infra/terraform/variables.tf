# ---------------------------------------------------------------- account and naming

variable "aws_region" {
  description = "AWS region everything is created in (pick one with the GPU instance type and quota)."
  type        = string
  default     = "us-east-1"
}

variable "project" {
  description = "Project name, first part of every resource name."
  type        = string
  default     = "advrag"
}

variable "environment" {
  description = "Environment name, second part of every resource name (dev, staging, prod)."
  type        = string
  default     = "dev"
}

variable "tags" {
  description = "Extra tags put on every resource (cost allocation, owner)."
  type        = map(string)
  default     = {}
}

# ---------------------------------------------------------------- network (existing VPC)

variable "vpc_id" {
  description = "Existing VPC to deploy into."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets in at least two AZs, with egress through a NAT gateway (or VPC endpoints); nothing here gets a public IP."
  type        = list(string)
}

variable "egress_cidr_blocks" {
  description = "Destinations the instances may reach over HTTP/HTTPS (package indexes, git host, AWS APIs)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "tracking_allowed_cidr_blocks" {
  description = "Private CIDR blocks (e.g. a VPN) allowed to open the MLflow UI directly; empty means SSM port forwarding only."
  type        = list(string)
  default     = []
}

# ---------------------------------------------------------------- project and Prefect

variable "project_repo_url" {
  description = "Git URL of this project, cloned by every GPU worker."
  type        = string
}

variable "project_git_ref" {
  description = "Commit (40 hex digits) the GPU workers run; a branch or tag is refused."
  type        = string
}

variable "prefect_api_url" {
  description = "HTTPS Prefect API URL the GPU workers poll (Prefect Cloud workspace, or a self-hosted server behind a TLS proxy)."
  type        = string
}

variable "prefect_api_key_ssm_parameter" {
  description = "Name of an existing SSM SecureString parameter with a Prefect Cloud API key; \"\" for a self-hosted server."
  type        = string
  default     = ""
}

variable "prefect_auth_string_ssm_parameter" {
  description = "Name of an existing SSM SecureString parameter with a self-hosted Prefect server's auth string (user:password); \"\" for Prefect Cloud."
  type        = string
  default     = ""
}

variable "prefect_api_cidr_blocks" {
  description = "CIDR blocks of a self-hosted Prefect server the workers may reach on prefect_api_port (empty for Prefect Cloud)."
  type        = list(string)
  default     = []
}

variable "prefect_api_port" {
  description = "Port of the self-hosted Prefect server API."
  type        = number
  default     = 4200
}

variable "prefect_work_pool" {
  description = "Prefect work pool (type process) the GPU workers join; GPU deployments target it."
  type        = string
  default     = "advrag-gpu"
}

# ---------------------------------------------------------------- GPU workers

variable "worker_instance_type" {
  description = "GPU instance type of a worker."
  type        = string
  default     = "g6e.xlarge"
}

variable "worker_fallback_instance_types" {
  description = "Other GPU instance types the worker group may use when the first has no capacity."
  type        = list(string)
  default     = []
}

variable "worker_count" {
  description = "Number of GPU workers; 0 keeps the group but runs (and bills) no instance."
  type        = number
  default     = 1
}

variable "worker_ami_id" {
  description = "Worker AMI; null uses the latest AWS Deep Learning Base AMI (Ubuntu 24.04, NVIDIA driver)."
  type        = string
  default     = null
}

variable "worker_root_volume_size_gb" {
  description = "Encrypted root volume of each worker in GiB."
  type        = number
  default     = 200
}

variable "worker_use_spot" {
  description = "Run workers on spot capacity (cheaper, interruptible)."
  type        = bool
  default     = false
}

variable "worker_spot_max_price" {
  description = "Highest hourly spot price in USD; \"\" caps it at the on-demand price."
  type        = string
  default     = ""
}

# ---------------------------------------------------------------- tracking server

variable "tracking_instance_type" {
  description = "Instance type of the MLflow tracking server."
  type        = string
  default     = "t3.medium"
}

variable "secrets_version" {
  description = "Version of the MLflow database, admin and worker passwords (generated, never in state): raise by one to rotate them."
  type        = number
  default     = 1
}

variable "db_instance_class" {
  description = "RDS instance class of the MLflow PostgreSQL database."
  type        = string
  default     = "db.t4g.small"
}

variable "db_multi_az" {
  description = "Multi-AZ database (doubles its cost)."
  type        = bool
  default     = false
}

variable "db_deletion_protection" {
  description = "Protect the MLflow database from deletion (turn off before destroying)."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------- storage and logs

variable "artifact_noncurrent_version_days" {
  description = "Days an overwritten or deleted artefact version is kept before it expires."
  type        = number
  default     = 30
}

variable "access_log_bucket" {
  description = "Existing bucket for S3 server access logs of the artefact bucket; null disables access logging."
  type        = string
  default     = null
}

variable "log_retention_days" {
  description = "Retention of the CloudWatch log groups in days."
  type        = number
  default     = 365
}
