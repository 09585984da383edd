output "artifact_bucket_name" {
  description = "Artefact bucket name."
  value       = module.artifact_bucket.bucket_name
}

output "dvc_remote_url" {
  description = "URL for `dvc remote add -d s3 <url>` (the workers can write here)."
  value       = "s3://${module.artifact_bucket.bucket_name}/${local.dvc_prefix}"
}

output "checkpoint_url" {
  description = "Where the GPU workers may write checkpoints."
  value       = "s3://${module.artifact_bucket.bucket_name}/${local.checkpoint_prefix}"
}

output "kms_key_arn" {
  description = "Project KMS key ARN."
  value       = module.artifact_bucket.kms_key_arn
}

output "mlflow_tracking_uri" {
  description = "MLflow tracking URI inside the VPC (set as MLFLOW_TRACKING_URI on the workers)."
  value       = module.tracking_server.tracking_uri
}

output "tracking_server_instance_id" {
  description = "Instance ID of the tracking server."
  value       = module.tracking_server.instance_id
}

output "mlflow_ui_port_forward_command" {
  description = "Opens the MLflow UI on https://localhost:5000 through SSM Session Manager (the server's self-signed certificate: trust it from its SSM parameter)."
  value       = "aws ssm start-session --region ${var.aws_region} --target ${module.tracking_server.instance_id} --document-name AWS-StartPortForwardingSession --parameters portNumber=5000,localPortNumber=5000"
}

output "mlflow_db_endpoint" {
  description = "Private endpoint of the MLflow PostgreSQL database."
  value       = module.tracking_server.db_endpoint
}

output "mlflow_db_password_parameter" {
  description = "SSM SecureString parameter holding the database password."
  value       = module.tracking_server.db_password_parameter
}

output "gpu_worker_autoscaling_group" {
  description = "Autoscaling group of the GPU workers."
  value       = module.gpu_workers.autoscaling_group_name
}

output "gpu_worker_security_group_id" {
  description = "Security group of the GPU workers."
  value       = module.gpu_workers.security_group_id
}

output "log_groups" {
  description = "CloudWatch log groups of the workers and the tracking server."
  value = {
    gpu_workers     = module.gpu_workers.log_group_name
    tracking_server = module.tracking_server.log_group_name
  }
}
