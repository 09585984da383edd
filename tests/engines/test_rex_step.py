"""REX-RAG's update on the tiny policy, with a generator that guesses wrong until probed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from advrag.agents.prompts import exploration_pool
from advrag.agents.types import Trajectory
from advrag.common.types import Passage
from advrag.datasets.records import QARecord, question_kind
from advrag.engines.local.policy import TrainablePolicy
from advrag.engines.local.trainer import LocalTrainer, TrainConfig
from advrag.models.loading import load_policy
from advrag.recipes.rex_rag import RexExploration
from advrag.recipes.rex_rag.step import (
    ExplorationState,
    probe_outcomes,
    probes_by_kind,
    rex_step,
)
from advrag.recipes.rollout import RolloutSettings

RECORDS = [QARecord("q1", "Who is A?", ["A"], {"type": "single", "hops": 1}),
           QARecord("q2", "Who is B?", ["B"], {"type": "compositional", "hops": 2})]
POOL = exploration_pool(30)


class _ProbeHelpsGenerator:
    """Guesses "nobody" at once; after an exploration prompt it searches, then answers right
    (or, with ``stubborn``, "nobody" again)."""

    def __init__(self, stubborn: bool = False):
        self.stubborn = stubborn

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return f"<|user|>{user}\n<|assistant|>"

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, stop=()) -> list[str]:
        return [self._continue(p) for p in prompts]

    def _continue(self, prompt: str) -> str:
        right = "A" if "Who is A?" in prompt else "B"
        if "Doc 1(Title" in prompt:
            return f"<answer> {'nobody' if self.stubborn else right} </answer>"
        if any(p in prompt for p in POOL):
            return f"<search> who is {right} </search>"
        return "<think> a guess </think><answer> nobody </answer>"


class _OnePassage:
    def search(self, queries, k):
        return [[Passage("p1", "Title\ntext")] for _ in queries]


def _trainer(model_dir) -> LocalTrainer:
    loaded = load_policy(str(model_dir))
    config = TrainConfig(lr=1e-2, weight_decay=0.0, micro_batch_size=4, max_seq_len=1024,
                         kl_coef=0.0, seed=0)
    return LocalTrainer(TrainablePolicy(loaded.model), loaded.tokenizer, config)


def _step(trainer, *, stubborn=False, **settings):
    exploration = RexExploration(kind="rex", probe_prob=1.0, **settings)
    state = ExplorationState(exploration.keep_ratio)

    def reward(trajectory: Trajectory, record: QARecord) -> float:
        return float(trajectory.answer == record.golden_answers[0])

    metrics = rex_step(trainer, _ProbeHelpsGenerator(stubborn), _OnePassage(), RECORDS,
                       group_size=3, reward_fn=reward,
                       full_marks=lambda answer, record: answer == record.golden_answers[0],
                       exploration=exploration, state=state, seed=0,
                       settings=RolloutSettings(max_turns=2, max_new_tokens=16))
    return metrics, state


def test_the_filter_keeps_the_top_probe_and_the_correction_reweighs_the_rest(tiny_policy_dir):
    trainer = _trainer(tiny_policy_dir)
    metrics, state = _step(trainer)
    # six wrong policy answers, each probed (probe_prob 1); every probe searches and is right
    assert metrics["rex/probes_opened"] == 6 and metrics["rex/probe_accuracy"] == 1.0
    # keep round(0.12 · 2 questions · 3) = 1 probe: a = 1/7 of the batch
    assert metrics["rex/probes_kept"] == 1 and metrics["rex/probe_share"] == pytest.approx(1 / 7)
    assert metrics["rex/policy_accuracy"] == 0.0
    assert metrics["reward_mean"] == 0.0  # the policy trajectories' reward, probes apart
    assert metrics["rex/informative_groups"] == 0.5  # the kept probe's group has a signal
    # a policy token: μ = 0, so π_old/μ_mix = 1/(1 − a) = 7/6
    assert metrics["rex/ratio_policy"] == pytest.approx(7 / 6, rel=1e-5)
    assert metrics["rex/ratio_continuation"] == pytest.approx(1.0, rel=1e-5)
    assert {"rex/ratio_prefix", "rex/ratio_prompt"} <= set(metrics)
    assert metrics["pg_loss"] != 0.0 and trainer.step == 1
    # the keep ratio moves towards the probes' accuracy (1) but not above the configured 0.12
    assert metrics["rex/keep_ratio"] == 0.12 and state.keep_ratio == 0.12
    assert metrics["type/single/f1"] == 0.0 and metrics["type/two-hop/searches"] == 0.0
    # three probes of each question's wrong answers, every one right
    assert {k: v for k, v in metrics.items() if "/probes_" in k and k.count("/") == 2} == {
        "rex/probes_opened/single": 3.0, "rex/probes_correct/single": 3.0,
        "rex/probes_opened/two-hop": 3.0, "rex/probes_correct/two-hop": 3.0}
    # each probe searched once after its prompt and answered anew, right where "nobody" was not
    assert (metrics["rex/probe_new_searches"], metrics["rex/probe_same_answer"],
            metrics["rex/probe_unanswered"], metrics["rex/probe_f1"],
            metrics["rex/probe_origin_f1"]) == (1.0, 0.0, 0.0, 1.0, 0.0)


def test_without_the_filter_every_probe_is_kept(tiny_policy_dir):
    metrics, _ = _step(_trainer(tiny_policy_dir), trajectory_filter=False)
    assert metrics["rex/probes_kept"] == 6 and metrics["rex/probe_share"] == 0.5
    assert metrics["rex/ratio_policy"] == pytest.approx(2.0, rel=1e-5)  # 1/(1 − ½)


def test_without_importance_sampling_the_ratio_is_the_plain_one(tiny_policy_dir):
    metrics, _ = _step(_trainer(tiny_policy_dir), correction="none")
    assert metrics["rex/probes_kept"] == 1
    assert not any(key.startswith("rex/ratio_") for key in metrics)
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # on-policy: π/π_old at the first step


def test_the_keep_ratio_follows_a_failing_probes_accuracy_down(tiny_policy_dir):
    metrics, state = _step(_trainer(tiny_policy_dir), stubborn=True)
    assert metrics["rex/probe_accuracy"] == 0.0
    assert metrics["rex/probes_opened/two-hop"] == 3.0 and metrics["rex/probes_correct/two-hop"] == 0.0
    assert state.keep_ratio == pytest.approx(0.9 * 0.12)  # (1 − 0.1)·0.12 + 0.1·0
    # the stubborn probes searched, then said "nobody" again: they explored nothing
    assert metrics["rex/probe_new_searches"] == 1.0 and metrics["rex/probe_same_answer"] == 1.0


def test_question_kinds_of_the_world():
    assert [question_kind(r) for r in RECORDS] == ["single", "two-hop"]
    assert question_kind(QARecord("x", "q", ["a"], {"type": "compositional", "hops": 3})) == \
        "three-hop"
    assert question_kind(QARecord("x", "q", ["a"])) == "untyped"


def test_without_both_every_probe_is_kept_with_the_plain_ratio(tiny_policy_dir):
    metrics, _ = _step(_trainer(tiny_policy_dir), correction="none", trajectory_filter=False)
    assert metrics["rex/probes_kept"] == 6 and metrics["rex/probe_share"] == 0.5
    assert not any(key.startswith("rex/ratio_") for key in metrics)


def test_ur2_explores_with_probes_from_its_searching_items(tiny_policy_dir):
    from advrag.engines.local.dual import AgentTrainers
    from advrag.recipes.ur2 import UR2Config, UR2Recipe

    config = UR2Config(curate=None, stage1_steps=0, group_size=3, questions_per_step=2, max_turns=2,
                       max_new_tokens=16, reward_metric="em",
                       exploration={"kind": "rex", "probe_prob": 1.0, "trajectory_filter": False})
    recipe = UR2Recipe(config)
    recipe.trainers = AgentTrainers({"reasoner": _trainer(tiny_policy_dir)})
    recipe.generators = {"reasoner": _ProbeHelpsGenerator()}
    reasoning = QARecord("r1", "Who is A?", ["A"], {"needs_retrieval": False})
    metrics = recipe.step(_OnePassage(), [RECORDS[1], reasoning])
    # the direct answers of the reasoning-only item are never probed: 3 probes, all kept
    assert metrics["rex/probes_opened"] == 3 and metrics["rex/probes_kept"] == 3
    assert metrics["rex/probe_accuracy"] == 1.0 and metrics["ur2/stage"] == 2.0
    # UR²'s counts are shares of every rewarded trajectory: 3 of 9 (the probes) are correct
    assert metrics["ur2/correct"] == pytest.approx(3 / 9)


def test_the_progress_line_names_the_probes():
    from advrag.recipes.grpo import GrpoConfig, GrpoRecipe

    line = GrpoRecipe(GrpoConfig(exploration={"kind": "rex"})).describe(
        {"reward_mean": 0.25, "loss": 0.1, "rollout_s": 20.0, "score_s": 0.0, "update_s": 9.6,
         "rex/probes_opened": 3.0, "rex/probes_kept": 1.0})
    assert line == "reward 0.250, loss 0.1000, probes 3 opened / 1 kept, 30 s"


def test_probes_are_counted_per_question_kind_with_those_that_earned_full_marks():
    three_hop = QARecord("q3", "Who?", ["C"], {"type": "compositional", "hops": 3})
    counted = probes_by_kind([True, False, False, True], [RECORDS[1], three_hop, three_hop,
                                                          RECORDS[1]])
    assert counted == {"rex/probes_opened/two-hop": 2.0, "rex/probes_correct/two-hop": 2.0,
                       "rex/probes_opened/three-hop": 2.0, "rex/probes_correct/three-hop": 0.0}
    assert probes_by_kind([], []) == {}


def test_probe_outcomes_compare_each_probe_with_the_answer_it_reopened():
    from advrag.agents.types import ProbeOrigin

    origins = [Trajectory(answer="Tarn", n_searches=2), Trajectory(answer="Varhir City", n_searches=1)]
    probes = [Trajectory(answer="the tarn", n_searches=2, probe=ProbeOrigin(0, 3, 0)),
              Trajectory(answer=None, n_searches=3, probe=ProbeOrigin(1, 2, 5))]
    records = [RECORDS[0], QARecord("q3", "Where?", ["Varhir"], {"type": "single", "hops": 1})]
    outcomes = probe_outcomes(origins + probes, records + records, 2)
    # new searches 0 and 2 → 1; "the tarn" normalises to "tarn": one repeat of two; one
    # unanswered; probe F1 0 and 0; origins' F1 0 ("Tarn" against "A") and 2/3 ("Varhir City"
    # against "Varhir": precision 1/2, recall 1 → 2/3) → 1/3
    assert outcomes == pytest.approx({
        "rex/probe_new_searches": 1.0, "rex/probe_same_answer": 0.5, "rex/probe_unanswered": 0.5,
        "rex/probe_f1": 0.0, "rex/probe_origin_f1": 1 / 3})
    assert probe_outcomes(origins, records, 2) == {}
