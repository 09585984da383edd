"""The ARR flow with a tiny model: per-agent metrics, figures, checkpoints, registry, benchmark."""

from __future__ import annotations

import mlflow
import pytest
import torch

from advrag.config import BenchmarkConfig, WarmupSection
from advrag.flows.rl import rl_flow
from advrag.models.loading import load_policy
from advrag.recipes.arr import ArrConfig
from advrag.tasks import tracking

AGENT_METRICS = {"reward_mean", "reward_std", "em", "f1", "format_errors", "bonus_fraction",
                 "loss", "kl", "grad_norm", "entropy", "lr", "time/rollout_s", "time/score_s",
                 "time/update_s"}
REASONER_METRICS = {"impact_mean", "monitored_entropy", "searches", "truncated_actions",
                    *(f"pattern_{p}" for p in ("D", "ID", "F", "DI", "I"))}
VERIFIER_METRICS = {"clarity_mean", "process_adv_mean", "critique_actions", "critique_entropy",
                    "truncated_actions"}
SHARED_METRICS = {"final/em", "final/f1", "time/retrieval_s", "time/step_s"}


def config(tmp_path, world, index, policy, steps, evaluate=None, **changes) -> ArrConfig:
    settings = dict(
        model=str(policy), lora={"r": 4, "alpha": 8}, cpu_bf16=False, steps=steps,
        questions_per_step=2, group_size=2, max_turns=2, max_new_tokens=8, checkpoint_every=1,
        optim={"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 3072, "kl_coef": 0.01},
        checkpoint_dir=tmp_path / "ckpt", world_dir=world, index_dir=index,
        experiment="arr-test", registered_reasoner="tiny-arr-reasoner",
        registered_verifier="tiny-arr-verifier", evaluate=evaluate, warmup=None,
    )
    return ArrConfig(**(settings | changes))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))


def test_joint_training_logs_registers_and_benchmarks_both_agents(
        prefect_server, store, tmp_path, small_world_dir, small_index_dir, tiny_policy_dir):
    evaluate = BenchmarkConfig(methods=["arr", "search_r1"], limit=2, batch_size=2, max_turns=1,
                               max_new_tokens=8, world_dir=small_world_dir,
                               index_dir=small_index_dir, experiment="arr-test-eval")
    # two fully fine-tuned models (the shared-adapter default runs in the resume test below)
    result = rl_flow(config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir,
                                   2, evaluate, policies="separate", lora=None,
                                   verifier_optim={"lr": 5e-3}))

    client = mlflow.MlflowClient()
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["flow"] == "rl"
    expected = ({f"{a}/{m}" for a in ("reasoner", "verifier") for m in AGENT_METRICS}
                | {f"reasoner/{m}" for m in REASONER_METRICS}
                | {f"verifier/{m}" for m in VERIFIER_METRICS} | SHARED_METRICS)
    assert expected <= run.data.metrics.keys()
    for name in expected:
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [0, 1], name
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"reward_curves.png", "entropy_trajectories.png", "checkpoints", "model"} <= artifacts
    for agent in ("reasoner", "verifier"):
        saved = {a.path for a in client.list_artifacts(run.info.run_id, f"checkpoints/{agent}")}
        assert saved == {f"checkpoints/{agent}/step-00000001", f"checkpoints/{agent}/step-00000002"}

    base = list(load_policy(str(tiny_policy_dir)).model.parameters())
    registered = {}
    for agent in ("reasoner", "verifier"):
        name = f"tiny-arr-{agent}"
        assert result["versions"][agent] == "1"
        tags = client.get_model_version(name, "1").tags
        assert tags["agent"] == agent and tags["run_id"] == run.info.run_id
        assert tags["bench.world.arr.n"] == "2.0000" and "bench.world.search_r1.em" in tags
        model_dir = tracking.download_model(f"models:/{name}/1", tmp_path / "dl" / agent)
        registered[agent] = list(load_policy(str(model_dir)).model.parameters())
        last = load_policy(str(tmp_path / "ckpt" / agent / "step-00000002" / "weights"))
        assert all(torch.equal(a, b) for a, b in zip(registered[agent], last.model.parameters()))
        assert any(not torch.equal(a, b) for a, b in zip(registered[agent], base))
    assert any(not torch.equal(a, b) for a, b in zip(registered["reasoner"], registered["verifier"]))

    for name in ("base", "trained"):
        assert {k: v["n"] for k, v in result[name].items()} == {
            ("arr", "world"): 2, ("search_r1", "world"): 2}
    bench_runs = client.search_runs([client.get_experiment_by_name("arr-test-eval").experiment_id])
    verifiers = {r.data.tags["mlflow.runName"]: r.data.params["config.verifier_model"]
                 for r in bench_runs}
    assert verifiers == {"arr-base": "None", "arr-trained": result["model_dirs"]["verifier"]}


def test_warm_up_then_rerun_resumes_and_refuses_other_method_settings(
        prefect_server, store, tmp_path, small_world_dir, small_index_dir, tiny_policy_dir):
    args = (tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    warmup = WarmupSection(demonstrations=2, sft={"lr": 1e-3, "batch_size": 3,
                                                  "micro_batch_size": 3, "max_seq_len": 4096})
    # the default layout (a LoRA adapter per agent on one base) after an SFT warm-up
    first = rl_flow(config(*args, 3, warmup=warmup, max_train_minutes=1e-9,
                                  checkpoint_every=5))
    assert first["steps_run"] == 1  # the budget was spent by the first update: checkpointed
    client = mlflow.MlflowClient()
    sft = client.get_metric_history(first["run_id"], "warmup/loss")
    assert [m.step for m in sft] == [0, 1]  # 2 dialogues × 3 roles in batches of 3
    warm = load_policy(str(tmp_path / "ckpt" / "warmup"))
    base = load_policy(str(tiny_policy_dir))
    assert any(not torch.equal(a, b) for a, b in zip(warm.model.parameters(),
                                                     base.model.parameters()))
    for agent in ("reasoner", "verifier"):
        weights = tmp_path / "ckpt" / agent / "step-00000001" / "weights"
        assert (weights / "adapter_model.safetensors").is_file()

    second = rl_flow(config(*args, 2, warmup=warmup))  # reuses the warm-up, resumes
    assert second["steps_run"] == 1 and second["resumed_at"] == 1  # step 0: the checkpoints'
    history, before = (client.get_metric_history(run, "verifier/reward_mean")
                       for run in (second["run_id"], first["run_id"]))
    assert [m.step for m in history] == [0, 1]
    assert history[0] == before[0]  # carried from the first run (its timestamp too), not rerun
    assert client.get_metric_history(second["run_id"], "warmup/loss") == []
    with pytest.raises(ValueError, match="other ARR settings"):
        rl_flow(config(*args, 3, warmup=warmup, lam=0.9))
