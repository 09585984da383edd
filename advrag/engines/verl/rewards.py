"""advrag's rewards as verl reward functions: a response's text in, the score verl adds.

verl's reward managers call ``compute_score(data_source, solution_str, ground_truth,
extra_info)`` on each decoded response; point ``reward.custom_reward_function`` at this
module (``path: pkg://advrag.engines.verl.rewards``) with ``name: search_r1_score`` or
``name: ur2_score`` (``reward_kwargs`` set the keyword arguments below).

A response is the agent's turns with the environment's text between them, as
``agents.search_loop`` writes it: ``<information>`` blocks and the loop's hints.
``response_trajectory`` cuts it back into those segments, so each score is the one the
local engine gives the same transcript (``core.rewards.answer_reward``,
``agents.ur2_scoring``), which the tests check on the loop's own transcripts. It reads text
only: a policy turn that itself wrote a whole ``<information>`` block followed by a blank
line would be taken for the environment's.

``ground_truth`` is a golden answer, a list of them, or Search-R1's ``{"target": [...]}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from advrag.agents.baselines import extract_answer
from advrag.agents.prompts import (
    FALLBACK_HINT,
    FORCE_ANSWER_HINT,
    INFO_CLOSE,
    INFO_OPEN,
    INVALID_ACTION_HINT,
)
from advrag.agents.protocol import parse_step
from advrag.agents.search_loop import ACTIONS
from advrag.agents.types import Trajectory
from advrag.agents.ur2_scoring import ur2_counts
from advrag.core.rewards import ANSWER_METRICS, answer_reward, ur2_reward

_ENVIRONMENT = re.compile(
    "(" + re.escape(INFO_OPEN) + ".*?" + re.escape(INFO_CLOSE) + "|"
    + "|".join(re.escape(h) for h in (FALLBACK_HINT, FORCE_ANSWER_HINT, INVALID_ACTION_HINT))
    + ")", re.S)


def golden_answers(ground_truth: Any) -> list[str]:
    """verl's ``ground_truth`` as a list of answers (a string, a list, or ``{"target": ...}``)."""
    if isinstance(ground_truth, dict):
        ground_truth = ground_truth.get("target")
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, Sequence) or hasattr(ground_truth, "tolist"):
        answers = [str(a) for a in (ground_truth.tolist() if hasattr(ground_truth, "tolist")
                                    else ground_truth)]
        if answers:
            return answers
    raise ValueError(f"ground_truth {ground_truth!r:.200}: give a golden answer, a list of them "
                     "or {'target': [...]}")


def response_trajectory(response: str) -> Trajectory:
    """The transcript ``response`` holds, scored as ``agents.search_loop`` scores its own: each
    policy turn parsed (``format_errors``, the answer), each ``<information>`` block a search
    (its query from the turn before), ``FALLBACK_HINT`` a fallback, and the turn after
    ``FORCE_ANSWER_HINT`` read leniently."""
    trajectory = Trajectory()
    pieces = [p for p in _ENVIRONMENT.split(response) if p]
    forced, query = False, None
    for piece in pieces:
        if _ENVIRONMENT.fullmatch(piece):
            trajectory.add(piece, "env")
            forced = piece == FORCE_ANSWER_HINT
            if piece.startswith(INFO_OPEN) and query is not None:
                trajectory.n_searches += 1
                trajectory.queries.append(query)
            trajectory.fallbacks += int(piece == FALLBACK_HINT)
            continue
        trajectory.add(piece, "policy")
        trajectory.n_turns += 1
        if forced:
            trajectory.answer = extract_answer(piece)
            trajectory.format_errors += int(trajectory.answer is None)
            continue
        step = parse_step(piece, ACTIONS)
        trajectory.format_errors += int(step.error is not None)
        query = step.content if step.kind == "search" else None
        if step.kind == "answer":
            trajectory.answer = step.content
    return trajectory


def search_r1_score(data_source: str, solution_str: str, ground_truth: Any,
                    extra_info: dict | None = None, **settings: Any) -> dict[str, float]:
    """``search_r1_terms`` of the transcript ``solution_str`` holds (verl's reward function)."""
    return search_r1_terms(response_trajectory(solution_str), ground_truth, extra_info, **settings)


def ur2_score(data_source: str, solution_str: str, ground_truth: Any,
              extra_info: dict | None = None, **settings: Any) -> dict[str, float]:
    """``ur2_terms`` of the transcript ``solution_str`` holds (verl's reward function)."""
    return ur2_terms(response_trajectory(solution_str), ground_truth, extra_info, **settings)


def search_r1_terms(trajectory: Trajectory, ground_truth: Any, extra_info: dict | None = None,
                    *, metric: str = "em", format_penalty: float = 0.2) -> dict[str, float]:
    """Search-R1's outcome reward (``core.rewards.answer_reward``): the final answer's
    ``metric`` against the golden answers, less ``format_penalty`` after any format error."""
    score = answer_reward(trajectory.answer, golden_answers(ground_truth),
                          format_errors=trajectory.format_errors, metric=metric,
                          format_penalty=format_penalty)
    return {"score": score, "format_errors": float(trajectory.format_errors),
            "searches": float(trajectory.n_searches)}


def ur2_terms(trajectory: Trajectory, ground_truth: Any, extra_info: dict | None = None, *,
              stage: int = 2, metric: str = "f1", fallback_penalty: float = 0.5,
              retrieval_expected: bool = True) -> dict[str, float]:
    """UR²'s reward of ``stage`` (``core.rewards.ur2_reward``) on the counts
    ``agents.ur2_scoring`` defines; correct is the answer scoring at least 0.5 under
    ``metric``, as in the UR² recipe. ``extra_info["retrieval_expected"]``, when present,
    says per item whether its prompt asked it to search (task mixing)."""
    expected = (extra_info or {}).get("retrieval_expected", retrieval_expected)
    counts = ur2_counts(trajectory, retrieval_expected=bool(expected))
    correct = trajectory.answer is not None and ANSWER_METRICS[metric](
        trajectory.answer, golden_answers(ground_truth)) >= 0.5
    score = ur2_reward(stage, format_violations=counts.format_violations,
                       valid_queries=counts.valid_queries, fallback_faults=counts.fallback_faults,
                       correct=correct, fallback_penalty=fallback_penalty)
    return {"score": score, "format_violations": float(counts.format_violations),
            "valid_queries": float(counts.valid_queries),
            "fallback_faults": float(counts.fallback_faults), "correct": float(correct)}


TRAJECTORY_TERMS = {"search_r1_score": search_r1_terms, "ur2_score": ur2_terms}
"""Each reward function's terms on an episode already cut into turns (REX-RAG's agent loop
scores its own episodes, probes included, with the run's reward function)."""
