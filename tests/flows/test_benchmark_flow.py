"""The benchmark flow under a real (temporary) Prefect server, writing a real MLflow run."""

from __future__ import annotations

import json

import mlflow
import pytest
from prefect.testing.utilities import prefect_test_harness

from advrag.config import BenchmarkConfig
from advrag.flows.benchmark import benchmark
from advrag.ops import dataplane
from advrag.tasks import tracking


@pytest.fixture(scope="module")
def prefect_server():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_benchmark_flow_logs_the_expected_run(prefect_server, tmp_path, monkeypatch,
                                             small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)  # data_version() reads dvc files of the cwd: none here
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    config = BenchmarkConfig(
        model=str(tiny_policy_dir), dtype="float32", world_dir=small_world_dir,
        index_dir=small_index_dir, limit=4, batch_size=2, max_turns=2, max_new_tokens=12,
        experiment="flow-test",
    )
    result = benchmark(config)

    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    for method in config.methods:
        assert run.data.metrics[f"world/{method}/n"] == 4
        em = run.data.metrics[f"world/{method}/em"]
        assert 0.0 <= run.data.metrics[f"world/{method}/em_lo"] <= em
        assert em <= run.data.metrics[f"world/{method}/em_hi"] <= 1.0
        assert f"avg/{method}/f1" in run.data.metrics
    assert run.data.params["config.limit"] == "4"
    assert run.data.tags["data.version"] == dataplane.data_version()["digest"]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"results.md", "results.png", "predictions"} <= artifacts
    table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/predictions/world/arr.json")
    assert len(table["data"]) == 4
    assert {"prediction", "em", "f1", "transcript"} <= set(table["columns"])
    assert "| arr | world | 4 |" in result["table"]


def user_config(tmp_path, policy, datasets) -> BenchmarkConfig:
    """Chain of thought only (no index needed) on the user's own QA files."""
    return BenchmarkConfig(model=str(policy), dtype="float32", methods=["cot"], datasets=datasets,
                           limit=3, batch_size=3, max_new_tokens=6, experiment="user-files",
                           predictions_dir=tmp_path / "predictions")


def test_datasets_by_absolute_relative_and_named_path(prefect_server, tmp_path, monkeypatch,
                                                      small_world_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    (tmp_path / "qa").mkdir()
    own = tmp_path / "qa" / "my qa.jsonl"  # a space: not allowed in names, fine in paths
    own.write_text((small_world_dir / "test.jsonl").read_text())
    datasets = [str(own.resolve()), "qa/my qa.jsonl", {"dev_set": str(small_world_dir / "dev.jsonl")}]
    with pytest.raises(ValueError, match="used twice"):
        user_config(tmp_path, tiny_policy_dir, datasets)
    config = user_config(tmp_path, tiny_policy_dir, [datasets[0], {"relative": datasets[1]},
                                                     datasets[2]])
    result = benchmark(config)

    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    for name in ("my_qa", "relative", "dev_set"):
        assert run.data.metrics[f"{name}/cot/n"] == 3
        table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/predictions/{name}/cot.json")
        assert len(table["data"]) == 3
        saved = tmp_path / "predictions" / result["run_id"] / name / "cot.json"
        assert len(json.loads(saved.read_text())["rows"]) == 3
    assert "| cot | my_qa | 3 |" in result["table"]


def test_a_logging_failure_keeps_the_predictions_and_fails_the_run(
        prefect_server, tmp_path, monkeypatch, small_world_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "artifacts").write_text("a file where the artifact store should be")
    config = user_config(tmp_path, tiny_policy_dir, [str(small_world_dir / "test.jsonl")])
    with pytest.raises(RuntimeError, match="predictions, summaries and table are in") as err:
        benchmark(config)

    (saved,) = (tmp_path / "predictions").glob("*/test/cot.json")
    assert len(json.loads(saved.read_text())["rows"]) == 3
    assert (saved.parents[1] / "results.md").read_text().startswith("| method |")
    assert str(saved.parents[1]) in str(err.value)
    run_id = saved.parents[1].name
    run = mlflow.get_run(run_id)
    assert run.info.status == "FAILED"
    assert "predictions, summaries and table are in" in run.data.tags["error"]
    assert run.data.metrics["test/cot/n"] == 3  # what reached MLflow before the failure stays
