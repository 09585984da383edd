"""REX-RAG's exploration settings: the ``exploration:`` section of a ``grpo``, ``ur2``,
``gar`` or ``arr`` config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from advrag.config.base import Strict


class RexExploration(Strict):
    """Probes, the trajectory filter and the policy correction (REX-RAG §3); the paper's
    values are the defaults. The ablation rows are settings: ``correction: coarse`` (μ =
    1/|pool| on a prompt's first token, 1 on the rest), ``correction: none`` (no importance
    sampling), ``trajectory_filter: false`` (every probe kept), and ``pool_size``."""

    kind: Literal["rex"] = Field(description="The exploration method (REX-RAG's probes).")
    probe_prob: float = Field(0.2, ge=0, le=1, description="Chance that an answer below full "
                              "marks is cloned into a probe.")
    pool_size: int = Field(30, ge=1, le=30, description="Exploration prompts in the pool "
                           "(the paper's ablation: 5, 15, 30).")
    keep_ratio: float = Field(0.12, ge=0, le=1, description="Probes kept per policy trajectory "
                              "at the start, and the most ever kept.")
    keep_ratio_weight: float = Field(0.1, gt=0, le=1, description="Weight of each step's probe "
                                     "accuracy in the keep ratio's exponential average.")
    trajectory_filter: bool = Field(True, description="Keep only the probes whose inserted "
                                    "prompt the policy finds most likely (else all).")
    probe_turns: int | None = Field(
        None, ge=1, le=8, description="Turns a probe gets after its exploration prompt, then the "
        "forced answer (beyond the paper); null: the turns its origin left of max_turns, as in "
        "the paper and its authors' code. Search-R1 loop only (GRPO, UR², GAR on the local "
        "engine).")
    correction: Literal["fine", "coarse", "none"] = Field(
        "fine", description="The behaviour policy of probe tokens: the pool's own next-token "
        "distribution ('fine'), 1/|pool| then 1 ('coarse'), or no correction ('none').")
