output "role_arn" {
  description = "ARN of the IAM role."
  value       = aws_iam_role.this.arn
}

output "instance_profile_arn" {
  description = "ARN of the instance profile (launch templates take the ARN)."
  value       = aws_iam_instance_profile.this.arn
}

output "instance_profile_name" {
  description = "Name of the instance profile (aws_instance takes the name)."
  value       = aws_iam_instance_profile.this.name
}

output "log_group_name" {
  description = "Name of the instance's CloudWatch log group."
  value       = aws_cloudwatch_log_group.this.name
}

output "cloudwatch_agent_installer" {
  description = "Boot script that installs the CloudWatch agent once its package's signature checks out against Amazon's pinned key."
  value       = file("${path.module}/install-cloudwatch-agent.sh")
}
