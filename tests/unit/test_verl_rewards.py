"""advrag's rewards as verl reward functions: on the local loop's own transcripts, the text-only
score equals the local engine's, verl loads the functions by its config, and verl's own reward
loop worker scores an episode's tokens with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import KeywordRetriever, ScriptedGenerator

pytest.importorskip("verl", reason="verl is not installed here: run `make verl`")

from advrag.agents.search_loop import run_search_agent  # noqa: E402
from advrag.agents.types import Trajectory  # noqa: E402
from advrag.agents.ur2_scoring import ur2_counts  # noqa: E402
from advrag.common.types import Passage, Summary  # noqa: E402
from advrag.core.rewards import answer_reward, ur2_reward  # noqa: E402
from advrag.engines.verl.rewards import (  # noqa: E402
    golden_answers,
    response_trajectory,
    search_r1_score,
    ur2_score,
)

CORPUS = [Passage("p1", "Hamlet\nHamlet is a tragedy written by William Shakespeare."),
          Passage("p2", "Paris\nParis is the capital of France.")]
GOLD = {"Who wrote Hamlet?": ["William Shakespeare", "Shakespeare"],
        "What is the capital of France?": ["Paris"],
        "Name a tragedy.": ["Hamlet"], "Where is the Louvre?": ["Paris"],
        "Who painted it?": ["Leonardo"]}
SCRIPT = {  # the most specific context first: later turns see the earlier ones
    "Who wrote Hamlet?\n<|assistant|><think> x </think><search>": "<answer> Shakespeare </answer>",
    "Who wrote Hamlet?": "<think> x </think><search> Hamlet author </search>",
    "capital of France?\n<|assistant|><Search>": "<answer>Lyon</answer> and more",
    "capital of France?": "<Search> capital France </search>",  # recognised, not canonical
    "Name a tragedy.\n<|assistant|>I think": "<answer> Hamlet",  # forced turn: unclosed
    "Name a tragedy.": "I think it is Hamlet.",  # no action: the invalid-action hint
    "Louvre?\n<|assistant|><search>": "<answer> Paris </answer>",
    "Louvre?": "<search> " + "very " * 25 + "long </search>",  # overlength for UR²
}


def transcripts(summariser=None) -> list[tuple[Trajectory, list[str], str]]:
    """The local loop's trajectories, their golden answers and their response text."""
    questions = list(GOLD)
    trajectories = run_search_agent(questions, ScriptedGenerator(SCRIPT), KeywordRetriever(CORPUS),
                                    max_turns=1, topk=1, summariser=summariser,
                                    prompt=lambda q: q)
    return [(t, GOLD[q], "".join(s.text for s in t.segments if s.source != "prompt"))
            for t, q in zip(trajectories, questions, strict=True)]


class Rejecting:
    """A summariser that calls every query one for reasoning (UR²'s fallback)."""

    def summarise(self, pairs):
        return [Summary("fallback message", "fallback") for _ in pairs]


@pytest.mark.parametrize("summariser", [None, Rejecting()])
def test_the_text_gives_back_the_loops_own_counts(summariser):
    for trajectory, _, response in transcripts(summariser):
        rebuilt = response_trajectory(response)
        for field in ("answer", "format_errors", "n_searches", "queries", "fallbacks",
                      "n_turns"):
            assert getattr(rebuilt, field) == getattr(trajectory, field), (field, response)
        assert [(s.text, s.source) for s in rebuilt.segments] == [
            (s.text, s.source) for s in trajectory.segments if s.source != "prompt"]


@pytest.mark.parametrize("summariser", [None, Rejecting()])
def test_verls_scores_equal_the_local_engines(summariser):
    scored = transcripts(summariser)
    assert {t.format_errors for t, _, _ in scored} >= {0, 1}  # both kinds are exercised
    for trajectory, golds, response in scored:
        for metric in ("em", "f1"):
            local = answer_reward(trajectory.answer, golds, format_errors=trajectory.format_errors,
                                  metric=metric)
            assert search_r1_score("nq", response, {"target": golds},
                                   metric=metric)["score"] == local
        counts = ur2_counts(trajectory)
        for stage in (1, 2):
            correct = trajectory.answer is not None and answer_reward(
                trajectory.answer, golds, metric="f1") >= 0.5
            local = ur2_reward(stage, format_violations=counts.format_violations,
                               valid_queries=counts.valid_queries,
                               fallback_faults=counts.fallback_faults, correct=correct)
            assert ur2_score("nq", response, golds, stage=stage)["score"] == local


def test_hand_worked_scores():
    # Who wrote Hamlet: one clean search, then "Shakespeare", a golden answer
    assert search_r1_score("nq", transcripts()[0][2], ["Shakespeare"]) == {
        "score": 1.0, "format_errors": 0.0, "searches": 1.0}
    # the capital: <Search> (non-canonical) and text after </answer>: 2 format errors, wrong
    assert search_r1_score("nq", transcripts()[1][2], "Paris")["score"] == pytest.approx(-0.2)
    # UR², Louvre: correct, but its 26-word query is a violation and not a valid query.
    # Stage 2: +2 for the answer, no format bonus; stage 1: −1 for the violation, no query bonus
    louvre = transcripts()[3][2]
    assert ur2_score("nq", louvre, ["Paris"]) == {
        "score": 2.0, "format_violations": 1.0, "valid_queries": 0.0, "fallback_faults": 0.0,
        "correct": 1.0}
    assert ur2_score("nq", louvre, ["Paris"], stage=1)["score"] == -1.0


def test_ground_truth_shapes_and_a_bad_one():
    import numpy as np

    assert golden_answers("Paris") == ["Paris"]
    assert golden_answers({"target": np.array(["a", "b"], dtype=object)}) == ["a", "b"]
    with pytest.raises(ValueError, match="give a golden answer"):
        golden_answers({"target": []})


def test_verl_loads_the_functions_its_config_names():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://advrag.engines.verl.rewards", "name": "ur2_score",
        "reward_kwargs": {"stage": 1}}}})
    score = get_custom_reward_fn(config)
    response = transcripts()[0][2]
    assert score(data_source="nq", solution_str=response, ground_truth=["Shakespeare"],
                 extra_info={})["score"] == ur2_score("nq", response, ["x"], stage=1)["score"]


def test_verls_reward_loop_worker_scores_an_episode_as_the_local_engine(tmp_path,
                                                                         small_world_dir,
                                                                         tiny_policy_dir):
    """configs/train.yaml as the launcher composes it: verl's own reward loop worker (its
    reward manager, the custom function loaded by the config) scores an episode's tokens, as the
    agent loop worker sends them, with the local engine's reward."""

    import numpy as np
    import torch
    from tensordict import TensorDict
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl_stand_in import prepare

    from advrag.recipes import recipe_for

    grpo = recipe_for(Path(__file__).resolve().parents[2] / "configs" / "train.yaml", {"world_dir": str(small_world_dir)}).config
    _, config = prepare(grpo, tmp_path, model_path=str(tiny_policy_dir),
                        retriever_url="http://127.0.0.1:8000", gpus=1, nodes=1)
    worker = RewardLoopWorker(config)
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    for trajectory, gold, response in transcripts():
        ids = torch.tensor(tokenizer.encode(response, add_special_tokens=False))
        prompt = torch.tensor([1, 2])
        data = DataProto(batch=TensorDict({
            "prompts": prompt[None], "responses": ids[None],
            "attention_mask": torch.ones(1, len(prompt) + len(ids), dtype=torch.int64),
            "input_ids": torch.cat([prompt, ids])[None]}, batch_size=1), non_tensor_batch={
            "data_source": np.array(["advrag"]),
            "reward_model": np.array([{"ground_truth": {"target": gold}}], dtype=object),
            "extra_info": np.array([{"split": "train"}], dtype=object),
            "tool_extra_fields": np.array([{"searches": trajectory.n_searches}], dtype=object),
            "__num_turns__": np.array([2])})
        result = worker.loop.run_until_complete(worker.compute_score(data))  # its own loop
        expected = answer_reward(trajectory.answer, gold, format_errors=trajectory.format_errors,
                                 metric=grpo.reward_metric, format_penalty=grpo.format_penalty)
        assert result["reward_score"] == pytest.approx(expected), response
