"""One ARR training step (ARR §4.2) on two local policies: rollout → score → update × 2.

1. rollout: ``group_size`` dialogues per question, all in one batched
   ``run_arr_dialogue``; each agent samples with its own weights (see
   ``dual.agent_generators``). The Final Predictor runs on the reasoner's
   generator, as in the paper.
2. score: each agent's outcome reward (eq. 5, minus the format penalty;
   ``agents.arr_scoring``), and each trajectory cut into its actions.
3. reasoner update: GRPO on its trajectories (the verifier's messages, the
   documents and the prompt are masked). A hook reads the sampling policy's
   token entropies from the old-log-prob pass and records, per turn, the
   mean entropy of each monitored action (think): impact (eq. 8) and the
   entropy patterns come from there.
4. verifier update: GRPO on its trajectories; a hook computes clarity (eq. 7)
   for each critique action (verify, response) from that action's mean
   entropy, its step's documents and its text, then ``A_proc`` (eq. 6) with
   the reasoner's F1 and impact, added on that action's tokens only (eq. 9).

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
reward/advantage bookkeeping (the reasoner's includes the outcome scoring of
both agents, done together); ``<agent>/time/update_s`` its update (log-prob
passes, loss, optimizer) without the hook.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from advrag.agents.arr import Dialogue, run_arr_dialogue
from advrag.agents.arr_scoring import (
    DialogueScore,
    SplitTrajectory,
    action_clarities,
    per_turn_means,
    score_dialogue,
    split_actions,
    verifier_turn_docs,
)
from advrag.agents.types import TextGenerator
from advrag.core.actions import action_means, action_token_ids
from advrag.core.arr_rewards import bin_value, impact, process_advantage, verifier_token_advantages
from advrag.core.entropy import PATTERN_SCORES, entropy_pattern
from advrag.datasets.records import QARecord
from advrag.engines.local.dual import DualTrainer
from advrag.engines.local.tokenize import Batch
from advrag.retrieval.base import Retriever

PATTERNS = ("D", "ID", "F", "DI", "I")


@dataclass(frozen=True)
class ArrSettings:
    """What one ARR step needs beyond the trainers (the flow fills it from its config)."""

    lam: float = 0.5
    n_bins: int = 10
    delta: float = 0.1
    pattern_scores: Mapping[str, float] = field(default_factory=lambda: dict(PATTERN_SCORES))
    adversarial_reward: bool = True
    process_advantage: bool = True
    format_penalty: float = 0.2
    critique_actions: tuple[str, ...] = ("verify", "response")
    monitored_actions: tuple[str, ...] = ("think",)
    group_size: int = 4
    max_turns: int = 2
    topk: int = 3
    max_new_tokens: int = 64


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


class _TimedGenerator:
    """Counts the seconds spent in ``generate`` (the rollout time of one agent)."""

    def __init__(self, inner: TextGenerator):
        self.inner, self.seconds = inner, 0.0

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self.inner.chat_prompt(user, system)

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        started = time.perf_counter()
        try:
            return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)
        finally:
            self.seconds += time.perf_counter() - started


class _TimedRetriever:
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


class ReasonerEntropyHook:
    """Reasoner update hook: records each monitored action's per-turn entropy; advantages unchanged."""

    def __init__(self, splits: Sequence[SplitTrajectory], names: Sequence[str]):
        self.splits, self.names = list(splits), list(names)
        self.per_turn: list[dict[str, dict[int, float]]] = []
        self.seconds = 0.0

    def __call__(self, batch: Batch, advantages: Tensor, entropy: Tensor) -> Tensor:
        started = time.perf_counter()
        means, _ = _action_entropies(batch, entropy, self.splits)
        self.per_turn = [{name: per_turn_means(s.actions, m, name) for name in self.names}
                         for s, m in zip(self.splits, means)]
        self.seconds += time.perf_counter() - started
        return advantages

    def impacts(self, delta: float, scores: Mapping[str, float]) -> tuple[list[float], Counter]:
        """Eq. 8 per dialogue (mean over monitored types) and the count of each pattern."""
        sequences = [[list(turns[name].values()) for name in self.names] for turns in self.per_turn]
        patterns = Counter(entropy_pattern(seq, delta) for seqs in sequences for seq in seqs)
        return [impact(seqs, delta, scores) for seqs in sequences], patterns


class VerifierProcessHook:
    """Verifier update hook: clarity (eq. 7) per critique action, ``A_proc`` (eq. 6) on its tokens."""

    def __init__(self, splits: Sequence[SplitTrajectory], dialogues: Sequence[Dialogue],
                 golds: Sequence[Sequence[str]], f1_reasoner: Sequence[float],
                 impacts: Sequence[float], *, enabled: bool):
        self.splits, self.dialogues, self.golds = list(splits), list(dialogues), list(golds)
        self.f1_reasoner, self.impacts, self.enabled = list(f1_reasoner), list(impacts), enabled
        self.entropies: list[list[float]] = []
        self.clarities: list[list[float]] = []
        self.process: list[list[float]] = []
        self.seconds = 0.0

    def __call__(self, batch: Batch, advantages: Tensor, entropy: Tensor) -> Tensor:
        started = time.perf_counter()
        self.entropies, ids = _action_entropies(batch, entropy, self.splits)
        self.clarities = [
            action_clarities(s.actions, h, verifier_turn_docs(d), g)
            for s, h, d, g in zip(self.splits, self.entropies, self.dialogues, self.golds)
        ]
        self.process = [[process_advantage(f1, c, imp) for c in row] for row, f1, imp in
                        zip(self.clarities, self.f1_reasoner, self.impacts)]
        if self.enabled:
            advantages = advantages + self._process_tokens(batch, ids, advantages)
        self.seconds += time.perf_counter() - started
        return advantages

    def _process_tokens(self, batch: Batch, ids: Tensor, advantages: Tensor) -> Tensor:
        """Each critique token's own action's ``A_proc`` (eq. 9's second term), 0 elsewhere."""
        table = torch.zeros(len(self.process), max([len(r) for r in self.process] + [1]),
                            dtype=advantages.dtype, device=advantages.device)
        for row, values in enumerate(self.process):
            table[row, : len(values)] = torch.tensor(values, dtype=advantages.dtype)
        zeros = torch.zeros(len(self.process), dtype=advantages.dtype, device=advantages.device)
        return verifier_token_advantages(zeros, table, ids >= 0, batch.loss_mask, ids)


def rollout(records: Sequence[QARecord], generators: Mapping[str, TextGenerator],
            retriever: Retriever, settings: ArrSettings
            ) -> tuple[list[Dialogue], list[QARecord], dict[str, float]]:
    """``group_size`` dialogues per record in one batched run; returns them, their records, times."""
    repeated = [record for record in records for _ in range(settings.group_size)]
    reasoner, verifier = _TimedGenerator(generators["reasoner"]), _TimedGenerator(
        generators["verifier"])
    timed_retriever = _TimedRetriever(retriever)
    dialogues = run_arr_dialogue(
        [r.question for r in repeated], reasoner, verifier, timed_retriever,
        max_turns=settings.max_turns, topk=settings.topk, max_new_tokens=settings.max_new_tokens,
    )
    times = {"reasoner/time/rollout_s": reasoner.seconds,
             "verifier/time/rollout_s": verifier.seconds,
             "time/retrieval_s": timed_retriever.seconds}
    return dialogues, repeated, times


def score(dialogues: Sequence[Dialogue], records: Sequence[QARecord],
          settings: ArrSettings) -> list[DialogueScore]:
    """Both agents' outcome rewards and the EM/F1 of every answer, per dialogue."""
    return [
        score_dialogue(d, r.golden_answers, lam=settings.lam, n_bins=settings.n_bins,
                       adversarial=settings.adversarial_reward,
                       format_penalty=settings.format_penalty)
        for d, r in zip(dialogues, records, strict=True)
    ]


def _timed(fn: Callable[[], dict[str, float]]) -> tuple[dict[str, float], float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def arr_step(dual: DualTrainer, generators: Mapping[str, TextGenerator], retriever: Retriever,
             records: Sequence[QARecord], settings: ArrSettings) -> ArrStepResult:
    """Rollout → score → reasoner update → verifier update; metrics of both agents and traces."""
    started = time.perf_counter()
    for name in ("reasoner", "verifier"):
        dual[name].policy.model.eval()
    dialogues, repeated, times = rollout(records, generators, retriever, settings)

    (scores, r_splits), r_score_s = _timed(lambda: (
        score(dialogues, repeated, settings),
        [split_actions(d.reasoner, settings.monitored_actions) for d in dialogues]))
    group_ids = [r.id for r in repeated]
    r_hook = ReasonerEntropyHook(r_splits, settings.monitored_actions)
    r_metrics, r_update_s = _timed(lambda: dual["reasoner"].update(
        [s.trajectory for s in r_splits], [s.reward_reasoner for s in scores], group_ids,
        advantage_hook=r_hook))
    impacts, patterns = r_hook.impacts(settings.delta, settings.pattern_scores)

    v_splits, v_split_s = _timed(
        lambda: [split_actions(d.verifier, settings.critique_actions) for d in dialogues])
    v_hook = VerifierProcessHook(v_splits, dialogues, [r.golden_answers for r in repeated],
                                 [s.f1_reasoner for s in scores], impacts,
                                 enabled=settings.process_advantage)
    v_metrics, v_update_s = _timed(lambda: dual["verifier"].update(
        [s.trajectory for s in v_splits], [s.reward_verifier for s in scores], group_ids,
        advantage_hook=v_hook))

    times |= {
        "reasoner/time/score_s": r_score_s + r_hook.seconds,
        "reasoner/time/update_s": r_update_s - r_hook.seconds,
        "verifier/time/score_s": v_split_s + v_hook.seconds,
        "verifier/time/update_s": v_update_s - v_hook.seconds,
    }
    metrics = (
        _outcome_metrics(dialogues, scores, settings)
        | _process_metrics(r_hook, v_hook, impacts, patterns)
        | {f"reasoner/{k}": v for k, v in r_metrics.items()}
        | {f"verifier/{k}": v for k, v in v_metrics.items()}
        | times
        | {"time/step_s": time.perf_counter() - started}
    )
    return ArrStepResult(metrics, _traces(scores, r_hook, v_hook, v_splits))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    return float(torch.tensor(values, dtype=torch.float64).std()) if len(values) > 1 else 0.0


def _outcome_metrics(dialogues: Sequence[Dialogue], scores: Sequence[DialogueScore],
                     settings: ArrSettings) -> dict[str, float]:
    """Rewards, EM/F1, behaviour and the share of dialogues each agent won a bonus in."""
    n = len(dialogues)
    r_rewards = [s.reward_reasoner for s in scores]
    v_rewards = [s.reward_verifier for s in scores]

    def won(a: float, b: float) -> bool:
        return settings.adversarial_reward and bin_value(a - b, settings.n_bins) > 0

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
    }


def _process_metrics(r_hook: ReasonerEntropyHook, v_hook: VerifierProcessHook,
                     impacts: Sequence[float], patterns: Counter) -> dict[str, float]:
    """Advantage components: impact and pattern counts (reasoner), clarity and A_proc (verifier)."""
    think = [h for turns in r_hook.per_turn for name in r_hook.names for h in turns[name].values()]
    clarities = [c for row in v_hook.clarities for c in row]
    process = [p for row in v_hook.process for p in row]
    return {
        "reasoner/impact_mean": _mean(impacts),
        "reasoner/monitored_entropy": _mean(think),
        **{f"reasoner/pattern_{p}": float(patterns.get(p, 0)) for p in PATTERNS},
        "verifier/critique_actions": _mean([len(row) for row in v_hook.clarities]),
        "verifier/critique_entropy": _mean([h for row in v_hook.entropies for h in row]),
        "verifier/clarity_mean": _mean(clarities),
        "verifier/clarity_nonzero_fraction": _mean([c != 0 for c in clarities]),
        "verifier/process_adv_mean": _mean(process),
    }


def _traces(scores: Sequence[DialogueScore], r_hook: ReasonerEntropyHook,
            v_hook: VerifierProcessHook, v_splits: Sequence[SplitTrajectory]
            ) -> list[EntropyTrace]:
    """Per-dialogue think/response entropy by turn, labelled by the final answer's EM."""
    return [
        EntropyTrace(
            correct=s.em_final > 0,
            think=turns.get("think", {}),
            response=per_turn_means(split.actions, entropies, "response"),
        )
        for s, turns, split, entropies in zip(scores, r_hook.per_turn, v_splits, v_hook.entropies)
    ]
