"""The one module that talks to MLflow.

Default store: SQLite at ``.mlflow/mlflow.db`` with artifacts under
``.mlflow/artifacts`` (project-local). ``MLFLOW_TRACKING_URI`` (or an explicit
``uri``) points at a tracking server or another backend instead (e.g.
``postgresql://user@host:5432/mlflow``; see docs/storage.md).
``ADVRAG_ARTIFACT_ROOT`` (e.g. ``s3://bucket/prefix``) puts new experiments'
artifacts there; S3 endpoints and credentials come from MLflow's and boto3's
own variables (``MLFLOW_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow

from advrag.common.allocator import allocator_in_use
from advrag.common.redact import redact, redact_param

DEFAULT_DIR = Path(".mlflow")
ARTIFACT_ROOT_ENV = "ADVRAG_ARTIFACT_ROOT"
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
OWNER_HOST = "advrag.host"
OWNER_PID = "advrag.pid"
RESUMED_FROM = "advrag.resumed_from"  # the run whose checkpoint a run resumed from
RESUMED_AT = "advrag.resumed_at"  # the update it resumed at
ALLOCATOR = "advrag.allocator"  # tcmalloc or system: it changes step times (docs/performance.md)


def default_uri(root: Path = DEFAULT_DIR) -> str:
    """The project-local SQLite store."""
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def configure(uri: str | None = None) -> str:
    """Point MLflow at ``uri`` (else $MLFLOW_TRACKING_URI, else the local store)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    return uri


def ensure_experiment(name: str) -> str:
    """Get or create an experiment (an existing one keeps its artifact location)."""
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = artifact_location(name, mlflow.get_tracking_uri())
    return mlflow.create_experiment(name, artifact_location=location)


def artifact_location(name: str, tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go.

    ``$ADVRAG_ARTIFACT_ROOT/<name>`` when set (a URI such as ``s3://bucket/prefix``
    or an absolute path); else beside a SQLite store; else, for a database
    store, the project-local ``.mlflow/artifacts`` (MLflow's own default is
    ``./mlruns`` of whatever the cwd is); a tracking server decides (None).
    """
    root = os.environ.get(ARTIFACT_ROOT_ENV, "").strip()
    if root:
        if "://" in root:
            return f"{root.rstrip('/')}/{name}"
        if not Path(root).is_absolute():
            raise ValueError(f"{ARTIFACT_ROOT_ENV}={root!r} is neither a URI nor an absolute path: "
                             "set it to e.g. s3://my-bucket/mlflow or /srv/mlflow-artifacts.")
        return (Path(root) / name).as_uri()
    if tracking_uri.startswith("sqlite:///"):
        root_dir = Path(tracking_uri.removeprefix("sqlite:///")).parent
    elif tracking_uri.startswith(DATABASE_SCHEMES):
        root_dir = DEFAULT_DIR
    else:
        return None
    return (root_dir / "artifacts" / name).resolve().as_uri()


def client():
    """An MlflowClient on the configured store (explicit run ids, thread-safe)."""
    return mlflow.MlflowClient()


@contextlib.contextmanager
def tracked_run(experiment: str, run_name: str, *, params: dict[str, Any] | None = None,
                tags: dict[str, str] | None = None, parent: str | None = None) -> Iterator[str]:
    """Create a run and always end it: FINISHED, FAILED (error recorded) or KILLED.

    Yields the run id; log through the functions below, which take it
    explicitly, so Prefect tasks in any thread write to the same run. ``parent``:
    the run this one nests under in the UI (same experiment). Tags name the
    process's host, pid (to reap it if it dies) and memory allocator.
    """
    c = client()
    experiment_id = ensure_experiment(experiment)
    reap_orphaned_runs(experiment_id)
    process_tags = {OWNER_HOST: socket.gethostname(), OWNER_PID: str(os.getpid()),
                    ALLOCATOR: allocator_in_use()}
    if parent is not None:
        process_tags["mlflow.parentRunId"] = parent
    run_id = c.create_run(experiment_id, run_name=run_name,
                          tags={**(tags or {}), **process_tags}).info.run_id
    try:
        if params:
            log_params(run_id, params)
        yield run_id
    except KeyboardInterrupt:
        c.set_tag(run_id, "error", "interrupted")
        c.set_terminated(run_id, "KILLED")
        raise
    except BaseException as err:
        c.set_tag(run_id, "error", redact(f"{type(err).__name__}: {err}")[:5000])
        c.set_terminated(run_id, "FAILED")
        raise
    c.set_terminated(run_id, "FINISHED")


def reap_orphaned_runs(experiment_id: str) -> list[str]:
    """End as KILLED the RUNNING runs whose owning process on this host is gone.

    A SIGKILL or power loss cannot run ``tracked_run``'s handlers; the next
    run in the experiment closes what was left open. Runs owned by another
    host, or by a live process, are left alone. Returns the ids it closed.
    """
    c = client()
    host = socket.gethostname()
    closed = []
    for run in c.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'"):
        tags = run.data.tags
        if tags.get(OWNER_HOST) != host or _alive(int(tags.get(OWNER_PID, "0"))):
            continue
        c.set_tag(run.info.run_id, "error", f"process {tags.get(OWNER_PID)} on {host} died "
                  "without closing the run")
        c.set_terminated(run.info.run_id, "KILLED")
        closed.append(run.info.run_id)
    return closed


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists (0 or negative: no)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dict → ``{"a.b": "value"}`` strings, as MLflow params want."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = str(value)[:6000]
    return flat


def log_params(run_id: str, params: dict[str, Any]) -> None:
    """Log (nested) params, flattened to dotted keys, secrets masked (``redact_param``: every
    reader of the run sees them)."""
    from mlflow.entities import Param

    items = [Param(k, redact_param(k, v)) for k, v in flatten(params).items()]
    for start in range(0, len(items), 100):
        client().log_batch(run_id, params=items[start:start + 100])


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    """Log numeric metrics (``/`` groups them in the UI)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    log_metric_points(run_id, [Metric(k, float(v), now, step) for k, v in metrics.items()])


def log_metric_points(run_id: str, points: list) -> None:
    """Log MLflow ``Metric`` points as they are (key, value, timestamp, step), in batches of
    500, under MLflow's limit of a batch."""
    for start in range(0, len(points), 500):
        client().log_batch(run_id, metrics=points[start:start + 500])


def carry_updates(earlier_run: str, run_id: str, before_step: int) -> list[dict[str, float]]:
    """Copy the per-update metrics ``earlier_run`` logged before ``before_step`` into ``run_id``
    (their timestamps kept) and tag it with both: a run resumed from ``earlier_run``'s
    checkpoint then shows the whole training curve. The warm-up's (``warmup/``) stays in the
    earlier run, and so do updates it logged past the checkpoint, which the resume replays.
    Returns the copied updates as history rows (``{"step": s, metric: value}``), oldest first.
    """
    c = client()
    try:
        logged = c.get_run(earlier_run).data.metrics
    except mlflow.exceptions.MlflowException as err:
        if _missing(err):
            raise LookupError(f"run {earlier_run} is not in {mlflow.get_tracking_uri()}") from err
        raise
    keys = [k for k in logged if not k.startswith("warmup/")]
    points = [m for key in keys for m in c.get_metric_history(earlier_run, key)
              if m.step < before_step]
    log_metric_points(run_id, points)
    set_tags(run_id, {RESUMED_FROM: earlier_run, RESUMED_AT: str(before_step)})
    rows: dict[int, dict[str, float]] = {}
    for m in points:
        rows.setdefault(m.step, {"step": m.step})[m.key] = m.value
    return [rows[step] for step in sorted(rows)]


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    """Tag a run."""
    for key, value in tags.items():
        client().set_tag(run_id, key, value)


def log_text(run_id: str, text: str, artifact_file: str) -> None:
    """Store a text artifact (markdown table, report)."""
    client().log_text(run_id, text, artifact_file)


def log_figure(run_id: str, figure, artifact_file: str) -> None:
    """Store a matplotlib figure as an image artifact, then close it (pyplot keeps it otherwise)."""
    import matplotlib.pyplot as plt

    try:
        client().log_figure(run_id, figure, artifact_file)
    finally:
        plt.close(figure)


def log_table(run_id: str, rows: list[dict[str, Any]], artifact_file: str) -> None:
    """Store rows as an MLflow table (viewable in the UI's artifact/evaluation views)."""
    import pandas as pd

    client().log_table(run_id, pd.DataFrame(rows), artifact_file)


def read_table(run_id: str, artifact_file: str) -> list[dict[str, Any]]:
    """The rows ``log_table`` stored as ``artifact_file`` of run ``run_id``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_file,
                                                   dst_path=tmp)
        table = json.loads(Path(path).read_text())
    return [dict(zip(table["columns"], row)) for row in table["data"]]


def download_model(uri: str, dst: Path | None = None) -> Path:
    """Download a ``models:/name@alias`` (or runs:/) model's files to a local dir."""
    path = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst) if dst else None)
    return Path(path)


def register_model_dir(run_id: str, local_dir: Path, name: str, *,
                       alias: str | None = None, tags: dict[str, str] | None = None,
                       artifact_path: str = "checkpoint") -> str:
    """Log a checkpoint directory under the run and register it as a new version.

    The version's files are the transformers checkpoint itself, so
    ``download_model("models:/<name>@<alias>")`` gives a directory that
    ``models.loading.load_policy`` loads. A run registering several models
    gives each its own ``artifact_path``. Returns the version number.
    """
    c = client()
    c.log_artifacts(run_id, str(local_dir), artifact_path=artifact_path)
    try:
        c.create_registered_model(name)
    except mlflow.exceptions.MlflowException as err:
        if "RESOURCE_ALREADY_EXISTS" not in str(err.error_code):
            raise
    source = f"{c.get_run(run_id).info.artifact_uri}/{artifact_path}"
    version = c.create_model_version(name, source, run_id=run_id, tags=tags).version
    if alias:
        c.set_registered_model_alias(name, alias, version)
    return str(version)


def log_artifacts(run_id: str, local_dir: Path, artifact_path: str) -> None:
    """Copy a local directory (e.g. a checkpoint) under ``artifact_path/<dir name>``."""
    client().log_artifacts(run_id, str(local_dir), artifact_path=f"{artifact_path}/{Path(local_dir).name}")


def log_file(run_id: str, path: Path, artifact_path: str) -> None:
    """Copy one local file (e.g. a command's log) to ``artifact_path/<file name>``."""
    client().log_artifact(run_id, str(path), artifact_path=artifact_path)


def set_model_version_tags(name: str, version: str, tags: dict[str, str]) -> None:
    """Tag a registered model version (benchmark results, provenance)."""
    for key, value in tags.items():
        client().set_model_version_tag(name, version, key, str(value))


def delete_model_version_tag(name: str, version: str, key: str) -> None:
    """Remove one tag of a registered model version, if it is there."""
    if key in model_version_tags(name, version):
        client().delete_model_version_tag(name, version, key)


def _missing(err: mlflow.exceptions.MlflowException) -> bool:
    """Whether an MLflow error means "no such run / model / version / alias"."""
    return err.error_code in {"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"}


def model_version_tags(name: str, version: str) -> dict[str, str]:
    """Tags of a registered model version; a clear error when it does not exist."""
    try:
        return dict(client().get_model_version(name, version).tags)
    except mlflow.exceptions.MlflowException as err:
        if _missing(err):
            raise LookupError(f"model {name!r} has no version {version!r} in "
                              f"{mlflow.get_tracking_uri()}") from err
        raise


def latest_version(name: str) -> str | None:
    """The highest version number of a registered model (None: no versions)."""
    versions = client().search_model_versions(f"name = '{name}'")
    return str(max(int(v.version) for v in versions)) if versions else None


def alias_version(name: str, alias: str) -> str | None:
    """The version an alias points at (None: no such alias or model)."""
    try:
        return str(client().get_model_version_by_alias(name, alias).version)
    except mlflow.exceptions.MlflowException as err:
        if _missing(err):
            return None
        raise


def set_alias(name: str, alias: str, version: str) -> None:
    """Point ``alias`` at ``version`` (moving it from wherever it was)."""
    client().set_registered_model_alias(name, alias, version)


def delete_alias(name: str, alias: str) -> None:
    """Remove an alias if it exists."""
    if alias_version(name, alias) is not None:
        client().delete_registered_model_alias(name, alias)


def run_status(run_id: str) -> str | None:
    """FINISHED, FAILED, KILLED or RUNNING; None when no such run exists."""
    try:
        return client().get_run(run_id).info.status
    except mlflow.exceptions.MlflowException as err:
        if _missing(err):
            return None
        raise


def list_artifacts(run_id: str, path: str | None = None) -> list[str]:
    """Artifact paths directly under ``path`` of a run."""
    return [a.path for a in client().list_artifacts(run_id, path)]


SHARED_VIEW_TAG = "mlflow.sharedViewState."


def share_runs_view(experiment: str, key: str, metric_pattern: str) -> str | None:
    """Save a runs-table view of ``experiment`` whose columns are its metrics matching
    ``metric_pattern`` (full match); returns its UI route, None if no such experiment.

    The MLflow UI shows no metric columns until a person picks them; a shared
    view (the experiment tag the UI's own "Share" writes, plain-JSON form) opens
    the table with them, e.g. ``#/experiments/1/runs?viewStateShareKey=em-f1``.
    """
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client().search_runs([found.experiment_id], max_results=1000)
    keys = sorted({k for run in runs for k in run.data.metrics if re.fullmatch(metric_pattern, k)})
    state = {"selectedColumns": [f"metrics.`{k}`" for k in keys]}
    client().set_experiment_tag(found.experiment_id, SHARED_VIEW_TAG + key, json.dumps(state))
    return f"#/experiments/{found.experiment_id}/runs?viewStateShareKey={key}"


def git_commit(root: Path = Path(".")) -> str:
    """The checked-out commit (``+dirty`` when the tree has changes), or ``unknown``."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
