variable "name" {
  description = "Name prefix of the role and the instance profile (e.g. advrag-prod-gpu-worker)."
  type        = string
}

variable "description" {
  description = "What the role is for, shown in the IAM console."
  type        = string
}

variable "policy_name" {
  description = "Name of the role's inline policy."
  type        = string
}

variable "artifact_bucket_arn" {
  description = "ARN of the artefact bucket."
  type        = string
}

variable "artifact_prefixes" {
  description = "Bucket prefixes (no slashes at either end) the instance may list, read and write; nothing else."
  type        = list(string)

  validation {
    condition     = length(var.artifact_prefixes) > 0 && alltrue([for p in var.artifact_prefixes : can(regex("^[A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]$", p))])
    error_message = "Give at least one prefix, each non-empty and without a slash at either end (e.g. \"dvc\")."
  }
}

variable "kms_key_arn" {
  description = "ARN of the project's KMS key (bucket objects, log group, SSM parameters)."
  type        = string
}

variable "log_group_name" {
  description = "CloudWatch log group the instance writes (created here, encrypted with kms_key_arn)."
  type        = string
}

variable "log_retention_days" {
  description = "Retention of the log group, in days."
  type        = number
}

variable "ssm_parameter_arns" {
  description = "ARNs of the SSM parameters the instance may read (secrets); empty = none."
  type        = list(string)
  default     = []
}

variable "writable_parameter_arns" {
  description = "ARNs of String (not secret) SSM parameters the instance writes, e.g. its TLS certificate; empty = none."
  type        = list(string)
  default     = []
}
