"""One ARR training step (ARR §4.2) on two local policies: rollout → score → update × 2.

1. rollout: ``group_size`` dialogues per question, all in one batched
   ``run_arr_dialogue``; each agent samples with its own weights (see
   ``dual.agent_generators``). The Final Predictor runs on the reasoner's
   generator, as in the paper.
2. score: each agent's outcome reward (eq. 5, minus the format penalty;
   ``agents.arr_scoring``), and each trajectory cut into its actions.
3. reasoner update: GRPO on its trajectories (the verifier's messages, the
   documents and the prompt are masked). The update returns the sampling
   policy's token entropies (its old-log-prob pass); per turn, the mean
   entropy of each monitored action (think) gives impact (eq. 8) and the
   entropy patterns.
4. verifier update: ``prepare`` gives the outcome advantages and the
   sampling entropies; the registered term ``arr_process``
   (``core.arr_process``) computes clarity (eq. 7) for each critique action
   (verify, response) from that action's mean entropy, its step's documents
   and its text, then ``A_proc`` (eq. 6) with the reasoner's F1 and impact,
   added on that action's tokens only (eq. 9); then ``learn``.

The reasoner updates first so its entropies (measured before its update, under
the policy that sampled) are ready when the verifier's advantages need them.

How this departs from the paper (silent on these points):

- Each critique action gets its own ``A_proc`` (its own entropy, text and
  step documents in eq. 7); eq. 9's indicator adds it to that action's tokens.
- Impact (eq. 8) looks at the reasoner's turns that contain a monitored
  action (turns without one are skipped); fewer than three such turns follow
  ``core.entropy``'s rule for short sequences.
- A broken tag grammar costs the agent ``format_penalty`` on top of eq. 5.
- The Final Predictor is not trained (eq. 5 rewards y_r and y_v); its EM/F1
  are logged, and its EM labels a dialogue correct in the entropy traces.

Time split (seconds, per step): ``<agent>/time/rollout_s`` is time inside that
agent's ``generate`` calls (the reasoner's includes the Final Predictor),
``time/retrieval_s`` the searches; ``<agent>/time/score_s`` the agent's
reward bookkeeping (the reasoner's includes the outcome scoring of both
agents, done together, and the impacts); ``<agent>/time/update_s`` its update
(log-prob passes, loss, optimizer; the verifier's includes its process term).

Settings are the recipe's ``ArrConfig`` itself (one place for defaults).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from advrag.agents.arr import Dialogue, run_arr_dialogue
from advrag.agents.arr_scoring import (
    DialogueScore,
    SplitTrajectory,
    per_turn_means,
    score_dialogue,
    split_actions,
    verifier_checks,
    verifier_turn_docs,
)
from advrag.agents.probes import Prober
from advrag.agents.prompts import exploration_pool
from advrag.agents.types import GeneratorWrapper
from advrag.common.types import Retriever, TextGenerator
from advrag.core.actions import action_means, action_token_ids, excluded_actions
from advrag.core.advantages import ADVANTAGE_TERMS
from advrag.core.arr_process import ProcessAdvantage
from advrag.core.arr_rewards import bin_value, gold_in_text, impact
from advrag.core.entropy import entropy_pattern
from advrag.core.metrics import f1_score
from advrag.core.patterns import PATTERNS
from advrag.datasets.records import QARecord
from advrag.engines.local.tokenize import Batch
from advrag.engines.local.trainer import LocalTrainer, push_updated_weights
from advrag.recipes.arr.config import ArrConfig
from advrag.recipes.rex_rag.exploring import ExplorationState
from advrag.recipes.rex_rag.step import explored, filtered_and_corrected, probe_outcomes


@dataclass(frozen=True)
class EntropyTrace:
    """Per-turn mean entropies of one dialogue (the paper's Figure 6 data).

    ``think``: reasoner message index → mean entropy of its think actions;
    ``response``: verifier message index → mean entropy of its response actions.
    ``correct``: the Final Predictor's answer is an exact match.
    """

    correct: bool
    think: dict[int, float]
    response: dict[int, float]


@dataclass
class ArrStepResult:
    """Metrics of the step (``reasoner/…``, ``verifier/…``, ``final/…``, ``time/…``) and traces."""

    metrics: dict[str, float]
    traces: list[EntropyTrace]


class _TimedGenerator(GeneratorWrapper):
    """Counts the seconds spent in ``generate`` (the rollout time of one agent)."""

    def __init__(self, inner: TextGenerator):
        super().__init__(inner)
        self.seconds = 0.0

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        started = time.perf_counter()
        try:
            return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)
        finally:
            self.seconds += time.perf_counter() - started


class TimedRetriever:
    """Counts the seconds spent in ``search``."""

    def __init__(self, inner: Retriever):
        self.inner, self.seconds = inner, 0.0

    def search(self, queries, k):
        started = time.perf_counter()
        try:
            return self.inner.search(queries, k)
        finally:
            self.seconds += time.perf_counter() - started


def _action_entropies(batch: Batch, entropy: Tensor,
                      splits: Sequence[SplitTrajectory]) -> tuple[list[list[float]], Tensor]:
    """Mean sampling entropy of every action, per row; and the token → action ids."""
    ids = action_token_ids(batch.segment_ids, [s.segment_action for s in splits])
    n = max([len(s.actions) for s in splits] + [1])
    means = action_means(entropy.float(), ids, n)
    return [means[row, : len(s.actions)].tolist() for row, s in enumerate(splits)], ids


def reasoner_entropies(batch: Batch, entropy: Tensor, splits: Sequence[SplitTrajectory],
                       names: Sequence[str]) -> tuple[list[dict[str, dict[int, float]]], int]:
    """Per dialogue, per monitored action name: turn → mean sampling entropy of that action.

    Actions cut away by ``max_seq_len`` have no entropy: they are left out (per
    ``per_turn_means``) and counted, the second value returned.
    """
    means, ids = _action_entropies(batch, entropy, splits)
    per_turn = [{name: per_turn_means(s.actions, m, name) for name in names}
                for s, m in zip(splits, means)]
    return per_turn, int(excluded_actions(ids, [len(s.actions) for s in splits]).sum())


def impacts(per_turn: Sequence[Mapping[str, Mapping[int, float]]], names: Sequence[str],
            delta: float, scores: Mapping[str, float]) -> tuple[list[float], Counter]:
    """Eq. 8 per dialogue (mean over monitored types) and the count of each pattern."""
    sequences = [[list(turns[name].values()) for name in names] for turns in per_turn]
    patterns = Counter(entropy_pattern(seq, delta) for seqs in sequences for seq in seqs)
    return [impact(seqs, delta, scores) for seqs in sequences], patterns


def gold_flags(splits: Sequence[SplitTrajectory], dialogues: Sequence[Dialogue],
               golds: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor]:
    """Per critique action: gold in its step's documents, gold in its content; bool ``(batch, A)``."""
    n = max([len(s.actions) for s in splits] + [1])
    in_docs = torch.zeros(len(splits), n, dtype=torch.bool)
    in_action = torch.zeros(len(splits), n, dtype=torch.bool)
    for row, (split, dialogue, gold) in enumerate(zip(splits, dialogues, golds)):
        docs = verifier_turn_docs(dialogue)
        for col, action in enumerate(split.actions):
            in_docs[row, col] = gold_in_text(gold, list(docs[action.turn]))
            in_action[row, col] = gold_in_text(gold, action.text)
    return in_docs, in_action


def verifier_update(trainer: LocalTrainer, splits: Sequence[SplitTrajectory],
                    dialogues: Sequence[Dialogue], records: Sequence[QARecord],
                    scores: Sequence[DialogueScore], impact_values: Sequence[float],
                    config: ArrConfig) -> tuple[dict[str, float], ProcessAdvantage]:
    """Prepare the verifier's update, add ``A_proc`` on its critique tokens (if on), learn.

    Returns the update's metrics and the process term (computed even when off, for its metrics).
    """
    inputs = trainer.prepare([s.trajectory for s in splits], [s.reward_verifier for s in scores],
                             [r.id for r in records], entropy_first=True)
    ids = action_token_ids(inputs.batch.segment_ids, [s.segment_action for s in splits])
    in_docs, in_action = gold_flags(splits, dialogues, [r.golden_answers for r in records])
    device = inputs.advantages.device
    term = ADVANTAGE_TERMS["arr_process"](
        inputs.advantages, inputs.entropy, ids, inputs.batch.loss_mask, in_docs.to(device),
        in_action.to(device), torch.tensor([s.f1_reasoner for s in scores], device=device),
        torch.tensor(list(impact_values), device=device))
    if config.process_advantage:
        inputs.advantages = term.advantages
    return trainer.learn(inputs).metrics, term


def rollout(records: Sequence[QARecord], generators: Mapping[str, TextGenerator],
            retriever: Retriever, config: ArrConfig, prober: Prober | None = None
            ) -> tuple[list[Dialogue], list[QARecord], dict[str, float]]:
    """``group_size`` dialogues per record in one batched run (with ``prober``, REX-RAG's probe
    dialogues after them); returns them, the record each answers, and the times."""
    repeated = [record for record in records for _ in range(config.group_size)]
    reasoner, verifier = _TimedGenerator(generators["reasoner"]), _TimedGenerator(
        generators["verifier"])
    timed_retriever = TimedRetriever(retriever)
    dialogues = run_arr_dialogue(
        [r.question for r in repeated], reasoner, verifier, timed_retriever,
        max_turns=config.max_turns, topk=config.topk, max_new_tokens=config.max_new_tokens,
        prober=prober,
    )
    times = {"reasoner/time/rollout_s": reasoner.seconds,
             "verifier/time/rollout_s": verifier.seconds,
             "time/retrieval_s": timed_retriever.seconds}
    answered = repeated + [repeated[d.reasoner.probe.origin] for d in dialogues[len(repeated):]]
    return dialogues, answered, times


def dialogue_prober(records: Sequence[QARecord], config: ArrConfig, step: int) -> Prober:
    """REX-RAG's prober of one update: a reasoner answer below full marks (F1 < 1, eq. 5's
    measure) is probed with ``probe_prob``; seeded by the run's seed and the update."""
    exploration = config.exploration
    repeated = [record for record in records for _ in range(config.group_size)]
    return Prober(exploration_pool(exploration.pool_size), exploration.probe_prob,
                  lambda i, answer: f1_score(answer, repeated[i].golden_answers) < 1.0,
                  random.Random(f"rex:{config.optim.seed}:{step}"))


def score(dialogues: Sequence[Dialogue], records: Sequence[QARecord],
          config: ArrConfig) -> list[DialogueScore]:
    """Both agents' outcome rewards and the EM/F1 of every answer, per dialogue."""
    return [
        score_dialogue(d, r.golden_answers, lam=config.lam, n_bins=config.n_bins,
                       adversarial=config.adversarial_reward,
                       format_penalty=config.format_penalty)
        for d, r in zip(dialogues, records, strict=True)
    ]


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def arr_step(trainers: Mapping[str, LocalTrainer], generators: Mapping[str, TextGenerator],
             retriever: Retriever, records: Sequence[QARecord],
             config: ArrConfig, exploration: ExplorationState | None = None) -> ArrStepResult:
    """Rollout → score → reasoner update → verifier update; metrics of both agents and traces.

    With ``config.exploration`` (and its run's ``exploration`` state), REX-RAG's probe
    dialogues join the rollout (``agents.arr.probe_dialogues``); the filter keeps the likeliest
    (``rex_rag.step.filtered_and_corrected``) and the kept ones go through both updates like
    any dialogue, the reasoner's ratio corrected for the probes' off-policy tokens. Outcome
    metrics are the policy's dialogues'; ``rex/…`` are REX-RAG's."""
    started = time.perf_counter()
    for trainer in trainers.values():
        trainer.policy.model.eval()
    step = trainers["reasoner"].step
    prober = None if config.exploration is None else dialogue_prober(records, config, step)
    dialogues, repeated, times = rollout(records, generators, retriever, config, prober)
    n = len(records) * config.group_size

    (scores, r_splits), r_score_s = _timed(lambda: (
        score(dialogues, repeated, config),
        [split_actions(d.reasoner, config.monitored_actions) for d in dialogues]))
    rows, correction, correct = list(range(n)), None, [s.f1_reasoner >= 1.0 for s in scores]
    answered = repeated  # every dialogue's record, probes included, before the filter
    reasoners = [d.reasoner for d in dialogues]  # likewise
    if prober is not None:
        rows, correction = filtered_and_corrected(
            trainers["reasoner"], [s.trajectory for s in r_splits], n, prober.pool, correct,
            config.exploration, exploration, config.group_size)
        dialogues, repeated, scores, r_splits = ([items[i] for i in rows] for items in
                                                 (dialogues, repeated, scores, r_splits))
    r_update, r_update_s = _timed(lambda: trainers["reasoner"].update(
        [s.trajectory for s in r_splits], [s.reward_reasoner for s in scores],
        [r.id for r in repeated], correction))
    explored_metrics = ({} if prober is None else  # after the update: the correction's ratios
                        explored(exploration, correct, answered, n, rows, correction,
                                 config.exploration) | probe_outcomes(reasoners, answered, n))
    (per_turn, r_truncated), r_entropy_s = _timed(lambda: reasoner_entropies(
        r_update.batch, r_update.entropy, r_splits, config.monitored_actions))
    (impact_values, patterns), r_impact_s = _timed(lambda: impacts(
        per_turn, config.monitored_actions, config.delta, config.pattern_scores))

    v_splits, v_split_s = _timed(
        lambda: [split_actions(d.verifier, config.critique_actions) for d in dialogues])
    (v_metrics, term), v_update_s = _timed(lambda: verifier_update(
        trainers["verifier"], v_splits, dialogues, repeated, scores, impact_values, config))
    _, push_s = _timed(lambda: [push_updated_weights(generators[agent], trainers[agent])
                                for agent in ("reasoner", "verifier")])

    times |= {
        "reasoner/time/score_s": r_score_s + r_entropy_s + r_impact_s,
        "reasoner/time/update_s": r_update_s,
        "verifier/time/score_s": v_split_s,
        "verifier/time/update_s": v_update_s,
        "time/push_s": push_s,
    }
    v_means = [row[: len(split.actions)] for row, split in zip(term.mean_entropy.tolist(), v_splits)]
    metrics = (
        _outcome_metrics(dialogues[:n], scores[:n], config)
        | _process_metrics(per_turn, config.monitored_actions, impact_values, patterns, term,
                           v_means, v_splits)
        | explored_metrics
        | {"reasoner/truncated_actions": float(r_truncated)}
        | {f"reasoner/{k}": v for k, v in r_update.metrics.items()}
        | {f"verifier/{k}": v for k, v in v_metrics.items()}
        | times
        | {"time/step_s": time.perf_counter() - started}
    )
    return ArrStepResult(metrics, _traces(scores, per_turn, v_splits, v_means))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    return float(torch.tensor(values, dtype=torch.float64).std()) if len(values) > 1 else 0.0


def _outcome_metrics(dialogues: Sequence[Dialogue], scores: Sequence[DialogueScore],
                     config: ArrConfig) -> dict[str, float]:
    """Rewards, EM/F1, behaviour and the share of dialogues each agent won a bonus in."""
    n = len(dialogues)
    r_rewards = [s.reward_reasoner for s in scores]
    v_rewards = [s.reward_verifier for s in scores]

    def won(a: float, b: float) -> bool:
        return config.adversarial_reward and bin_value(a - b, config.n_bins) > 0

    return {
        "reasoner/reward_mean": _mean(r_rewards), "reasoner/reward_std": _std(r_rewards),
        "verifier/reward_mean": _mean(v_rewards), "verifier/reward_std": _std(v_rewards),
        "reasoner/em": _mean([s.em_reasoner for s in scores]),
        "reasoner/f1": _mean([s.f1_reasoner for s in scores]),
        "verifier/em": _mean([s.em_verifier for s in scores]),
        "verifier/f1": _mean([s.f1_verifier for s in scores]),
        "final/em": _mean([s.em_final for s in scores]),
        "final/f1": _mean([s.f1_final for s in scores]),
        "reasoner/bonus_fraction": _mean([won(s.f1_reasoner, s.f1_verifier) for s in scores]),
        "verifier/bonus_fraction": _mean([won(s.f1_verifier, s.f1_reasoner) for s in scores]),
        "reasoner/format_errors": sum(d.reasoner.format_errors for d in dialogues) / n,
        "verifier/format_errors": sum(d.verifier.format_errors for d in dialogues) / n,
        "reasoner/answered_fraction": _mean([d.reasoner_answer is not None for d in dialogues]),
        "verifier/answered_fraction": _mean([d.verifier_answer is not None for d in dialogues]),
        "reasoner/searches": sum(d.reasoner.n_searches for d in dialogues) / n,
        "reasoner/turns": sum(d.reasoner.n_turns for d in dialogues) / n,
    } | {f"verifier/{k}": v for k, v in verifier_checks(dialogues, scores).items()}


def _process_metrics(per_turn: Sequence[Mapping[str, Mapping[int, float]]], names: Sequence[str],
                     impact_values: Sequence[float], patterns: Counter, term: ProcessAdvantage,
                     v_means: Sequence[Sequence[float]], v_splits: Sequence[SplitTrajectory]
                     ) -> dict[str, float]:
    """Advantage components: impact and pattern counts (reasoner), clarity and A_proc (verifier)."""
    think = [h for turns in per_turn for name in names for h in turns[name].values()]
    n_actions = [len(s.actions) for s in v_splits]
    clarities = [c for row, n in zip(term.clarity.tolist(), n_actions) for c in row[:n]
                 if not math.isnan(c)]
    process = [p for row, n in zip(term.process.tolist(), n_actions) for p in row[:n]]
    return {
        "reasoner/impact_mean": _mean(impact_values),
        "reasoner/monitored_entropy": _mean(think),
        **{f"reasoner/pattern_{p}": float(patterns.get(p, 0)) for p in PATTERNS},
        "verifier/critique_actions": _mean(n_actions),
        "verifier/critique_entropy": _mean([h for row in v_means for h in row if not math.isnan(h)]),
        "verifier/clarity_mean": _mean(clarities),
        "verifier/clarity_nonzero_fraction": _mean([c != 0 for c in clarities]),
        "verifier/process_adv_mean": _mean(process),
        "verifier/truncated_actions": float(sum(math.isnan(h) for row in v_means for h in row)),
    }


def _traces(scores: Sequence[DialogueScore], per_turn: Sequence[Mapping[str, Mapping[int, float]]],
            v_splits: Sequence[SplitTrajectory], v_means: Sequence[Sequence[float]]
            ) -> list[EntropyTrace]:
    """Per-dialogue think/response entropy by turn, labelled by the final answer's EM."""
    return [
        EntropyTrace(
            correct=s.em_final > 0,
            think=dict(turns.get("think", {})),
            response=per_turn_means(split.actions, entropies, "response"),
        )
        for s, turns, split, entropies in zip(scores, per_turn, v_splits, v_means)
    ]
