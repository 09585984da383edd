"""The GRPO train flow with a tiny model: metrics, checkpoints, registry, resume, benchmark."""

from __future__ import annotations

import json

import mlflow
import torch

from advrag.config import BenchmarkConfig
from advrag.engines.local.checkpoint import list_checkpoints
from advrag.flows.rl import rl_flow
from advrag.models.loading import load_policy
from advrag.recipes.grpo import GrpoConfig
from advrag.recipes.rex_rag import RexExploration
from advrag.tasks import tracking

STEP_METRICS = {"reward_mean", "reward_std", "informative_groups", "loss", "kl", "clip_fraction",
                "grad_norm", "entropy", "tokens_per_s", "searches", "lr", "rollout_s", "score_s",
                "update_s"}


def config(tmp_path, world, index, policy, steps, evaluate=None) -> GrpoConfig:
    return GrpoConfig(
        model=str(policy), lora=None, steps=steps, questions_per_step=2, max_turns=1,
        max_new_tokens=8, checkpoint_every=1, checkpoint_dir=tmp_path / "ckpt",
        world_dir=world, index_dir=index, experiment="train-test", registered_model="tiny-rl",
        group_size=2, optim={"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 2048,
               "kl_coef": 0.01},
        warmup={"demonstrations": 4, "sft": {"lr": 1e-3, "batch_size": 2}},
        evaluate=evaluate,
    )


def test_two_steps_train_log_checkpoint_register_and_benchmark(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    evaluate = BenchmarkConfig(methods=["search_r1"], limit=2, batch_size=2, max_turns=1,
                               max_new_tokens=8, world_dir=small_world_dir,
                               index_dir=small_index_dir, experiment="train-test-eval")
    result = rl_flow(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 2, evaluate))

    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    client = mlflow.MlflowClient()
    for name in STEP_METRICS:
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == [0, 1], name
    warmup_loss = client.get_metric_history(run.info.run_id, "warmup/loss")
    assert [m.step for m in warmup_loss] == [0, 1]  # 4 demonstrations, batches of 2
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"reward_curve.png", "checkpoints", "checkpoint"} <= artifacts
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {
        "checkpoints/step-00000001", "checkpoints/step-00000002"}
    assert result["version"] == "1"
    tags = client.get_model_version("tiny-rl", "1").tags
    assert tags["run_id"] == run.info.run_id and len(tags["config.hash"]) == 16
    assert tags["data.version"] == run.data.tags["data.version"] and tags["git.commit"]
    assert tags["bench.world.search_r1.n"] == "2.0000"
    assert float(tags["bench.world.search_r1.em"]) == result["trained"][("search_r1", "world")]["em"]

    trained = load_policy(str(tracking.download_model("models:/tiny-rl/1", tmp_path / "dl")))
    base = load_policy(str(tiny_policy_dir))
    changed = [not torch.equal(a, b) for a, b in
               zip(trained.model.parameters(), base.model.parameters())]
    assert any(changed)
    for name in ("base", "warmup", "trained"):
        assert result[name][("search_r1", "world")]["n"] == 2


def test_a_spent_budget_checkpoints_and_a_rerun_resumes_from_it(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    budgeted = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 3).model_copy(
        update={"max_train_minutes": 1e-9, "checkpoint_every": 5})
    first = rl_flow(budgeted)
    assert first["steps_run"] == 1  # the budget was spent by the first update
    assert [p.name for p in list_checkpoints(tmp_path / "ckpt")] == ["step-00000001"]
    second = rl_flow(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 2))
    assert second["steps_run"] == 1 and second["resumed_at"] == 1  # step 0: the checkpoint's
    client = mlflow.MlflowClient()
    history, before = (client.get_metric_history(run, "reward_mean")
                       for run in (second["run_id"], first["run_id"]))
    assert [(m.step, m.value, m.timestamp) for m in history[:1]] == [
        (m.step, m.value, m.timestamp) for m in before]  # carried from the first run, not rerun
    assert [m.step for m in history] == [0, 1]
    assert mlflow.get_run(second["run_id"]).data.tags[tracking.RESUMED_FROM] == first["run_id"]
    assert not client.get_metric_history(second["run_id"], "warmup/loss")


def test_a_resume_from_a_checkpoint_that_names_no_run_says_its_curves_start_there(capsys):
    from types import SimpleNamespace

    from advrag.flows.rl import carried_updates

    older_checkpoint = SimpleNamespace(resumed_from_run=None)
    assert carried_updates(older_checkpoint, "run", 8) == []
    assert "resumed at update 9" in capsys.readouterr().out
    assert carried_updates(older_checkpoint, "run", 0) == []  # a fresh start carries nothing
    assert capsys.readouterr().out == ""


def test_rex_rag_exploration_trains_logs_its_metrics_and_checkpoints_its_keep_ratio(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    rex = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 2).model_copy(
        update={"exploration": RexExploration(kind="rex", keep_ratio=0.3)})
    result = rl_flow(rex)
    client = mlflow.MlflowClient()
    for name in ("rex/probes_opened", "rex/probes_kept", "rex/keep_ratio", "rex/policy_accuracy",
                 "rex/probe_accuracy", "rex/informative_groups"):
        assert [m.step for m in client.get_metric_history(result["run_id"], name)] == [0, 1], name
    logged = client.get_run(result["run_id"]).data.metrics
    assert any(name.startswith("type/") and name.endswith("/f1") for name in logged)
    artifacts = {a.path for a in client.list_artifacts(result["run_id"])}
    assert {"reward_curve.png", "training_by_type.png"} <= artifacts
    newest = list_checkpoints(tmp_path / "ckpt")[-1]
    state = json.loads((newest / "state.json").read_text())
    assert state["extra"]["recipe_state"]["keep_ratio"] <= 0.3


def test_checkpoints_go_to_the_bucket_and_a_fresh_machine_resumes_from_it(
        prefect_server, s3, tmp_path, monkeypatch, small_world_dir, small_index_dir,
        tiny_policy_dir):
    """With ADVRAG_ARTIFACT_BUCKET set (moto's S3), each checkpoint is mirrored; with the local
    checkpoints gone (a new instance), the rerun pulls the newest and resumes after it."""
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("ADVRAG_ARTIFACT_BUCKET", "advrag-ckpt-test")
    s3.client.create_bucket(Bucket="advrag-ckpt-test")
    first = rl_flow(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 2))
    assert first["steps_run"] == 2
    assert {"checkpoints/ckpt/step-00000001/COMPLETE", "checkpoints/ckpt/step-00000002/COMPLETE",
            "checkpoints/ckpt/step-00000002/state.json"} <= s3.keys("advrag-ckpt-test")
    shutil.rmtree(tmp_path / "ckpt")  # the instance and its disk are gone; the warm-up too
    second = rl_flow(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir, 3))
    assert second["steps_run"] == 1  # updates 1 and 2 came from the bucket
    assert [p.name for p in list_checkpoints(tmp_path / "ckpt")][-1] == "step-00000003"
