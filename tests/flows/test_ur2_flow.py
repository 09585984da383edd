"""UR² end to end with a tiny model: curation subflow → stage 1 → stage 2, resumable curation."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow

from advrag.flows.curate import curate_flow
from advrag.flows.rl import run_recipe
from advrag.recipes.ur2 import UR2Config, UR2Recipe
from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path, world, index, policy) -> UR2Config:
    return UR2Config(
        model=str(policy), lora=None, steps=2, stage1_steps=1, questions_per_step=2,
        max_turns=1, max_new_tokens=8, checkpoint_every=1, checkpoint_dir=tmp_path / "ckpt",
        world_dir=world, index_dir=index, experiment="ur2-test", registered_model="tiny-ur2",
        group_size=2, optim={"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 2048,
               "kl_coef": 0.0, "advantage": "reinforce_pp"},
        curate={"k": 2, "questions": 4, "batch_questions": 2, "out_dir": tmp_path / "curated",
                "cache_dir": tmp_path / "cache"},
        warmup=None, evaluate=None, cpu_bf16=False,
    )


def test_ur2_curates_then_trains_both_stages_in_one_tracked_run(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    result = run_recipe(UR2Recipe(cfg), "rl", "ur2")

    client = mlflow.MlflowClient()
    stages = client.get_metric_history(result["run_id"], "ur2/stage")
    assert [(m.step, m.value) for m in stages] == [(0, 1.0), (1, 2.0)]
    for name in ("ur2/violations", "ur2/valid_queries", "ur2/fallbacks", "informative_groups"):
        assert len(client.get_metric_history(result["run_id"], name)) == 2, name
    experiment = mlflow.get_experiment_by_name("ur2-test").experiment_id
    children = mlflow.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{result['run_id']}'",
                                  output_format="list")
    assert [run.info.run_name for run in children] == ["curate"]
    curate_run = children[0]
    assert {"curate/difficulty.png", "curate/curated"} <= {
        a.path for a in client.list_artifacts(curate_run.info.run_id, "curate")}
    rows = [json.loads(line) for line in (tmp_path / "curated" / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["k"] for r in rows} == {2}
    assert {r["policy"] for r in rows} == {curate_run.data.tags["policy.hash"]}
    histogram = {k: curate_run.data.metrics[f"curate/{k}"] for k in ("easy", "medium", "hard", "filtered")}
    assert sum(histogram.values()) == 4


def test_a_second_curation_with_the_same_policy_reuses_every_rollout(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    first = curate_flow(UR2Recipe(cfg))
    (cache,) = (tmp_path / "cache").iterdir()
    written = cache.read_text()
    second = curate_flow(UR2Recipe(cfg))
    assert cache.read_text() == written  # nothing rolled out again
    assert second["levels"] == first["levels"] and second["policy_hash"] == first["policy_hash"]
    assert len(written.splitlines()) == 4


def test_the_dvc_curate_stage_depends_on_the_policy_fingerprint(tmp_path, tiny_policy_dir):
    import yaml
    from typer.testing import CliRunner

    from advrag.cli import app
    from advrag.curation.curate import policy_fingerprint

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    fingerprint_out = next(iter(stages["policy-hash"]["outs"][0]))
    assert stages["policy-hash"]["always_changed"] and fingerprint_out in stages["curate"]["deps"]
    config = tmp_path / "ur2.yaml"
    config.write_text(f"extends: {ROOT / 'configs' / 'ur2.yaml'}\nmodel: {tiny_policy_dir}\n")
    out = tmp_path / "policy.sha256"
    result = CliRunner().invoke(app, ["policy-hash", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == policy_fingerprint(tiny_policy_dir) + "\n"
