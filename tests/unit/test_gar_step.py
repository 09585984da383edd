"""GAR's step, the pure parts: slices of rollouts, reference draws, each judgment's reward."""

from __future__ import annotations

import math

import pytest
from fakes import ScriptedGenerator

from advrag.agents.types import Trajectory
from advrag.core.gar_rewards import reasoner_reward
from advrag.datasets.records import QARecord
from advrag.recipes.gar import GarConfig
from advrag.recipes.gar.step import (
    Slice,
    discriminator_metrics,
    generated_slices,
    judge,
    judged_slices,
    judgment_rewards,
    judgment_scores,
    reference_slices,
    rollout_slice_scores,
)

CONFIG = GarConfig(lam3=1.0, lam4=0.5, malformed_penalty=1.0)


def judgment(text: str) -> Trajectory:
    t = Trajectory()
    t.add("<judge prompt>", "prompt")
    t.add(text, "policy")
    return t


# two rollouts' slices and a reference one, each with its judgment and P(yes) at "Verdict:"
JUDGED = [
    (Slice("q", "Q?", "a1", 0), "Analysis: fine.\nVerdict: yes\nRationale: true.", 0.7),
    (Slice("q", "Q?", "a2", 0), "Analysis: off.\nVerdict: **No**\nRationale: wrong.", 0.4),
    (Slice("q", "Q?", "b1", 1), "Analysis: hm.\nVerdict: maybe\nRationale: unsure.", 0.6),
    (Slice("q", "Q?", "b2", 1), "The slice seems fine to me.", None),  # no verdict at all
    (Slice("q", "Q?", "ref", None), "Analysis: ok.\nVerdict: yes\nRationale: ok.", 0.9),
]


def rollout_rewards(mode: str) -> tuple[list[list[float]], list[float]]:
    """Each rollout's slice scores under ``mode`` and its reasoner reward (R_m = 1, 0)."""
    slices, texts, probs = zip(*JUDGED)
    scores = judgment_scores([judgment(t) for t in texts], probs, mode)
    per_rollout = rollout_slice_scores(slices, scores, n_rollouts=2)
    return per_rollout, [reasoner_reward(m, s) for m, s in zip((1.0, 0.0), per_rollout)]


def test_verdict_mode_scores_each_slice_by_its_written_verdict():
    # yes → 1, **No** → 0 (whatever P(yes) says); "maybe" and no verdict → 0, not 0.5
    per_rollout, rewards = rollout_rewards("verdict")
    assert per_rollout == [[1.0, 0.0], [0.0, 0.0]]
    # rollout 0: 1·1 + 1·(1 + 0)/2 = 1.5; rollout 1: 1·0 + 1·(0 + 0)/2 = 0
    assert rewards == [1.5, 0.0]


def test_p_yes_mode_scores_each_slice_by_p_yes_and_nothing_without_one():
    # "maybe" still has P(yes) = 0.6 at its "Verdict:"; the judgment without one earns 0
    per_rollout, rewards = rollout_rewards("p_yes")
    assert per_rollout == [[0.7, 0.4], [0.6, 0.0]]
    # rollout 0: 1 + (0.7 + 0.4)/2 = 1.55; rollout 1: 0 + (0.6 + 0)/2 = 0.3
    assert rewards == pytest.approx([1.55, 0.3])


def test_judgments_without_a_verdict_pay_the_penalty_in_the_mode_they_lack_one():
    slices, texts, probs = zip(*JUDGED)
    for mode, malformed in (("verdict", [2, 3]), ("p_yes", [3])):
        scores = judgment_scores([judgment(t) for t in texts], probs, mode)
        assert [i for i, r in enumerate(scores) if r is None] == malformed
        free = GarConfig(lam3=1.0, lam4=0.5, malformed_penalty=0.0)
        paid, unpaid = (judgment_rewards(slices, probs, scores, [True, False], c)
                        for c in (CONFIG, free))
        assert [round(u - p, 9) for p, u in zip(paid, unpaid)] == [
            1.0 if i in malformed else 0.0 for i in range(len(JUDGED))]


def test_each_judgment_gets_its_slice_share_of_the_discriminator_reward():
    slices = [Slice("q", "Q?", "ref", None), Slice("q", "Q?", "gen a", 0), Slice("q", "Q?", "gen b", 1)]
    rewards = judgment_rewards(slices, [0.5, 0.25, None], [1.0, 0.0, None],
                               correct=[False, True], config=CONFIG)
    # reference, p = 0.5:                    log 0.5                             = -0.693147
    # generated, p = 0.25, r = 0, wrong:     log 0.75 + 0.5·(1 − |0 − 0|)        = -0.287682 + 0.5
    # generated, no verdict, correct: p 0.5, r 0: log 0.5 + 0.5·(1 − |0 − 1|) − 1.0 = -0.693147 − 1
    assert rewards == pytest.approx([math.log(0.5), math.log(0.75) + 0.5, math.log(0.5) - 1.0])


def test_r_d_reads_p_yes_and_r_a_reads_the_slice_score():
    # the same P(yes) = 0.8 under two scores: R_d's share is log(1 − 0.8) both times; R_a's
    # follows r: a written "no" (r = 0) on a wrong answer agrees, a "yes" (r = 1) does not
    slices = [Slice("q", "Q?", "gen", 0)]
    said_no, said_yes = (judgment_rewards(slices, [0.8], [r], correct=[False], config=CONFIG)[0]
                         for r in (0.0, 1.0))
    assert said_no == pytest.approx(math.log(0.2) + 0.5)
    assert said_yes == pytest.approx(math.log(0.2))


def test_generated_slices_come_from_the_policy_reasoning_of_each_rollout():
    a, b = Trajectory(), Trajectory()
    a.add("<prompt>", "prompt")
    a.add("<think> First step. </think><search> x </search>", "policy")
    a.add("\n\n<information>Doc 1(Title: X) Doc text.</information>\n\n", "env")
    a.add("<think> So it is y. </think><answer> y </answer>", "policy")
    b.add("<think> Only thought. </think><answer> y </answer>", "policy")
    records = [QARecord("q1", "Q1?", ["y"]), QARecord("q2", "Q2?", ["y"])]
    slices = generated_slices([a, b], records, lambda text: len(text.split()), max_tokens=50,
                              min_tokens=0)
    assert [(s.question_id, s.trajectory) for s in slices] == [("q1", 0), ("q1", 0), ("q2", 1)]
    assert all("Doc text" not in s.text for s in slices)
    assert [s.evidence for s in slices] == [(), ("Doc 1(Title: X) Doc text.",), ()]


def test_the_judge_prompt_shows_each_slice_its_passages_within_the_cap():
    generator = ScriptedGenerator({}, default="Analysis: ok.\nVerdict: yes\nRationale: ok.")
    read = ("Doc 1(Title: X) one two three", "Doc 2(Title: Y) four")
    slices = [Slice("q", "Q?", "It is y.", 0, read), Slice("q", "Q?", "First, x.", 0)]
    judgments, probs, left_out = judge(generator, lambda p, o: [0.5] * len(p), slices,
                                       max_tokens=8, count_tokens=lambda t: len(t.split()),
                                       evidence_tokens=5)
    first, second = generator.calls[0]
    assert "before the slice:\nDoc 2(Title: Y) four\nSlice: It is y." in first  # 4 words + 1
    assert "before the slice:\n(none)\nSlice: First, x." in second
    assert left_out == 1 and probs == [0.5, 0.5]
    assert [j.segments[0].text for j in judgments] == [first, second]


def test_reference_draws_cycle_a_short_pool_and_are_seeded():
    pool = [Slice("q", "Q?", f"s{i}", None) for i in range(3)]
    drawn = reference_slices(pool, 5, seed=1)
    assert len(drawn) == 5 and set(drawn[:3]) == set(pool)  # a full pass before any repeat
    assert drawn == reference_slices(pool, 5, seed=1)
    assert reference_slices([], 4, seed=0) == []


def test_discriminator_metrics_score_the_balanced_set():
    slices = [Slice("q", "Q?", "r", None), Slice("q", "Q?", "g", 0), Slice("q", "Q?", "h", 0)]
    # verdicts: the reference judged yes, "g" judged no, "h" without a verdict; P(yes) 0.9, 0.2, –
    m = discriminator_metrics(slices, [0.9, 0.2, None], [1.0, 0.0, None], correct=[True],
                              rewards=[0.0, 0.0, 0.0])
    # accuracy over judgments with a verdict: the reference said yes, "g" said no: both right
    assert m["discriminator/accuracy"] == 1.0 and m["discriminator/malformed"] == pytest.approx(1 / 3)
    assert (m["slices/generated"], m["slices/reference"]) == (2.0, 1.0)
    # R_d = log 0.9 + mean(log(1 − 0.2), log(1 − 0.5)); R_a = mean(1 − |0 − 1|, 1 − |0 − 1|) = 0
    assert m["discriminator/R_d"] == pytest.approx(math.log(0.9) + (math.log(0.8) + math.log(0.5)) / 2)
    assert m["discriminator/R_a"] == 0.0


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
