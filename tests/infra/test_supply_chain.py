"""What the deployment must never let through: committed secret settings, a vLLM with a known
flaw, an instance reading another's secrets, Terraform state outside a locked, encrypted
backend (split from test_terraform.py, which stays under 800 lines)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import hcl2
from test_terraform import REPO, TF_ROOT, as_list, named


def test_secret_settings_files_are_never_committed():
    """The infra README has users write dev.tfvars; .env files hold keys: git ignores them."""
    paths = ["infra/terraform/dev.tfvars", "infra/terraform/prod.tfvars", ".env", "mlflow/.env",
             "secrets.env", "infra/terraform/terraform.tfvars.example"]
    check = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True,
                           text=True, check=False)
    assert check.stdout.split() == paths[:-1]  # all but the committed example


def test_the_gpu_extra_admits_no_vllm_with_the_pickle_flaw():
    import tomllib
    from packaging.requirements import Requirement

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (vllm,) = [Requirement(r) for r in extras["gpu"] if Requirement(r).name == "vllm"]
    assert not vllm.specifier.contains("0.8.4") and vllm.specifier.contains("0.8.5")


def policy_statements(module: Path) -> list[dict]:
    """The statements of the module's ``aws_iam_policy_document`` named ``this``."""
    (doc,) = [b for n, b in named(module, "data")["aws_iam_policy_document"].items() if n == "this"]
    return as_list(doc["statement"])


def test_an_instance_can_read_and_decrypt_no_parameter_but_its_own():
    """The Session Manager policy allows ssm:GetParameter* on every parameter; explicit denies
    (which win over any allow) keep the role to the parameters it is given, also through the
    shared KMS key (SSM puts the parameter's ARN in the encryption context)."""
    role = TF_ROOT / "modules" / "instance_role"
    statements = {s.get("sid"): s for s in policy_statements(role)}
    deny = statements["DenyOtherParameters"]
    assert deny["effect"] == "Deny" and "resources" not in deny
    assert {"ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"} <= set(
        deny["actions"])
    assert "var.ssm_parameter_arns" in str(deny["not_resources"])
    key = statements["DenyOtherParametersKeyUse"]
    assert (key["effect"], key["actions"]) == ("Deny", ["kms:Decrypt"])
    tests = {c["test"]: c for c in as_list(key["condition"])}
    assert tests["Null"]["variable"] == "kms:EncryptionContext:PARAMETER_ARN"
    assert tests["Null"]["values"] == ["false"]  # only requests that name a parameter
    assert tests["StringNotEquals"]["variable"] == "kms:EncryptionContext:PARAMETER_ARN"
    assert "var.ssm_parameter_arns" in str(tests["StringNotEquals"]["values"])


def test_state_lives_in_an_encrypted_locked_s3_backend():
    (terraform,) = as_list(hcl2.loads((TF_ROOT / "versions.tf").read_text())["terraform"])
    (backend,) = as_list(terraform["backend"])
    s3 = next(body for kind, body in backend.items() if kind.strip('"') == "s3")
    assert s3["encrypt"] is True and s3["use_lockfile"] is True
    assert "bucket" not in s3  # given at init: nothing account-specific committed
