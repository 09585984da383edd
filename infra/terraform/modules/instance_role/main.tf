# The IAM identity of an advrag EC2 instance (GPU worker or tracking server), least
# privilege: list and read/write only its own prefixes of the artefact bucket, use the
# project's KMS key, write only its own log group, read only the SSM parameters it is
# given, and be reachable through SSM Session Manager (never SSH).

data "aws_partition" "current" {}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  name_prefix        = "${var.name}-"
  description        = var.description
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

data "aws_iam_policy_document" "this" {
  statement {
    sid       = "ListOwnPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [var.artifact_bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = flatten([for p in var.artifact_prefixes : [p, "${p}/*"]])
    }
  }

  statement {
    sid = "ReadWriteOwnPrefixes"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = [for p in var.artifact_prefixes : "${var.artifact_bucket_arn}/${p}/*"]
  }

  statement {
    sid       = "UseProjectKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }

  statement {
    sid = "WriteOwnLogGroup"
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
      "logs:DescribeLogStreams",
    ]
    resources = [
      aws_cloudwatch_log_group.this.arn,
      "${aws_cloudwatch_log_group.this.arn}:*",
    ]
  }

  dynamic "statement" {
    for_each = length(var.ssm_parameter_arns) == 0 ? [] : [var.ssm_parameter_arns]

    content {
      sid       = "ReadOwnParameters"
      actions   = ["ssm:GetParameter"]
      resources = statement.value
    }
  }

  dynamic "statement" {
    for_each = length(var.writable_parameter_arns) == 0 ? [] : [var.writable_parameter_arns]

    content {
      sid       = "WriteOwnParameters"
      actions   = ["ssm:PutParameter"]
      resources = statement.value
    }
  }

  # AmazonSSMManagedInstanceCore (Session Manager) allows ssm:GetParameter* on every
  # parameter; an explicit deny wins over it: no parameter but this instance's own.
  statement {
    sid    = "DenyOtherParameters"
    effect = "Deny"
    actions = [
      "ssm:GetParameter",
      "ssm:GetParameters",
      "ssm:GetParametersByPath",
      "ssm:GetParameterHistory",
    ]
    not_resources = length(var.ssm_parameter_arns) == 0 ? [local.no_parameter] : var.ssm_parameter_arns
  }

  # The project key also encrypts other instances' parameters: decrypting one of them is
  # refused by its encryption context (SSM names the parameter there), so the key serves
  # S3 and the logs and only this instance's own parameters.
  statement {
    sid       = "DenyOtherParametersKeyUse"
    effect    = "Deny"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]

    condition {
      test     = "Null"
      variable = "kms:EncryptionContext:PARAMETER_ARN"
      values   = ["false"]
    }

    condition {
      test     = "StringNotEquals"
      variable = "kms:EncryptionContext:PARAMETER_ARN"
      values   = length(var.ssm_parameter_arns) == 0 ? [local.no_parameter] : var.ssm_parameter_arns
    }
  }
}

locals {
  # An ARN no parameter has: with no parameter of its own, the denies above cover them all.
  no_parameter = "arn:${data.aws_partition.current.partition}:ssm:::parameter/advrag-none"
}

resource "aws_iam_role_policy" "this" {
  name   = var.policy_name
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.this.json
}

resource "aws_iam_role_policy_attachment" "ssm_core" {
  role       = aws_iam_role.this.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "this" {
  name_prefix = "${var.name}-"
  role        = aws_iam_role.this.name
}

resource "aws_cloudwatch_log_group" "this" {
  name              = var.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
}
