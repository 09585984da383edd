"""GAR's step, the pure parts: slices of rollouts, reference draws, each judgment's reward."""

from __future__ import annotations

import math

import pytest

from advrag.agents.types import Trajectory
from advrag.datasets.records import QARecord
from advrag.recipes.gar import GarConfig
from advrag.recipes.gar.step import (
    Slice,
    discriminator_metrics,
    generated_slices,
    judged_slices,
    judgment_rewards,
    reference_slices,
)

CONFIG = GarConfig(lam3=1.0, lam4=0.5, malformed_penalty=1.0)


def test_each_judgment_gets_its_slice_share_of_the_discriminator_reward():
    slices = [Slice("q", "Q?", "ref", None), Slice("q", "Q?", "gen a", 0), Slice("q", "Q?", "gen b", 1)]
    rewards = judgment_rewards(slices, [0.5, 0.25, None], correct=[False, True], config=CONFIG)
    # reference, p = 0.5:             log 0.5                              = -0.693147
    # generated, p = 0.25, wrong:     log 0.75 + 0.5·(1 − |0.25 − 0|)      = -0.287682 + 0.375
    # generated, no verdict, correct: log 0.5 + 0.5·(1 − |0.5 − 1|) − 1.0  = -0.693147 + 0.25 - 1
    assert rewards == pytest.approx([math.log(0.5), math.log(0.75) + 0.375,
                                     math.log(0.5) + 0.25 - 1.0])


def test_generated_slices_come_from_the_policy_reasoning_of_each_rollout():
    a, b = Trajectory(), Trajectory()
    a.add("<prompt>", "prompt")
    a.add("<think> First step. </think><search> x </search>", "policy")
    a.add("<information> Doc text. </information>", "env")
    b.add("<think> Only thought. </think><answer> y </answer>", "policy")
    records = [QARecord("q1", "Q1?", ["y"]), QARecord("q2", "Q2?", ["y"])]
    slices = generated_slices([a, b], records, lambda text: len(text.split()), max_tokens=50)
    assert [(s.question_id, s.trajectory) for s in slices] == [("q1", 0), ("q2", 1)]
    assert all("Doc text" not in s.text for s in slices)


def test_reference_draws_cycle_a_short_pool_and_are_seeded():
    pool = [Slice("q", "Q?", f"s{i}", None) for i in range(3)]
    drawn = reference_slices(pool, 5, seed=1)
    assert len(drawn) == 5 and set(drawn[:3]) == set(pool)  # a full pass before any repeat
    assert drawn == reference_slices(pool, 5, seed=1)
    assert reference_slices([], 4, seed=0) == []


def test_discriminator_metrics_score_the_balanced_set():
    slices = [Slice("q", "Q?", "r", None), Slice("q", "Q?", "g", 0), Slice("q", "Q?", "h", 0)]
    m = discriminator_metrics(slices, [0.9, 0.2, None], [0.0, 0.0, 0.0])
    # accuracy over readable verdicts: reference 0.9 > 0.5 right, generated 0.2 ≤ 0.5 right
    assert m["discriminator/accuracy"] == 1.0 and m["discriminator/malformed"] == pytest.approx(1 / 3)
    assert (m["slices/generated"], m["slices/reference"]) == (2.0, 1.0)


def test_judged_slices_pair_each_slice_with_its_judgment_and_its_rollouts_answer():
    slices = [Slice("q", "Q?", "gen a", 1), Slice("q", "Q?", "ref", None)]
    judgments = []
    for text in ("Verdict: yes", "Verdict:"):
        t = Trajectory()
        t.add("<judge prompt>", "prompt")
        t.add(text, "policy")
        judgments.append(t)
    records = judged_slices(slices, judgments, [0.75, None], correct=[False, True])
    assert records == [
        {"source": "generated", "question": "Q?", "slice": "gen a", "p_yes": 0.75,
         "judgment": "Verdict: yes", "correct": True},
        {"source": "reference", "question": "Q?", "slice": "ref", "p_yes": None,
         "judgment": "Verdict:", "correct": None}]
