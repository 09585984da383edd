variable "name_prefix" {
  description = "Prefix for every resource name, e.g. \"advrag-prod\"."
  type        = string
}

variable "vpc_id" {
  description = "VPC the workers run in."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets (with a NAT gateway or VPC endpoints for egress) the autoscaling group launches workers into; several AZs widen spot capacity."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0
    error_message = "Give at least one subnet id."
  }
}

variable "instance_type" {
  description = "GPU instance type of a worker (g6e.xlarge: 1x L40S 48 GB, 4 vCPU, 32 GiB)."
  type        = string
  default     = "g6e.xlarge"
}

variable "spot_fallback_instance_types" {
  description = "Further instance types the group may use when instance_type has no capacity (useful with spot), e.g. [\"g6.xlarge\", \"g5.xlarge\"]."
  type        = list(string)
  default     = []
}

variable "worker_count" {
  description = "Number of GPU workers (the group's min, max and desired size); 0 stops them all."
  type        = number
  default     = 1

  validation {
    condition     = var.worker_count >= 0 && var.worker_count <= 64
    error_message = "worker_count must be between 0 and 64."
  }
}

variable "ami_id" {
  description = "AMI for the workers; null resolves the latest AWS Deep Learning Base AMI through ami_ssm_parameter."
  type        = string
  default     = null
}

variable "ami_ssm_parameter" {
  description = "Public SSM parameter that names the current GPU AMI, used when ami_id is null (NVIDIA driver and CUDA preinstalled, SSM agent included)."
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
}

variable "root_device_name" {
  description = "Root device name of the AMI (/dev/sda1 for the Ubuntu-based Deep Learning AMIs)."
  type        = string
  default     = "/dev/sda1"
}

variable "root_volume_size_gb" {
  description = "Size of the encrypted gp3 root volume in GiB (AMI ~60 GiB + venv + model and dataset caches)."
  type        = number
  default     = 200

  validation {
    condition     = var.root_volume_size_gb >= 100
    error_message = "root_volume_size_gb must be at least 100 (the Deep Learning AMI alone uses most of 75 GiB)."
  }
}

variable "use_spot" {
  description = "Run workers on spot capacity (about a third of the on-demand price; a run can be interrupted with two minutes' notice; the next run resumes from the checkpoints in the bucket)."
  type        = bool
  default     = false
}

variable "spot_max_price" {
  description = "Highest hourly spot price in USD as a string; \"\" caps it at the on-demand price."
  type        = string
  default     = ""
}

variable "project_repo_url" {
  description = "Git URL the worker clones the project from (https; a private repository needs a credential helper or a deploy key baked into the AMI)."
  type        = string
}

variable "project_git_ref" {
  description = "Commit (40 hex digits) the worker checks out: a branch or tag can move under a running fleet, a commit cannot."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{40}$", var.project_git_ref))
    error_message = "project_git_ref must be a full commit hash (git rev-parse HEAD), not a branch or tag."
  }
}

variable "prefect_api_url" {
  description = "Prefect API URL the worker polls over HTTPS: a Prefect Cloud workspace URL, or a self-hosted server behind a TLS proxy, e.g. https://prefect.internal/api."
  type        = string

  validation {
    condition     = startswith(var.prefect_api_url, "https://")
    error_message = "prefect_api_url must be https://: the worker sends its API key or auth string with every request."
  }
}

variable "prefect_api_key_ssm_parameter" {
  description = "Name of an SSM SecureString parameter holding a Prefect Cloud API key; \"\" for a self-hosted server (then set prefect_auth_string_ssm_parameter)."
  type        = string
  default     = ""
}

variable "prefect_auth_string_ssm_parameter" {
  description = "Name of an SSM SecureString parameter holding the self-hosted Prefect server's auth string (user:password, its PREFECT_SERVER_API_AUTH_STRING); \"\" for Prefect Cloud."
  type        = string
  default     = ""

  validation {
    condition     = (var.prefect_auth_string_ssm_parameter == "") != (var.prefect_api_key_ssm_parameter == "")
    error_message = "Set exactly one of prefect_api_key_ssm_parameter (Prefect Cloud) and prefect_auth_string_ssm_parameter (a self-hosted server): the worker never talks to an API without credentials."
  }
}

variable "mlflow_username" {
  description = "MLflow user the worker signs in as (the tracking server's basic auth)."
  type        = string
}

variable "mlflow_password_ssm_parameter" {
  description = "Name of the SSM SecureString parameter holding that user's password."
  type        = string
}

variable "mlflow_tls_certificate_parameter" {
  description = "Name of the SSM parameter holding the tracking server's TLS certificate, the one the workers trust."
  type        = string
}

variable "prefect_work_pool" {
  description = "Prefect work pool (type process) the workers join; created on first start when missing."
  type        = string
  default     = "advrag-gpu"
}

variable "prefect_worker_limit" {
  description = "Most flow runs one worker runs at a time (one per GPU)."
  type        = number
  default     = 1
}

variable "prefect_api_cidr_blocks" {
  description = "CIDR blocks of a self-hosted Prefect server the workers may reach on prefect_api_port; leave empty for Prefect Cloud (HTTPS egress covers it)."
  type        = list(string)
  default     = []
}

variable "prefect_api_port" {
  description = "TCP port of the self-hosted Prefect server API."
  type        = number
  default     = 4200
}

variable "mlflow_tracking_uri" {
  description = "MLflow tracking URI the training runs log to (the tracking server's private address)."
  type        = string
}

variable "tracking_server_security_group_id" {
  description = "Security group of the MLflow tracking server; the workers get egress to it on tracking_server_port."
  type        = string
}

variable "tracking_server_port" {
  description = "TCP port of the MLflow tracking server."
  type        = number
  default     = 5000
}

variable "artifact_bucket_name" {
  description = "Name of the artefact bucket (DVC remote, checkpoints)."
  type        = string
}

variable "artifact_bucket_arn" {
  description = "ARN of the artefact bucket."
  type        = string
}

variable "artifact_prefixes" {
  description = "Key prefixes (no slashes at the ends) the workers may read and write in the artefact bucket; nothing else in the bucket is reachable."
  type        = list(string)
  default     = ["dvc", "checkpoints"]

  validation {
    condition     = alltrue([for p in var.artifact_prefixes : can(regex("^[A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]$", p))])
    error_message = "Each prefix must be non-empty and must not start or end with a slash."
  }
}

variable "kms_key_arn" {
  description = "Project KMS key: decrypts bucket objects and the Prefect key parameter, encrypts the log group."
  type        = string
}

variable "egress_cidr_blocks" {
  description = "Destinations for HTTP/HTTPS egress (package indexes, git host, AWS APIs); narrow to a proxy or endpoint range where you have one."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "log_retention_days" {
  description = "Retention of the worker log group in days."
  type        = number
  default     = 365
}
