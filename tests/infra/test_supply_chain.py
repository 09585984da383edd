"""What the deployment must never let through: committed secret settings, a vLLM with a known
flaw, an instance reading another's secrets, Terraform state outside a locked, encrypted
backend, a worker package whose files were not hash-checked (split from test_terraform.py,
which stays under 800 lines)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import hcl2
from packaging.utils import canonicalize_name
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


WORKER = REPO / "infra" / "worker"


def requirements(path: Path) -> list[str]:
    """The requirement lines of a requirements file, without comments."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name → (version, sha256 hashes) of a hash-locked file; each entry is ``name==version``
    and its ``--hash`` lines (pip's --require-hashes format)."""
    entries, current = {}, None
    for line in path.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            name, version = line.removesuffix(" \\").split("==")
            current = entries.setdefault(canonicalize_name(name), (version, []))
        elif line.strip().startswith("--hash=sha256:"):
            current[1].append(line.strip().removesuffix(" \\").removeprefix("--hash=sha256:"))
    return entries


def hashed_lock_of(folder: Path, at_least: int) -> dict[str, tuple[str, list[str]]]:
    """``folder``'s requirements.lock, checked: the whole environment (over ``at_least``
    entries, transitive dependencies included), every entry hashed, and each line of its
    requirements.in pinned to a version it admits."""
    from packaging.requirements import Requirement

    lock = locked(folder / "requirements.lock")
    assert len(lock) > at_least
    assert all(len(hashes) >= 1 and all(len(h) == 64 for h in hashes)
               for _, hashes in lock.values())
    for line in requirements(folder / "requirements.in"):
        wanted = Requirement(line)
        version, _ = lock[canonicalize_name(wanted.name)]
        assert wanted.specifier.contains(version, prereleases=True), (line, version)
    return lock


def test_the_worker_requirements_are_advrags_with_faiss_for_the_gpu():
    """advrag's dependencies, its gpu and verl extras, faiss-gpu-cu12 for faiss-cpu and the
    build backend: a dependency added to pyproject.toml and not to the worker fails here."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    expected = [r for r in project["project"]["dependencies"] if not r.startswith("faiss-cpu")]
    expected += extras["gpu"] + extras["verl"] + ["faiss-gpu-cu12==1.14.1.post1"]
    expected += project["build-system"]["requires"]
    assert requirements(WORKER / "requirements.in") == expected


def test_the_worker_lock_pins_and_hashes_every_package_the_requirements_ask_for():
    from packaging.requirements import Requirement

    lock = hashed_lock_of(WORKER, at_least=100)
    assert "faiss-cpu" not in lock  # one FAISS per environment
    assert not Requirement("vllm<0.8.5").specifier.contains(lock["vllm"][0])


def test_the_build_tools_lock_is_the_locks_own_setuptools_and_wheel():
    """An sdist in the lock builds with these (--no-build-isolation), hash-checked first."""
    lock, tools = locked(WORKER / "requirements.lock"), locked(WORKER / "build-tools.lock")
    assert set(tools) == {"setuptools", "wheel"}
    assert all(tools[name] == lock[name] for name in tools)  # the same versions and hashes


def test_the_worker_installs_only_the_hashed_lock_and_advrag_without_dependencies():
    from test_access import rendered_files

    boot = rendered_files("gpu_workers")["/usr/local/sbin/advrag-bootstrap"]
    installs = [line.strip() for line in boot.replace("\\\n", " ").splitlines()
                if "pip install" in line]
    assert [" ".join(i.split()) for i in installs] == [
        "sudo -u advrag /opt/advrag/venv/bin/pip install --quiet --require-hashes --no-deps "
        "-r /opt/advrag/src/infra/worker/build-tools.lock",
        "sudo -u advrag /opt/advrag/venv/bin/pip install --quiet --require-hashes --no-deps "
        "--no-build-isolation -r /opt/advrag/src/infra/worker/requirements.lock",
        "sudo -u advrag /opt/advrag/venv/bin/pip install --quiet --no-deps --no-build-isolation "
        "-e /opt/advrag/src"]
    assert "sys.version_info[:2] != (3, 12)" in boot  # the Python the lock was resolved for


TRACKING = REPO / "infra" / "tracking_server"


def test_the_tracking_server_lock_pins_wheels_of_every_package_the_requirements_ask_for():
    """Every entry hashed; each requirement's exact pin; MLflow at the clients' version (the
    worker lock's), so the server and its clients speak one MLflow."""
    lock = hashed_lock_of(TRACKING, at_least=50)
    assert lock["mlflow"][0] == locked(WORKER / "requirements.lock")["mlflow"][0]
    assert {"flask", "sqlalchemy", "alembic"} <= set(lock)  # the [auth] extra's server side


def test_the_tracking_server_installs_only_its_hashed_lock_from_the_pinned_commit():
    from test_access import rendered_files

    boot = rendered_files("tracking_server")["/usr/local/sbin/mlflow-bootstrap"]
    installs = [" ".join(line.split()) for line in boot.replace("\\\n", " ").splitlines()
                if "pip install" in line]
    assert installs == ["/opt/mlflow/bin/pip install --quiet --require-hashes --no-deps "
                        "--only-binary :all: -r /opt/mlflow-src/infra/tracking_server/"
                        "requirements.lock"]
    assert "sys.version_info[:2] != (3, 12)" in boot  # the Python the lock was resolved for
    assert boot.index("rev-parse HEAD") < boot.index("pip install")  # checked out, then installed
