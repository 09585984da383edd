# GPU training workers: an autoscaling group of Deep Learning AMI instances. Each one
# installs the project from git (cloud-init), then runs `prefect worker start` on the
# GPU work pool as a systemd service. No inbound traffic at all: shell access is SSM
# Session Manager; egress is HTTP(S), the tracking server and (optionally) a
# self-hosted Prefect API.

data "aws_ssm_parameter" "ami" {
  count = var.ami_id == null ? 1 : 0
  name  = var.ami_ssm_parameter
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  name   = "${var.name_prefix}-gpu-worker"
  ami_id = var.ami_id != null ? var.ami_id : data.aws_ssm_parameter.ami[0].insecure_value

  instance_types = distinct(concat([var.instance_type], var.spot_fallback_instance_types))

  # The parameters a worker reads: the MLflow password and server certificate, and the
  # Prefect API key or auth string.
  secret_parameters = compact([
    var.mlflow_password_ssm_parameter,
    var.mlflow_tls_certificate_parameter,
    var.prefect_api_key_ssm_parameter,
    var.prefect_auth_string_ssm_parameter,
  ])
  secret_parameter_arns = [
    for name in local.secret_parameters :
    "arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:parameter/${trimprefix(name, "/")}"
  ]

  web_egress = {
    for pair in setproduct(var.egress_cidr_blocks, [80, 443]) :
    "${pair[1]}-${pair[0]}" => { cidr = pair[0], port = pair[1] }
  }

  user_data = templatefile("${path.module}/cloud-init.yaml.tftpl", {
    project_repo_url                  = var.project_repo_url
    project_git_ref                   = var.project_git_ref
    prefect_api_url                   = var.prefect_api_url
    prefect_api_key_ssm_parameter     = var.prefect_api_key_ssm_parameter
    prefect_auth_string_ssm_parameter = var.prefect_auth_string_ssm_parameter
    prefect_work_pool                 = var.prefect_work_pool
    prefect_worker_limit              = var.prefect_worker_limit
    mlflow_tracking_uri               = var.mlflow_tracking_uri
    mlflow_username                   = var.mlflow_username
    mlflow_password_ssm_parameter     = var.mlflow_password_ssm_parameter
    mlflow_tls_certificate_parameter  = var.mlflow_tls_certificate_parameter
    artifact_bucket_name              = var.artifact_bucket_name
    log_group_name                    = module.role.log_group_name
    cloudwatch_agent_installer        = indent(6, chomp(module.role.cloudwatch_agent_installer))
  })
}

# ---------------------------------------------------------------- network

resource "aws_security_group" "this" {
  name_prefix = "${local.name}-"
  description = "advrag GPU workers: no ingress; egress to HTTP(S), MLflow and the Prefect API only"
  vpc_id      = var.vpc_id

  tags = { Name = local.name }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "web" {
  for_each = local.web_egress

  security_group_id = aws_security_group.this.id
  description       = "HTTP(S) to package indexes, the git host and AWS APIs"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_egress_rule" "tracking" {
  security_group_id            = aws_security_group.this.id
  description                  = "MLflow tracking server"
  ip_protocol                  = "tcp"
  from_port                    = var.tracking_server_port
  to_port                      = var.tracking_server_port
  referenced_security_group_id = var.tracking_server_security_group_id
}

resource "aws_vpc_security_group_egress_rule" "prefect_api" {
  for_each = toset(var.prefect_api_cidr_blocks)

  security_group_id = aws_security_group.this.id
  description       = "Self-hosted Prefect API"
  ip_protocol       = "tcp"
  from_port         = var.prefect_api_port
  to_port           = var.prefect_api_port
  cidr_ipv4         = each.value
}

# ---------------------------------------------------------------- IAM (least privilege) and logs

module "role" {
  source = "../instance_role"

  name                = local.name
  description         = "advrag GPU worker: its artefact prefixes, its log group, SSM Session Manager"
  policy_name         = "advrag-worker"
  artifact_bucket_arn = var.artifact_bucket_arn
  artifact_prefixes   = var.artifact_prefixes
  kms_key_arn         = var.kms_key_arn
  log_group_name      = "/${var.name_prefix}/gpu-workers"
  log_retention_days  = var.log_retention_days
  ssm_parameter_arns  = local.secret_parameter_arns
}

# ---------------------------------------------------------------- compute

resource "aws_launch_template" "this" {
  name_prefix            = "${local.name}-"
  description            = "advrag GPU worker (Prefect work pool ${var.prefect_work_pool})"
  image_id               = local.ami_id
  instance_type          = var.instance_type
  ebs_optimized          = true
  update_default_version = true
  user_data              = base64encode(local.user_data)

  iam_instance_profile {
    arn = module.role.instance_profile_arn
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.this.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = var.root_device_name

    ebs {
      volume_size           = var.root_volume_size_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = local.name, "advrag:work-pool" = var.prefect_work_pool }
  }

  tag_specifications {
    resource_type = "volume"
    tags          = { Name = local.name }
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_autoscaling_group" "this" {
  name_prefix         = "${local.name}-"
  min_size            = var.worker_count
  max_size            = var.worker_count
  desired_capacity    = var.worker_count
  vpc_zone_identifier = var.subnet_ids
  health_check_type   = "EC2"
  capacity_rebalance  = var.use_spot

  mixed_instances_policy {
    instances_distribution {
      on_demand_base_capacity                  = 0
      on_demand_percentage_above_base_capacity = var.use_spot ? 0 : 100
      spot_allocation_strategy                 = "price-capacity-optimized"
      spot_max_price                           = var.spot_max_price
    }

    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.this.id
        version            = aws_launch_template.this.latest_version
      }

      dynamic "override" {
        for_each = local.instance_types

        content {
          instance_type = override.value
        }
      }
    }
  }

  tag {
    key                 = "Name"
    value               = local.name
    propagate_at_launch = true
  }

  tag {
    key                 = "advrag:work-pool"
    value               = var.prefect_work_pool
    propagate_at_launch = true
  }

  lifecycle {
    create_before_destroy = true
  }
}
