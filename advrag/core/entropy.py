"""Entropy-trend patterns of multi-turn reasoning (ARR §3.2, used by eq. 8).

An action's entropy is the mean token entropy of its tokens,
``H_a = (1/|a|)·Σ_j H(π(a_j | s, a_<j))``. Over the last three turns the
trend between consecutive values is Increase if ``ΔH > δ``, Decrease if
``ΔH < −δ`` and Flat otherwise, and the two steps map to one of five patterns
scored D 1.0, ID 0.8, F 0.6, DI 0.4, I 0.2.

How this departs from the paper:

- The paper classifies only trajectories with at least three turns. Shorter
  ones get a pattern here too, so every dialogue can be scored: one step
  (two values) is "D", "I" or "F" by its own trend; one value or none is "F".
- The δ comparisons carry an absolute tolerance of 1e-9, so a change written
  as exactly ±δ in decimals (1.0 → 1.1 with δ = 0.1, which floats make
  0.10000000000000009) is Flat, as the paper's inclusive "otherwise" intends.
- An action with no kept tokens (cut by ``max_seq_len``) has no mean entropy
  (NaN). It is left out of the trend, never read as 0.0: the caller drops it
  (``agents.arr_scoring.per_turn_means``) and ``entropy_pattern`` refuses NaN.
- ``PATTERN_SCORES`` is the paper's table; the authors' released code uses a
  different one. Pass ``scores=`` to use another table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import torch

from advrag.core.patterns import PATTERN_SCORES

_DELTA_TOL = 1e-9


def _trend(change: float, delta: float) -> int:
    """+1 for an increase (> δ), −1 for a decrease (< −δ), 0 for flat (|Δ| ≤ δ)."""
    if change > delta + _DELTA_TOL:
        return 1
    if change < -delta - _DELTA_TOL:
        return -1
    return 0


def entropy_pattern(values: Sequence[float], delta: float) -> str:
    """Pattern of the last three values: one of "D", "ID", "F", "DI", "I".

    Each of the (at most two) steps between the last three values is an
    increase, a decrease or flat (``|Δ| ≤ δ``, inclusive). No increase and at
    least one decrease is "D"; no decrease and at least one increase is "I";
    an increase then a decrease is "ID"; a decrease then an increase is "DI";
    all flat is "F". Two values give one step (so "D", "I" or "F"); one value
    or none is "F". ``delta`` must be >= 0; a NaN value (an action with no
    kept tokens) is an error: leave it out before calling.
    """
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    if any(math.isnan(float(v)) for v in values):
        raise ValueError(f"NaN entropy in {list(values)}: drop actions with no kept tokens")
    last = [float(v) for v in values[-3:]]
    trends = [_trend(b - a, delta) for a, b in itertools.pairwise(last)]
    if trends == [1, -1]:
        return "ID"
    if trends == [-1, 1]:
        return "DI"
    if -1 in trends:
        return "D"
    if 1 in trends:
        return "I"
    return "F"


def pattern_score(pattern: str, scores: Mapping[str, float] = PATTERN_SCORES) -> float:
    """Score of an entropy pattern under ``scores`` (the paper's table by default)."""
    if pattern not in scores:
        raise ValueError(f"unknown entropy pattern {pattern!r}; expected one of {list(scores)}")
    return float(scores[pattern])


def mean_token_entropy(entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean entropy over the masked tokens of each action.

    Args:
        entropies: per-token policy entropies, shape ``(..., seq)``.
        mask: which tokens belong to the action (bool or 0/1), shape ``(..., seq)``.

    Returns:
        Mean over the last dimension, shape ``(...)``; NaN for an action with
        no tokens. Unmasked positions are ignored even if they hold NaN/inf.
    """
    mask = mask.bool()
    total = torch.where(mask, entropies, torch.zeros_like(entropies)).sum(dim=-1)
    count = mask.sum(dim=-1).to(entropies.dtype)
    return torch.where(count > 0, total / count.clamp(min=1), torch.nan)
