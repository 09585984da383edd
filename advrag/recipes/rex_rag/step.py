"""One REX-RAG update (REX-RAG §3): rollout with probes → score → filter → corrected update.

1. **Rollout**: ``group_size`` policy trajectories per question; an answer below full marks
   is probed with probability ``probe_prob`` (``agents.probes``).
2. **Score** every trajectory with the recipe's reward; a trajectory is *correct* when its
   answer earns full marks (the probe trigger's test).
3. **Filter**: probes ranked by the mean old log-prob of their inserted prompt tokens; the
   top ``probes_to_keep(keep_ratio, questions, group_size)`` stay (all of them without the
   filter). Every policy trajectory stays; a probe joins its question's group.
4. **Update** with the clipped ratio taken against the mixture behaviour policy
   (``correction``), ``a`` = the kept probes' share of the batch, ``z`` = 1 − the policy
   trajectories' accuracy.
5. The keep ratio moves towards this step's probe accuracy (``updated_keep_ratio``), never
   above the configured one.

How this departs from the release: the keep ratio follows the accuracy of every probe opened
this step, not only of the ones the filter kept. With a handful of questions per step the
filter can keep none, and an average of the kept ones' accuracy would then read 0 and lock
the ratio at 0 for the rest of training.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from advrag.agents.probes import Prober, pool_token_ids
from advrag.agents.prompts import exploration_pool
from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator
from advrag.core.advantages import informative_group_fraction
from advrag.core.metrics import f1_score, normalize_answer
from advrag.core.rex_rag import probe_ranking, probes_to_keep, updated_keep_ratio
from advrag.datasets.records import QARecord, question_kind
from advrag.engines.local.trainer import LocalTrainer, push_updated_weights
from advrag.recipes.rex_rag.config import RexExploration
from advrag.recipes.rex_rag.correction import Correction, token_roles
from advrag.recipes.rex_rag.exploring import ExplorationState
from advrag.recipes.rollout import RewardFn, RolloutSettings, rollout_metrics, score

FullMarks = Callable[[str | None, QARecord], bool]
"""``(answer, record) → whether the answer earns full marks`` (correct; never probed)."""
ProbingAgent = Callable[[Sequence[QARecord], Prober], list[Trajectory]]
"""Runs an episode per record with a prober; probes come after the records' trajectories."""


@dataclass(frozen=True)
class ProbedRollout:
    """One update's episodes: ``policy_count`` policy trajectories, then the probes opened;
    ``answered[i]`` is the record trajectory ``i`` answers (a probe's is its origin's)."""

    trajectories: list[Trajectory]
    answered: list[QARecord]
    policy_count: int
    prober: Prober | None  # None: rollouts without probes


def rex_step(trainer: LocalTrainer, generator: TextGenerator, retriever: Retriever,
             records: Sequence[QARecord], *, group_size: int, reward_fn: RewardFn,
             full_marks: FullMarks, exploration: RexExploration, state: ExplorationState,
             seed: int, settings: RolloutSettings = RolloutSettings(),
             agent: ProbingAgent | None = None) -> dict[str, float]:
    """Rollout with probes → score → filter → corrected update; returns all metrics.

    ``agent`` replaces the Search-R1 loop (``settings`` then go unused); ``seed`` and
    the trainer's step seed the probes' draws.
    """
    timer = time.perf_counter
    started = timer()
    probed = probe_rollout(trainer, generator, retriever, records, group_size=group_size,
                           full_marks=full_marks, exploration=exploration, seed=seed,
                           settings=settings, agent=agent)
    rolled = timer()
    scores = score(probed.trajectories, probed.answered, reward_fn)
    correct = [full_marks(t.answer, r) for t, r in zip(probed.trajectories, probed.answered)]
    scored = timer()
    metrics = corrected_update(trainer, generator, probed, scores, correct,
                               exploration=exploration, state=state, group_size=group_size)
    n = probed.policy_count
    seconds = {"rollout_s": rolled - started, "score_s": scored - rolled,
               "update_s": timer() - scored}
    return (rollout_metrics(probed.trajectories[:n], scores[:n], [r.id for r in probed.answered[:n]])
            | by_question_type(probed.trajectories[:n], probed.answered[:n]) | metrics | seconds)


def probe_rollout(trainer: LocalTrainer, generator: TextGenerator, retriever: Retriever,
                  records: Sequence[QARecord], *, group_size: int, full_marks: FullMarks,
                  exploration: RexExploration, seed: int,
                  settings: RolloutSettings = RolloutSettings(),
                  agent: ProbingAgent | None = None) -> ProbedRollout:
    """``group_size`` episodes per record, an answer below full marks probed with
    ``probe_prob`` (steps 1 of the module docstring); the draws seeded by ``seed`` and the
    trainer's step."""
    trainer.policy.model.eval()
    repeated = [record for record in records for _ in range(group_size)]
    prober = Prober(exploration_pool(exploration.pool_size), exploration.probe_prob,
                    lambda i, answer: not full_marks(answer, repeated[i]),
                    random.Random(f"rex:{seed}:{trainer.step}"), exploration.probe_turns)
    trajectories = rollout_with_probes(repeated, prober, generator, retriever, settings, agent)
    answered = repeated + [repeated[t.probe.origin] for t in trajectories[len(repeated):]]
    return ProbedRollout(trajectories, answered, len(repeated), prober)


def corrected_update(trainer: LocalTrainer, generator: TextGenerator, probed: ProbedRollout,
                     scores: torch.Tensor, correct: Sequence[bool], *,
                     exploration: RexExploration, state: ExplorationState,
                     group_size: int) -> dict[str, float]:
    """Steps 3–5 of the module docstring on scored episodes: filter the probes, update with
    the correction, move the keep ratio; the update's and the exploration's metrics."""
    n, trajectories = probed.policy_count, probed.trajectories
    rows, correction = filtered_and_corrected(trainer, trajectories, n, probed.prober.pool,
                                              correct, exploration, state, group_size)
    group_ids = [probed.answered[i].id for i in rows]
    result = trainer.update([trajectories[i] for i in rows], scores[rows], group_ids, correction)
    push_updated_weights(generator, trainer)
    metrics = (explored(state, correct, probed.answered, n, rows, correction, exploration)
               | probe_outcomes(trajectories, probed.answered, n))
    metrics["rex/informative_groups"] = informative_group_fraction(scores[rows], group_ids)
    return result.metrics | metrics


def filtered_and_corrected(trainer: LocalTrainer, trajectories: Sequence[Trajectory], n: int,
                           pool: Sequence[str], correct: Sequence[bool],
                           exploration: RexExploration, state: ExplorationState,
                           group_size: int) -> tuple[list[int], Correction | None]:
    """Step 3 and the correction of step 4: the batch's rows (the ``n`` policy trajectories,
    then the probes the filter keeps) and the mixture correction over them (None without
    kept probes or with ``correction: none``)."""
    rows = list(range(n)) + keep_probes(trainer, trajectories, n, exploration, state.keep_ratio,
                                        n // group_size, group_size)
    if len(rows) == n or exploration.correction == "none":
        return rows, None
    return rows, Correction([trajectories[i] for i in rows], pool_token_ids(pool, trainer.tokenizer),
                            probe_share=(len(rows) - n) / len(rows),
                            failure_rate=1.0 - sum(correct[:n]) / n,
                            correction=exploration.correction)


def explored(state: ExplorationState, correct: Sequence[bool], answered: Sequence[QARecord],
             n: int, rows: Sequence[int], correction: Correction | None,
             exploration: RexExploration) -> dict[str, float]:
    """Step 5: the exploration's metrics at the keep ratio used (with the probes of each
    question kind, ``answered[i]`` being trajectory ``i``'s record), then the ratio moved
    towards this step's probe accuracy (when probes were opened)."""
    metrics = (exploration_metrics(correct, n, rows, state.keep_ratio, correction)
               | probes_by_kind(correct[n:], answered[n:]))
    if len(correct) > n:
        state.keep_ratio = updated_keep_ratio(state.keep_ratio, metrics["rex/probe_accuracy"],
                                              exploration.keep_ratio_weight,
                                              cap=exploration.keep_ratio)
    return metrics


def rollout_with_probes(repeated: Sequence[QARecord], prober: Prober, generator: TextGenerator,
                        retriever: Retriever, settings: RolloutSettings,
                        agent: ProbingAgent | None) -> list[Trajectory]:
    """One episode per record (the Search-R1 loop unless ``agent``), then the probes opened."""
    if agent is not None:
        return agent(repeated, prober)
    return run_search_agent([r.question for r in repeated], generator, retriever,
                            prober=prober, **settings.search_options())


def exploration_metrics(correct: Sequence[bool], policy_count: int, rows: Sequence[int],
                        keep_ratio: float, correction: Correction | None) -> dict[str, float]:
    """Probes opened and kept, the keep ratio used, accuracies, the probes' share of the
    update and (with the correction) the mean importance ratio per token role."""
    opened = correct[policy_count:]
    kept = len(rows) - policy_count
    metrics = {
        "rex/probes_opened": float(len(opened)), "rex/probes_kept": float(kept),
        "rex/keep_ratio": keep_ratio, "rex/probe_share": kept / len(rows),
        "rex/policy_accuracy": sum(correct[:policy_count]) / policy_count,
        "rex/probe_accuracy": sum(opened) / len(opened) if opened else 0.0}
    if correction is not None:
        metrics |= {f"rex/ratio_{role}": value for role, value in correction.ratios.items()}
    return metrics


def probes_by_kind(correct: Sequence[bool], records: Sequence[QARecord]) -> dict[str, float]:
    """The probes opened and those that earned full marks, per question kind of their record
    (``question_kind``): summed over a run, which kinds the exploration prompts rescue."""
    kinds = [question_kind(record) for record in records]
    opened = Counter(kinds)
    right = Counter(kind for kind, ok in zip(kinds, correct, strict=True) if ok)
    return ({f"rex/probes_opened/{kind}": float(count) for kind, count in opened.items()}
            | {f"rex/probes_correct/{kind}": float(right[kind]) for kind in opened})


def probe_outcomes(trajectories: Sequence[Trajectory], answered: Sequence[QARecord],
                   policy_count: int) -> dict[str, float]:
    """What the probes did after their exploration prompt, beside the answers they reopened:
    searches made, answers repeated (normalised) or missing, and the answer F1 of probes and
    origins. Why probes fail: a probe that repeats its origin's answer explored nothing.
    Empty when no probe was opened."""
    probes = trajectories[policy_count:]
    if not probes:
        return {}
    origins = [trajectories[t.probe.origin] for t in probes]
    golds = [record.golden_answers for record in answered[policy_count:]]
    n = len(probes)
    return {
        "rex/probe_new_searches": sum(t.n_searches - o.n_searches
                                      for t, o in zip(probes, origins)) / n,
        "rex/probe_same_answer": sum(t.answer is not None and normalize_answer(t.answer)
                                     == normalize_answer(o.answer)
                                     for t, o in zip(probes, origins)) / n,
        "rex/probe_unanswered": sum(t.answer is None for t in probes) / n,
        "rex/probe_f1": sum(f1_score(t.answer, g) for t, g in zip(probes, golds)) / n,
        "rex/probe_origin_f1": sum(f1_score(o.answer, g) for o, g in zip(origins, golds)) / n,
    }


def keep_probes(trainer: LocalTrainer, trajectories: Sequence[Trajectory], policy_count: int,
                exploration: RexExploration, keep_ratio: float, questions: int,
                group_size: int) -> list[int]:
    """Indices of the probes the update keeps: the filter's top ones, or all without it."""
    probes = list(range(policy_count, len(trajectories)))
    if not probes or not exploration.trajectory_filter:
        return probes
    wanted = probes_to_keep(keep_ratio, questions, group_size)
    if wanted == 0:
        return []
    probe_trajectories = [trajectories[i] for i in probes]
    batch = trainer.encode(probe_trajectories)
    old_logprobs, _ = trainer.policy.logprobs(batch, micro_batch_size=trainer.config.micro_batch_size)
    prompt = token_roles(batch, probe_trajectories)["prompt"]
    whole = [row for row in range(len(probes)) if bool(prompt[row].any())]  # not cut by max_seq_len
    ranked = probe_ranking([old_logprobs[row][prompt[row]] for row in whole])
    return sorted(probes[whole[i]] for i in ranked[:wanted])


def by_question_type(trajectories: Sequence[Trajectory], records: Sequence[QARecord]
                     ) -> dict[str, float]:
    """Answer F1 and searches per question kind (``question_kind``): what the figure of
    training by question type plots."""
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(question_kind(record), []).append(i)
    metrics = {}
    for kind, rows in groups.items():
        f1 = [f1_score(trajectories[i].answer, records[i].golden_answers) for i in rows]
        metrics[f"type/{kind}/f1"] = sum(f1) / len(rows)
        metrics[f"type/{kind}/searches"] = sum(trajectories[i].n_searches for i in rows) / len(rows)
    return metrics
