"""REX-RAG on verl: the agent loop that probes and the trainer with the filter and the
correction (``engines.verl.agent_loop``, ``engines.verl.rex_trainer``), as a verl run of any
recipe whose config explores (``exploration: {kind: rex}``) brings them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advrag.engines.verl.runs import (
    REX_AGENT_LOOP,
    REX_AGENT_NAME,
    REX_SECTION,
    REX_TRAINER_MODE,
    REX_TRAINER_MODULES,
    AgentLoop,
    RexTrainerSettings,
    TrainerMode,
)
from advrag.recipes.rex_rag.config import RexExploration


def verl_exploration(exploration: RexExploration | None, reward: tuple[str, Mapping[str, Any]],
                     seed: int) -> dict[str, Any]:
    """A ``VerlRun``'s ``search_loop`` and ``trainer`` for ``exploration`` (none without it):
    the probing loop scoring with the run's ``reward`` (its name and settings) from ``seed``,
    and REX-RAG's trainer with its typed section."""
    if exploration is None:
        return {}
    if exploration.probe_turns is not None:
        raise ValueError("exploration.probe_turns is not in the verl agent loop (its probes get "
                         "the turns their origin left) — remove it, or train on the local engine")
    name, settings = reward
    loop = AgentLoop(REX_AGENT_NAME, REX_AGENT_LOOP, {
        "probe_prob": exploration.probe_prob, "pool_size": exploration.pool_size,
        "reward": name, "reward_kwargs": dict(settings), "seed": seed})
    trainer = TrainerMode(REX_TRAINER_MODE, REX_TRAINER_MODULES, REX_SECTION, RexTrainerSettings(
        pool_size=exploration.pool_size, keep_ratio=exploration.keep_ratio,
        keep_ratio_weight=exploration.keep_ratio_weight,
        trajectory_filter=exploration.trajectory_filter, correction=exploration.correction))
    return {"search_loop": loop, "trainer": trainer}
