# MLflow tracking server: one EC2 instance running `mlflow server --app-name basic-auth`
# (systemd) on loopback behind nginx's TLS endpoint, with a PostgreSQL backend store on RDS
# and proxied artefacts in the artefact bucket. Every request needs a user and password. The database and admin passwords are
# generated for one apply and written only to the database and to SSM SecureStrings
# (write-only arguments, Terraform 1.11+): neither state nor plan holds them, nor user data
# or a command line. Reach the UI through SSM port forwarding (see docs/infrastructure.md).

data "aws_ssm_parameter" "ami" {
  count = var.ami_id == null ? 1 : 0
  name  = var.ami_ssm_parameter
}

data "aws_partition" "current" {}

locals {
  name       = "${var.name_prefix}-mlflow"
  ami_id     = var.ami_id != null ? var.ami_id : data.aws_ssm_parameter.ami[0].insecure_value
  db_name    = "mlflow"
  db_user    = "mlflow"
  admin_user = "admin"
  # The workers' MLflow user: not an admin, so it edits runs and models but makes no users and
  # grants nothing (the server's start script makes it and keeps its password current).
  worker_user = "advrag-worker"
  db_family   = "postgres${split(".", var.db_engine_version)[0]}"
  managed     = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
  web_egress = {
    for pair in setproduct(var.egress_cidr_blocks, [80, 443]) :
    "${pair[1]}-${pair[0]}" => { cidr = pair[0], port = pair[1] }
  }

  user_data = templatefile("${path.module}/cloud-init.yaml.tftpl", {
    project_repo_url           = var.project_repo_url
    project_git_ref            = var.project_git_ref
    mlflow_port                = var.mlflow_port
    mlflow_workers             = var.mlflow_workers
    artifacts_destination      = "s3://${var.artifact_bucket_name}/${var.artifact_prefix}"
    db_host                    = aws_db_instance.this.address
    db_port                    = aws_db_instance.this.port
    db_name                    = local.db_name
    db_user                    = local.db_user
    db_password_parameter      = aws_ssm_parameter.db_password.name
    admin_user                 = local.admin_user
    admin_password_parameter   = aws_ssm_parameter.admin_password.name
    worker_user                = local.worker_user
    worker_password_parameter  = aws_ssm_parameter.worker_password.name
    tls_certificate_parameter  = aws_ssm_parameter.tls_certificate.name
    log_group_name             = module.role.log_group_name
    cloudwatch_agent_installer = indent(6, chomp(module.role.cloudwatch_agent_installer))
  })
}

# ---------------------------------------------------------------- network

resource "aws_security_group" "server" {
  name_prefix = "${local.name}-server-"
  description = "MLflow tracking server: port ${var.mlflow_port} from the workers and listed CIDRs only"
  vpc_id      = var.vpc_id

  tags = { Name = "${local.name}-server" }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "from_clients" {
  for_each = var.client_security_group_ids

  security_group_id            = aws_security_group.server.id
  description                  = "MLflow from ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = var.mlflow_port
  to_port                      = var.mlflow_port
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_ingress_rule" "from_cidrs" {
  for_each = toset(var.allowed_cidr_blocks)

  security_group_id = aws_security_group.server.id
  description       = "MLflow from an allowed private range"
  ip_protocol       = "tcp"
  from_port         = var.mlflow_port
  to_port           = var.mlflow_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "server_web" {
  for_each = local.web_egress

  security_group_id = aws_security_group.server.id
  description       = "HTTP(S) to the package index and AWS APIs"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_egress_rule" "server_db" {
  security_group_id            = aws_security_group.server.id
  description                  = "PostgreSQL backend store"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.db.id
}

resource "aws_security_group" "db" {
  name_prefix = "${local.name}-db-"
  description = "MLflow PostgreSQL: port 5432 from the tracking server only"
  vpc_id      = var.vpc_id

  tags = { Name = "${local.name}-db" }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "db_from_server" {
  security_group_id            = aws_security_group.db.id
  description                  = "PostgreSQL from the tracking server"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.server.id
}

# ---------------------------------------------------------------- database

# Ephemeral: generated when an apply needs it, never written to state or plan. The write-only
# arguments below receive it only when var.secrets_version changes (the first apply, then
# each deliberate rotation), so the database and its parameter always get the same value.
ephemeral "random_password" "db" {
  length  = 40
  special = false # URL-safe: it goes into a postgresql:// URI unescaped
}

ephemeral "random_password" "admin" {
  length  = 40
  special = false
}

ephemeral "random_password" "worker" {
  length  = 40
  special = false
}

resource "aws_ssm_parameter" "db_password" {
  name             = "/${var.name_prefix}/mlflow/db-password"
  description      = "Password of the MLflow PostgreSQL user"
  type             = "SecureString"
  key_id           = var.kms_key_arn
  value_wo         = ephemeral.random_password.db.result
  value_wo_version = var.secrets_version
}

# The server's TLS certificate (public, not a secret): self-signed at the server's first boot
# and written here by the server, so the workers trust exactly that certificate.
resource "aws_ssm_parameter" "tls_certificate" {
  #checkov:skip=CKV2_AWS_34:a public certificate, not a secret; every secret parameter is a SecureString (tests/infra/test_access.py)
  name        = "/${var.name_prefix}/mlflow/tls-certificate"
  description = "PEM certificate of the MLflow server's TLS endpoint (written by the server at boot)"
  type        = "String"
  tier        = "Advanced" # a PEM certificate can pass the standard tier's 4 KB
  value       = "pending: the server writes its certificate here at its first boot"

  lifecycle {
    ignore_changes = [value]
  }
}

resource "aws_ssm_parameter" "admin_password" {
  name             = "/${var.name_prefix}/mlflow/admin-password"
  description      = "Password of the MLflow server's admin user (basic auth)"
  type             = "SecureString"
  key_id           = var.kms_key_arn
  value_wo         = ephemeral.random_password.admin.result
  value_wo_version = var.secrets_version
}

resource "aws_ssm_parameter" "worker_password" {
  name             = "/${var.name_prefix}/mlflow/worker-password"
  description      = "Password of the MLflow user the workers sign in as (basic auth, not an admin)"
  type             = "SecureString"
  key_id           = var.kms_key_arn
  value_wo         = ephemeral.random_password.worker.result
  value_wo_version = var.secrets_version
}

resource "aws_db_subnet_group" "this" {
  name_prefix = "${local.name}-"
  description = "MLflow backend store (private subnets)"
  subnet_ids  = var.subnet_ids
}

resource "aws_db_parameter_group" "this" {
  name_prefix = "${local.name}-"
  description = "MLflow backend store: TLS only, DDL and slow-query logging"
  family      = local.db_family

  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }

  parameter {
    name  = "log_statement"
    value = "ddl"
  }

  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }

  lifecycle {
    create_before_destroy = true
  }
}

data "aws_iam_policy_document" "rds_monitoring_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["monitoring.rds.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "rds_monitoring" {
  name_prefix        = "${var.name_prefix}-rdsmon-"
  description        = "RDS enhanced monitoring for the MLflow database"
  assume_role_policy = data.aws_iam_policy_document.rds_monitoring_assume.json
}

resource "aws_iam_role_policy_attachment" "rds_monitoring" {
  role       = aws_iam_role.rds_monitoring.name
  policy_arn = "${local.managed}/service-role/AmazonRDSEnhancedMonitoringRole"
}

resource "aws_db_instance" "this" {
  identifier_prefix = "${local.name}-"
  engine            = "postgres"
  engine_version    = var.db_engine_version
  instance_class    = var.db_instance_class

  db_name             = local.db_name
  username            = local.db_user
  password_wo         = ephemeral.random_password.db.result
  password_wo_version = var.secrets_version

  allocated_storage     = var.db_allocated_storage_gb
  max_allocated_storage = var.db_max_allocated_storage_gb
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = var.kms_key_arn

  db_subnet_group_name   = aws_db_subnet_group.this.name
  vpc_security_group_ids = [aws_security_group.db.id]
  parameter_group_name   = aws_db_parameter_group.this.name
  publicly_accessible    = false
  multi_az               = var.db_multi_az
  ca_cert_identifier     = "rds-ca-rsa2048-g1"

  iam_database_authentication_enabled = true
  auto_minor_version_upgrade          = true
  backup_retention_period             = var.db_backup_retention_days
  copy_tags_to_snapshot               = true
  deletion_protection                 = var.db_deletion_protection
  skip_final_snapshot                 = false
  final_snapshot_identifier           = "${local.name}-final"

  enabled_cloudwatch_logs_exports       = ["postgresql", "upgrade"]
  monitoring_interval                   = 60
  monitoring_role_arn                   = aws_iam_role.rds_monitoring.arn
  performance_insights_enabled          = true
  performance_insights_kms_key_id       = var.kms_key_arn
  performance_insights_retention_period = 7

  depends_on = [aws_iam_role_policy_attachment.rds_monitoring]
}

# ---------------------------------------------------------------- IAM (least privilege), logs, server

module "role" {
  source = "../instance_role"

  name                    = local.name
  description             = "MLflow tracking server: its artefact prefix, its three password parameters and its certificate parameter, its log group, SSM"
  policy_name             = "advrag-mlflow-server"
  artifact_bucket_arn     = var.artifact_bucket_arn
  artifact_prefixes       = [var.artifact_prefix]
  kms_key_arn             = var.kms_key_arn
  log_group_name          = "/${var.name_prefix}/mlflow-server"
  log_retention_days      = var.log_retention_days
  ssm_parameter_arns      = [aws_ssm_parameter.db_password.arn, aws_ssm_parameter.admin_password.arn, aws_ssm_parameter.worker_password.arn]
  writable_parameter_arns = [aws_ssm_parameter.tls_certificate.arn]
}

resource "aws_instance" "server" {
  ami                         = local.ami_id
  instance_type               = var.instance_type
  subnet_id                   = var.subnet_ids[0]
  vpc_security_group_ids      = [aws_security_group.server.id]
  iam_instance_profile        = module.role.instance_profile_name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true
  user_data                   = local.user_data
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    delete_on_termination = true
  }

  tags = { Name = local.name }

  lifecycle {
    # A newer AMI must not silently replace the server; roll it deliberately.
    ignore_changes = [ami]
  }
}
