"""GAR end to end with a tiny model: joint updates, both agents checkpointed and registered."""

from __future__ import annotations

import json

import mlflow
import pytest
import torch

from advrag.flows.rl import run_recipe
from advrag.recipes.gar import GarConfig, GarRecipe
from advrag.tasks import tracking


def config(tmp_path, world, index, policy, **changes) -> GarConfig:
    settings = dict(
        model=str(policy), steps=2, questions_per_step=2, max_turns=1, max_new_tokens=8,
        max_judge_tokens=12, max_slice_tokens=16, checkpoint_every=1, lora={"r": 4, "alpha": 8},
        checkpoint_dir=tmp_path / "ckpt", world_dir=world, index_dir=index,
        experiment="gar-test", registered_reasoner="tiny-gar-r", registered_discriminator="tiny-gar-d",
        group_size=2, optim={"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 2048},
        warmup=None, evaluate=None, cpu_bf16=False)
    return GarConfig(**(settings | changes))


def test_gar_updates_and_registers_both_agents(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    recipe = GarRecipe(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir))
    before = {n: p.detach().clone() for n, p in recipe_params(recipe, tiny_policy_dir)}
    result = run_recipe(recipe, "rl", "gar")

    client = mlflow.MlflowClient()
    for name in ("reasoner/reward_mean", "reasoner/loss", "slices/reference",
                 "discriminator/accuracy", "discriminator/loss"):
        assert [m.step for m in client.get_metric_history(result["run_id"], name)] == [0, 1], name
    assert set(result["versions"]) == {"reasoner", "discriminator"}
    figures = {a.path for a in client.list_artifacts(result["run_id"])}
    assert {"gar_curves.png", "judged_slices.png", "slice_scores.png"} <= figures
    png = client.download_artifacts(result["run_id"], "judged_slices.png", str(tmp_path / "dl"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    examples = recipe.judged_examples()
    assert all(e in recipe.slice_log[-1]["judged"] for e in
               [{k: v for k, v in e.items() if k not in ("verdict", "rationale")} for e in examples])
    generated = sum(e["source"] == "generated" for e in examples)
    assert 0 < len(examples) <= 6 and generated <= 3  # the tiny world may lack a reference
    assert len(examples) - generated <= max(generated, 1)
    assert all(0 <= e["p_yes"] <= 1 for e in examples if e["p_yes"] is not None)
    assert (tmp_path / "ckpt" / "discriminator").is_dir() and (tmp_path / "ckpt" / "reasoner").is_dir()
    trained = recipe.trainers["discriminator"].policy
    changed = [not torch.equal(before[n], p) for n, p in trained.model.named_parameters()
               if ".discriminator." in n]
    assert changed and any(changed)


def recipe_params(recipe, policy_dir):
    """The adapters' initial weights (built the way the recipe builds them)."""
    recipe.build(str(policy_dir))
    return [(n, p) for n, p in recipe.trainers["discriminator"].policy.model.named_parameters()
            if ".discriminator." in n]


def test_without_a_discriminator_only_the_reasoner_trains(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, discriminator="none",
                 steps=1)
    result = run_recipe(GarRecipe(cfg), "rl", "gar-none")
    assert set(result["versions"]) == {"reasoner"}
    metrics = mlflow.get_run(result["run_id"]).data.metrics
    assert "reasoner/reward_mean" in metrics and "discriminator/accuracy" not in metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(result["run_id"])}
    assert "gar_curves.png" in artifacts and "judged_slices.png" not in artifacts  # nobody judges
    assert "slice_scores.png" not in artifacts


def test_a_fixed_discriminator_needs_its_sft_adapter(tmp_path, tiny_policy_dir):
    cfg = config(tmp_path, tmp_path, tmp_path, tiny_policy_dir, discriminator="fixed")
    with pytest.raises(ValueError, match="discriminator-sft"):
        GarRecipe(cfg).build(str(tiny_policy_dir))


def test_gar_with_ur2s_curation_in_front_trains_on_the_curated_sample(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    """``curate:`` on a gar config: the curation subflow scores the training questions with
    GAR's own agent (the Search-R1 loop) and the updates draw from its sample. The tiny policy
    solves nothing, so every question scores 0: with the hard level from 0 up and a sample of
    hard questions only, all four are kept (with the paper's levels none would be)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    curate = {"k": 2, "questions": 4, "batch_questions": 2, "out_dir": tmp_path / "curated",
              "cache_dir": tmp_path / "cache", "thresholds": {"easy": 0.8, "medium": 0.5, "hard": 0.0},
              "ratio": {"hard": 1.0, "medium": 0.0, "easy": 0.0}}
    recipe = GarRecipe(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir,
                              steps=1, discriminator="none", curate=curate))
    assert recipe.upstream() == ("curation",)
    result = run_recipe(recipe, "rl", "gar")

    client = mlflow.MlflowClient()
    experiment = mlflow.get_experiment_by_name("gar-test").experiment_id
    children = mlflow.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{result['run_id']}'",
                                  output_format="list")
    assert [run.info.run_name for run in children] == ["curate"]
    (cache,) = (tmp_path / "cache").iterdir()
    assert len(cache.read_text().splitlines()) == 4  # four questions, k = 2 attempts each
    curated = [json.loads(line)["id"] for line in
               (tmp_path / "curated" / "curated.jsonl").read_text().splitlines()]
    questions = recipe.training_questions()
    assert len(questions) > 4  # so the sample is a real subset
    first_four = [r.id for r in questions[:4]]
    assert sorted(curated) == sorted(first_four)
    assert [r.id for r in recipe.curated] == curated
    pool_flag = client.get_metric_history(result["run_id"], "uncurated_pool")
    assert [m.value for m in pool_flag] == [0.0]
    assert {r.id for r in recipe.batch(questions, 0)} <= set(curated)
