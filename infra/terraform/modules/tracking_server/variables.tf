variable "name_prefix" {
  description = "Prefix for every resource name, e.g. \"advrag-prod\"."
  type        = string
}

variable "vpc_id" {
  description = "VPC the tracking server and its database run in."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets in at least two AZs: the server runs in the first, the database subnet group spans all."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "RDS needs subnets in at least two availability zones."
  }
}

variable "instance_type" {
  description = "Instance type of the MLflow server (t3.medium: 2 vCPU, 4 GiB; enough for a team's tracking and UI)."
  type        = string
  default     = "t3.medium"
}

variable "ami_id" {
  description = "AMI for the server; null resolves the current Ubuntu 24.04 LTS image through ami_ssm_parameter."
  type        = string
  default     = null
}

variable "ami_ssm_parameter" {
  description = "Public SSM parameter naming the server AMI, used when ami_id is null."
  type        = string
  default     = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
}

variable "root_volume_size_gb" {
  description = "Size of the encrypted gp3 root volume in GiB."
  type        = number
  default     = 30
}

variable "project_repo_url" {
  description = "Git URL the server clones the project from, for its hash-locked MLflow environment (infra/tracking_server/requirements.lock)."
  type        = string
}

variable "project_git_ref" {
  description = "Commit (40 hex digits) whose lock the server installs: a branch or tag can move, a commit cannot."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{40}$", var.project_git_ref))
    error_message = "project_git_ref must be a full commit hash (git rev-parse HEAD), not a branch or tag."
  }
}

variable "mlflow_port" {
  description = "TCP port of the server's TLS endpoint (nginx, in front of MLflow on 127.0.0.1:5001)."
  type        = number
  default     = 5000

  validation {
    condition     = var.mlflow_port != 5001 && var.mlflow_port > 0 && var.mlflow_port < 65536
    error_message = "mlflow_port is a TCP port other than 5001, where MLflow itself listens on loopback."
  }
}

variable "mlflow_workers" {
  description = "MLflow server worker processes."
  type        = number
  default     = 2
}

variable "client_security_group_ids" {
  description = "Security groups allowed to reach the server on mlflow_port, keyed by a stable name, e.g. { gpu_workers = \"sg-...\" }."
  type        = map(string)
  default     = {}
}

variable "allowed_cidr_blocks" {
  description = "Extra private CIDR blocks allowed to reach the server on mlflow_port (e.g. a VPN range for the UI): each inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7."
  type        = list(string)
  default     = []

  validation {
    # each block must lie inside a private range: its address in the range and its prefix at least the range's
    condition = alltrue([for c in var.allowed_cidr_blocks : can(cidrhost(c, 0)) && anytrue([for r in [
      "^10\\.[0-9.]+/([89]|[12][0-9]|3[0-2])$",
      "^172\\.(1[6-9]|2[0-9]|3[01])\\.[0-9.]+/(1[2-9]|2[0-9]|3[0-2])$",
      "^192\\.168\\.[0-9.]+/(1[6-9]|2[0-9]|3[0-2])$",
      "^100\\.(6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7])\\.[0-9.]+/(1[0-9]|2[0-9]|3[0-2])$",
      "^f[cd][0-9a-f]{0,2}:[0-9a-f:]*/([7-9]|[1-9][0-9]|1[01][0-9]|12[0-8])$",
    ] : can(regex(r, lower(c)))])])
    error_message = "The tracking server takes private ranges only (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7): never the internet; use SSM port forwarding or a VPN range."
  }
}

variable "egress_cidr_blocks" {
  description = "Destinations for the server's HTTP/HTTPS egress (package index, S3, SSM and CloudWatch APIs)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "artifact_bucket_name" {
  description = "Name of the artefact bucket MLflow stores artefacts in."
  type        = string
}

variable "artifact_bucket_arn" {
  description = "ARN of the artefact bucket."
  type        = string
}

variable "artifact_prefix" {
  description = "Key prefix (no slashes at the ends) for MLflow artefacts; the server proxies all artefact traffic, so only it needs access."
  type        = string
  default     = "mlflow"
}

variable "kms_key_arn" {
  description = "Project KMS key: RDS storage, Performance Insights, the password parameter, the log group, bucket objects."
  type        = string
}

variable "db_instance_class" {
  description = "RDS instance class of the PostgreSQL backend store."
  type        = string
  default     = "db.t4g.small"
}

variable "db_engine_version" {
  description = "PostgreSQL major version (RDS picks the newest minor and upgrades minors automatically)."
  type        = string
  default     = "16"
}

variable "db_allocated_storage_gb" {
  description = "Initial database storage in GiB."
  type        = number
  default     = 20
}

variable "db_max_allocated_storage_gb" {
  description = "Ceiling for storage autoscaling in GiB."
  type        = number
  default     = 100
}

variable "db_multi_az" {
  description = "Run the database as a Multi-AZ deployment (doubles its cost; survives an AZ outage)."
  type        = bool
  default     = false
}

variable "db_backup_retention_days" {
  description = "Days of automated database backups (point-in-time recovery window)."
  type        = number
  default     = 7

  validation {
    condition     = var.db_backup_retention_days >= 1
    error_message = "Keep at least one day of backups."
  }
}

variable "db_deletion_protection" {
  description = "Protect the database from deletion; set false (and apply) before `terraform destroy`."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Retention of the server log group in days."
  type        = number
  default     = 365
}

variable "secrets_version" {
  description = "Version of the generated database, admin and worker passwords: raise it by one to rotate them in the next apply (none is ever stored in state)."
  type        = number
  default     = 1

  validation {
    condition     = var.secrets_version >= 1 && floor(var.secrets_version) == var.secrets_version
    error_message = "secrets_version is a whole number from 1; raise it by one to rotate the passwords."
  }
}
