"""The benchmark flow under a real (temporary) Prefect server, writing a real MLflow run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import pytest

from advrag.config import BenchmarkConfig, ConfigError, load_config
from advrag.flows.benchmark import benchmark
from advrag.ops import dataplane
from advrag.tasks import tracking


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


def test_dataset_entries_get_safe_unique_names_when_the_config_loads(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("datasets: [world, {my_qa: /data/my_qa/test.jsonl}, ../rel/dev.jsonl, "
                    "'/data/my qa/x+y.jsonl']\n")
    assert load_config(good, BenchmarkConfig).dataset_specs() == [
        ("world", "world"), ("my_qa", "/data/my_qa/test.jsonl"), ("dev", "../rel/dev.jsonl"),
        ("x_y", "/data/my qa/x+y.jsonl")]
    same_stem = tmp_path / "same_stem.yaml"
    same_stem.write_text("datasets: [/data/a/test.jsonl, ../b/test.jsonl]\n")
    with pytest.raises(ConfigError, match=r"\['test'\] are used twice.*\{name: path\} form"):
        load_config(same_stem, BenchmarkConfig)


@pytest.mark.parametrize(("datasets", "problem"), [
    ("[{..: /data/x.jsonl}]", r"name '\.\.' may use only letters.*\(not first\)"),
    ("[{avg: /data/x.jsonl}]", r"'avg' is reserved for the averages"),
    ("[/data/avg.jsonl]", r"'avg' is reserved"),
])
def test_dataset_names_that_would_escape_or_collide_are_refused(tmp_path, datasets, problem):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"datasets: {datasets}\n")
    with pytest.raises(ConfigError, match=problem):
        load_config(bad, BenchmarkConfig)


def test_a_dotfile_path_is_named_without_its_leading_dots(tmp_path):
    config = tmp_path / "dot.yaml"
    config.write_text("datasets: [/data/.hidden.jsonl]\n")
    assert load_config(config, BenchmarkConfig).dataset_specs() == [
        ("hidden", "/data/.hidden.jsonl")]


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
    relative = os.path.relpath(small_world_dir / "dev.jsonl", tmp_path)  # ../…/dev.jsonl
    config = user_config(tmp_path, tiny_policy_dir,
                         [str(own.resolve()), relative, {"held_out": "qa/my qa.jsonl"}])
    result = benchmark(config)

    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    assert result["predictions"] == tmp_path / "predictions" / result["run_id"]
    for name in ("my_qa", "dev", "held_out"):
        assert run.data.metrics[f"{name}/cot/n"] == 3
        table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/predictions/{name}/cot.json")
        assert len(table["data"]) == 3
        saved = result["predictions"] / name / "cot.json"
        assert len(json.loads(saved.read_text())["rows"]) == 3
    assert "| cot | my_qa | 3 |" in result["table"]


def test_a_bad_dataset_entry_fails_before_any_evaluation(prefect_server, tmp_path, monkeypatch,
                                                         small_world_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    config = user_config(tmp_path, tiny_policy_dir, ["world", "hotpot"])
    config = config.model_copy(update={"world_dir": small_world_dir})
    with pytest.raises(ValueError, match="unknown dataset 'hotpot': give 'world', a standard"):
        benchmark(config)

    assert not (tmp_path / "predictions").exists()
    (run,) = mlflow.search_runs(experiment_names=["user-files"], output_format="list")
    assert run.info.status == "FAILED"
    assert "unknown dataset 'hotpot'" in run.data.tags["error"]


def test_a_logging_failure_keeps_the_predictions_and_fails_the_run(
        prefect_server, tmp_path, monkeypatch, small_world_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "artifacts").write_text("a file where the artifact store should be")
    config = user_config(tmp_path, tiny_policy_dir, [str(small_world_dir / "test.jsonl")])
    config = config.model_copy(update={"predictions_dir": Path("predictions")})  # relative to cwd
    with pytest.raises(RuntimeError, match="predictions, summaries and table are in") as err:
        benchmark(config)

    (saved,) = (tmp_path / "predictions").glob("*/test/cot.json")
    assert len(json.loads(saved.read_text())["rows"]) == 3
    assert (saved.parents[1] / "results.md").read_text().startswith("| method |")
    assert f"are in {saved.parents[1]}" in str(err.value)  # absolute: found from anywhere
    run_id = saved.parents[1].name
    run = mlflow.get_run(run_id)
    assert run.info.status == "FAILED"
    assert "predictions, summaries and table are in" in run.data.tags["error"]
    assert run.data.metrics["test/cot/n"] == 3  # what reached MLflow before the failure stays
