"""ARR rewards and the verifier's process-aware advantage (ARR §4.2, eqs. 5–9).

- Outcome reward (eq. 5): ``r = F1_self + λ·max(bin(F1_self − F1_other), 0)``.
- Process advantage (eq. 6): ``A_proc = F1(y_reasoner)·A_clarity·A_impact``, with
  ``A_clarity = exp(−H̄(a_v))·1[gold ∈ docs]·(2·1[gold ∈ a_v] − 1)`` (eq. 7) and
  ``A_impact`` = mean pattern score of the reasoner's entropy trend (eq. 8).
- Verifier token advantage (eq. 9): ``Â = A_grpo + 1[token in critique]·A_proc`` — on
  tensors in ``core.arr_process`` (the registered term the ARR step uses); the
  scalar ``clarity`` and ``process_advantage`` here are its reference, tested equal.

How this departs from the paper (which is otherwise followed; where the
authors' released code differs from it, the paper wins):

- ``bin`` is unspecified beyond "discretise the F1 range into n buckets". Here
  it truncates the difference toward zero onto the grid ``k/n``:
  ``sign(x)·floor(|x|·n)/n``, so a gap smaller than one bucket earns nothing.
  Only the positive side matters (eq. 5 takes ``max(·, 0)``); the negative side
  is the mirror image. A difference within 1e-6 of a bucket edge (in bucket
  units) counts as on the edge, absorbing float error (``0.7 − 0.4`` is
  0.29999999999999993 in float64; F1s stored as float32 are worse). The
  released code instead takes the integer difference of the two F1s' bucket
  indices; that rewards a 0.02 gap straddling an edge and is not offered.
- Impact uses the paper's pattern table (``advrag.core.entropy``), not the
  released code's; pass ``scores=`` for another one. The released code also
  doubles the GRPO term; eq. 9 adds it once, and so does this module.
- "gold in text" is whole-token containment after SQuAD normalisation (as in
  ``advrag.core.metrics``); a gold that normalises to "" is never contained.
- Clarity is per verifier action (its entropy and its text), so eq. 9 can give
  each critique action its own ``A_proc`` (``core.arr_process``).
  An action's entropy and tokens are its content's, not its tag markup's (as
  in the authors' release). An action with no kept tokens (cut by
  ``max_seq_len``) has no clarity: NaN, left out rather than read as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from advrag.core.entropy import PATTERN_SCORES, entropy_pattern, pattern_score
from advrag.core.metrics import Golds, retrieval_recall

_EDGE_TOL = 1e-6  # in bucket units


def bin_values(diffs: torch.Tensor, n_buckets: int) -> torch.Tensor:
    """Differences of F1 values (in [-1, 1]) truncated toward zero onto the grid k/n.

    ``sign(x)·floor(|x|·n)/n`` with a 1e-6 bucket tolerance at the edges, e.g.
    n=10: 0.3 → 0.3, 0.29 → 0.2, 0.099 → 0.0, −0.25 → −0.2. Computed in float64;
    returns the input's float dtype (float64 for integer input), same shape.
    """
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    x = diffs.to(torch.float64)
    binned = torch.sign(x) * torch.floor(x.abs() * n_buckets + _EDGE_TOL) / n_buckets
    out_dtype = diffs.dtype if diffs.is_floating_point() else torch.float64
    return binned.to(out_dtype)


def bin_value(diff: float, n_buckets: int) -> float:
    """Scalar ``bin_values``: one F1 difference onto the bucket grid."""
    return float(bin_values(torch.tensor(float(diff), dtype=torch.float64), n_buckets))


def adversarial_outcome_rewards(
    f1_self: torch.Tensor, f1_other: torch.Tensor, *, lam: float, n_buckets: int
) -> torch.Tensor:
    """ARR eq. 5 for a batch: ``F1_self + λ·max(bin(F1_self − F1_other), 0)``.

    Args:
        f1_self: F1 of this agent's answers, shape ``(batch,)``.
        f1_other: F1 of the counterpart's answers on the same items, ``(batch,)``.
        lam: weight λ of the winning bonus.
        n_buckets: number n of F1 buckets of ``bin``.

    Returns:
        Outcome rewards, shape ``(batch,)``.
    """
    bonus = bin_values(f1_self - f1_other, n_buckets).clamp(min=0.0)
    return f1_self + lam * bonus.to(f1_self.dtype)


def adversarial_outcome_reward(
    f1_self: float, f1_other: float, *, lam: float, n_buckets: int
) -> float:
    """ARR eq. 5 for one item: ``F1_self + λ·max(bin(F1_self − F1_other), 0)``."""
    return float(f1_self) + lam * max(bin_value(f1_self - f1_other, n_buckets), 0.0)


def gold_in_text(golds: Golds, text: str | Sequence[str]) -> bool:
    """Whether any gold occurs, as whole SQuAD-normalised tokens, in the text(s).

    ``text`` may be one string (a verifier action) or several (retrieved
    documents; each is searched separately, so no match spans two documents).
    Golds that normalise to "" never match.
    """
    texts = [text] if isinstance(text, str) else list(text)
    return retrieval_recall(texts, golds) == 1.0


def clarity(mean_entropy: float, gold_in_docs: bool, gold_in_action: bool) -> float:
    """ARR eq. 7: ``exp(−H̄)·1[gold in docs]·(2·1[gold in action] − 1)``.

    ``+exp(−H̄)`` when the documents hold the gold and the verifier's action
    keeps it, ``−exp(−H̄)`` when the action drops it, 0 when the documents
    lack it (retrieval failed, so the verifier is neither credited nor blamed).
    NaN when ``mean_entropy`` is NaN (an action with no kept tokens has no clarity).
    """
    if math.isnan(float(mean_entropy)):
        return math.nan
    if not gold_in_docs:
        return 0.0
    return math.exp(-float(mean_entropy)) * (1.0 if gold_in_action else -1.0)


def _is_nested(entropies: Sequence) -> bool:
    """True if ``entropies`` is a list of per-action-type sequences."""
    if len(entropies) == 0:
        return False
    first = entropies[0]
    if isinstance(first, (torch.Tensor, np.ndarray)):
        return first.ndim > 0
    return isinstance(first, Sequence)


def impact(
    entropies_per_turn: Sequence[float] | Sequence[Sequence[float]],
    delta: float,
    scores: Mapping[str, float] = PATTERN_SCORES,
) -> float:
    """ARR eq. 8: pattern score of the reasoner's entropy trend over its last three turns.

    Args:
        entropies_per_turn: mean token entropy of the reasoner's monitored
            action at each turn, ``[H_1, …, H_n]``; or, with several monitored
            action types (e.g. think and search), one such sequence per type,
            whose scores are averaged (the ``1/|A_sub^r|·Σ`` of eq. 8). No
            turns at all is the flat pattern "F".
        delta: flat threshold δ of the trend.
        scores: pattern → score table (the paper's by default).
    """
    per_type = entropies_per_turn if _is_nested(entropies_per_turn) else [entropies_per_turn]
    type_scores = [pattern_score(entropy_pattern(h, delta), scores) for h in per_type]
    return sum(type_scores) / len(type_scores)


def process_advantage(f1_reasoner: float, clarity_value: float, impact_value: float) -> float:
    """ARR eq. 6: ``A_proc = F1(y_reasoner)·A_clarity·A_impact``."""
    return float(f1_reasoner) * float(clarity_value) * float(impact_value)
