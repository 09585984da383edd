output "tracking_uri" {
  description = "MLflow tracking URI (TLS) on the server's private address."
  value       = "https://${aws_instance.server.private_ip}:${var.mlflow_port}"
}

output "tls_certificate_parameter" {
  description = "Name of the SSM parameter holding the server's TLS certificate (clients trust it)."
  value       = aws_ssm_parameter.tls_certificate.name
}

output "instance_id" {
  description = "Instance ID of the tracking server (target of SSM sessions and port forwarding)."
  value       = aws_instance.server.id
}

output "security_group_id" {
  description = "Security group of the tracking server."
  value       = aws_security_group.server.id
}

output "db_endpoint" {
  description = "Address:port of the PostgreSQL backend store (private)."
  value       = aws_db_instance.this.endpoint
}

output "db_password_parameter" {
  description = "Name of the SSM SecureString parameter holding the database password."
  value       = aws_ssm_parameter.db_password.name
}

output "admin_password_parameter" {
  description = "Name of the SSM SecureString parameter holding the MLflow admin password (basic auth)."
  value       = aws_ssm_parameter.admin_password.name
}

output "admin_username" {
  description = "MLflow's admin user (for people administering the server, never the workers)."
  value       = local.admin_user
}

output "worker_username" {
  description = "MLflow user the workers sign in as (not an admin)."
  value       = local.worker_user
}

output "worker_password_parameter" {
  description = "Name of the SSM SecureString parameter holding the workers' MLflow password."
  value       = aws_ssm_parameter.worker_password.name
}

output "log_group_name" {
  description = "CloudWatch log group with the MLflow server and cloud-init logs."
  value       = module.role.log_group_name
}
