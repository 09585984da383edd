"""MLflow tracking: runs always end with a status; params are flattened."""

from __future__ import annotations

import mlflow
import pytest

from advrag.tasks import tracking


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tracking.configure(tracking.default_uri(tmp_path / "ml"))


def test_flatten_nested_params():
    assert tracking.flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2]}) == {
        "a.b": "1", "a.c.d": "x", "e": "[1, 2]"}


def test_run_finishes_with_params_metrics_and_artifacts(store):
    with tracking.tracked_run("exp", "ok", params={"model": {"name": "tiny"}}) as run_id:
        tracking.log_metrics(run_id, {"world/cot/em": 0.25})
        tracking.log_text(run_id, "| a |", "results.md")
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.name"] == "tiny"
    assert run.data.metrics["world/cot/em"] == 0.25
    assert "results.md" in [a.path for a in mlflow.MlflowClient().list_artifacts(run_id)]


def test_crash_marks_the_run_failed_with_the_error(store):
    with pytest.raises(RuntimeError):
        with tracking.tracked_run("exp", "boom") as run_id:
            raise RuntimeError("index missing")
    run = mlflow.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "RuntimeError: index missing"


def test_interrupt_marks_the_run_killed(store):
    with pytest.raises(KeyboardInterrupt):
        with tracking.tracked_run("exp", "ctrl-c") as run_id:
            raise KeyboardInterrupt
    assert mlflow.get_run(run_id).info.status == "KILLED"


def test_local_store_puts_artifacts_under_the_store(store, tmp_path):
    experiment_id = tracking.ensure_experiment("where")
    location = mlflow.get_experiment(experiment_id).artifact_location
    assert location.startswith((tmp_path / "ml" / "artifacts").as_uri())


def test_registered_checkpoint_loads_back_by_alias(store, tiny_policy_dir, tmp_path):
    """A checkpoint registered in MLflow comes back through models:/name@alias."""
    import torch

    from advrag.models.loading import load_policy

    with tracking.tracked_run("exp", "register") as run_id:
        version = tracking.register_model_dir(run_id, tiny_policy_dir, "tiny-reasoner",
                                              alias="champion", tags={"data.version": "abc"})
    assert version == "1"
    local = tracking.download_model("models:/tiny-reasoner@champion", tmp_path / "dl")
    loaded = load_policy(str(local))
    original = load_policy(str(tiny_policy_dir))
    for a, b in zip(loaded.model.parameters(), original.model.parameters()):
        assert torch.equal(a, b)
    mv = mlflow.MlflowClient().get_model_version_by_alias("tiny-reasoner", "champion")
    assert mv.tags["data.version"] == "abc"


def test_a_killed_process_leaves_no_run_running(store, tmp_path):
    """SIGKILL mid-run: the next run in the experiment marks the orphan KILLED."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, signal
        from advrag.tasks import tracking
        tracking.configure({store!r})
        with tracking.tracked_run("exp", "doomed") as run_id:
            print(run_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9
    orphan = proc.stdout.strip()
    assert mlflow.get_run(orphan).info.status == "RUNNING"
    with tracking.tracked_run("exp", "next"):
        pass
    run = mlflow.get_run(orphan)
    assert run.info.status == "KILLED" and "died without closing" in run.data.tags["error"]


def test_live_runs_are_not_reaped(store):
    with tracking.tracked_run("exp", "outer") as outer:
        with tracking.tracked_run("exp", "inner"):
            pass
        assert mlflow.get_run(outer).info.status == "RUNNING"
    assert mlflow.get_run(outer).info.status == "FINISHED"


def test_a_resumed_run_carries_the_updates_before_its_checkpoint_and_no_others(store):
    """Updates 1-2 were checkpointed; the earlier run also logged update 3 (lost with the kill,
    replayed by the resume) and its warm-up, which stay where they are."""
    with tracking.tracked_run("exp", "first") as first:
        tracking.log_metrics(first, {"warmup/loss": 2.0}, step=0)
        for step, reward in enumerate([0.1, 0.2, 0.3]):
            tracking.log_metrics(first, {"reward_mean": reward, "loss": -reward}, step=step)
    with tracking.tracked_run("exp", "second") as second:
        rows = tracking.carry_updates(first, second, before_step=2)
    assert rows == [{"step": 0, "reward_mean": 0.1, "loss": -0.1},
                    {"step": 1, "reward_mean": 0.2, "loss": -0.2}]
    client = mlflow.MlflowClient()
    carried, original = (client.get_metric_history(run, "reward_mean") for run in (second, first))
    assert [(m.step, m.value, m.timestamp) for m in carried] == [
        (m.step, m.value, m.timestamp) for m in original[:2]]
    assert not client.get_metric_history(second, "warmup/loss")
    tags = mlflow.get_run(second).data.tags
    assert tags[tracking.RESUMED_FROM] == first and tags[tracking.RESUMED_AT] == "2"


def test_carrying_from_a_run_the_store_does_not_hold_names_it(store):
    with tracking.tracked_run("exp", "second") as second:
        with pytest.raises(LookupError, match="run 0123abcd is not in sqlite:"):
            tracking.carry_updates("0123abcd", second, before_step=2)
