output "security_group_id" {
  description = "Security group of the workers (the tracking server admits it on port 5000)."
  value       = aws_security_group.this.id
}

output "autoscaling_group_name" {
  description = "Name of the workers' autoscaling group (scale with `aws autoscaling set-desired-capacity`)."
  value       = aws_autoscaling_group.this.name
}

output "launch_template_id" {
  description = "ID of the workers' launch template."
  value       = aws_launch_template.this.id
}

output "iam_role_arn" {
  description = "ARN of the workers' IAM role."
  value       = module.role.role_arn
}

output "log_group_name" {
  description = "CloudWatch log group with the Prefect worker and cloud-init logs."
  value       = module.role.log_group_name
}
