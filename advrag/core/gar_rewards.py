"""GAR rewards (GAR §3 "Reward Functions", weights from §4.1).

- Slice score ``r_s`` of one judgment (``slice_score``): the paper's binary
  verdict, 1 for "yes" and 0 for "no" (``mode="verdict"``); ``mode="p_yes"``
  keeps the continuous P(yes) read at the verdict instead, a named option of
  ours, not the paper's. A judgment without a verdict under the mode's reading
  (no parsable yes/no; no "Verdict:" to read P(yes) at) has no score, and
  earns its slice 0 in ``R_s`` — not 0.5: an unreadable judgment says nothing
  in the slice's favour (the paper does not say; this is our reading).
- Reasoner: ``R_rea = λ1·R_m + λ2·R_s`` with ``R_m`` the exact-match reward and
  ``R_s`` the mean of the slice scores.
- Discriminator: ``R_dis = λ3·R_d + λ4·R_a`` with the GAN term
  ``R_d = E_ref[log M_d(x)] + E_gen[log(1 − M_d(x))]`` and the alignment term
  ``R_a = mean_i (1 − |r_i − 1[correct]|)``. ``M_d(x)`` is "the
  discriminator's estimated probability", so the GAN term reads P(yes) in
  either mode; ``r_i`` is the slice score.
- Defaults are the paper's: λ1 = λ2 = λ3 = 1, λ4 = 0.5.

How this departs from the paper (which does not say):

- Expectations are sample means. An empty side (no reference slices, or no
  generated slices) contributes 0 to ``R_d``, and an answer with no slices
  gets ``R_s = 0`` and ``R_a = 0``: nothing judged earns nothing, so a
  reasoner cannot gain slice reward by emitting no reasoning.
- Probabilities are clamped to ``[eps, 1 − eps]`` (eps = 1e-6) before the log,
  so a confident discriminator gets a large finite penalty, not ``-inf``.
- Every probability and score must lie in [0, 1]; anything else (NaN
  included) raises ``ValueError`` rather than producing a silent NaN reward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check_unit(values: Sequence[float], name: str) -> None:
    """Raise ValueError unless every value is a number in [0, 1] (NaN fails the test)."""
    for i, value in enumerate(values):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}[{i}] = {value!r} is not a probability in [0, 1]")


def _mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0 for an empty sequence (see the module docstring)."""
    return math.fsum(values) / len(values) if values else 0.0


SLICE_SCORES = ("verdict", "p_yes")
"""How a judgment becomes its slice score (module docstring); "verdict" is the paper's."""


def slice_score(verdict: bool | None, p_yes: float | None, mode: str = "verdict") -> float | None:
    """``r_s`` of one judgment: its verdict as 1/0 (``"verdict"``) or its P(yes) (``"p_yes"``);
    None when it has none under that reading (its slice then earns 0, module docstring)."""
    if mode == "verdict":
        return None if verdict is None else float(verdict)
    if mode == "p_yes":
        if p_yes is not None:
            _check_unit([p_yes], "p_yes")
        return p_yes
    raise ValueError(f"slice score mode must be one of {SLICE_SCORES}, got {mode!r}")


def reasoner_reward(
    exact_match: float, slice_scores: Sequence[float], lam1: float = 1.0, lam2: float = 1.0
) -> float:
    """``λ1·R_m + λ2·mean(slice_scores)``; the slice term is 0 when there are no slices."""
    _check_unit([exact_match], "exact_match")
    _check_unit(slice_scores, "slice_scores")
    return lam1 * exact_match + lam2 * _mean(slice_scores)


def discriminator_reward(
    p_ref: Sequence[float], p_gen: Sequence[float], eps: float = 1e-6
) -> float:
    """GAN term ``mean log p_ref + mean log(1 − p_gen)`` with clamped probabilities.

    ``p_ref`` / ``p_gen``: the discriminator's probability that a reference /
    generated slice is real. An empty list contributes 0.
    """
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps!r}")
    _check_unit(p_ref, "p_ref")
    _check_unit(p_gen, "p_gen")

    def clamp(p: float) -> float:
        return min(max(p, eps), 1.0 - eps)

    real = _mean([math.log(clamp(p)) for p in p_ref])
    fake = _mean([math.log(1.0 - clamp(p)) for p in p_gen])
    return real + fake


def alignment_reward(slice_scores: Sequence[float], correct: bool) -> float:
    """Mean agreement ``1 − |r_i − 1[correct]|`` of slice scores with answer correctness (0 if none)."""
    _check_unit(slice_scores, "slice_scores")
    target = 1.0 if correct else 0.0
    return _mean([1.0 - abs(score - target) for score in slice_scores])


def discriminator_total(r_d: float, r_a: float, lam3: float = 1.0, lam4: float = 0.5) -> float:
    """``λ3·R_d + λ4·R_a`` (paper §4.1 defaults)."""
    return lam3 * r_d + lam4 * r_a
