"""UR²'s difficulty-aware curriculum, the pure part: levels from rollout scores, a 7:2:1 sample.

A question's score is its mean answer score over k rollouts (UR² §3.1.2: 20
rollouts of Qwen-2.5-7B-Instruct). ``difficulty_level`` buckets it — easy
(0.8 ≤ s ≤ 1), medium (0.5 ≤ s < 0.8), hard (0.2 ≤ s < 0.5) — or filters it
(s < 0.2: the policy never solves it; UR² keeps the filtered math problems as the
stage-1 pool, ``mixing.stage1_pool``). ``sample_by_difficulty`` draws a training set
with the paper's hard:medium:easy = 7:2:1, largest-remainder rounding, a short
level's deficit shared among the others by the same ratio.

How this departs from the paper: the paper scores every question with one fixed
model, Qwen-2.5-7B-Instruct, whatever backbone it then trains (not the policy as
it trains); the flow here scores with the start policy (the warmed-up model RL
starts from, ``flows.rl.curate_with``): no larger model runs offline here, and it
is the model our runs train. k is a config value (4 on the CPU, the paper's 20).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

LEVELS = ("easy", "medium", "hard")
THRESHOLDS = {"easy": 0.8, "medium": 0.5, "hard": 0.2}
"""The lowest score of each level (UR²'s defaults); below ``hard``'s, a question is filtered."""
RATIO = {"hard": 7.0, "medium": 2.0, "easy": 1.0}


def difficulty_level(score: float, thresholds: Mapping[str, float] = THRESHOLDS) -> str | None:
    """``"easy"``, ``"medium"`` or ``"hard"`` for a score in [0, 1]; None when filtered.

    ``thresholds``: the lowest score of each level (easy > medium > hard).
    """
    if not 0.0 <= score <= 1.0 or math.isnan(score):
        raise ValueError(f"a difficulty score is a mean reward in [0, 1], got {score!r}")
    if not thresholds["easy"] > thresholds["medium"] > thresholds["hard"]:
        raise ValueError(f"thresholds must fall from easy to hard, got {dict(thresholds)}")
    for level in LEVELS:
        if score >= thresholds[level]:
            return level
    return None


def sample_by_difficulty(levels: Sequence[str | None], n: int,
                         ratio: Mapping[str, float] = RATIO, seed: int = 0) -> list[int]:
    """Indices of ``min(n, available)`` distinct unfiltered items, per level by ``ratio``.

    Counts follow the ratio with largest-remainder rounding; a level with fewer
    items than its share gives all it has and its deficit is shared among the
    other levels by the same ratio (repeatedly, until the sample is full or
    every level is exhausted). Within a level the items are drawn at random
    (``seed``); the result lists them by level in ``ratio``'s order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    unknown = {lv for lv in levels if lv is not None} - set(ratio)
    if unknown or any(w < 0 for w in ratio.values()):
        raise ValueError(f"levels {sorted(unknown)} have no ratio, or a ratio is negative: "
                         f"ratio {dict(ratio)}")
    pools = {level: [i for i, lv in enumerate(levels) if lv == level] for level in ratio}
    counts = level_counts({lv: len(p) for lv, p in pools.items()}, n, ratio)
    rng = random.Random(seed)
    return [i for level, pool in pools.items() for i in sorted(rng.sample(pool, counts[level]))]


def level_counts(available: Mapping[str, int], n: int, ratio: Mapping[str, float]) -> dict[str, int]:
    """How many items each level gives to a sample of ``min(n, total available)``."""
    counts = dict.fromkeys(available, 0)
    wanted = min(n, sum(available[lv] for lv in available if ratio[lv] > 0))
    while sum(counts.values()) < wanted:
        open_levels = {lv: ratio[lv] for lv in available if counts[lv] < available[lv]
                       and ratio[lv] > 0}
        shares = largest_remainder(wanted - sum(counts.values()), open_levels)
        for level, share in shares.items():
            counts[level] += min(share, available[level] - counts[level])
    return counts


def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` split by ``weights`` into integers: floors, then the largest remainders +1.

    Ties go to the key that comes first in ``weights``.
    """
    weight_sum = sum(weights.values())
    if weight_sum <= 0:
        return dict.fromkeys(weights, 0)
    exact = {key: total * w / weight_sum for key, w in weights.items()}
    shares = {key: math.floor(x) for key, x in exact.items()}
    order = sorted(weights, key=lambda key: exact[key] - shares[key], reverse=True)
    for key in order[: total - sum(shares.values())]:
        shares[key] += 1
    return shares
