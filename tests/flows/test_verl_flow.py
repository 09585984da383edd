"""The flow `rl-verl` around verl's trainer: one MLflow run with the config verl composed and
the trainer's run id, the newest checkpoint merged back, registered with the local engine's
provenance tags and benchmarked. verl's trainer needs GPUs, so a stand-in takes its place: it
writes the checkpoint verl would (a real two-rank FSDP2 checkpoint by verl's own checkpoint
manager, test_verl_checkpoints) where the composed config says."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
import torch

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")
pytestmark = pytest.mark.slow

from verl_stand_in import verl_saves, weights  # noqa: E402

from advrag.config import BenchmarkConfig  # noqa: E402
from advrag.config.flows import VerlSection  # noqa: E402
from advrag.engines.verl import launch  # noqa: E402
from advrag.flows.verl import rl_on_verl  # noqa: E402
from advrag.recipes.grpo import GrpoConfig  # noqa: E402
from advrag.recipes.grpo.recipe import GrpoRecipe  # noqa: E402
from advrag.tasks import tracking  # noqa: E402

URL = "http://127.0.0.1:8000"  # the stand-in trainer searches nothing


def test_verls_checkpoint_comes_back_registered_and_benchmarked(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    evaluate = BenchmarkConfig(methods=["search_r1"], limit=2, batch_size=2, max_turns=1,
                               max_new_tokens=8, world_dir=small_world_dir,
                               index_dir=small_index_dir, experiment="verl-test-eval")
    config = GrpoConfig(model=str(tiny_policy_dir), lora=None, steps=2, questions_per_step=2,
                        checkpoint_every=1, checkpoint_dir=tmp_path / "ckpt",
                        world_dir=small_world_dir, index_dir=small_index_dir,
                        experiment="verl-test", registered_model="tiny-verl",
                        evaluate=evaluate, benchmark_base=False)
    launched = {}

    def trainer(overrides, run_id=None):
        """verl's trainer as far as the flow sees it: a checkpoint where it was told."""
        values = dict(o.split("=", 1) for o in overrides)
        launched.update(run_id=run_id, values=values)
        verl_saves(tiny_policy_dir, Path(values["trainer.default_local_dir"]), step=2)
        return 0

    monkeypatch.setattr(launch, "launch", trainer)
    result = rl_on_verl(GrpoRecipe(config), VerlSection(out_dir=tmp_path / "verl-data", retriever_url=URL))

    assert launched["run_id"] == result["run_id"]
    assert launched["values"]["trainer.logger"] == "[console,mlflow]"
    assert launched["values"]["trainer.default_local_dir"] == str(tmp_path / "ckpt" / "verl")
    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["engine"] == "verl" and run.data.tags["verl.step"] == "2"
    client = mlflow.MlflowClient()
    assert "verl/ppo_trainer.yaml" in {a.path for a in client.list_artifacts(run.info.run_id,
                                                                                "verl")}
    tags = client.get_model_version("tiny-verl", result["version"]).tags
    assert tags["run_id"] == run.info.run_id and tags["data.version"] == run.data.tags[
        "data.version"] and len(tags["config.hash"]) == 16
    assert tags["bench.world.search_r1.n"] == "2.0000"  # the trained stage, benchmarked
    downloaded = tracking.download_model(f"models:/tiny-verl/{result['version']}",
                                         tmp_path / "downloaded")
    back, original = weights(downloaded), weights(tiny_policy_dir)
    assert all(torch.equal(back[n], t.to(torch.bfloat16).float()) for n, t in original.items())


def test_a_failed_trainer_fails_the_run_and_registers_nothing(
        prefect_server, tmp_path, monkeypatch, small_world_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    config = GrpoConfig(model=str(tiny_policy_dir), lora=None, steps=1, questions_per_step=2,
                        checkpoint_dir=tmp_path / "ckpt", world_dir=small_world_dir,
                        experiment="verl-fail", registered_model="tiny-verl-fail")
    monkeypatch.setattr(launch, "launch", lambda overrides, run_id=None: 3)
    with pytest.raises(RuntimeError, match="verl's trainer exited with status 3"):
        rl_on_verl(GrpoRecipe(config), VerlSection(out_dir=tmp_path / "verl-data", retriever_url=URL))
    (run,) = mlflow.search_runs(experiment_names=["verl-fail"], output_format="list")
    assert run.info.status == "FAILED"
    with pytest.raises(mlflow.exceptions.MlflowException):
        mlflow.MlflowClient().get_registered_model("tiny-verl-fail")
