"""The pipeline with its RL stage on verl (`verl:` in the pipeline config): data → warm-up on
the local engine → verl's trainer from the warm-up's model, searching a retrieval server the
pipeline serves on 127.0.0.1 → merged back, registered, benchmarked → promotion. verl's trainer
needs GPUs: a stand-in writes the checkpoint verl's checkpoint manager would, and the GPU check
is lifted; everything else is the real chain."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
import yaml
from test_pipeline_flow import SMALL_WORLD, project, write  # noqa: F401 (the fixture)
from verl_stand_in import verl_saves, weights

from advrag.config import ConfigError, PipelineConfig
from advrag.registry.promotion import CHAMPION

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")
pytestmark = pytest.mark.slow


def grpo_pipeline(root, policy, **verl) -> PipelineConfig:
    recipe = write(root / "grpo.yaml", {
        "recipe": "grpo", "model": str(policy), "lora": None, "steps": 1,
        "questions_per_step": 2, "max_turns": 1, "max_new_tokens": 8, "group_size": 2,
        "checkpoint_dir": str(root / "ckpt"), "registered_model": "tiny-verl-reasoner",
        "optim": {"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 2048},
        "warmup": {"demonstrations": 4, "sft": {"lr": 1e-3, "batch_size": 2, "epochs": 1}},
        "benchmark_base": False, "evaluate": {"methods": ["search_r1"], "dtype": "float32",
                                              "limit": 4, "batch_size": 4, "max_turns": 1,
                                              "max_new_tokens": 8}})
    return PipelineConfig(data={"world": SMALL_WORLD}, recipe=recipe, discriminator=None,
                          promotion={"method": "search_r1", "n_boot": 200},
                          experiment="pipeline-verl", cache_dir=root / "stages",
                          verl={"out_dir": str(root / "verl-data"), **verl})


def test_the_rl_stage_runs_on_verl_from_the_warm_up(project, tiny_policy_dir, monkeypatch):  # noqa: F811
    from advrag.engines.verl import launch
    from advrag.flows.pipeline import pipeline

    seen = {}

    def trainer(overrides, run_id=None):
        """verl's trainer as the pipeline sees it: it searched the server it was given and
        saved a checkpoint of the model it started from where it was told."""
        values = dict(o.split("=", 1) for o in overrides)
        loops = yaml.safe_load(open(values["actor_rollout_ref.rollout.agent."
                                           "agent_loop_config_path"]))
        seen["health"] = httpx.get(f"{loops[0]['retriever_url']}/health", timeout=10).json()
        seen["start"] = values["actor_rollout_ref.model.path"]
        verl_saves(seen["start"], Path(values["trainer.default_local_dir"]), step=1)
        return 0

    monkeypatch.setattr(launch, "require_gpu", lambda: None)  # the GPU machine's stand-in
    monkeypatch.setattr(launch, "launch", trainer)
    config = grpo_pipeline(project, tiny_policy_dir)
    result = pipeline(config)

    assert seen["health"]["status"] == "ok"  # the pipeline's own retrieval server answered
    assert "warmup" in seen["start"]  # verl started from the warm-up's model
    assert result["decision"]["alias"] == CHAMPION
    import mlflow

    experiment = mlflow.get_experiment_by_name("pipeline-verl").experiment_id
    children = mlflow.search_runs([experiment], f"tags.`mlflow.parentRunId` = "
                                  f"'{result['run_id']}'", output_format="list")
    names = {run.info.run_name: run for run in children}
    assert set(names) == {"warm-up", "grpo-verl"}
    assert names["grpo-verl"].data.tags["engine"] == "verl"
    assert {"warmup", "trained"} <= set(result["trained"]["benchmark_runs"])
    model = result["trained"]["model_dir"]
    back, start = weights(model), weights(seen["start"])
    assert all(torch.equal(back[n], t.to(torch.bfloat16).float()) for n, t in start.items())


def test_a_recipe_verl_cannot_train_is_refused_before_any_stage(project, tiny_policy_dir):  # noqa: F811
    from advrag.flows.pipeline import pipeline

    config = grpo_pipeline(project, tiny_policy_dir)
    gar = write(project / "gar.yaml", {"recipe": "gar", "model": str(tiny_policy_dir)})
    with pytest.raises(ConfigError, match="verl: --engine verl runs recipes grpo and ur2 for now"):
        pipeline(config.model_copy(update={"recipe": gar}))
    assert not (project / "data" / "world").exists()  # nothing was built


def test_rollouts_that_do_not_split_over_the_gpus_are_refused_before_any_stage(
        project, tiny_policy_dir):  # noqa: F811
    from advrag.flows.pipeline import pipeline

    config = grpo_pipeline(project, tiny_policy_dir, gpus=3)  # 2 questions × 2 rollouts
    with pytest.raises(ConfigError, match="verl: verl splits a step's 4 rollouts .* over 3 GPUs"):
        pipeline(config)
    assert not (project / "data" / "world").exists()  # nothing was built


def test_ur2s_summaries_on_verl_need_a_summarising_server(project, tiny_policy_dir):  # noqa: F811
    from advrag.flows.pipeline import pipeline

    config = grpo_pipeline(project, tiny_policy_dir)
    ur2 = write(project / "ur2.yaml", {"recipe": "ur2", "model": str(tiny_policy_dir),
                                       "summary": {"summarise": True}})
    with pytest.raises(ConfigError, match="UR²'s summaries need a retrieval server started "
                                          "with --summarise: set verl.retriever_url"):
        pipeline(config.model_copy(update={"recipe": ur2}))


def test_several_nodes_need_a_shared_retrieval_server():
    with pytest.raises(ValueError, match="several nodes need a retrieval server"):
        PipelineConfig(verl={"nodes": 2})
    assert PipelineConfig(verl={"nodes": 2, "retriever_url": "http://10.0.1.5:8000"}).verl


def test_the_gpu_workers_nightly_trains_on_verl():
    """prefect.yaml's nightly-gpu deployment (the Terraform workers' pool) runs
    configs/nightly-gpu.yaml: the pipeline with a recipe verl can train and a verl section."""
    from advrag.config import load_config
    from advrag.recipes import recipe_for

    root = Path(__file__).resolve().parents[2]
    deployments = {d["name"]: d for d in yaml.safe_load((root / "prefect.yaml").read_text())[
        "deployments"]}
    gpu = deployments["nightly-gpu"]
    assert gpu["work_pool"]["name"] == "advrag-gpu"
    assert gpu["parameters"] == {"config": "configs/nightly-gpu.yaml"}
    config = load_config(root / gpu["parameters"]["config"], PipelineConfig)
    assert config.verl is not None and config.discriminator is None
    recipe_for(root / config.recipe).refuse_verl()  # raises for a recipe verl lacks
