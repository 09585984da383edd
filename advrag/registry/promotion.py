"""The promotion gate: may a candidate model become the registry's champion?

A candidate is promoted only if its benchmark run finished, its data gate
passed, it was evaluated on exactly the champion's questions, and its EM beats
the champion's by more than the paired-bootstrap 95 % interval: the interval's
lower bound of (candidate − champion) must exceed ``min_margin``. Anything else
makes it the ``challenger`` with the reason recorded. With no champion yet, a
candidate that passed its checks is promoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from advrag.core.metrics import paired_bootstrap_diff_ci

CHAMPION = "champion"
CHALLENGER = "challenger"


@dataclass(frozen=True)
class Decision:
    """Which alias the candidate gets, why, and the measured EM difference."""

    alias: str
    reason: str
    diff: float | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def promote(self) -> bool:
        return self.alias == CHAMPION


def decide(candidate_em: Mapping[str, float] | None, champion_em: Mapping[str, float] | None, *,
           benchmark_finished: bool, gate_passed: bool, min_margin: float = 0.0,
           n_boot: int = 2000, seed: int = 0, measure: str = "EM") -> Decision:
    """Decide from per-item scores keyed by item id (candidate and champion): per-question EM
    for a reasoner, per-slice verdict correctness for a discriminator; ``measure`` names them."""
    if not benchmark_finished or not candidate_em:
        return Decision(CHALLENGER, "the candidate has no finished benchmark run")
    if not gate_passed:
        return Decision(CHALLENGER, "the candidate's data gate did not pass")
    if champion_em is None:
        return Decision(CHAMPION, "no champion yet; the candidate passed its checks")
    if set(candidate_em) != set(champion_em):
        return Decision(CHALLENGER, "evaluated on different questions than the champion: "
                        f"{len(set(candidate_em) ^ set(champion_em))} ids differ")
    ids = sorted(candidate_em)
    diff, lo, hi = paired_bootstrap_diff_ci([candidate_em[i] for i in ids],
                                            [champion_em[i] for i in ids], n_boot=n_boot, seed=seed)
    interval = f"{measure} diff {diff:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}]"
    if lo > min_margin:
        return Decision(CHAMPION, f"beats the champion: {interval} > {min_margin}", diff, lo, hi)
    return Decision(CHALLENGER, f"not clearly better: {interval}, needs lower bound > "
                    f"{min_margin}", diff, lo, hi)
