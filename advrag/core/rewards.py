"""Outcome rewards of the single-agent (Search-R1-style) training flow, and UR²'s two stages.

``answer_reward`` scores the content of the final ``<answer>`` tag only (a
trajectory that never closed one gets 0 for the answer: training is strict
where the benchmark is lenient), and subtracts ``format_penalty`` once if the
trajectory broke the tag grammar at least once. How this departs from
Search-R1: Search-R1 uses EM alone; F1 is offered because a 135M model
rarely gets exact matches early in training.

``ur2_reward`` is UR²'s (§3.2.2 eq. 4, §3.2.3): stage 1 pays for well-formed
output and for searching, whatever the answer; stage 2 for a correct answer
and a fully valid format. Both subtract a penalty per fallback fault (a query
the summariser rejected as needing reasoning, not facts). It reads counts, not text:
what a violation and a valid query are (the query word limit the policy's prompt
states among them) is defined in ``advrag.agents.ur2_scoring``.
"""

from __future__ import annotations

from collections.abc import Sequence

from advrag.core.metrics import exact_match, f1_score

ANSWER_METRICS = {"em": exact_match, "f1": f1_score}


def full_marks(answer: str | None, golds: Sequence[str], metric: str) -> bool:
    """The answer scores 1 under ``metric`` (REX-RAG's correct: never probed)."""
    return answer is not None and ANSWER_METRICS[metric](answer, golds) >= 1.0


def answer_reward(answer: str | None, golds: str | Sequence[str], *, format_errors: int = 0,
                  metric: str = "em", format_penalty: float = 0.2) -> float:
    """``metric(answer, golds)`` (0 without an answer) − ``format_penalty`` if any format error."""
    if metric not in ANSWER_METRICS:
        raise ValueError(f"unknown answer metric {metric!r}; choose from {sorted(ANSWER_METRICS)}")
    score = ANSWER_METRICS[metric](answer, golds) if answer is not None else 0.0
    return score - (format_penalty if format_errors > 0 else 0.0)


def ur2_reward(stage: int, *, format_violations: int, valid_queries: int, fallback_faults: int,
               correct: bool, violation_penalty: float = 1.0, format_bonus: float = 1.0,
               one_query: float = 3.0, two_queries: float = 4.0, answer_bonus: float = 2.0,
               fallback_penalty: float = 0.5) -> float:
    """UR²'s reward of one rollout; the keyword defaults are the paper's.

    Stage 1: (+``format_bonus`` with no violation, else −``violation_penalty`` per
    violation) + (``one_query`` for one valid query, ``two_queries`` for two or
    more, 0 for none) − ``fallback_penalty`` per fallback fault; ``correct`` is
    not used. Stage 2: (+``answer_bonus`` if correct) + (+``format_bonus`` with no
    violation, else 0) − ``fallback_penalty`` per fallback fault.
    """
    if min(format_violations, valid_queries, fallback_faults) < 0:
        raise ValueError("format_violations, valid_queries and fallback_faults are counts (>= 0)")
    penalty = fallback_penalty * fallback_faults
    clean = format_violations == 0
    if stage == 1:
        formatting = format_bonus if clean else -violation_penalty * format_violations
        searching = two_queries if valid_queries >= 2 else one_query if valid_queries == 1 else 0.0
        return formatting + searching - penalty
    if stage == 2:
        return (answer_bonus if correct else 0.0) + (format_bonus if clean else 0.0) - penalty
    raise ValueError(f"UR² has stages 1 and 2, got stage {stage!r}")

