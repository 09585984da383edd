"""The benchmark flow under a real (temporary) Prefect server, writing a real MLflow run."""

from __future__ import annotations

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
