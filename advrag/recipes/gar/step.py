"""One GAR training step (GAR §3) on two LoRA adapters: rollout → slice → judge → score → update × 2.

1. rollout: ``group_size`` Search-R1 trajectories per question (the reasoner's adapter);
   with ``exploration`` (beyond both papers), REX-RAG's probes of the answers below full
   marks follow them, and go through steps 2–4 like any rollout;
2. slice: each trajectory's own reasoning (``<think>`` text, never documents) cut into
   slices of ``min_slice_tokens`` to L tokens (``curation.slicing``); as many reference
   slices are drawn from grounded demonstrations (each judged with its own question);
3. judge: the discriminator writes analysis → verdict → rationale (≤ K tokens) for
   every slice, and P(yes) is read at its verdict token (``verdicts``);
4. score: each judgment's slice score r_s (``core.gar_rewards.slice_score``) is its
   written verdict, 1 for yes and 0 for no (``slice_score: verdict``, the paper's), or
   P(yes) (``slice_score: p_yes``). A judgment without a verdict under that reading earns
   its slice 0 — not 0.5 — and costs the discriminator ``malformed_penalty``. The
   reasoner's reward is λ1·R_m + λ2·mean(its slices' r_s) (``reasoner_reward``); each
   judgment's reward is its slice's share of λ3·R_d + λ4·R_a: λ3·log p for a reference
   slice, and λ3·log(1 − p) + λ4·(1 − |r_s − 1[correct]|) for a generated one, with p =
   P(yes) (0.5 when the judgment has no "Verdict:" to read it at) and correct = the
   rollout's answer scores 1 under ``reward_metric``;
5. update: GRPO for the reasoner (groups: a question's rollouts; with ``exploration``,
   REX-RAG's filtered probes join them and the ratio takes its policy correction) and, when
   trainable, for the discriminator (groups: all judgments of one question's
   slices, reference ones included).

How this departs from the paper: R_d and R_a are batch means in the paper; with
equal numbers of reference and generated slices, giving each judgment its own
slice's term makes the batch's mean judgment reward exactly λ3·R_d/2 + λ4·R_a/2
per slice, so GRPO credits the judgments that earned it. One judgment per slice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator
from advrag.core.gar_rewards import (
    alignment_reward,
    discriminator_reward,
    reasoner_reward,
    slice_score,
)
from advrag.core.rewards import ANSWER_METRICS, full_marks
from advrag.curation.gar_labels import (
    capped_evidence,
    discriminator_prompt,
    information_passages,
    parse_verdict,
)
from advrag.curation.slicing import slices_with_evidence
from advrag.datasets.records import QARecord
from advrag.engines.local.trainer import LocalTrainer, push_updated_weights
from advrag.recipes.gar.config import GarConfig
from advrag.recipes.rex_rag.exploring import ExplorationState
from advrag.recipes.rex_rag.step import ProbedRollout, corrected_update, probe_rollout
from advrag.recipes.rollout import RolloutSettings, rollout, rollout_metrics


@dataclass(frozen=True)
class Slice:
    """One slice to judge: its text, the question, the passages its episode had retrieved
    before it, and where it came from."""

    question_id: str
    question: str
    text: str
    trajectory: int | None  # index of the generating rollout; None for a reference slice
    evidence: tuple[str, ...] = ()  # gar_labels.information_passages of what it was written after


def trajectory_slices(trajectory: Trajectory, record: QARecord, index: int | None,
                      count_tokens: Callable[[str], int], max_tokens: int,
                      min_tokens: int) -> list[Slice]:
    """One trajectory's reasoning slices, each with the passages retrieved before it."""
    return [Slice(record.id, record.question, text, index, tuple(information_passages(read)))
            for text, read in slices_with_evidence(trajectory, count_tokens, max_tokens,
                                                   min_tokens)]


def generated_slices(trajectories: Sequence[Trajectory], records: Sequence[QARecord],
                     count_tokens: Callable[[str], int], max_tokens: int,
                     min_tokens: int) -> list[Slice]:
    """Every rollout's reasoning slices, in rollout order."""
    return [s for i, (t, r) in enumerate(zip(trajectories, records, strict=True))
            for s in trajectory_slices(t, r, i, count_tokens, max_tokens, min_tokens)]


def reference_slices(pool: Sequence[Slice], n: int, seed: int) -> list[Slice]:
    """``n`` reference slices drawn without replacement (cycling when the pool is short)."""
    if not pool:
        return []
    rng = random.Random(seed)
    out: list[Slice] = []
    while len(out) < n:
        out += rng.sample(list(pool), min(n - len(out), len(pool)))
    return out


def judge(generator: TextGenerator, scorer: Callable, slices: Sequence[Slice],
          max_tokens: int, count_tokens: Callable[[str], int],
          evidence_tokens: int) -> tuple[list[Trajectory], list[float | None], int]:
    """The discriminator's judgment of every slice (its prompt carries the slice's passages
    within ``evidence_tokens``), as trajectories; P(yes) of each; the passages the cap left out."""
    evidence = [capped_evidence(s.evidence, count_tokens, evidence_tokens) for s in slices]
    prompts = [generator.chat_prompt(discriminator_prompt(s.question, s.text, e.text))
               for s, e in zip(slices, evidence, strict=True)]
    outputs = generator.generate(prompts, max_new_tokens=max_tokens) if prompts else []
    judgments = []
    for prompt, output in zip(prompts, outputs, strict=True):
        t = Trajectory(n_turns=1)
        t.add(prompt, "prompt")
        t.add(output, "policy")
        judgments.append(t)
    return (judgments, scorer(prompts, outputs) if prompts else [],
            sum(e.left_out for e in evidence))


def judged_slices(slices: Sequence[Slice], judgments: Sequence[Trajectory],
                  probs: Sequence[float | None], correct: Sequence[bool]) -> list[dict]:
    """One record per judged slice: where it came from, its text, P(yes) and the judgment."""
    return [{"source": "reference" if s.trajectory is None else "generated",
             "question": s.question, "slice": s.text, "p_yes": p, "judgment": j.policy_text(),
             "correct": None if s.trajectory is None else correct[s.trajectory]}
            for s, j, p in zip(slices, judgments, probs, strict=True)]


def judgment_scores(judgments: Sequence[Trajectory], probs: Sequence[float | None],
                    mode: str) -> list[float | None]:
    """Each judgment's slice score r_s under ``mode`` (module docstring); None without a verdict."""
    return [slice_score(parse_verdict(j.policy_text()), p, mode)
            for j, p in zip(judgments, probs, strict=True)]


def rollout_slice_scores(slices: Sequence[Slice], scores: Sequence[float | None],
                         n_rollouts: int) -> list[list[float]]:
    """Each rollout's slice scores, in slice order (its R_s is their mean); a judgment without
    a verdict earns its slice 0. Reference slices belong to no rollout."""
    per_rollout: list[list[float]] = [[] for _ in range(n_rollouts)]
    for s, score in zip(slices, scores, strict=True):
        if s.trajectory is not None:
            per_rollout[s.trajectory].append(0.0 if score is None else score)
    return per_rollout


def judgment_rewards(slices: Sequence[Slice], probs: Sequence[float | None],
                     scores: Sequence[float | None], correct: Sequence[bool],
                     config: GarConfig) -> list[float]:
    """Each judgment's share of λ3·R_d + λ4·R_a (module docstring); one without a verdict pays
    ``malformed_penalty``."""
    rewards = []
    for s, p, score in zip(slices, probs, scores, strict=True):
        p = 0.5 if p is None else p
        if s.trajectory is None:
            reward = config.lam3 * discriminator_reward([p], [])
        else:
            reward = (config.lam3 * discriminator_reward([], [p]) + config.lam4
                      * alignment_reward([0.0 if score is None else score], correct[s.trajectory]))
        rewards.append(reward - (config.malformed_penalty if score is None else 0.0))
    return rewards


def gar_step(trainers: Mapping[str, LocalTrainer], generators: Mapping[str, TextGenerator],
             retriever: Retriever, records: Sequence[QARecord], config: GarConfig, *,
             references: Sequence[Slice], scorer: Callable | None, count_tokens: Callable,
             step: int, slice_log: list[dict] | None = None,
             exploration: ExplorationState | None = None) -> dict[str, float]:
    """One joint update (module docstring); the step's metrics. ``slice_log``, when given, gets
    the step's P(yes) per slice kind and every judged slice: ``{"step", "reference": [...],
    "generated": [...], "judged": [{"source", "question", "slice", "p_yes", "judgment",
    "correct"}, ...]}`` (``correct``: the rollout's answer; None for a reference slice).

    With ``config.exploration`` (and its run's ``exploration`` state), the reasoner's rollouts
    are REX-RAG's (``rex_rag.step.probe_rollout``): its probes are sliced, judged and rewarded
    like the policy's rollouts, and the reasoner's update is REX-RAG's filtered, corrected one
    (``corrected_update``). Nothing else changes."""
    started = time.perf_counter()
    reasoner = trainers["reasoner"]
    reasoner.policy.model.eval()
    probed = reasoner_rollouts(reasoner, generators["reasoner"], retriever, records, config)
    trajectories, repeated = probed.trajectories, probed.answered
    metric = ANSWER_METRICS[config.reward_metric]
    answer_scores = [metric(t.answer, r.golden_answers) if t.answer else 0.0
                     for t, r in zip(trajectories, repeated)]
    rolled = time.perf_counter()
    metrics: dict[str, float] = {"time/rollout_s": rolled - started}
    slice_scores: list[list[float]] = [[] for _ in trajectories]
    if scorer is not None:
        slice_scores = _judge_and_train_discriminator(
            trainers, generators, trajectories, repeated, answer_scores, config, references,
            scorer, count_tokens, step, metrics, slice_log)
    rewards = torch.tensor([reasoner_reward(m, s, config.lam1, config.lam2)
                            for m, s in zip(answer_scores, slice_scores)])
    judged = time.perf_counter()
    group_ids = [r.id for r in repeated]
    if config.exploration is None:
        update = reasoner.update(trajectories, rewards, group_ids).metrics
        push_updated_weights(generators["reasoner"], reasoner)
    else:
        update = corrected_update(reasoner, generators["reasoner"], probed, rewards,
                                  [m >= 1.0 for m in answer_scores], exploration=config.exploration,
                                  state=exploration, group_size=config.group_size)
        metrics |= {k: update.pop(k) for k in list(update) if k.startswith("rex/")}
    n = probed.policy_count  # the policy's rollouts; probes come after them
    reasoner_metrics = rollout_metrics(trajectories[:n], rewards[:n], group_ids[:n]) | update | {
        "answer_score": mean(answer_scores[:n]),
        "slice_score": mean([mean(s) for s in slice_scores[:n]])}
    metrics |= {f"reasoner/{k}": v for k, v in reasoner_metrics.items()}
    metrics |= {"time/judge_s": judged - rolled, "time/update_s": time.perf_counter() - judged,
                "time/step_s": time.perf_counter() - started}
    return metrics


def reasoner_rollouts(reasoner: LocalTrainer, generator: TextGenerator, retriever: Retriever,
                      records: Sequence[QARecord], config: GarConfig) -> ProbedRollout:
    """``group_size`` Search-R1 rollouts per question; with ``exploration``, REX-RAG's probes
    of the answers below full marks follow them."""
    settings = RolloutSettings.of(config)
    if config.exploration is None:
        trajectories, repeated = rollout(records, generator, retriever,
                                         group_size=config.group_size, settings=settings)
        return ProbedRollout(trajectories, repeated, len(repeated), prober=None)
    return probe_rollout(reasoner, generator, retriever, records, group_size=config.group_size,
                         full_marks=lambda answer, record: full_marks(
                             answer, record.golden_answers, config.reward_metric),
                         exploration=config.exploration, seed=config.optim.seed,
                         settings=settings)


def _judge_and_train_discriminator(trainers, generators, trajectories, repeated, answer_scores,
                                   config: GarConfig, references, scorer, count_tokens, step,
                                   metrics: dict[str, float], slice_log) -> list[list[float]]:
    """Slice, judge, reward and (when trainable) update the discriminator; each rollout's slice
    scores."""
    generated = generated_slices(trajectories, repeated, count_tokens, config.max_slice_tokens,
                                 config.min_slice_tokens)
    slices = generated + reference_slices(references, len(generated), seed=step)
    judgments, probs, left_out = judge(generators["discriminator"], scorer, slices,
                                       config.max_judge_tokens, count_tokens,
                                       config.evidence_tokens)
    scores = judgment_scores(judgments, probs, config.slice_score)
    correct = [m >= 1.0 for m in answer_scores]
    if slice_log is not None:
        slice_log.append({"step": step, **{kind: [p for s, p in zip(slices, probs) if p is not None
                                                  and (s.trajectory is None) == (kind == "reference")]
                                           for kind in ("reference", "generated")},
                          "judged": judged_slices(slices, judgments, probs, correct)})
    rewards = judgment_rewards(slices, probs, scores, correct, config)
    metrics |= discriminator_metrics(slices, probs, scores, correct, rewards) | {
        "slices/evidence_left_out": float(left_out)}
    if "discriminator" in trainers and slices:
        trainer = trainers["discriminator"]
        result = trainer.update(judgments, torch.tensor(rewards), [s.question_id for s in slices])
        push_updated_weights(generators["discriminator"], trainer)
        metrics |= {f"discriminator/{k}": v for k, v in result.metrics.items()}
    return rollout_slice_scores(slices, scores, len(trajectories))


def discriminator_metrics(slices: Sequence[Slice], probs: Sequence[float | None],
                          scores: Sequence[float | None], correct: Sequence[bool],
                          rewards: Sequence[float]) -> dict[str, float]:
    """Slice counts; mean P(yes) of both kinds; the accuracy of the slice scores (> 0.5 = judged
    a reference slice) on the balanced set, judgments without a verdict left out; their share;
    the batch's R_d (P(yes), 0.5 where unread) and R_a (generated slices' r_s, 0 without one)."""
    n = max(len(slices), 1)
    read = [(s.trajectory is None, p) for s, p in zip(slices, probs) if p is not None]
    scored = [(s.trajectory is None, r) for s, r in zip(slices, scores) if r is not None]
    p_of = {kind: [0.5 if p is None else p for s, p in zip(slices, probs)
                   if (s.trajectory is None) == (kind == "reference")]
            for kind in ("reference", "generated")}
    agreement = [alignment_reward([0.0 if r is None else r], correct[s.trajectory])
                 for s, r in zip(slices, scores) if s.trajectory is not None]
    return {
        "slices/generated": float(sum(s.trajectory is not None for s in slices)),
        "slices/reference": float(sum(s.trajectory is None for s in slices)),
        "discriminator/score_reference": mean([p for ref, p in read if ref]),
        "discriminator/score_generated": mean([p for ref, p in read if not ref]),
        "discriminator/accuracy": mean([float((r > 0.5) == ref) for ref, r in scored]),
        "discriminator/malformed": sum(r is None for r in scores) / n,
        "discriminator/reward_mean": mean(list(rewards)),
        "discriminator/R_d": discriminator_reward(p_of["reference"], p_of["generated"]),
        "discriminator/R_a": mean(agreement),
    }


def mean(values: Sequence[float]) -> float:
    """The mean, 0 for no values."""
    return sum(values) / len(values) if values else 0.0
