"""UR² on verl: curation with the start policy here, then stage 1 and stage 2 as two verl runs,
each on its pool with task mixing's prompts and UR²'s reward of the stage, the second from
the first's merged checkpoint. verl's trainer needs GPUs: a stand-in writes the checkpoint
verl's checkpoint manager would, after recording what it was given."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
from stand_in_http import serving_app

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")
pytestmark = pytest.mark.slow

from test_ur2_flow import config as ur2_config  # noqa: E402
from verl_stand_in import Summarising, verl_saves, weights  # noqa: E402

from advrag.config.flows import SummaryConfig, VerlSection  # noqa: E402
from advrag.engines.verl import launch  # noqa: E402
from advrag.recipes.ur2 import UR2Recipe  # noqa: E402
from advrag.recipes.ur2.verl import require_summaries  # noqa: E402
from advrag.tasks import tracking  # noqa: E402


def test_each_stage_is_a_verl_run_with_its_pool_prompts_and_reward(tmp_path, small_world_dir,
                                                                   small_index_dir,
                                                                   tiny_policy_dir):
    config = ur2_config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    recipe = UR2Recipe(config.model_copy(update={  # a hub model: verl's 512-token prompt budget
        "summary": SummaryConfig(summarise=False),
        "optim": config.optim.model_copy(update={"max_seq_len": 1024})}))
    records = recipe.training_questions()[:4]
    flags = [True, False, True, False]
    recipe.use_curation(records, [])  # stage 2 trains on these
    [stage_2] = [run for run in recipe.verl_runs() if run.part == "stage-2"]
    hydra_overrides, composed = launch.prepare(
        recipe.config, dataclasses.replace(stage_2, retrieval=flags), tmp_path / "out",
        model_path="/models/stage-1", gpus=1, nodes=1, retriever_url="http://10.0.0.5:8000")
    reward = composed.reward.custom_reward_function
    assert (reward.name, dict(reward.reward_kwargs)) == ("ur2_score", {
        "stage": 2, "metric": recipe.config.reward_metric,
        "fallback_penalty": recipe.config.fallback_penalty})  # no Search-R1 format penalty
    assert composed.trainer.total_training_steps == 1  # steps 2, stage 1 took 1
    assert composed.trainer.default_local_dir == str(tmp_path / "ckpt" / "verl" / "stage-2")
    assert composed.actor_rollout_ref.model.path == "/models/stage-1"
    assert (composed.data.max_prompt_length, composed.data.max_response_length) == (512, 512)
    rows = pd.read_parquet(tmp_path / "out" / "stage-2" / "train.parquet")
    assert list(rows["agent_name"]) == ["advrag_search_r1", "advrag_direct"] * 2
    assert rows["prompt"][0][0]["content"] == recipe.search_prompt()(records[0].question)
    assert [bool(e["retrieval_expected"]) for e in rows["extra_info"]] == flags


def test_summaries_need_a_server_that_summarises(tmp_path, small_world_dir, small_index_dir,
                                                 tiny_policy_dir):
    from advrag.retrieval.retriever import load_retriever
    from advrag.retrieval.server import create_app

    config = ur2_config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    config = config.model_copy(update={"summary": SummaryConfig(summarise=True)})
    retriever = load_retriever(small_index_dir, kind="dense")
    with serving_app(create_app(retriever)) as raw:
        with pytest.raises(ValueError, match="serves raw documents; start it with .*--summarise"):
            require_summaries(config, raw)
    with serving_app(create_app(retriever, summariser=Summarising())) as summarising:
        require_summaries(config, summarising)


def test_ur2_curates_then_trains_stage_one_then_stage_two_from_it(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    from advrag.flows.verl import rl_on_verl

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    config = ur2_config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    config = config.model_copy(update={"summary": SummaryConfig(summarise=False)})
    launches = []

    def trainer(overrides, run_id=None):
        """verl's trainer as the flow sees it: it saves the model it started from."""
        values = dict(o.split("=", 1) for o in overrides)
        launches.append(values)
        verl_saves(values["actor_rollout_ref.model.path"],
                   Path(values["trainer.default_local_dir"]), step=len(launches))
        return 0

    monkeypatch.setattr(launch, "launch", trainer)
    result = rl_on_verl(UR2Recipe(config), VerlSection(retriever_url="http://127.0.0.1:8000",
                                                       out_dir=tmp_path / "verl-data"))

    stage1, stage2 = launches
    assert stage1["+reward.custom_reward_function.reward_kwargs.stage"] == "1"
    assert stage2["+reward.custom_reward_function.reward_kwargs.stage"] == "2"
    assert stage1["actor_rollout_ref.model.path"] == str(tiny_policy_dir)
    # stage 2 starts from stage 1's checkpoint, merged back
    assert stage2["actor_rollout_ref.model.path"] == str(
        tmp_path / "ckpt" / "verl-export" / "stage-1" / "step-1")
    assert result["step"] == 2 and result["model_dir"].endswith("stage-2/step-2")
    run = mlflow.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["verl.step"] == "2"
    children = mlflow.search_runs(experiment_names=["ur2-test"], output_format="list",
                                  filter_string=f"tags.`mlflow.parentRunId` = "
                                                f"'{result['run_id']}'")
    assert [c.info.run_name for c in children] == ["curate"]  # with the start policy
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(result["run_id"], "verl")}
    assert artifacts == {"verl/stage-1", "verl/stage-2"}
    back, original = weights(Path(result["model_dir"])), weights(tiny_policy_dir)
    assert all(torch.equal(back[n], t.to(torch.bfloat16).float()) for n, t in original.items())
