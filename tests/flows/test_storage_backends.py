"""Storage backends: MLflow on PostgreSQL, MLflow artifacts and the DVC remote in S3.

S3 is moto's server mode on 127.0.0.1 reached through boto3 with an explicit
endpoint URL (what a MinIO or AWS user configures); PostgreSQL is a real
throwaway cluster from Debian's package (fixtures in conftest.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from advrag.ops import dataplane
from advrag.tasks import tracking

GIT = ["git", "-c", "user.name=advrag-test", "-c", "user.email=test@advrag.invalid"]


def files_of(root: Path) -> dict[str, bytes]:
    """Relative path → bytes of every file under ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def dvc_repo(path: Path) -> Path:
    """An empty git + DVC repository."""
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    dataplane.run_dvc(["init", "-q"], path)
    return path


def test_artifact_root_setting(monkeypatch):
    monkeypatch.setenv("ADVRAG_ARTIFACT_ROOT", "s3://team-bucket/mlflow/")
    assert tracking.artifact_location("exp", "sqlite:////x/mlflow.db") == "s3://team-bucket/mlflow/exp"
    monkeypatch.setenv("ADVRAG_ARTIFACT_ROOT", "/srv/artifacts")
    assert tracking.artifact_location("exp", "postgresql://h/db") == "file:///srv/artifacts/exp"
    monkeypatch.setenv("ADVRAG_ARTIFACT_ROOT", "bucket/prefix")
    with pytest.raises(ValueError, match="ADVRAG_ARTIFACT_ROOT='bucket/prefix'.*s3://"):
        tracking.artifact_location("exp", "sqlite:////x/mlflow.db")
    monkeypatch.delenv("ADVRAG_ARTIFACT_ROOT")
    assert tracking.artifact_location("exp", "http://127.0.0.1:5000") is None  # the server decides


@pytest.mark.parametrize("url, endpoint, problem", [
    ("my-bucket/data", None, "s3://bucket/prefix"),
    ("s3://", None, "s3://bucket/prefix"),
    ("s3://my-bucket/data", "127.0.0.1:9000", "http://"),
])
def test_s3_remote_rejects_bad_settings_before_touching_dvc(tmp_path, url, endpoint, problem):
    with pytest.raises(ValueError, match=problem):
        dataplane.configure_s3_remote("storage", url, endpoint, root=tmp_path)
    assert not (tmp_path / ".dvc").exists()


@pytest.mark.slow
def test_remote_credentials_stay_out_of_the_committed_config(tmp_path):
    repo = dvc_repo(tmp_path / "repo")
    dataplane.configure_s3_remote("storage", "s3://b/dvc", "http://127.0.0.1:9", root=repo,
                                  access_key_id="AKIDEXAMPLE", secret_access_key="s3cr3t-value")
    committed = (repo / ".dvc" / "config").read_text()
    local = (repo / ".dvc" / "config.local").read_text()
    assert "url = s3://b/dvc" in committed and "endpointurl = http://127.0.0.1:9" in committed
    assert "remote = storage" in committed  # the default remote
    assert "s3cr3t-value" not in committed and "AKIDEXAMPLE" not in committed
    assert "secret_access_key = s3cr3t-value" in local
    assert (repo / ".dvc" / "config.local").stat().st_mode & 0o077 == 0  # this user's only
    shown = dataplane.run_dvc(["config", "--local", "--list"], repo)  # DVC reads it back
    assert "remote.storage.secret_access_key=s3cr3t-value" in shown
    ignored = subprocess.run(["git", "check-ignore", "-q", ".dvc/config.local"], cwd=repo)
    assert ignored.returncode == 0, ".dvc/config.local would be committed"


def test_no_secret_reaches_a_command_line(tmp_path, monkeypatch):
    repo = dvc_repo(tmp_path / "repo")
    argvs = []
    real = dataplane.run_dvc
    monkeypatch.setattr(dataplane, "run_dvc", lambda args, root: argvs.append(args) or
                        real(args, root))
    dataplane.configure_s3_remote("storage", "s3://b/dvc", root=repo,
                                  access_key_id="AKIDEXAMPLE", secret_access_key="s3cr3t-value")
    assert argvs and not any("s3cr3t-value" in a or "AKIDEXAMPLE" in a for a in sum(argvs, []))


@pytest.mark.slow
def test_dvc_push_then_pull_into_a_fresh_clone_reproduces_the_index(s3, small_index_dir, tmp_path):
    """`advrag remote` + `dvc push`; a new clone's `dvc pull` gets the index back byte for byte."""
    bucket = s3.bucket("advrag-dvc")
    repo = dvc_repo(tmp_path / "repo")
    shutil.copytree(small_index_dir, repo / "index")
    dataplane.run_dvc(["add", "-q", "index"], repo)
    cli = subprocess.run([sys.executable, "-m", "advrag.cli", "remote", "storage",
                          f"s3://{bucket}/dvc", "--endpoint-url", s3.endpoint],
                         cwd=repo, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "index"], cwd=repo, check=True)
    dataplane.run_dvc(["push", "-q"], repo)

    expected = files_of(small_index_dir)
    # one object per file plus the directory manifest (.dir); all file contents differ
    assert len(set(expected.values())) == len(expected)
    assert len(s3.keys(bucket)) == len(expected) + 1

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    shutil.rmtree(repo / ".dvc" / "cache")  # S3 is the only place the data can come from
    assert not (clone / "index").exists()
    dataplane.run_dvc(["pull", "-q"], clone)
    assert files_of(clone / "index") == expected


@pytest.mark.slow
def test_model_logged_to_s3_loads_back_by_alias(s3, tiny_policy_dir, tmp_path, monkeypatch):
    """Experiment artifacts in S3: register a checkpoint, load `models:/…@champion` back."""
    import torch

    from advrag.models.loading import load_policy

    bucket = s3.bucket("advrag-mlflow")
    monkeypatch.setenv("ADVRAG_ARTIFACT_ROOT", f"s3://{bucket}/mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure(tracking.default_uri(tmp_path / "ml"))
    with tracking.tracked_run("s3-exp", "register") as run_id:
        version = tracking.register_model_dir(run_id, tiny_policy_dir, "s3-reasoner",
                                              alias="champion")
    assert version == "1"
    experiment = mlflow.get_experiment_by_name("s3-exp")
    assert experiment.artifact_location == f"s3://{bucket}/mlflow/s3-exp"

    expected = files_of(tiny_policy_dir)
    prefix = f"mlflow/s3-exp/{run_id}/artifacts/checkpoint/"
    assert {prefix + name for name in expected} <= s3.keys(bucket)
    assert not (tmp_path / "ml" / "artifacts").exists(), "artifacts also written locally"

    local = tracking.download_model("models:/s3-reasoner@champion", tmp_path / "dl")
    assert files_of(local) == expected
    loaded, original = load_policy(str(local)), load_policy(str(tiny_policy_dir))
    for a, b in zip(loaded.model.parameters(), original.model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_tracking_on_postgresql(postgres_uri, tmp_path, monkeypatch):
    """Runs, metrics, versions and aliases live in PostgreSQL; artifacts stay project-local."""
    import psycopg2

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADVRAG_ARTIFACT_ROOT", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", postgres_uri)
    assert tracking.configure() == postgres_uri
    checkpoints = []
    for n in (1, 2):
        ckpt = tmp_path / f"ckpt{n}"
        ckpt.mkdir()
        (ckpt / "config.json").write_text(json.dumps({"version": n}))
        (ckpt / "weights.bin").write_bytes(bytes(range(256)) * n)
        checkpoints.append(ckpt)

    for n, ckpt in enumerate(checkpoints, start=1):  # two training runs, each registers a version
        with tracking.tracked_run("pg-exp", f"pg-run-{n}", params={"opt": {"lr": 0.001}}) as run_id:
            tracking.log_metrics(run_id, {"world/arr/em": 0.5}, step=0)
            tracking.log_metrics(run_id, {"world/arr/em": 0.75}, step=1)
            version = tracking.register_model_dir(run_id, ckpt, "pg-reasoner", alias="champion",
                                                  tags={"data.version": f"d{n}"})
        assert version == str(n)

    c = mlflow.MlflowClient()
    run = c.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["opt.lr"] == "0.001"
    assert [(m.step, m.value) for m in c.get_metric_history(run_id, "world/arr/em")] == [
        (0, 0.5), (1, 0.75)]
    champion = c.get_model_version_by_alias("pg-reasoner", "champion")
    assert (str(champion.version), champion.tags["data.version"]) == ("2", "d2")
    local = tracking.download_model("models:/pg-reasoner@champion", tmp_path / "dl")
    assert files_of(local) == files_of(checkpoints[1])
    first = tracking.download_model("models:/pg-reasoner/1", tmp_path / "dl1")
    assert files_of(first) == files_of(checkpoints[0])
    location = mlflow.get_experiment_by_name("pg-exp").artifact_location
    assert location == (tmp_path / ".mlflow" / "artifacts" / "pg-exp").resolve().as_uri()

    # the same facts, read straight from PostgreSQL's tables
    with psycopg2.connect(postgres_uri) as conn, conn.cursor() as cur:
        cur.execute("SELECT step, value FROM metrics WHERE run_uuid = %s AND key = %s "
                    "ORDER BY step", (run_id, "world/arr/em"))
        assert cur.fetchall() == [(0, 0.5), (1, 0.75)]
        cur.execute("SELECT alias, version FROM registered_model_aliases WHERE name = %s",
                    ("pg-reasoner",))
        assert cur.fetchall() == [("champion", 2)]
