"""`advrag rl --engine verl`: the data in verl's parquet schema (read back by verl's own dataset),
our config composed against verl 0.9.1's config files, and the command line's dry run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed here: run `make verl`")

from omegaconf import OmegaConf  # noqa: E402
from verl_stand_in import prepare  # noqa: E402

from advrag.agents.prompts import search_r1_prompt  # noqa: E402
from advrag.datasets.loaders import load_qa  # noqa: E402
from advrag.engines.verl import launch  # noqa: E402
from advrag.recipes import RECIPES, recipe_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def grpo(small_world_dir):
    return recipe_for(ROOT / "configs" / "train.yaml",
                      {"world_dir": str(small_world_dir)}).config


def test_the_parquet_reads_back_through_verls_dataset(tmp_path, small_world_dir,
                                                      tiny_policy_dir):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    records = load_qa(small_world_dir / "train.jsonl")
    path = launch.export_parquet(records, tmp_path / "train.parquet", "train")
    dataset = RLHFDataset(str(path), AutoTokenizer.from_pretrained(tiny_policy_dir),
                          OmegaConf.create({"max_prompt_length": 4096,
                                            "filter_overlong_prompts": False,
                                            "cache_dir": str(tmp_path / "cache")}))
    assert len(dataset) == len(records)
    for i in (0, len(records) - 1):
        item = dataset[i]
        assert list(item["raw_prompt"]) == [
            {"role": "user", "content": search_r1_prompt(records[i].question)}]
        assert list(item["reward_model"]["ground_truth"]["target"]) == records[i].golden_answers
        assert item["extra_info"]["id"] == records[i].id and item["agent_name"] == "advrag_search_r1"
    with pytest.raises(ValueError, match="no dev questions"):
        launch.export_parquet([], tmp_path / "dev.parquet", "dev")


def test_task_mixing_rows_answer_directly_and_expect_no_retrieval(tmp_path, small_world_dir):
    """UR²'s task mixing in verl's data: a row that does not search names the direct loop and
    the direct-reasoning prompt, and tells ur2_score not to expect a query."""
    from advrag.agents.prompts import direct_reasoning_prompt

    records = load_qa(small_world_dir / "train.jsonl")[:3]
    rows = launch.dataset_rows(records, "train", retrieval=[True, False, True])
    assert [r["agent_name"] for r in rows] == ["advrag_search_r1", "advrag_direct",
                                               "advrag_search_r1"]
    assert rows[1]["prompt"] == [{"role": "user",
                                  "content": direct_reasoning_prompt(records[1].question)}]
    assert [r["extra_info"]["retrieval_expected"] for r in rows] == [True, False, True]
    with pytest.raises(ValueError, match="2 retrieval flags for 3 records"):
        launch.dataset_rows(records, "train", retrieval=[True, False])


def test_the_composed_config_carries_our_values(tmp_path, grpo):
    hydra_overrides, composed = prepare(grpo, tmp_path, model_path="/models/smollm2",
                                               retriever_url="http://10.0.0.5:8000", gpus=4,
                                               nodes=2)
    optim = grpo.optim  # configs/train.yaml: lr 5e-5, kl 0.001 (k3), group 4, 2 questions, f1
    expected = {
        "algorithm.adv_estimator": "advrag_grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode": "advrag_ppo",
        "actor_rollout_ref.actor.optim.lr": 5e-5,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.clip_ratio_low": optim.clip_low,
        "actor_rollout_ref.actor.clip_ratio_high": optim.clip_high,
        "actor_rollout_ref.model.path": "/models/smollm2",
        "actor_rollout_ref.model.lora_rank": 16,
        "actor_rollout_ref.model.lora_alpha": 32,
        "actor_rollout_ref.rollout.n": 4,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "advrag_search_r1",
        "actor_rollout_ref.rollout.calculate_log_probs": False,
        "trainer.v1.trainer_mode": "sync",
        "data.train_batch_size": 2,
        "data.max_response_length": 3072 - 512,
        "data.train_files": str(tmp_path / "train.parquet"),
        "reward.custom_reward_function.path": "pkg://advrag.engines.verl.rewards",
        "reward.custom_reward_function.name": "search_r1_score",
        "reward.custom_reward_function.reward_kwargs.metric": "f1",
        "trainer.total_training_steps": 8,
        "trainer.save_freq": 4,
        "trainer.n_gpus_per_node": 4,
        "trainer.nnodes": 2,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 4,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
        "trainer.project_name": "advrag-train",
    }
    assert {key: OmegaConf.select(composed, key) for key in expected} == expected
    loops = OmegaConf.load(composed.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert OmegaConf.to_container(loops) == [{
        "name": "advrag_search_r1", "_target_": "advrag.engines.verl.agent_loop.SearchR1AgentLoop",
        "retriever_url": "http://10.0.0.5:8000", "max_turns": grpo.max_turns, "topk": grpo.topk}, {
        "name": "advrag_direct",
        "_target_": "advrag.engines.verl.agent_loop.DirectAnswerAgentLoop"}]
    assert launch.command(hydra_overrides)[1:3] == ["-m", "verl.trainer.main_ppo"]


def test_rex_rag_runs_its_agent_loop_and_trainer(tmp_path, small_world_dir):
    """configs/rex-rag.yaml: training rows name REX-RAG's loop (dev rows the plain one), the
    loop file carries the probes' settings and the reward, and verl runs REX-RAG's trainer
    with its settings, registered in every Ray process by the module the environment names."""
    import pandas as pd

    rex = recipe_for(ROOT / "configs" / "rex-rag.yaml", {"world_dir": str(small_world_dir)}).config
    hydra_overrides, composed = prepare(rex, tmp_path, model_path="m",
                                               retriever_url="http://10.0.0.5:8000", gpus=1,
                                               nodes=1)
    assert set(pd.read_parquet(tmp_path / "train.parquet")["agent_name"]) == {"advrag_rex_rag"}
    assert set(pd.read_parquet(tmp_path / "dev.parquet")["agent_name"]) == {"advrag_search_r1"}
    loops = OmegaConf.to_container(OmegaConf.load(tmp_path / "agent_loops.yaml"))
    assert loops[2] == {"name": "advrag_rex_rag",
                        "_target_": "advrag.engines.verl.agent_loop.RexSearchAgentLoop",
                        "retriever_url": "http://10.0.0.5:8000", "max_turns": 4,
                        "topk": rex.topk, "probe_prob": 0.2, "pool_size": 30,
                        "reward": "search_r1_score",
                        "reward_kwargs": {"metric": "em", "format_penalty": 0.2},
                        "seed": rex.optim.seed}
    assert composed.trainer.v1.trainer_mode == "advrag_rex_rag"
    assert OmegaConf.to_container(composed.advrag_rex) == {
        "pool_size": 30, "keep_ratio": 0.12, "keep_ratio_weight": 0.1,
        "trajectory_filter": True, "correction": "fine"}
    modules = "advrag.engines.verl,advrag.engines.verl.rex_trainer"
    assert composed.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == modules
    assert launch.shown(hydra_overrides).startswith(f"VERL_USE_EXTERNAL_MODULES={modules} ")


def test_the_verl_runs_refuse_probe_turns_their_agent_loop_does_not_have(small_world_dir):
    rex = recipe_for(ROOT / "configs" / "rex-rag.yaml", {
        "world_dir": str(small_world_dir), "exploration": {"kind": "rex", "probe_turns": 2}})
    with pytest.raises(ValueError, match="probe_turns is not in the verl agent loop"):
        rex.verl_runs()


def test_ur2_with_rex_rag_probes_scores_with_ur2s_reward(tmp_path, small_world_dir):
    """A UR² stage with exploration: its searching rows name REX-RAG's loop, which scores
    with the stage's UR² reward; a direct row keeps the direct loop (never probed)."""
    import pandas as pd

    ur2 = recipe_for(ROOT / "configs" / "ur2-raw-docs.yaml", {
        "world_dir": str(small_world_dir), "exploration": {"kind": "rex"}}).config
    records = load_qa(small_world_dir / "train.jsonl")[:3]
    [stage_2] = [run for run in RECIPES["ur2"](ur2).verl_runs() if run.part == "stage-2"]
    stage_2 = dataclasses.replace(stage_2, records=records, retrieval=[True, False, True],
                                  search_prompt=search_r1_prompt)
    _, composed = launch.prepare(ur2, stage_2, tmp_path, model_path="m",
                                 retriever_url="http://127.0.0.1:8000", gpus=1, nodes=1)
    stage = tmp_path / "stage-2"
    assert list(pd.read_parquet(stage / "train.parquet")["agent_name"]) == [
        "advrag_rex_rag", "advrag_direct", "advrag_rex_rag"]
    rex_loop = OmegaConf.to_container(OmegaConf.load(stage / "agent_loops.yaml"))[2]
    assert (rex_loop["reward"], rex_loop["reward_kwargs"]) == ("ur2_score", {
        "stage": 2, "metric": ur2.reward_metric, "fallback_penalty": ur2.fallback_penalty})
    assert composed.reward.custom_reward_function.reward_kwargs == rex_loop["reward_kwargs"]
    assert composed.trainer.v1.trainer_mode == "advrag_rex_rag"


@pytest.mark.parametrize("name", ["train.yaml", "rex-rag.yaml"])
@pytest.mark.parametrize("gpus, nodes", [(1, 1), (8, 1), (4, 2)])
def test_verls_own_validation_passes_the_composed_config(tmp_path, small_world_dir, monkeypatch,
                                                          name, gpus, nodes):
    """verl's ``validate_config``, which ``main_ppo`` runs before anything starts, on the
    config as composed. Its last check asks vLLM's GPU build for the LoRA ranks it serves,
    which cannot load here: a stand-in answers as vLLM would for any rank up to 512."""
    import sys
    import types

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    utils = types.ModuleType("verl.workers.rollout.vllm_rollout.utils")
    utils.get_vllm_max_lora_rank = lambda rank: rank
    monkeypatch.setitem(sys.modules, "verl.workers.rollout.vllm_rollout",
                        types.ModuleType("verl.workers.rollout.vllm_rollout"))
    monkeypatch.setitem(sys.modules, "verl.workers.rollout.vllm_rollout.utils", utils)
    config = recipe_for(ROOT / "configs" / name, {"world_dir": str(small_world_dir)}).config
    _, composed = prepare(config, tmp_path, model_path="m", retriever_url="http://x",
                                 gpus=gpus, nodes=nodes)
    validate_config(config=composed, use_reference_policy=need_reference_policy(composed),
                    use_critic=need_critic(composed))


def test_the_prompt_budget_is_the_longest_exported_prompt(tmp_path, grpo, tiny_policy_dir):
    """With the model's tokenizer at hand, verl's prompt budget is the longest exported prompt
    (verl's dataset then keeps every question: tests/engines/test_verl_trainer_steps.py) and
    the episode gets the rest of max_seq_len; a budget that leaves none is refused."""
    _, composed = prepare(grpo, tmp_path, model_path=str(tiny_policy_dir),
                                 retriever_url="u", gpus=1, nodes=1)
    budget = composed.data.max_prompt_length
    assert 0 < budget < launch.DEFAULT_PROMPT_TOKENS
    assert composed.data.max_response_length == grpo.optim.max_seq_len - budget
    short = grpo.model_copy(update={"optim": grpo.optim.model_copy(
        update={"max_seq_len": budget})})
    with pytest.raises(ValueError, match=f"takes {budget} tokens, all of optim.max_seq_len"):
        prepare(short, tmp_path, model_path=str(tiny_policy_dir), retriever_url="u",
                       gpus=1, nodes=1)


def test_rollouts_that_do_not_split_over_the_gpus_are_refused(tmp_path, grpo):
    with pytest.raises(ValueError, match=r"8 rollouts \(questions_per_step 2 × group_size 4\) "
                                         "over 16 GPUs evenly"):
        prepare(grpo, tmp_path, model_path="m", retriever_url="u", gpus=8, nodes=2)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_a_key_verl_does_not_have_is_named(tmp_path, grpo):
    hydra_overrides, _ = prepare(grpo, tmp_path, model_path="m", retriever_url="u",
                                        gpus=1, nodes=1)
    with pytest.raises(ValueError, match="no_such_setting"):
        launch.compose([*hydra_overrides, "trainer.no_such_setting=1"])


def test_recipes_the_launcher_cannot_carry_are_refused(small_world_dir):
    arr = recipe_for(ROOT / "configs" / "arr.yaml", {"world_dir": str(small_world_dir)})
    with pytest.raises(ValueError, match="runs recipes grpo and ur2 for now; 'arr'"):
        arr.refuse_verl()


def test_the_command_line_dry_run_and_the_launch_without_a_gpu(tmp_path, small_world_dir):
    from typer.testing import CliRunner

    from advrag.cli import app

    args = ["rl", "--config", str(ROOT / "configs" / "train.yaml"), "--engine", "verl",
            "--set", f"world_dir={small_world_dir}", "--out-dir", str(tmp_path)]
    dry = CliRunner().invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    first, *config = dry.output.splitlines()
    assert first.startswith("VERL_USE_EXTERNAL_MODULES=advrag.engines.verl ")
    assert "-m verl.trainer.main_ppo algorithm.adv_estimator=advrag_grpo" in first
    assert "  adv_estimator: advrag_grpo" in config
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent_loops.yaml", "dev.parquet", "train.parquet"]
    launched = CliRunner().invoke(app, args)
    assert launched.exit_code == 1
    assert "verl's trainer runs on GPUs and torch sees none here" in launched.output


def test_a_ur2_dry_run_shows_one_verl_run_per_stage(tmp_path, small_world_dir):
    from typer.testing import CliRunner

    from advrag.cli import app

    dry = CliRunner().invoke(app, [
        "rl", "--config", str(ROOT / "configs" / "ur2.yaml"), "--engine", "verl", "--dry-run",
        "--set", f"world_dir={small_world_dir}", "--set", "summary.summarise=false",
        "--out-dir", str(tmp_path)])
    assert dry.exit_code == 0, dry.output
    commands = [line for line in dry.output.splitlines()
                if line.startswith("VERL_USE_EXTERNAL_MODULES=")]
    assert len(commands) == 2
    for stage, command in zip((1, 2), commands):
        assert f"reward_kwargs.stage={stage}" in command and "name=ur2_score" in command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage-1", "stage-2"]
